// The rig: a real `roamkv serve` (and, for the bus, a real mosquitto) started by the tests,
// each on a free loopback port with a private temporary directory, its log kept and printed
// when a test fails, killed on every way out (the test's end, a failure, a panic, a signal).

package edgex

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// startTimeout bounds a server's start: its engine opening and its first answer.
	startTimeout = 30 * time.Second
	// callTimeout bounds every call a test makes to a server or a broker.
	callTimeout = 15 * time.Second
)

// The processes the suite started and has not reaped: killed by the signal handler and by
// TestMain whatever way the run ends.
var (
	liveMu sync.Mutex
	live   = map[*exec.Cmd]struct{}{}
)

func track(cmd *exec.Cmd) {
	liveMu.Lock()
	live[cmd] = struct{}{}
	liveMu.Unlock()
}

func untrack(cmd *exec.Cmd) {
	liveMu.Lock()
	delete(live, cmd)
	liveMu.Unlock()
}

func killAll() {
	liveMu.Lock()
	defer liveMu.Unlock()
	for cmd := range live {
		_ = cmd.Process.Kill()
	}
}

// shared is the server most REST tests talk to (started by TestMain).
var shared *server

func TestMain(m *testing.M) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-signals
		killAll()
		os.Exit(2)
	}()
	code := func() int {
		defer killAll()
		binary, err := roamkvBinary()
		if err != nil {
			fmt.Fprintln(os.Stderr, "interop:", err)
			return 1
		}
		shared, err = startServer(binary, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "interop:", err)
			return 1
		}
		defer shared.stop()
		code := m.Run()
		if code != 0 {
			shared.printLog(os.Stderr)
		}
		return code
	}()
	os.Exit(code)
}

// roamkvBinary: $ROAMKV_BIN, else $CARGO_TARGET_DIR/release/roamkv, else the repository's
// target/release/roamkv. A missing binary is a failure, never a skip.
func roamkvBinary() (string, error) {
	if bin := os.Getenv("ROAMKV_BIN"); bin != "" {
		return checkBinary(bin)
	}
	dir := os.Getenv("CARGO_TARGET_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "target")
	}
	return checkBinary(filepath.Join(dir, "release", "roamkv"))
}

func checkBinary(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if info, err := os.Stat(abs); err != nil || info.IsDir() {
		return "", fmt.Errorf("no roamkv binary at %s: build it first (cargo build --release -p roamkv) or set ROAMKV_BIN", abs)
	}
	return abs, nil
}

// server is one `roamkv serve` process.
type server struct {
	binary string
	data   string
	args   []string
	port   int
	cmd    *exec.Cmd
	url    string
	log    *lockedBuffer
	done   chan struct{}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServer starts `roamkv serve` on a free loopback port with a new temporary data
// directory and `args` added, and waits for /api/v3/ping.
func startServer(binary string, args []string) (*server, error) {
	data, err := os.MkdirTemp("", "roamkv-interop-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{binary: binary, data: data, args: args, port: port, log: &lockedBuffer{}}
	if err := s.start(); err != nil {
		s.printLog(os.Stderr)
		s.stop()
		return nil, err
	}
	return s, nil
}

// start runs the process on the server's port and data directory (again, after a kill).
func (s *server) start() error {
	args := append([]string{
		"serve",
		"--listen", fmt.Sprintf("127.0.0.1:%d", s.port),
		"--data", s.data,
		"--max-result-count", "200",
	}, s.args...)
	cmd := exec.Command(s.binary, args...)
	// The tests write readings at fixed past times that the default retention (a week)
	// would delete at its first pass.
	cmd.Env = append(os.Environ(), "ROAMKV_RETENTION_DEFAULT_H=0")
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.binary, err)
	}
	track(cmd)
	s.cmd = cmd
	s.done = make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		untrack(cmd)
		close(done)
	}(s.done)
	s.url = fmt.Sprintf("http://127.0.0.1:%d", s.port)
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			return fmt.Errorf("roamkv serve exited before answering /api/v3/ping")
		default:
		}
		resp, err := client.Get(s.url + "/api/v3/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("roamkv serve did not answer /api/v3/ping within %v", startTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill9 SIGKILLs the process and waits for it to be gone.
func (s *server) kill9() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(callTimeout):
	}
	s.cmd = nil
}

// stop kills the process and removes its data directory.
func (s *server) stop() {
	s.kill9()
	_ = os.RemoveAll(s.data)
}

// waitReady waits until /ready answers 200 (the broker subscribed, with MQTT).
func (s *server) waitReady(t *testing.T) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := client.Get(s.url + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("roamkv serve %s not ready within %v", s.url, startTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) printLog(w *os.File) {
	lines := strings.Split(strings.TrimRight(s.log.String(), "\n"), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	fmt.Fprintf(w, "--- roamkv serve %s (%s), last %d lines of its log:\n%s\n", s.url, s.data, len(lines), strings.Join(lines, "\n"))
}

// newServer starts a server of the test's own, stopped (and its log printed if the test
// failed) when the test ends.
func newServer(t *testing.T, args ...string) *server {
	t.Helper()
	binary, err := roamkvBinary()
	if err != nil {
		t.Fatal(err)
	}
	s, err := startServer(binary, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.printLog(os.Stderr)
		}
		s.stop()
	})
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ctx is a context bounded by callTimeout, cancelled when the test ends.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return c
}

// mosquitto is one real broker.
type mosquitto struct {
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

func mosquittoBinary() string {
	if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
		return "/usr/sbin/mosquitto"
	}
	return "mosquitto"
}

// newMosquitto starts a broker on a free loopback port, anonymous, without persistence,
// logging everything to its directory; killed (its log printed if the test failed) when the
// test ends.
func newMosquitto(t *testing.T) *mosquitto {
	t.Helper()
	dir := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "root"
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	logPath := filepath.Join(dir, "mosquitto.log")
	text := fmt.Sprintf("user %s\npersistence false\nlistener %d 127.0.0.1\nallow_anonymous true\n"+
		"log_dest file %s\nlog_type all\nlog_timestamp_format %%H:%%M:%%S\n", user, port, logPath)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mosquittoBinary(), "-c", conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mosquitto (install it: scripts/install-deps test): %v", err)
	}
	track(cmd)
	b := &mosquitto{port: port, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		untrack(cmd)
		close(b.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-b.done
		if t.Failed() {
			text, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			fmt.Fprintf(os.Stderr, "--- mosquitto :%d, last lines of its log:\n%s\n", port, strings.Join(lines, "\n"))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return b
		}
		select {
		case <-b.done:
			t.Fatalf("mosquitto exited at start: %s", readTail(logPath))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto did not listen on port %d within 10 s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
