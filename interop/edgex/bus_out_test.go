// The message bus, out: events POSTed to roamkv over REST are re-published as core-data
// publishes them, on edgex/events/core/{service}/{profile}/{device}/{source}; a subscriber
// made with go-mod-messaging's MQTT client at QoS 1 (what an app service's trigger uses)
// decodes each with go-mod-messaging's GetMsgPayload into EdgeX's AddEventRequest, as
// app-functions-sdk-go does, and gets every one exactly once.

package edgex

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgexfoundry/go-mod-core-contracts/v4/common"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/dtos"
	"github.com/edgexfoundry/go-mod-core-contracts/v4/dtos/requests"
	"github.com/edgexfoundry/go-mod-messaging/v4/pkg/types"
)

func TestBusOutRepublishesRESTEvents(t *testing.T) {
	broker := newMosquitto(t)
	s := busServer(t, broker)
	c := clientsFor(s, "")
	sub := busClient(t, broker, "app-interop", 1)
	messages := make(chan types.MessageEnvelope, 256)
	subErrors := make(chan error, 16)
	topic := common.BuildTopic(common.DefaultBaseTopic, common.EventsPublishTopic, "core", "#")
	if err := sub.Subscribe([]types.TopicChannel{{Topic: topic, Messages: messages}}, subErrors); err != nil {
		t.Fatalf("go-mod-messaging Subscribe %s: %v", topic, err)
	}

	// What the app service wants (a FilterByDeviceName of "out-a" and "out-b") and what it
	// does not ("out-other").
	var sent []dtos.Event
	cborEvent := everyValueType(t, "out-a", window(40))
	jsonEvent := everyValueType(t, "out-b", window(40))
	n := len(jsonEvent.Readings) // drop the Binary reading, keep the Object one
	jsonEvent.Readings = append(jsonEvent.Readings[:n-2], jsonEvent.Readings[n-1])
	sent = append(sent, cborEvent, jsonEvent)
	for i := int64(0); i < 50; i++ {
		sent = append(sent, simpleEvent(t, "out-b", window(41)+i*1000, 2))
	}
	other := simpleEvent(t, "out-other", window(42), 1)
	for _, e := range sent {
		add(t, c, e)
	}
	add(t, c, other)

	byID := map[string]dtos.Event{}
	for _, e := range sent {
		byID[e.Id] = e
	}
	got := map[string]int{}
	deadline := time.After(20 * time.Second)
	settle := (<-chan time.Time)(nil)
	for {
		select {
		case err := <-subErrors:
			t.Fatalf("go-mod-messaging subscription error: %v", err)
		case env := <-messages:
			req, err := types.GetMsgPayload[requests.AddEventRequest](env)
			if err != nil {
				t.Fatalf("GetMsgPayload[AddEventRequest] on the envelope from %s (contentType %s): %v", env.ReceivedTopic, env.ContentType, err)
			}
			if err := req.Validate(); err != nil {
				t.Errorf("the re-published AddEventRequest fails EdgeX's validation: %v", err)
			}
			e := req.Event
			wantTopic := common.BuildTopic(common.DefaultBaseTopic, common.EventsPublishTopic, "core", "interop-service", e.ProfileName, e.DeviceName, e.SourceName)
			if env.ReceivedTopic != wantTopic {
				t.Errorf("event %s came on %s; core-data publishes it on %s", e.Id, env.ReceivedTopic, wantTopic)
			}
			if e.DeviceName != "out-a" && e.DeviceName != "out-b" {
				continue // filtered out by device, as the app service's pipeline does
			}
			got[e.Id]++
			want, ok := byID[e.Id]
			if !ok {
				t.Errorf("event %s of %s was re-published but never posted", e.Id, e.DeviceName)
				continue
			}
			sameEvent(t, fmt.Sprintf("re-published %s (%s)", e.DeviceName, env.ContentType), e, want)
			if len(got) == len(sent) && settle == nil {
				settle = time.After(500 * time.Millisecond)
			}
		case <-settle:
			for id, n := range got {
				if n != 1 {
					t.Errorf("event %s received %d times at QoS 1", id, n)
				}
			}
			return
		case <-deadline:
			t.Fatalf("%d of the %d events posted over REST came on the bus within 20 s", len(got), len(sent))
		}
	}
}
