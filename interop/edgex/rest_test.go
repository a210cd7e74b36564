// core-data's REST API as EdgeX's own clients see it: go-mod-core-contracts' EventClient,
// ReadingClient, GeneralClient and CommonClient against a real `roamkv serve`, every answer
// decoded into EdgeX's DTO types and every failure reported as EdgeX's client reports it
// (its error kind and status code).

package edgex

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	clients "github.com/edgexfoundry/go-mod-core-contracts/v4/clients/http"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/clients/interfaces"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/common"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/dtos"
	dtoCommon "github.com/edgexfoundry/go-mod-core-contracts/v4/dtos/common"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/dtos/requests"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/errors"
)

// injector is EdgeX's AuthenticationInjector: no header without a token (the loopback server
// has none), `Authorization: Bearer TOKEN` with one, as EdgeX's JWT injector sends it.
type injector struct{ token string }

func (i injector) AddAuthenticationData(r *http.Request) error {
	if i.token != "" {
		r.Header.Set("Authorization", "Bearer "+i.token)
	}
	return nil
}

func (i injector) RoundTripper() http.RoundTripper {
	return &http.Transport{ResponseHeaderTimeout: callTimeout}
}

var _ interfaces.AuthenticationInjector = injector{}

type edgexClients struct {
	events   interfaces.EventClient
	readings interfaces.ReadingClient
	general  interfaces.GeneralClient
	common   interfaces.CommonClient
}

func clientsFor(s *server, token string) edgexClients {
	auth := injector{token: token}
	return edgexClients{
		events:   clients.NewEventClient(s.url, auth, true),
		readings: clients.NewReadingClient(s.url, auth, true),
		general:  clients.NewGeneralClient(s.url, auth),
		common:   clients.NewCommonClient(s.url, auth),
	}
}

// base is an origin in 2001 in nanoseconds: each test takes its own window past it, so the
// time-range routes of one test see only its readings.
const base int64 = 978_307_200_000_000_000

func window(n int64) int64 { return base + n*1_000_000_000_000 }

// mustEdgeX fails the test with EdgeX's view of the error.
func mustEdgeX(t *testing.T, what string, err errors.EdgeX) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: EdgeX's client says: kind %s, code %d: %s", what, err.Kind(), err.Code(), err.Message())
	}
}

// wantEdgeXError checks that the call failed as EdgeX's client names the failure.
func wantEdgeXError(t *testing.T, what string, err errors.EdgeX, kind errors.ErrKind, code int) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded; EdgeX's core-data answers %d (%s)", what, code, kind)
	}
	if err.Code() != code || errors.Kind(err) != kind {
		t.Fatalf("%s: EdgeX's client got kind %s, code %d (%s); core-data answers kind %s, code %d",
			what, errors.Kind(err), err.Code(), err.Message(), kind, code)
	}
}

// simpleEvent: an event of `readings` Float64 readings of resources r0, r1, ..., all at the
// event's origin, as device-sdk-go v4 stamps the readings of one command
// (transformer.CommandValuesToEventDTO).
func simpleEvent(t *testing.T, device string, origin int64, readings int) dtos.Event {
	t.Helper()
	e := dtos.NewEvent("interop-profile", device, "interop-source")
	e.Origin = origin
	for i := 0; i < readings; i++ {
		mustAdd(t, &e, fmt.Sprintf("r%d", i), common.ValueTypeFloat64, float64(i)+0.5)
		e.Readings[i].Origin = origin
	}
	return e
}

func mustAdd(t *testing.T, e *dtos.Event, resource, valueType string, value any) {
	t.Helper()
	if err := e.AddSimpleReading(resource, valueType, value); err != nil {
		t.Fatalf("EdgeX's NewSimpleReading(%s, %v): %v", valueType, value, err)
	}
}

func add(t *testing.T, c edgexClients, e dtos.Event) {
	t.Helper()
	res, err := c.events.Add(ctx(t), "interop-service", requests.NewAddEventRequest(e))
	mustEdgeX(t, "EventClient.Add "+e.DeviceName, err)
	if res.StatusCode != http.StatusCreated || res.Id != e.Id || res.ApiVersion != common.ApiVersion {
		t.Fatalf("EventClient.Add %s: BaseWithIdResponse %+v; core-data answers statusCode 201, apiVersion %s, id = the event's %s",
			e.DeviceName, res, common.ApiVersion, e.Id)
	}
}

// canonical is a DTO as its JSON says it, decoded into plain values: what EdgeX's JSON
// encoding makes of it, compared field for field.
func canonical(t *testing.T, v any) any {
	t.Helper()
	if r, ok := v.(dtos.BaseReading); ok {
		r.Tags = stringKeys(r.Tags).(map[string]any)
		r.ObjectValue = stringKeys(r.ObjectValue)
		v = r
	} else if tags, ok := v.(dtos.Tags); ok {
		v = stringKeys(tags)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// stringKeys turns the map[any]any that EdgeX's CBOR decoding (fxamacker/cbor) makes of a
// nested map into the map[string]any JSON has, so that both can be compared.
func stringKeys(v any) any {
	switch m := v.(type) {
	case dtos.Tags:
		if m == nil {
			return map[string]any(nil)
		}
		out := map[string]any{}
		for k, x := range m {
			out[k] = stringKeys(x)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, x := range m {
			out[k] = stringKeys(x)
		}
		return out
	case map[any]any:
		out := map[string]any{}
		for k, x := range m {
			out[fmt.Sprint(k)] = stringKeys(x)
		}
		return out
	case []any:
		out := make([]any, len(m))
		for i, x := range m {
			out[i] = stringKeys(x)
		}
		return out
	default:
		return v
	}
}

func sameReading(t *testing.T, where string, got, want dtos.BaseReading) {
	t.Helper()
	if got.IsNull() != want.IsNull() {
		t.Errorf("%s: reading %s: IsNull() %v, sent %v", where, want.ResourceName, got.IsNull(), want.IsNull())
	}
	if g, w := canonical(t, got), canonical(t, want); !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		t.Errorf("%s: reading %s came back as\n  %s\nsent\n  %s", where, want.ResourceName, gb, wb)
	}
}

// sameEvent compares an event that came back with the one sent: id, names, origin to the
// nanosecond, tags, and every reading (in any order: core-data does not order an event's
// readings either).
func sameEvent(t *testing.T, where string, got, want dtos.Event) {
	t.Helper()
	if got.ApiVersion != common.ApiVersion {
		t.Errorf("%s: event apiVersion %q", where, got.ApiVersion)
	}
	if got.Id != want.Id || got.DeviceName != want.DeviceName || got.ProfileName != want.ProfileName ||
		got.SourceName != want.SourceName || got.Origin != want.Origin {
		t.Errorf("%s: event came back as id %s device %s profile %s source %s origin %d; sent %s %s %s %s %d",
			where, got.Id, got.DeviceName, got.ProfileName, got.SourceName, got.Origin,
			want.Id, want.DeviceName, want.ProfileName, want.SourceName, want.Origin)
	}
	if g, w := canonical(t, got.Tags), canonical(t, want.Tags); !reflect.DeepEqual(g, w) {
		t.Errorf("%s: event tags %v, sent %v", where, g, w)
	}
	if len(got.Readings) != len(want.Readings) {
		t.Fatalf("%s: %d readings came back, %d sent", where, len(got.Readings), len(want.Readings))
	}
	byResource := map[string]dtos.BaseReading{}
	for _, r := range got.Readings {
		byResource[r.ResourceName] = r
	}
	for _, w := range want.Readings {
		g, ok := byResource[w.ResourceName]
		if !ok {
			t.Errorf("%s: reading %s did not come back", where, w.ResourceName)
			continue
		}
		sameReading(t, where, g, w)
	}
}

// everyValueType is one event with a reading of every value type EdgeX v4 defines, made with
// EdgeX's own constructors (which format the values as device services do), units and tags
// on some, each reading 1 ns after the one before.
func everyValueType(t *testing.T, device string, origin int64) dtos.Event {
	t.Helper()
	e := dtos.NewEvent("interop-profile", device, "every-type")
	e.Origin = origin
	e.Tags = dtos.Tags{"Gateway": "HoustonStore-000123", "Latitude": "29.7604", "nested": map[string]any{"floor": 3.0}}
	simple := []struct {
		valueType string
		value     any
	}{
		{common.ValueTypeBool, true},
		{common.ValueTypeString, "héllo, \"world\" [1,2]"},
		{common.ValueTypeUint8, uint8(math.MaxUint8)},
		{common.ValueTypeUint16, uint16(math.MaxUint16)},
		{common.ValueTypeUint32, uint32(math.MaxUint32)},
		{common.ValueTypeUint64, uint64(math.MaxUint64)},
		{common.ValueTypeInt8, int8(math.MinInt8)},
		{common.ValueTypeInt16, int16(math.MinInt16)},
		{common.ValueTypeInt32, int32(math.MinInt32)},
		{common.ValueTypeInt64, int64(math.MinInt64)},
		{common.ValueTypeFloat32, float32(math.MaxFloat32)},
		{common.ValueTypeFloat64, math.SmallestNonzeroFloat64},
		{common.ValueTypeBoolArray, []bool{true, false}},
		{common.ValueTypeStringArray, []string{"a", "b c"}},
		{common.ValueTypeUint8Array, []uint8{0, math.MaxUint8}},
		{common.ValueTypeUint16Array, []uint16{0, math.MaxUint16}},
		{common.ValueTypeUint32Array, []uint32{0, math.MaxUint32}},
		{common.ValueTypeUint64Array, []uint64{0, math.MaxUint64}},
		{common.ValueTypeInt8Array, []int8{math.MinInt8, math.MaxInt8}},
		{common.ValueTypeInt16Array, []int16{math.MinInt16, math.MaxInt16}},
		{common.ValueTypeInt32Array, []int32{math.MinInt32, math.MaxInt32}},
		{common.ValueTypeInt64Array, []int64{math.MinInt64, math.MaxInt64}},
		{common.ValueTypeFloat32Array, []float32{1.5, -2.25e-30}},
		{common.ValueTypeFloat64Array, []float64{math.Pi, -1e300}},
	}
	for _, s := range simple {
		mustAdd(t, &e, "r-"+s.valueType, s.valueType, s.value)
	}
	bytes := make([]byte, 256)
	for i := range bytes {
		bytes[i] = byte(i)
	}
	e.AddBinaryReading("r-Binary", bytes, "application/octet-stream")
	e.AddObjectReading("r-Object", map[string]any{"a": []any{1.0, "x", true}, "b": map[string]any{"c": nil}})
	for i := range e.Readings {
		e.Readings[i].Origin = origin + int64(i)
	}
	e.Readings[1].Units = "text"
	e.Readings[11].Units = "°C"
	e.Readings[11].Tags = dtos.Tags{"calibrated": "2026-11-01", "by": map[string]any{"who": "lab"}}
	return e
}

func TestPingVersionConfig(t *testing.T) {
	c := clientsFor(shared, "")
	ping, err := c.common.Ping(ctx(t))
	mustEdgeX(t, "CommonClient.Ping", err)
	if ping.ApiVersion != common.ApiVersion || ping.ServiceName != common.CoreDataServiceKey || ping.Timestamp == "" {
		t.Errorf("PingResponse %+v: want apiVersion %s, serviceName %s, a timestamp", ping, common.ApiVersion, common.CoreDataServiceKey)
	}
	version, err := c.common.Version(ctx(t))
	mustEdgeX(t, "CommonClient.Version", err)
	if version.ApiVersion != common.ApiVersion || version.ServiceName != common.CoreDataServiceKey || version.Version == "" {
		t.Errorf("VersionResponse %+v", version)
	}
	config, err := c.general.FetchConfiguration(ctx(t))
	mustEdgeX(t, "GeneralClient.FetchConfiguration", err)
	if config.ApiVersion != common.ApiVersion || config.ServiceName != common.CoreDataServiceKey || config.Config == nil {
		t.Errorf("ConfigResponse %+v", config)
	}
	config2, err := c.common.Configuration(ctx(t))
	mustEdgeX(t, "CommonClient.Configuration", err)
	if !reflect.DeepEqual(config2.Config, config.Config) {
		t.Errorf("CommonClient.Configuration %v differs from GeneralClient.FetchConfiguration %v", config2.Config, config.Config)
	}
	// core-data keeps secrets in EdgeX's secret store, which roamkv does not have (DEVIATIONS.md D10).
	_, err = c.common.AddSecret(ctx(t), dtoCommon.NewSecretRequest("db", []dtoCommon.SecretDataKeyValue{{Key: "password", Value: "x"}}))
	wantEdgeXError(t, "CommonClient.AddSecret", err, errors.KindNotImplemented, http.StatusNotImplemented)
}

// Every value type goes in as JSON (EdgeX's client encodes an event without a Binary
// reading as JSON), as CBOR (with a Binary reading it encodes CBOR; and with
// EDGEX_ENCODE_ALL_EVENTS_CBOR every event), and comes back the same through every route
// that returns it.
func TestEveryValueTypeJSONAndCBOR(t *testing.T) {
	c := clientsFor(shared, "")
	origin := window(1)

	binary := everyValueType(t, "every-type-cbor", origin)
	if got := (&requests.AddEventRequest{Event: binary}).GetEncodingContentType(); got != common.ContentTypeCBOR {
		t.Fatalf("EdgeX encodes an event with a Binary reading as %s", got)
	}
	add(t, c, binary)

	jsonEvent := everyValueType(t, "every-type-json", origin)
	jsonEvent.Readings = jsonEvent.Readings[:len(jsonEvent.Readings)-2] // no Binary: JSON
	jsonEvent.Readings = append(jsonEvent.Readings, binary.Readings[len(binary.Readings)-1])
	jsonEvent.Readings[len(jsonEvent.Readings)-1].DeviceName = jsonEvent.DeviceName
	if got := (&requests.AddEventRequest{Event: jsonEvent}).GetEncodingContentType(); got != common.ContentTypeJSON {
		t.Fatalf("EdgeX encodes an event without a Binary reading as %s", got)
	}
	add(t, c, jsonEvent)

	allCBOR := everyValueType(t, "every-type-all-cbor", origin)
	allCBOR.Readings = allCBOR.Readings[:len(allCBOR.Readings)-2]
	t.Setenv(common.EnvEncodeAllEvents, common.ValueTrue)
	if got := (&requests.AddEventRequest{Event: allCBOR}).GetEncodingContentType(); got != common.ContentTypeCBOR {
		t.Fatalf("with %s EdgeX encodes %s", common.EnvEncodeAllEvents, got)
	}
	add(t, c, allCBOR)
	os.Unsetenv(common.EnvEncodeAllEvents)

	for _, sent := range []dtos.Event{binary, jsonEvent, allCBOR} {
		res, err := c.events.EventsByDeviceName(ctx(t), sent.DeviceName, 0, -1)
		mustEdgeX(t, "EventClient.EventsByDeviceName "+sent.DeviceName, err)
		if len(res.Events) != 1 || res.TotalCount != 1 || res.StatusCode != http.StatusOK {
			t.Fatalf("EventsByDeviceName %s: %d events, totalCount %d, statusCode %d; want the 1 sent",
				sent.DeviceName, len(res.Events), res.TotalCount, res.StatusCode)
		}
		sameEvent(t, "EventsByDeviceName "+sent.DeviceName, res.Events[0], sent)
		if err := requests.NewAddEventRequest(res.Events[0]).Validate(); err != nil {
			t.Errorf("the event that came back fails EdgeX's own AddEventRequest validation: %v", err)
		}

		readings, err := c.readings.ReadingsByDeviceName(ctx(t), sent.DeviceName, 0, -1)
		mustEdgeX(t, "ReadingClient.ReadingsByDeviceName "+sent.DeviceName, err)
		if len(readings.Readings) != len(sent.Readings) || int(readings.TotalCount) != len(sent.Readings) {
			t.Fatalf("ReadingsByDeviceName %s: %d readings, totalCount %d; sent %d", sent.DeviceName,
				len(readings.Readings), readings.TotalCount, len(sent.Readings))
		}
		// Newest first: the readings' origins are distinct and ascending as sent.
		for i, r := range readings.Readings {
			sameReading(t, "ReadingsByDeviceName "+sent.DeviceName, r, sent.Readings[len(sent.Readings)-1-i])
		}
		for _, w := range sent.Readings {
			one, err := c.readings.ReadingsByDeviceNameAndResourceName(ctx(t), sent.DeviceName, w.ResourceName, 0, -1)
			mustEdgeX(t, "ReadingClient.ReadingsByDeviceNameAndResourceName", err)
			if len(one.Readings) != 1 {
				t.Fatalf("ReadingsByDeviceNameAndResourceName %s %s: %d readings", sent.DeviceName, w.ResourceName, len(one.Readings))
			}
			sameReading(t, "ReadingsByDeviceNameAndResourceName", one.Readings[0], w)
			if w.ValueType == common.ValueTypeObject {
				var into map[string]any
				if err := one.Readings[0].UnmarshalObjectValue(&into); err != nil {
					t.Errorf("EdgeX's UnmarshalObjectValue on the Object reading: %v", err)
				}
			}
			if w.ValueType != common.ValueTypeBinary && w.ValueType != common.ValueTypeObject {
				if err := dtos.ValidateValue(w.ValueType, one.Readings[0].Value); err != nil {
					t.Errorf("EdgeX's ValidateValue(%s, %q): %v", w.ValueType, one.Readings[0].Value, err)
				}
			}
		}
	}
}

// EdgeX v4's additions to the reading: the ObjectArray value type, and a null reading (a
// resource read with no value: `value`/`binaryValue`/`objectValue` null), which
// NewNullReading makes and core-data v4 stores.
func TestObjectArrayAndNullReadings(t *testing.T) {
	c := clientsFor(shared, "")
	origin := window(2)
	e := dtos.NewEvent("interop-profile", "v4-readings", "v4-source")
	e.Origin = origin
	e.Readings = append(e.Readings,
		dtos.NewObjectReadingWithArray(e.ProfileName, e.DeviceName, "objects", []any{map[string]any{"x": 1.0}, map[string]any{"y": "z"}}),
		dtos.NewNullReading(e.ProfileName, e.DeviceName, "nothing-float", common.ValueTypeFloat64),
		dtos.NewNullReading(e.ProfileName, e.DeviceName, "nothing-object", common.ValueTypeObject),
	)
	for i := range e.Readings {
		e.Readings[i].Origin = origin + int64(i)
	}
	add(t, c, e)
	res, err := c.events.EventsByDeviceName(ctx(t), e.DeviceName, 0, -1)
	mustEdgeX(t, "EventClient.EventsByDeviceName", err)
	if len(res.Events) != 1 {
		t.Fatalf("EventsByDeviceName: %d events", len(res.Events))
	}
	sameEvent(t, "EventsByDeviceName", res.Events[0], e)
}

// Counts, and paging as core-data pages: offset, limit, -1, totalCount, and the answers
// past the end (416) and above MaxResultCount (400).
func TestCountsAndPaging(t *testing.T) {
	c := clientsFor(shared, "")
	before, err := c.events.EventCount(ctx(t))
	mustEdgeX(t, "EventClient.EventCount", err)
	readingsBefore, err := c.readings.ReadingCount(ctx(t))
	mustEdgeX(t, "ReadingClient.ReadingCount", err)

	const device = "paging"
	var sent []dtos.Event
	for i := int64(0); i < 25; i++ {
		e := simpleEvent(t, device, window(3)+i*1000, 2)
		add(t, c, e)
		sent = append(sent, e)
	}
	count, err := c.events.EventCountByDeviceName(ctx(t), device)
	mustEdgeX(t, "EventClient.EventCountByDeviceName", err)
	if count.Count != 25 || count.StatusCode != http.StatusOK {
		t.Errorf("EventCountByDeviceName: %+v, want count 25", count)
	}
	rcount, err := c.readings.ReadingCountByDeviceName(ctx(t), device)
	mustEdgeX(t, "ReadingClient.ReadingCountByDeviceName", err)
	if rcount.Count != 50 {
		t.Errorf("ReadingCountByDeviceName: %d, want 50", rcount.Count)
	}
	after, err := c.events.EventCount(ctx(t))
	mustEdgeX(t, "EventClient.EventCount", err)
	if after.Count != before.Count+25 {
		t.Errorf("EventCount went from %d to %d after 25 events", before.Count, after.Count)
	}
	readingsAfter, err := c.readings.ReadingCount(ctx(t))
	mustEdgeX(t, "ReadingClient.ReadingCount", err)
	if readingsAfter.Count != readingsBefore.Count+50 {
		t.Errorf("ReadingCount went from %d to %d after 50 readings", readingsBefore.Count, readingsAfter.Count)
	}

	// Newest first: sent[24] is the newest.
	var seen []dtos.Event
	for offset := 0; offset < 25; offset += 10 {
		page, err := c.events.EventsByDeviceName(ctx(t), device, offset, 10)
		mustEdgeX(t, fmt.Sprintf("EventsByDeviceName offset %d limit 10", offset), err)
		if page.TotalCount != 25 {
			t.Errorf("offset %d: totalCount %d, want 25", offset, page.TotalCount)
		}
		want := 10
		if offset == 20 {
			want = 5
		}
		if len(page.Events) != want {
			t.Fatalf("offset %d limit 10: %d events, want %d", offset, len(page.Events), want)
		}
		seen = append(seen, page.Events...)
	}
	for i, e := range seen {
		sameEvent(t, fmt.Sprintf("page position %d", i), e, sent[24-i])
	}
	all, err := c.events.EventsByDeviceName(ctx(t), device, 0, -1)
	mustEdgeX(t, "EventsByDeviceName limit -1", err)
	if len(all.Events) != 25 {
		t.Errorf("limit -1: %d events, want 25", len(all.Events))
	}
	noCount, err := c.events.EventsByDeviceName(ctx(t), device, -1, 5)
	mustEdgeX(t, "EventsByDeviceName offset -1", err)
	if len(noCount.Events) != 5 || noCount.TotalCount != 0 {
		t.Errorf("offset -1 limit 5: %d events, totalCount %d; core-data answers 5 and totalCount 0 (not counted)",
			len(noCount.Events), noCount.TotalCount)
	}
	_, err = c.events.EventsByDeviceName(ctx(t), device, 30, 10)
	wantEdgeXError(t, "EventsByDeviceName offset 30 of 25", err, errors.KindRangeNotSatisfiable, http.StatusRequestedRangeNotSatisfiable)
	_, err = c.events.EventsByDeviceName(ctx(t), device, 0, 201)
	wantEdgeXError(t, "EventsByDeviceName limit 201 > MaxResultCount 200", err, errors.KindContractInvalid, http.StatusBadRequest)

	// AllEvents and AllReadings page the same way over every device.
	allEvents, err := c.events.AllEvents(ctx(t), 0, 3)
	mustEdgeX(t, "EventClient.AllEvents", err)
	if len(allEvents.Events) != 3 || allEvents.TotalCount != after.Count {
		t.Errorf("AllEvents 0,3: %d events, totalCount %d; want 3 and EventCount %d", len(allEvents.Events), allEvents.TotalCount, after.Count)
	}
	allReadings, err := c.readings.AllReadings(ctx(t), 1, 4)
	mustEdgeX(t, "ReadingClient.AllReadings", err)
	if len(allReadings.Readings) != 4 || allReadings.TotalCount != readingsAfter.Count {
		t.Errorf("AllReadings 1,4: %d readings, totalCount %d; want 4 and ReadingCount %d", len(allReadings.Readings), allReadings.TotalCount, readingsAfter.Count)
	}
	for i := 1; i < len(allReadings.Readings); i++ {
		if allReadings.Readings[i].Origin > allReadings.Readings[i-1].Origin {
			t.Errorf("AllReadings not newest first: %d after %d", allReadings.Readings[i].Origin, allReadings.Readings[i-1].Origin)
		}
	}
	for i := 1; i < len(allEvents.Events); i++ {
		if allEvents.Events[i].Origin > allEvents.Events[i-1].Origin {
			t.Errorf("AllEvents not newest first: %d after %d", allEvents.Events[i].Origin, allEvents.Events[i-1].Origin)
		}
	}
}

// Every time-range and name route, with its bounds inclusive to the nanosecond.
func TestTimeRangeAndNameRoutes(t *testing.T) {
	c := clientsFor(shared, "")
	w := window(4)
	// Two devices, each with 10 events 1 µs apart; each event's readings "r0" at its origin
	// and "r1" 1 ns later.
	var a, b []dtos.Event
	for i := int64(0); i < 10; i++ {
		ea := simpleEvent(t, "range-a", w+i*1000, 2)
		eb := simpleEvent(t, "range-b", w+i*1000+500, 2)
		add(t, c, ea)
		add(t, c, eb)
		a, b = append(a, ea), append(b, eb)
	}
	origins := func(es []dtos.Event) []int64 {
		var out []int64
		for _, e := range es {
			out = append(out, e.Origin)
		}
		return out
	}
	readingOrigins := func(rs []dtos.BaseReading) []int64 {
		var out []int64
		for _, r := range rs {
			out = append(out, r.Origin)
		}
		return out
	}
	desc := func(xs ...int64) []int64 {
		sort.Slice(xs, func(i, j int) bool { return xs[i] > xs[j] })
		return xs
	}
	check := func(what string, got, want []int64) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: origins %v, want %v", what, got, want)
		}
	}

	// Events [a2, a5]: a2, b2, a3, b3, a4, b4, a5 (b5 is 500 ns past the end).
	start, end := a[2].Origin, a[5].Origin
	events, err := c.events.EventsByTimeRange(ctx(t), start, end, 0, -1)
	mustEdgeX(t, "EventClient.EventsByTimeRange", err)
	check("EventsByTimeRange [a2, a5]", origins(events.Events),
		desc(a[2].Origin, b[2].Origin, a[3].Origin, b[3].Origin, a[4].Origin, b[4].Origin, a[5].Origin))
	if events.TotalCount != 7 {
		t.Errorf("EventsByTimeRange totalCount %d, want 7", events.TotalCount)
	}
	for _, e := range events.Events {
		want := a
		if e.DeviceName == "range-b" {
			want = b
		}
		for _, s := range want {
			if s.Id == e.Id {
				sameEvent(t, "EventsByTimeRange", e, s)
			}
		}
	}
	// One nanosecond inside each bound leaves a2 and a5 out.
	events, err = c.events.EventsByTimeRange(ctx(t), start+1, end-1, 0, -1)
	mustEdgeX(t, "EventClient.EventsByTimeRange", err)
	check("EventsByTimeRange [a2+1ns, a5-1ns]", origins(events.Events),
		desc(b[2].Origin, a[3].Origin, b[3].Origin, a[4].Origin, b[4].Origin))

	// Readings [a2+1ns, a3]: b2's two and a3's two.
	readings, err := c.readings.ReadingsByTimeRange(ctx(t), a[2].Origin+1, a[3].Origin, 0, -1)
	mustEdgeX(t, "ReadingClient.ReadingsByTimeRange", err)
	check("ReadingsByTimeRange", readingOrigins(readings.Readings),
		desc(b[2].Origin, b[2].Origin, a[3].Origin, a[3].Origin))

	readings, err = c.readings.ReadingsByResourceNameAndTimeRange(ctx(t), "r1", a[2].Origin, a[3].Origin, 0, -1)
	mustEdgeX(t, "ReadingClient.ReadingsByResourceNameAndTimeRange", err)
	check("ReadingsByResourceNameAndTimeRange r1", readingOrigins(readings.Readings),
		desc(a[2].Origin, b[2].Origin, a[3].Origin))
	for _, r := range readings.Readings {
		if r.ResourceName != "r1" || r.Value != "1.5e+00" {
			t.Errorf("ReadingsByResourceNameAndTimeRange r1: reading %s value %q, sent 1.5e+00", r.ResourceName, r.Value)
		}
	}

	readings, err = c.readings.ReadingsByDeviceNameAndResourceNameAndTimeRange(ctx(t), "range-b", "r0", b[1].Origin, b[3].Origin, 0, -1)
	mustEdgeX(t, "ReadingClient.ReadingsByDeviceNameAndResourceNameAndTimeRange", err)
	check("ReadingsByDeviceNameAndResourceNameAndTimeRange range-b r0", readingOrigins(readings.Readings),
		desc(b[1].Origin, b[2].Origin, b[3].Origin))
	for _, r := range readings.Readings {
		if r.DeviceName != "range-b" || r.ResourceName != "r0" || r.ValueType != common.ValueTypeFloat64 || r.ProfileName != "interop-profile" {
			t.Errorf("ReadingsByDeviceNameAndResourceNameAndTimeRange: reading %+v", r)
		}
	}

	readings, err = c.readings.ReadingsByDeviceNameAndResourceNamesAndTimeRange(ctx(t), "range-a", []string{"r1"}, a[0].Origin, a[1].Origin, 0, -1)
	mustEdgeX(t, "ReadingClient.ReadingsByDeviceNameAndResourceNamesAndTimeRange [r1]", err)
	check("ReadingsByDeviceNameAndResourceNamesAndTimeRange [r1]", readingOrigins(readings.Readings),
		desc(a[0].Origin, a[1].Origin))
	readings, err = c.readings.ReadingsByDeviceNameAndResourceNamesAndTimeRange(ctx(t), "range-a", nil, a[0].Origin, a[1].Origin, 0, -1)
	mustEdgeX(t, "ReadingClient.ReadingsByDeviceNameAndResourceNamesAndTimeRange (no names: every resource)", err)
	check("ReadingsByDeviceNameAndResourceNamesAndTimeRange (every resource)", readingOrigins(readings.Readings),
		desc(a[0].Origin, a[0].Origin, a[1].Origin, a[1].Origin))

	// The name routes: every reading of a resource name over every device.
	byResource, err := c.readings.ReadingsByResourceName(ctx(t), "r0", 0, 200)
	mustEdgeX(t, "ReadingClient.ReadingsByResourceName", err)
	n := 0
	for _, r := range byResource.Readings {
		if r.ResourceName != "r0" {
			t.Errorf("ReadingsByResourceName r0 answered a reading of %s", r.ResourceName)
		}
		if r.DeviceName == "range-a" || r.DeviceName == "range-b" {
			n++
		}
	}
	if n != 20 {
		t.Errorf("ReadingsByResourceName r0: %d readings of range-a and range-b, want 20", n)
	}
	// A range with no readings is an empty page, not an error.
	empty, err := c.readings.ReadingsByTimeRange(ctx(t), window(99), window(99)+10, 0, 20)
	mustEdgeX(t, "ReadingsByTimeRange over nothing", err)
	if len(empty.Readings) != 0 || empty.TotalCount != 0 {
		t.Errorf("ReadingsByTimeRange over nothing: %d readings, totalCount %d", len(empty.Readings), empty.TotalCount)
	}
	// end before start: core-data answers 400 (ParseTimeRangeOffsetLimit).
	_, err = c.readings.ReadingsByTimeRange(ctx(t), end, start, 0, 20)
	wantEdgeXError(t, "ReadingsByTimeRange end < start", err, errors.KindContractInvalid, http.StatusBadRequest)
}

// Names with characters a path must escape, sent as EdgeX's client sends them
// (enableNameFieldEscape: url.PathEscape of each name).
func TestEscapedNames(t *testing.T) {
	c := clientsFor(shared, "")
	e := dtos.NewEvent("profile with space", "device/with slash & ü", "source?x=1#y")
	e.Origin = window(5)
	mustAdd(t, &e, "resource %20 name", common.ValueTypeInt32, int32(7))
	e.Readings[0].Origin = e.Origin
	add(t, c, e)
	readings, err := c.readings.ReadingsByDeviceNameAndResourceNamesAndTimeRange(ctx(t), e.DeviceName,
		[]string{e.Readings[0].ResourceName}, e.Origin, e.Origin, 0, -1)
	mustEdgeX(t, "ReadingsByDeviceNameAndResourceNamesAndTimeRange with an escaped device name", err)
	if len(readings.Readings) != 1 {
		t.Fatalf("%d readings", len(readings.Readings))
	}
	sameReading(t, "escaped names", readings.Readings[0], e.Readings[0])
}

// Refusals as core-data refuses them: the kind and the code EdgeX's client reports.
func TestRefusals(t *testing.T) {
	c := clientsFor(shared, "")
	e := dtos.NewEvent("interop-profile", "refused", "src")
	e.Origin = window(6)
	mustAdd(t, &e, "ok", common.ValueTypeUint8, uint8(1))
	bad := e.Readings[0]
	bad.ResourceName, bad.Value, bad.Origin = "too-big", "300", e.Origin+1
	e.Readings = append(e.Readings, bad)
	_, err := c.events.Add(ctx(t), "interop-service", requests.NewAddEventRequest(e))
	wantEdgeXError(t, "Add with a Uint8 reading of 300", err, errors.KindContractInvalid, http.StatusBadRequest)
	count, cerr := c.events.EventCountByDeviceName(ctx(t), "refused")
	mustEdgeX(t, "EventCountByDeviceName", cerr)
	if count.Count != 0 {
		t.Errorf("a refused event left %d events", count.Count)
	}

	e.Readings = e.Readings[:1]
	e.Readings[0].ValueType = "Float128"
	_, err = c.events.Add(ctx(t), "interop-service", requests.NewAddEventRequest(e))
	wantEdgeXError(t, "Add with valueType Float128", err, errors.KindContractInvalid, http.StatusBadRequest)

	e.Readings = nil
	_, err = c.events.Add(ctx(t), "interop-service", requests.NewAddEventRequest(e))
	wantEdgeXError(t, "Add with no readings", err, errors.KindContractInvalid, http.StatusBadRequest)

	_, err = c.events.DeleteById(ctx(t), "a6a8b1d4-5c43-4b2b-9e36-3c8f0fc2e1d7")
	wantEdgeXError(t, "DeleteById of an id no event has", err, errors.KindEntityDoesNotExist, http.StatusNotFound)
}

// DeleteById, DeleteByDeviceName and DeleteByAge, each on a server of its own so that age
// deletes nothing of the other tests.
func TestDeletes(t *testing.T) {
	s := newServer(t)
	c := clientsFor(s, "")
	old1 := simpleEvent(t, "old", window(7), 2)
	old2 := simpleEvent(t, "old", window(7)+1000, 2)
	gone := simpleEvent(t, "gone", window(7), 1)
	now := time.Now().UnixNano()
	recent := simpleEvent(t, "recent", now, 3)
	for _, e := range []dtos.Event{old1, old2, gone, recent} {
		add(t, c, e)
	}

	res, err := c.events.DeleteById(ctx(t), old1.Id)
	mustEdgeX(t, "EventClient.DeleteById", err)
	if res.StatusCode != http.StatusOK {
		t.Errorf("DeleteById: statusCode %d, want 200", res.StatusCode)
	}
	left, err := c.events.EventsByDeviceName(ctx(t), "old", 0, -1)
	mustEdgeX(t, "EventsByDeviceName after DeleteById", err)
	if len(left.Events) != 1 || left.Events[0].Id != old2.Id {
		t.Errorf("after DeleteById(%s) device old has %d events", old1.Id, len(left.Events))
	}
	_, err = c.events.DeleteById(ctx(t), old1.Id)
	wantEdgeXError(t, "DeleteById again", err, errors.KindEntityDoesNotExist, http.StatusNotFound)

	res, err = c.events.DeleteByDeviceName(ctx(t), "gone")
	mustEdgeX(t, "EventClient.DeleteByDeviceName", err)
	if res.StatusCode != http.StatusAccepted {
		t.Errorf("DeleteByDeviceName: statusCode %d, want 202", res.StatusCode)
	}
	count, err := c.events.EventCountByDeviceName(ctx(t), "gone")
	mustEdgeX(t, "EventCountByDeviceName gone", err)
	if count.Count != 0 {
		t.Errorf("DeleteByDeviceName left %d events", count.Count)
	}

	// Age in nanoseconds, as core-data takes it: an hour keeps the recent event only.
	res, err = c.events.DeleteByAge(ctx(t), int(time.Hour))
	mustEdgeX(t, "EventClient.DeleteByAge", err)
	if res.StatusCode != http.StatusAccepted {
		t.Errorf("DeleteByAge: statusCode %d, want 202", res.StatusCode)
	}
	all, err := c.events.AllEvents(ctx(t), 0, -1)
	mustEdgeX(t, "AllEvents after DeleteByAge", err)
	if len(all.Events) != 1 {
		t.Fatalf("after DeleteByAge(1h) %d events are left, want the recent one", len(all.Events))
	}
	sameEvent(t, "after DeleteByAge", all.Events[0], recent)
	rc, err := c.readings.ReadingCount(ctx(t))
	mustEdgeX(t, "ReadingCount after deletes", err)
	if rc.Count != 3 {
		t.Errorf("ReadingCount after deletes: %d, want 3", rc.Count)
	}
}

// With a token, EdgeX's clients authenticate as its JWT injector does (a bearer header);
// without it they are refused as core-data refuses them (401).
func TestBearerToken(t *testing.T) {
	token := "interop-token-0123456789abcdef"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--auth-token-file", file)
	e := simpleEvent(t, "authed", window(8), 1)
	add(t, clientsFor(s, token), e)
	_, err := clientsFor(s, "").events.EventCount(ctx(t))
	wantEdgeXError(t, "EventCount without the token", err, errors.KindUnauthorized, http.StatusUnauthorized)
	_, err = clientsFor(s, "wrong-token-0123456789").events.Add(ctx(t), "svc", requests.NewAddEventRequest(simpleEvent(t, "authed", window(8)+5, 1)))
	wantEdgeXError(t, "Add with a wrong token", err, errors.KindUnauthorized, http.StatusUnauthorized)
	ping, perr := clientsFor(s, "").common.Ping(ctx(t))
	mustEdgeX(t, "Ping without a token (core-data's ping needs none)", perr)
	if ping.ServiceName != common.CoreDataServiceKey {
		t.Errorf("ping %+v", ping)
	}
}
