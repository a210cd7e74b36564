// An app service built with app-functions-sdk-go v4 (./appservice), run as EdgeX runs one: its
// own process, its configuration file (-cf), no registry (no -r), no configuration provider
// (no -cp), no secret store (EDGEX_SECURITY_SECRET_STORE=false). Its pipeline
// (FilterByDeviceName, TransformToJSON, HTTPPost) receives the events roamkv re-publishes
// after REST ingest and posts each to this test's HTTP sink, once, at QoS 1.

package edgex

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgexfoundry/go-mod-core-contracts/v4/dtos"
)

// appServiceBinary: $APP_INTEROP_BIN (make test-interop builds it before the timed run), else
// built here from ./appservice, its own Go module.
func appServiceBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("APP_INTEROP_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("APP_INTEROP_BIN %s: %v", bin, err)
		}
		return bin
	}
	bin := filepath.Join(t.TempDir(), "app-interop")
	// The go that built this test (runtime.GOROOT), not whichever is first on the PATH.
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	build.Dir = "appservice"
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=readonly -buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the app service (app-functions-sdk-go v4.0.0): %v\n%s", err, out)
	}
	return bin
}

// appConfiguration is the app service's configuration file. Without a configuration
// provider the SDK reads nothing else (no common configuration: no -cc), so it holds what
// EdgeX's common configuration would give it: Service, MessageBus, Trigger.
const appConfiguration = `Writable:
  LogLevel: INFO
  StoreAndForward:
    Enabled: false
    RetryInterval: 5m
    MaxRetryCount: 10
  Telemetry:
    Interval: 0s
Service:
  Host: 127.0.0.1
  Port: %d
  ServerBindAddr: 127.0.0.1
  StartupMsg: app-interop started
  RequestTimeout: 5s
  MaxRequestSize: 0
  MaxResultCount: 1024
  HealthCheckInterval: 10s
MessageBus:
  Disabled: false
  Protocol: tcp
  Host: 127.0.0.1
  Port: %d
  Type: mqtt
  AuthMode: none
  BaseTopicPrefix: edgex
  Optional:
    ClientId: app-interop
    Qos: "1"
    KeepAlive: "10"
    Retained: "false"
    AutoReconnect: "true"
    ConnectTimeout: "5"
    CleanSession: "false"
Trigger:
  Type: edgex-messagebus
  SubscribeTopics: events/core/#
ApplicationSettings:
  Devices: app-a,app-b
  SinkURL: %s
`

func TestAppServiceReceivesRepublishedEvents(t *testing.T) {
	bin := appServiceBinary(t)
	broker := newMosquitto(t)
	s := busServer(t, broker)
	c := clientsFor(s, "")

	// The sink: every event the app service posts, by id.
	var mu sync.Mutex
	received := map[string][]dtos.Event{}
	var bad []string
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e dtos.Event
		mu.Lock()
		defer mu.Unlock()
		if err := json.Unmarshal(body, &e); err != nil {
			bad = append(bad, fmt.Sprintf("%v: %.200s", err, body))
		} else {
			received[e.Id] = append(received[e.Id], e)
		}
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: callTimeout}
	go func() { _ = sink.Serve(listener) }()
	t.Cleanup(func() { _ = sink.Close() })

	dir := t.TempDir()
	appPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "configuration.yaml")
	sinkURL := fmt.Sprintf("http://%s/sink", listener.Addr())
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(appConfiguration, appPort, broker.port, sinkURL)), 0o644); err != nil {
		t.Fatal(err)
	}
	app := exec.Command(bin, "-cd", dir, "-cf", "configuration.yaml")
	app.Dir = dir
	app.Env = append(os.Environ(), "EDGEX_SECURITY_SECRET_STORE=false")
	var appLog lockedBuffer
	app.Stdout, app.Stderr = &appLog, &appLog
	app.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := app.Start(); err != nil {
		t.Fatalf("start the app service: %v", err)
	}
	track(app)
	appDone := make(chan struct{})
	go func() { _ = app.Wait(); untrack(app); close(appDone) }()
	t.Cleanup(func() {
		_ = app.Process.Kill()
		<-appDone
		if t.Failed() {
			lines := strings.Split(strings.TrimRight(appLog.String(), "\n"), "\n")
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			fmt.Fprintf(os.Stderr, "--- app service (app-functions-sdk-go v4.0.0), last lines of its log:\n%s\n", strings.Join(lines, "\n"))
		}
	})
	// Ready when its /api/v3/ping answers and it is subscribed (its log says so).
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-appDone:
			t.Fatalf("the app service exited at start")
		default:
		}
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v3/ping", appPort))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(appLog.String(), "Subscribing to topic") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app service did not answer its ping and subscribe within %v", startTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // its SUBSCRIBE reaches the broker after the log line

	var sent []dtos.Event
	// A CBOR event (it has a Binary reading) without maps nested in its tags or an Object
	// reading: EdgeX's CBOR decoding makes a nested map a map[any]any, which the SDK's
	// TransformToJSON cannot encode; core-data re-publishes CBOR as posted too (DEVIATIONS.md
	// D14). The JSON event carries both.
	cborEvent := everyValueType(t, "app-a", window(50))
	delete(cborEvent.Tags, "nested")
	delete(cborEvent.Readings[11].Tags, "by")
	cborEvent.Readings = cborEvent.Readings[:len(cborEvent.Readings)-1]
	jsonEvent := everyValueType(t, "app-b", window(50))
	n := len(jsonEvent.Readings) // drop the Binary reading, keep the Object one
	jsonEvent.Readings = append(jsonEvent.Readings[:n-2], jsonEvent.Readings[n-1])
	sent = append(sent, cborEvent, jsonEvent)
	for i := int64(0); i < 40; i++ {
		sent = append(sent, simpleEvent(t, "app-b", window(51)+i*1000, 2))
	}
	for _, e := range sent {
		add(t, c, e)
	}
	add(t, c, simpleEvent(t, "app-filtered-out", window(52), 1))

	deadline = time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(received)
		mu.Unlock()
		if n >= len(sent) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app service posted %d of the %d events within 20 s", n, len(sent))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a second delivery would come now
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("the sink got bodies that are not an EdgeX Event: %v", bad)
	}
	for _, e := range sent {
		got := received[e.Id]
		if len(got) != 1 {
			t.Errorf("event %s of %s reached the app service's sink %d times, want once", e.Id, e.DeviceName, len(got))
			continue
		}
		sameEvent(t, "through the app service "+e.DeviceName, got[0], e)
	}
	for id, es := range received {
		if es[0].DeviceName == "app-filtered-out" {
			t.Errorf("event %s of app-filtered-out passed FilterByDeviceName", id)
		}
	}
}
