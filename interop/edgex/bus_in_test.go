// The message bus, in: events published as device-sdk-go v4 publishes them (go-mod-messaging's
// MQTT client, the MessageEnvelope it makes, JSON and CBOR, QoS 0 and 1, the topic layout
// edgex/events/device/{service}/{profile}/{device}/{source}) to a real mosquitto, stored by a
// real `roamkv serve` exactly, and kept through kill -9 at QoS 1.

package edgex

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/edgexfoundry/go-mod-core-contracts/v4/common"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/dtos"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/dtos/requests"
	"github.com/edgexfoundry/go-mod-messaging/v4/messaging"
	mqttConfig "github.com/edgexfoundry/go-mod-messaging/v4/messaging/mqtt"
	"github.com/edgexfoundry/go-mod-messaging/v4/pkg/types"
)

const deviceService = "device-interop"

// busClient is go-mod-messaging's MQTT client as a device service configures it
// (MessageBus.Type mqtt, Optional.Qos, ClientId, AutoReconnect, KeepAlive, ConnectTimeout).
func busClient(t *testing.T, broker *mosquitto, clientID string, qos int) messaging.MessageClient {
	t.Helper()
	client, err := messaging.NewMessageClient(types.MessageBusConfig{
		Broker: types.HostInfo{Host: "127.0.0.1", Port: broker.port, Protocol: "tcp"},
		Type:   messaging.MQTT,
		Optional: mqttConfig.NewMQTTOptionalConfigurationBuilder().
			ClientID(clientID).Qos(qos).AutoReconnect(true).KeepAlive(10).ConnectTimeout(5).Build(),
	})
	if err != nil {
		t.Fatalf("go-mod-messaging NewMessageClient: %v", err)
	}
	if err := client.Connect(); err != nil {
		t.Fatalf("go-mod-messaging Connect to mosquitto :%d: %v", broker.port, err)
	}
	t.Cleanup(func() { _ = client.Disconnect() })
	return client
}

// publishEvent publishes an event exactly as device-sdk-go v4's common.SendEvent does: an
// AddEventRequest, its encoding chosen by GetEncodingContentType (CBOR with a Binary
// reading), put in a MessageEnvelope by NewMessageEnvelope with the correlation id and
// content type in its context, on edgex/events/device/{service}/{profile}/{device}/{source}.
func publishEvent(client messaging.MessageClient, event dtos.Event) error {
	req := requests.NewAddEventRequest(event)
	encoding := req.GetEncodingContentType()
	ctx := context.WithValue(context.Background(), common.CorrelationHeader, event.Id) //nolint:staticcheck // as device-sdk-go does
	ctx = context.WithValue(ctx, common.ContentType, encoding)                         //nolint:staticcheck
	envelope := types.NewMessageEnvelope(req, ctx)
	topic := common.NewPathBuilder().EnableNameFieldEscape(false).
		SetPath(common.DefaultBaseTopic).SetPath(common.EventsPublishTopic).SetPath("device").
		SetNameFieldPath(deviceService).SetNameFieldPath(event.ProfileName).SetNameFieldPath(event.DeviceName).
		SetNameFieldPath(event.SourceName).BuildPath()
	return client.PublishWithSizeLimit(envelope, topic, 0)
}

// waitEvents waits (bounded) until `device` has `want` events over REST.
func waitEvents(t *testing.T, c edgexClients, device string, want uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got uint32
	for time.Now().Before(deadline) {
		res, err := c.events.EventCountByDeviceName(ctx(t), device)
		if err == nil {
			got = res.Count
			if got >= want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("device %s: %d events stored within 30 s of publishing %d on the bus", device, got, want)
}

// allEvents pages through every event of a device (MaxResultCount is 200 here).
func allEventsOf(t *testing.T, c edgexClients, device string) []dtos.Event {
	t.Helper()
	var out []dtos.Event
	for offset := 0; ; offset += 200 {
		page, err := c.events.EventsByDeviceName(ctx(t), device, offset, 200)
		if err != nil && err.Code() == 416 {
			return out
		}
		mustEdgeX(t, "EventsByDeviceName "+device, err)
		out = append(out, page.Events...)
		if len(page.Events) < 200 {
			return out
		}
	}
}

func busServer(t *testing.T, broker *mosquitto) *server {
	t.Helper()
	s := newServer(t, "--mqtt-broker", fmt.Sprintf("127.0.0.1:%d", broker.port))
	s.waitReady(t)
	return s
}

// Every value type, JSON and CBOR, QoS 0 and QoS 1, stored exactly as sent.
func TestBusInEveryValueType(t *testing.T) {
	broker := newMosquitto(t)
	s := busServer(t, broker)
	c := clientsFor(s, "")
	for _, qos := range []int{0, 1} {
		bus := busClient(t, broker, fmt.Sprintf("device-interop-qos%d", qos), qos)
		origin := window(20 + int64(qos))

		cborEvent := everyValueType(t, fmt.Sprintf("bus-cbor-qos%d", qos), origin)
		jsonEvent := everyValueType(t, fmt.Sprintf("bus-json-qos%d", qos), origin)
		jsonEvent.Readings = jsonEvent.Readings[:len(jsonEvent.Readings)-2]
		v4 := dtos.NewEvent("interop-profile", fmt.Sprintf("bus-v4-qos%d", qos), "v4-source")
		v4.Origin = origin
		v4.Readings = append(v4.Readings,
			dtos.NewObjectReadingWithArray(v4.ProfileName, v4.DeviceName, "objects", []any{map[string]any{"x": 1.0}}),
			dtos.NewNullReading(v4.ProfileName, v4.DeviceName, "nothing", common.ValueTypeInt16))
		for i := range v4.Readings {
			v4.Readings[i].Origin = origin
		}
		for _, e := range []dtos.Event{cborEvent, jsonEvent, v4} {
			if err := publishEvent(bus, e); err != nil {
				t.Fatalf("QoS %d: go-mod-messaging PublishWithSizeLimit %s: %v", qos, e.DeviceName, err)
			}
		}
		for _, e := range []dtos.Event{cborEvent, jsonEvent, v4} {
			waitEvents(t, c, e.DeviceName, 1)
			got := allEventsOf(t, c, e.DeviceName)
			if len(got) != 1 {
				t.Fatalf("QoS %d: device %s has %d events, 1 published", qos, e.DeviceName, len(got))
			}
			sameEvent(t, fmt.Sprintf("bus QoS %d %s", qos, e.DeviceName), got[0], e)
		}
	}
}

// ledger is the publisher's record: every event the broker acknowledged (QoS 1: Publish
// returned once the PUBACK came), and every one whose publish failed (unknown fate).
type ledger struct {
	mu      sync.Mutex
	acked   map[string]dtos.Event
	unknown map[string]dtos.Event
}

// Events published at QoS 1 while roamkv is killed with SIGKILL and restarted, three times:
// every event the broker acknowledged to the device service is stored once, with every
// reading; nothing is stored that was never published.
func TestBusInSurvivesKill9AtQoS1(t *testing.T) {
	broker := newMosquitto(t)
	s := busServer(t, broker)
	c := clientsFor(s, "")
	bus := busClient(t, broker, "device-interop-kill", 1)

	const events = 300
	const device = "bus-kill"
	rng := rand.New(rand.NewSource(55))
	kills := map[int]bool{}
	for len(kills) < 3 {
		kills[20+rng.Intn(events-40)] = true
	}
	book := ledger{acked: map[string]dtos.Event{}, unknown: map[string]dtos.Event{}}
	published := make(chan int, events)
	go func() {
		defer close(published)
		for i := 0; i < events; i++ {
			e := simpleEvent(t, device, window(30)+int64(i)*1000, 3)
			err := publishEvent(bus, e)
			book.mu.Lock()
			if err == nil {
				book.acked[e.Id] = e
			} else {
				book.unknown[e.Id] = e
			}
			book.mu.Unlock()
			published <- i
			time.Sleep(2 * time.Millisecond)
		}
	}()
	killed := 0
	for i := range published {
		if kills[i] {
			s.kill9()
			killed++
			if err := s.start(); err != nil {
				t.Fatalf("restart after kill -9 number %d: %v", killed, err)
			}
		}
	}
	if killed != 3 {
		t.Fatalf("killed %d times, planned 3", killed)
	}
	s.waitReady(t)
	if len(book.unknown) > 0 {
		t.Logf("%d publishes failed (fate unknown; the broker was never down, so none should)", len(book.unknown))
	}
	waitEvents(t, c, device, uint32(len(book.acked)))
	// Let any redelivery land before counting duplicates.
	time.Sleep(500 * time.Millisecond)
	got := allEventsOf(t, c, device)
	seen := map[string]int{}
	for _, e := range got {
		seen[e.Id]++
		want, ok := book.acked[e.Id]
		if !ok {
			want, ok = book.unknown[e.Id]
		}
		if !ok {
			t.Errorf("event %s is stored but was never published", e.Id)
			continue
		}
		sameEvent(t, "after kill -9", e, want)
	}
	lost := 0
	for id := range book.acked {
		if seen[id] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("event %s: acknowledged by the broker at QoS 1, not stored after %d kills", id, killed)
			}
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("event %s is answered %d times", id, n)
		}
	}
	readings, err := c.readings.ReadingCountByDeviceName(ctx(t), device)
	mustEdgeX(t, "ReadingCountByDeviceName", err)
	if int(readings.Count) != 3*len(got) {
		t.Errorf("%d readings for %d events of 3 readings: some reading is stored twice or lost", readings.Count, len(got))
	}
	t.Logf("%d events published at QoS 1, %d acknowledged, %d stored, %d lost, 3 kills", events, len(book.acked), len(got), lost)
}
