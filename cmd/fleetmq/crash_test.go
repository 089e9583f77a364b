package main

// The crash-safety test runs the real "fleetmq serve" in a child process
// (this test binary re-executed, see TestMain), drives QoS 1 publishers
// hard, kills the process with SIGKILL mid-stream, restarts it on the same
// data directory and checks what docs/design.md promises: every message that
// received a PUBACK is in history exactly once, and retained messages and
// persistent sessions come back from the last periodic state save.
//
// Acceptance asks for 20 runs in a row once:
//
//	go test -race -count=20 -run TestCrashSafety ./cmd/fleetmq/

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// childEnv marks a re-executed test binary that runs the fleetmq command
// given after "--" instead of the tests.
const childEnv = "FLEETMQ_TEST_CHILD"

func TestMain(m *testing.M) {
	control.ServeKeyWorkerIfAsked()
	if os.Getenv(childEnv) == "1" {
		keyWorkers = true // a child is "fleetmq serve" as the binary runs it
		i := 0
		for i < len(os.Args) && os.Args[i] != "--" {
			i++
		}
		quietRuntimeMonitor(os.Args, os.Args[min(i+1, len(os.Args)):]) // as main does
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		if i+1 < len(os.Args) {
			fitProcessors(ctx, os.Args[i+1]) // as main does
		}
		err := runStdin(ctx, os.Args[min(i+1, len(os.Args)):], os.Stdin, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetmq:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveProcess is a "fleetmq serve" child process.
type serveProcess struct {
	cmd   *exec.Cmd
	addr  string // MQTT TCP address
	route string // a cluster node's embedded NATS route listener, HOST:PORT
	http  string // the HTTP listener, HOST:PORT, when -http-listen is given
	dir   string // its data directory
	done  chan struct{}
}

// startServe runs "fleetmq serve" on dir in a child process and waits for
// its MQTT address.
func startServe(t *testing.T, dir string, extra ...string) *serveProcess {
	t.Helper()
	p := startChild(t, append([]string{"serve", "-data", dir, "-listen", "127.0.0.1:0", "-http-listen", "",
		"-state-save-interval", "100ms"}, extra...)...)
	p.dir = dir
	return p
}

// startChild runs the fleetmq command args (serve or broker) in a child
// process and waits for the addresses it prints.
func startChild(t *testing.T, args ...string) *serveProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(func() { p.kill(t) })
	addrc := make(chan [3]string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, after, ok := strings.Cut(sc.Text(), "mqtt://"); ok {
				var route, web string
				if _, r, ok := strings.Cut(after, "nats-route://"); ok {
					route = strings.Fields(r)[0]
				}
				if _, h, ok := strings.Cut(after, "http://"); ok {
					web = strings.Fields(h)[0]
				}
				select {
				case addrc <- [3]string{strings.Fields(after)[0], route, web}:
				default:
				}
			}
		}
	}()
	go func() { cmd.Wait(); close(p.done) }()
	select {
	case a := <-addrc:
		p.addr, p.route, p.http = a[0], a[1], a[2]
	case <-p.done:
		t.Fatalf("fleetmq %s exited before listening", args[0])
	case <-time.After(waitFor):
		t.Fatalf("fleetmq %s did not print its address", args[0])
	}
	return p
}

// stop sends SIGTERM (a clean shutdown) and waits for the process to end.
func (p *serveProcess) stop(t *testing.T) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(waitFor + 10*time.Second):
		t.Errorf("fleetmq serve (pid %d) did not end after SIGTERM", p.cmd.Process.Pid)
	}
}

// kill sends SIGKILL (only to the process this test started) and waits for
// it to end.
func (p *serveProcess) kill(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(waitFor):
		t.Errorf("fleetmq serve (pid %d) did not end after SIGKILL", p.cmd.Process.Pid)
	}
}

// crashPublisher publishes numbered QoS 1 messages as fast as the server
// acknowledges them, with up to window outstanding, and records which
// numbers were acknowledged.
type crashPublisher struct {
	client mqtt3.Client
	id     string
	first  int // the first number it sends
	mu     sync.Mutex
	acked  map[int]bool
	sent   atomic.Int64
}

func (p *crashPublisher) run(topic string, window int, stop <-chan struct{}) {
	sem := make(chan struct{}, window)
	for seq := p.first; ; seq++ {
		select {
		case <-stop:
			return
		case sem <- struct{}{}:
		}
		if !p.client.IsConnectionOpen() {
			return
		}
		tok := p.client.Publish(topic, 1, false, fmt.Sprintf(`{"seq":%d}`, seq))
		p.sent.Add(1)
		go func(seq int) {
			defer func() { <-sem }()
			if tok.WaitTimeout(waitFor) && tok.Error() == nil {
				p.mu.Lock()
				p.acked[seq] = true
				p.mu.Unlock()
			}
		}(seq)
	}
}

func (p *crashPublisher) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// TestCrashSafety: SIGKILL while QoS 1 publishers run loses no
// acknowledged message and stores none twice; retained messages and a
// persistent session saved before the crash come back.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dir := t.TempDir()
	acc := field(t, mustCLI(t, dir, "account", "create", "-name", "Crash", "-email", "crash@example.com", "-plan", "growth"), "account_id")
	const publishers = 4
	for i := range publishers {
		mustCLI(t, dir, "client", "add", acc, fmt.Sprintf("dev-%d", i))
	}
	pubOut := mustCLI(t, dir, "credential", "create", acc, "-kind", "publisher")
	pubUser, pubPass := field(t, pubOut, "username"), field(t, pubOut, "password")
	subOut := mustCLI(t, dir, "credential", "create", acc, "-kind", "subscriber")
	subUser, subPass := field(t, subOut, "username"), field(t, subOut, "password")

	srv := startServe(t, dir)

	// A retained message and a persistent session, both saved by the
	// periodic state save before the crash.
	dev0 := connectV3(t, srv.addr, "dev-0", pubUser, pubPass)
	if tok := dev0.Publish(acc+"/dev-0/state/config", 1, true, `{"mode":"auto"}`); !tok.WaitTimeout(waitFor) || tok.Error() != nil {
		t.Fatalf("retained publish: %v", tok.Error())
	}
	dev0.Disconnect(0)
	persistent := connectV5(t, srv.addr, "watcher", subUser, subPass, false)
	if _, err := persistent.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: acc + "/+/event/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	persistent.Disconnect(&paho.Disconnect{})
	stateFile := filepath.Join(dir, "broker-state.json")
	eventually(t, "state saved with the retained message and the session", func() bool {
		b, err := os.ReadFile(stateFile)
		r, rerr := os.ReadFile(stateFile + ".retained") // the retained log
		return err == nil && rerr == nil && strings.Contains(string(b), "watcher") && strings.Contains(string(r), "state/config")
	})

	// The storm, then SIGKILL mid-stream.
	pubs := make([]*crashPublisher, publishers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range pubs {
		id := fmt.Sprintf("dev-%d", i)
		pubs[i] = &crashPublisher{client: connectV3(t, srv.addr, id, pubUser, pubPass), id: id, acked: map[int]bool{}}
		wg.Add(1)
		go func(p *crashPublisher) {
			defer wg.Done()
			p.run(acc+"/"+p.id+"/telemetry/seq", 50, stop)
		}(pubs[i])
	}
	eventually(t, "publishers acknowledged", func() bool {
		n := 0
		for _, p := range pubs {
			n += p.ackedCount()
		}
		return n >= 2000
	})
	srv.kill(t)
	close(stop)
	wg.Wait()
	for _, p := range pubs {
		p.client.Disconnect(0)
	}
	// Wait for outstanding tokens: each ends with an error once the
	// connection is gone.
	acked := map[string]map[int]bool{}
	total, sent := 0, int64(0)
	for _, p := range pubs {
		p.mu.Lock()
		acked[p.id] = p.acked
		total += len(p.acked)
		p.mu.Unlock()
		sent += p.sent.Load()
	}
	t.Logf("killed after %d QoS 1 publishes, %d acknowledged", sent, total)

	srv = startServe(t, dir)
	stored := storedSeqs(t, mustCLI(t, dir, "history", "export", acc, "-topic", acc+"/+/telemetry/seq", "-format", "ndjson"))
	lines := 0
	for _, seqs := range stored {
		for _, n := range seqs {
			lines += n
		}
	}
	for id, seqs := range stored {
		for seq, n := range seqs {
			if n != 1 {
				t.Errorf("%s seq %d stored %d times", id, seq, n)
			}
		}
	}
	missing := 0
	for id, seqs := range acked {
		for seq := range seqs {
			if stored[id][seq] != 1 {
				missing++
				if missing <= 5 {
					t.Errorf("%s seq %d was acknowledged but is not in history", id, seq)
				}
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged messages missing from history", missing)
	}
	t.Logf("history holds %d records: all %d acknowledged, %d stored whose PUBACK the crash cut off", lines, total, lines-total)

	// Retained and the persistent session came back.
	watcher := connectV5(t, srv.addr, "watcher", subUser, subPass, false)
	if !watcher.Connack.SessionPresent {
		t.Error("persistent session did not survive the crash")
	}
	reader := connectV5(t, srv.addr, "reader", subUser, subPass, true)
	if _, err := reader.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: acc + "/dev-0/state/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-reader.Msgs:
		if string(m.Payload) != `{"mode":"auto"}` || !m.Retain {
			t.Errorf("retained after restart: %s retain=%v", m.Payload, m.Retain)
		}
	case <-time.After(waitFor):
		t.Error("retained message did not survive the crash")
	}
	// The session's subscription still delivers.
	dev1 := connectV3(t, srv.addr, "dev-1", pubUser, pubPass)
	if tok := dev1.Publish(acc+"/dev-1/event/after", 1, false, "after"); !tok.WaitTimeout(waitFor) || tok.Error() != nil {
		t.Fatalf("publish after restart: %v", tok.Error())
	}
	select {
	case m := <-watcher.Msgs:
		if string(m.Payload) != "after" {
			t.Errorf("persistent session got %q", m.Payload)
		}
	case <-time.After(waitFor):
		t.Error("persistent session's subscription did not deliver after the restart")
	}
}

// storedSeqs reads an NDJSON history export of crashPublisher messages:
// how many times each client's numbers are stored.
func storedSeqs(t *testing.T, out string) map[string]map[int]int {
	t.Helper()
	stored := map[string]map[int]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r history.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		var m struct{ Seq int }
		if err := json.Unmarshal(r.Payload, &m); err != nil {
			t.Fatalf("payload %s: %v", r.Payload, err)
		}
		if stored[r.ClientID] == nil {
			stored[r.ClientID] = map[int]int{}
		}
		stored[r.ClientID][m.Seq]++
	}
	return stored
}

// connectV3 connects a 3.1.1 client with a clean session.
func connectV3(t *testing.T, addr, id, user, pass string) *mqtttest.V3 {
	t.Helper()
	return mqtttest.DialV3(t, addr, id, mqtttest.Credentials(user, pass),
		func(o *mqtt3.ClientOptions) { o.SetWriteTimeout(waitFor).SetMaxResumePubInFlight(0) })
}

// connectV5 connects an MQTT 5 client whose session, unless clean, lives
// an hour after it leaves.
func connectV5(t *testing.T, addr, id, user, pass string, clean bool, edit ...func(*paho.ClientConfig)) *mqtttest.V5 {
	t.Helper()
	cp := mqtttest.Login(id, user, pass)
	cp.CleanStart = clean
	cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: paho.Uint32(3600)}
	return mqtttest.DialV5(t, addr, cp, edit...)
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// TestCrashReplaysPersistentSessions: the QoS 1 messages an offline
// persistent session was given after the last state save are not in the
// state file when the server is killed; the session restored at the next
// start gets them from history, in order and before what is published
// after, and a message it was sent before that save does not come again.
func TestCrashReplaysPersistentSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dir := t.TempDir()
	acc := field(t, mustCLI(t, dir, "account", "create", "-name", "Replay", "-email", "replay@example.com", "-plan", "growth"), "account_id")
	mustCLI(t, dir, "client", "add", acc, "dev-0")
	pubOut := mustCLI(t, dir, "credential", "create", acc, "-kind", "publisher")
	pubUser, pubPass := field(t, pubOut, "username"), field(t, pubOut, "password")
	subOut := mustCLI(t, dir, "credential", "create", acc, "-kind", "subscriber")
	subUser, subPass := field(t, subOut, "username"), field(t, subOut, "password")
	const noSave = "1h" // no periodic save in the test's time: only the one at a clean stop
	publish := func(addr, payload string) {
		t.Helper()
		dev := connectV3(t, addr, "dev-0", pubUser, pubPass)
		defer dev.Disconnect(0)
		if tok := dev.Publish(acc+"/dev-0/event/x", 1, false, payload); !tok.WaitTimeout(waitFor) || tok.Error() != nil {
			t.Fatalf("publish %q: %v", payload, tok.Error())
		}
	}

	srv := startServe(t, dir, "-state-save-interval", noSave)
	// A raw client, so that its PUBACK goes before its DISCONNECT (paho
	// writes its PUBACK after its handler returns, which can be after the
	// test's DISCONNECT, and an unacknowledged message is rightly sent
	// again when the session resumes).
	var expiry packet.Properties
	expiry.SetSessionExpiry(3600)
	first, _ := mqtttest.ConnectRaw(t, srv.addr, &packet.Connect{ClientID: "watcher", KeepAlive: 30,
		Username: subUser, HasUsername: true, Password: []byte(subPass), HasPassword: true, Properties: expiry})
	first.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: acc + "/+/event/#", QoS: 1}}})
	first.Expect(t, packet.SUBACK)
	publish(srv.addr, "before")
	got := first.Expect(t, packet.PUBLISH).(*packet.Publish)
	if string(got.Payload) != "before" {
		t.Fatalf("the watcher got %q, want \"before\"", got.Payload)
	}
	first.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: got.PacketID})
	first.Must(t, &packet.Disconnect{})
	first.Closed(t)
	srv.stop(t) // saves the session, "before" among what it was sent

	srv = startServe(t, dir, "-state-save-interval", noSave)
	const n = 30
	for i := range n {
		publish(srv.addr, fmt.Sprint(i)) // acknowledged: stored, and queued for the offline session
	}
	srv.kill(t)

	srv = startServe(t, dir, "-state-save-interval", noSave)
	watcher := connectV5(t, srv.addr, "watcher", subUser, subPass, false)
	if !watcher.Connack.SessionPresent {
		t.Fatal("the persistent session did not survive the crash")
	}
	publish(srv.addr, "after")
	// Each of the n once, in order (none lost, repeated or reordered), then
	// what was published after.
	var want []string
	for i := range n {
		want = append(want, fmt.Sprint(i))
	}
	watcher.Expect(t, append(want, "after")...)
}
