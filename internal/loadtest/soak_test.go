package loadtest

import (
	"bytes"
	"cmp"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// publishAt records a message as the devices do, with its publish and
// acknowledgement at the given times.
func publishAt(l *ledger, topic string, qos byte, start, acked time.Time) []byte {
	id, p := l.begin("dev", topic, qos, soakHeader)
	l.mu.Lock()
	l.msgs[id].start, l.msgs[id].acked = start.UnixNano(), acked.UnixNano()
	if acked.IsZero() {
		l.msgs[id].acked = 0
	}
	l.mu.Unlock()
	return p
}

// TestLedgerOwed: a message is owed to a subscriber when it was
// acknowledged, matches the filter, is delivered at QoS 1 or 2 and was
// published while the subscription was in place; a clean session's span
// ends when its connection is lost (less the grace), a persistent one's
// goes on across reconnects.
func TestLedgerOwed(t *testing.T) {
	l := newLedger(42)
	t0 := time.Now().Add(-time.Hour)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	clean := &subBook{name: "clean", filter: "a/+/state/#", qos: 1}
	pers := &subBook{name: "persistent", filter: "a/#", qos: 2, persistent: true}
	q0 := &subBook{name: "q0", filter: "a/#", qos: 0}
	for _, b := range []*subBook{clean, pers, q0} {
		l.addSub(b)
		b.cover = []span{{from: at(10).UnixNano()}}
	}
	clean.cover[0].to = at(100).UnixNano() // lost at 100 s
	clean.cover = append(clean.cover, span{from: at(120).UnixNano()})

	msgs := []struct {
		name         string
		topic        string
		qos          byte
		start, acked int
		clean, pers  bool
	}{
		{"before the subscriptions", "a/d/state/x", 1, 5, 11, false, false},
		{"inside both", "a/d/state/x", 2, 20, 21, true, true},
		{"filter does not match the clean one", "a/d/event/x", 1, 20, 21, false, true},
		{"QoS 0", "a/d/state/x", 0, 20, 21, false, false},
		{"not acknowledged", "a/d/state/x", 1, 20, -1, false, false},
		{"within the grace before the loss", "a/d/state/x", 1, 95, 95, false, true},
		{"while the clean one was away", "a/d/state/x", 1, 110, 111, false, true},
		{"after it subscribed again", "a/d/state/x", 1, 130, 131, true, true},
	}
	for _, m := range msgs {
		acked := time.Time{}
		if m.acked >= 0 {
			acked = at(m.acked)
		}
		publishAt(l, m.topic, m.qos, at(m.start), acked)
	}
	for i, m := range msgs {
		if got := clean.owed(&l.msgs[i]); got != m.clean {
			t.Errorf("%s: owed to the clean subscriber = %v", m.name, got)
		}
		if got := pers.owed(&l.msgs[i]); got != m.pers {
			t.Errorf("%s: owed to the persistent subscriber = %v", m.name, got)
		}
		if q0.owed(&l.msgs[i]) {
			t.Errorf("%s: owed to a QoS 0 subscription", m.name)
		}
	}
	tl := l.tally()
	if want := int64(2 + 5); tl.Owed != want || tl.Lost != want || l.outstanding() != want {
		t.Fatalf("owed %d lost %d outstanding %d, want %d each: %+v", tl.Owed, tl.Lost, l.outstanding(), want, tl)
	}
}

// TestLedgerDuplicates: a copy of a message already received is allowed
// only at QoS 1 with DUP after a reconnect, or at QoS 2 likewise to a
// client that keeps no QoS 2 state; every other one is counted against
// the broker.
func TestLedgerDuplicates(t *testing.T) {
	type copyOf struct {
		qos       byte
		dup       bool
		reconnect bool // before this copy
	}
	for _, tc := range []struct {
		name                  string
		v3                    bool
		pubQoS, subQoS        byte
		copies                []copyOf
		allowed, v3QoS2, bad  int64
		above, below, lost    int64
		subscribeAfterPublish bool
	}{
		{name: "once", pubQoS: 1, subQoS: 1, copies: []copyOf{{1, false, false}}},
		{name: "QoS 1 again after a reconnect", pubQoS: 1, subQoS: 2, copies: []copyOf{{1, false, false}, {1, true, true}}, allowed: 1},
		{name: "QoS 1 again without a reconnect", pubQoS: 1, subQoS: 1, copies: []copyOf{{1, true, false}, {1, true, false}}, bad: 1},
		{name: "QoS 1 again without DUP", pubQoS: 1, subQoS: 1, copies: []copyOf{{1, false, false}, {1, false, true}}, bad: 1},
		{name: "QoS 2 again to paho.golang", pubQoS: 2, subQoS: 2, copies: []copyOf{{2, false, false}, {2, true, true}}, bad: 1},
		{name: "QoS 2 again to paho.mqtt.golang", v3: true, pubQoS: 2, subQoS: 2, copies: []copyOf{{2, false, false}, {2, true, true}}, v3QoS2: 1},
		{name: "QoS 2 again to paho.mqtt.golang without a reconnect", v3: true, pubQoS: 2, subQoS: 2, copies: []copyOf{{2, false, false}, {2, true, false}}, bad: 1},
		{name: "QoS 0 twice", pubQoS: 0, subQoS: 1, copies: []copyOf{{0, false, false}, {0, false, true}}, bad: 1},
		{name: "above the subscription", pubQoS: 2, subQoS: 1, copies: []copyOf{{2, false, false}}, above: 1},
		{name: "below the publish", pubQoS: 2, subQoS: 2, copies: []copyOf{{1, false, false}}, below: 1},
		{name: "never", pubQoS: 1, subQoS: 1, lost: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(7)
			b := &subBook{name: "s", filter: "#", qos: tc.subQoS, keepsQoS2State: !tc.v3}
			l.addSub(b)
			l.connected(b)
			l.subscribed(b, false, false)
			id, p := l.begin("dev", "t/x", tc.pubQoS, 64)
			l.acked(id)
			for _, c := range tc.copies {
				if c.reconnect {
					l.connected(b)
				}
				l.receive(b, p, c.qos, c.dup)
			}
			// Copies of another run's messages, and garbage, are set aside.
			_, other := newLedger(8).begin("dev", "t/x", 1, 64)
			l.receive(b, other, 1, false)
			l.receive(b, []byte("short"), 1, false)
			tl := l.tally()
			if tl.DupAllowed != tc.allowed || tl.DupV3QoS2 != tc.v3QoS2 || tl.DupBad != tc.bad || tl.QoSAbove != tc.above ||
				tl.QoSBelow != tc.below || tl.Lost != tc.lost || tl.Foreign != 2 {
				t.Fatalf("%+v", tl)
			}
		})
	}
}

// TestLedgerPersistentResume: a resumed persistent session keeps its span
// (what was published while it was offline is owed); one the broker did
// not keep is counted, and its span goes on too, so its messages count
// as lost.
func TestLedgerPersistentResume(t *testing.T) {
	l := newLedger(1)
	b := &subBook{name: "p", filter: "#", qos: 1, persistent: true}
	l.addSub(b)
	l.subscribed(b, false, false)
	l.lostConnection(b) // no effect on a persistent session
	id, _ := l.begin("dev", "t", 1, 64)
	l.acked(id)
	l.subscribed(b, true, false)
	l.subscribed(b, false, true)
	if len(b.cover) != 1 || b.cover[0].to != 0 {
		t.Fatalf("spans %+v, want one open span", b.cover)
	}
	if tl := l.tally(); tl.Owed != 1 || tl.Lost != 1 || tl.SessionLost != 1 {
		t.Fatalf("%+v", tl)
	}
}

// TestServerLog reads the broker's JSON event log: close lines by remote
// address, drops, refusals, suppressed lines, and ERROR or non-JSON lines
// (a panic) as errors.
func TestServerLog(t *testing.T) {
	l := newServerLog()
	log := strings.Join([]string{
		`{"time":"2026-11-25T11:54:05.1Z","level":"INFO","msg":"client connected","client_id":"a","remote":"127.0.0.1:1000"}`,
		`{"time":"2026-11-25T11:54:06.1Z","level":"WARN","msg":"client disconnected","client_id":"a","remote":"127.0.0.1:1000","by":"server","reason":"keepalive_timeout","code":"0x8D Keep alive timeout","detail":"nothing received"}`,
		`{"time":"2026-11-25T12:54:06.1Z","level":"INFO","msg":"client disconnected","client_id":"b","remote":"127.0.0.1:1000","by":"client","reason":"client_disconnect"}`,
		`{"time":"2026-11-25T11:54:07.1Z","level":"WARN","msg":"connection closed before CONNECT","remote":"127.0.0.1:2000","by":"server","reason":"connect_timeout","suppressed_before":3}`,
		`{"time":"2026-11-25T11:54:08.1Z","level":"WARN","msg":"message dropped","client_id":"c","reason":"queue_full"}`,
		`{"time":"2026-11-25T11:54:08.1Z","level":"WARN","msg":"publish refused","client_id":"c"}`,
		`{"time":"2026-11-25T11:54:09.1Z","level":"ERROR","msg":"encode packet"}`,
		`panic: boom`,
		``,
	}, "\n")
	l.consume(strings.NewReader(log), nil)
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339Nano, s); return v }
	if c := l.closeFor("127.0.0.1:1000", at("2026-11-25T11:54:06Z")); c == nil || c.by != "server" || c.reason != "keepalive_timeout" || c.clientID != "a" {
		t.Fatalf("nearest close to 11:54:06: %+v", c)
	}
	if c := l.closeFor("127.0.0.1:1000", at("2026-11-25T12:50:00Z")); c == nil || c.by != "client" {
		t.Fatalf("nearest close to 12:50: %+v", c)
	}
	if c := l.closeFor("127.0.0.1:2000", time.Time{}); c == nil || c.reason != "connect_timeout" || c.msg != "connection closed before CONNECT" {
		t.Fatalf("close before CONNECT: %+v", c)
	}
	if l.closeFor("127.0.0.1:3000", time.Time{}) != nil {
		t.Fatal("a close for an address never logged")
	}
	if l.drops["queue_full"] != 1 || l.refusals["publish refused"] != 1 || l.suppressed != 3 || l.errorsN != 2 || l.lines != 8 {
		t.Fatalf("drops %v refusals %v suppressed %d errors %d %q lines %d", l.drops, l.refusals, l.suppressed, l.errorsN, l.errors, l.lines)
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 42
fleetmq_mqtt_connections{listener="tcp"} 3
fleetmq_mqtt_connections{listener="websocket"} 1
fleetmq_mqtt_disconnects_total{by="server",reason="keepalive_timeout"} 2
fleetmq_mqtt_disconnects_total{by="client",reason="client_disconnect"} 5
fleetmq_mqtt_disconnects_total{by="server",reason="write_timeout"} 0
bad line
`))
	if err != nil {
		t.Fatal(err)
	}
	if m["go_goroutines"] != 42 || m["fleetmq_mqtt_connections"] != 4 || m[`fleetmq_mqtt_connections{listener="tcp"}`] != 3 {
		t.Fatalf("%v", m)
	}
	got := seriesBy(m, "fleetmq_mqtt_disconnects_total", "by", "reason")
	if len(got) != 2 || got["server/keepalive_timeout"] != 2 || got["client/client_disconnect"] != 5 {
		t.Fatalf("%v", got)
	}
	if seriesBy(m, "fleetmq_mqtt_dropped_total", "reason") != nil {
		t.Fatal("series of a metric not scraped")
	}
}

// TestJudgeCloses: every way a connection can end, and what the report
// makes of it.
func TestJudgeCloses(t *testing.T) {
	l := newLedger(1)
	log := newServerLog()
	now := time.Now()
	type conn struct {
		name     string
		end      endKind
		code     byte
		provoked string
		detail   string // the client's error ("EOF" when empty)
		server   string // by/reason in the server's log; "" for no line
	}
	conns := []conn{
		{name: "harness", end: endHarness, server: "client/client_disconnect"},
		{name: "v5 keep alive", end: endServerMsg, code: 0x8D},
		{name: "3.1.1 write timeout in the log", end: endLost, server: "server/write_timeout"},
		{name: "EOF, no line", end: endLost},
		{name: "EOF, the server says the client left", end: endLost, server: "client/connection_lost"},
		{name: "canary", end: endLost, provoked: "connect_timeout", server: "server/connect_timeout"},
		{name: "canary for the wrong reason", end: endServerMsg, code: 0x8B, provoked: "keepalive_timeout"},
		{name: "canary the server let be", end: endHarness, provoked: "keepalive_timeout"},
		{name: "takeover after the harness closed", end: endHarness, server: "server/session_taken_over"},
		{name: "no PINGRESP", end: endLost, detail: "ping handler error: PINGRESP timed out", server: "client/connection_lost"},
	}
	for i, c := range conns {
		local := "127.0.0.1:" + string(rune('a'+i))
		r := &connRecord{client: c.name, role: "subscriber", version: 5, opened: now, provoked: c.provoked, local: local}
		r.finish(c.end, c.code, cmp.Or(c.detail, "EOF"))
		l.addConn(r)
		if by, reason, ok := strings.Cut(c.server, "/"); ok {
			log.closes[local] = []*serverClose{{at: now, remote: local, by: by, reason: reason}}
		}
	}
	var r SoakResult
	r.judgeCloses(l, log)
	if r.Connections != len(conns) || r.ClosedByHarness != 3 || r.Unexplained != 2 || r.PingTimeouts != 1 {
		t.Fatalf("connections %d, by the harness %d, unexplained %d: %q", r.Connections, r.ClosedByHarness, r.Unexplained, r.UnexplainedExamples)
	}
	if r.Provoked["connect_timeout"] != 1 || r.Unprovoked["keepalive_timeout"] != 1 || r.Unprovoked["write_timeout"] != 1 || r.ServerCloses["server_shutdown"] != 1 {
		t.Fatalf("provoked %v unprovoked %v server %v", r.Provoked, r.Unprovoked, r.ServerCloses)
	}
	if len(r.Failures) != 2 || !strings.Contains(r.Failures[0], "closed by the server for server_shutdown") || !strings.Contains(r.Failures[1], "did not close it") {
		t.Fatalf("failures %q", r.Failures)
	}
}

// TestSoakConfig: the idle periods must outlast the timeouts.
func TestSoakConfig(t *testing.T) {
	ok := SoakConfig{Target: "broker", Fleetmq: "fleetmq", Duration: time.Minute, Scale: 0.25, WriteTimeout: 2 * time.Second}
	if err := ok.fill(); err != nil {
		t.Fatal(err)
	}
	if ok.ConnectTimeout != 2500*time.Millisecond || ok.Sample != time.Second {
		t.Fatalf("defaults: %+v", ok)
	}
	for name, c := range map[string]SoakConfig{
		"gap under the keep alive":    {Target: "broker", Fleetmq: "x", Duration: time.Minute, Scale: 0.1},
		"gap under the write timeout": {Target: "broker", Fleetmq: "x", Duration: time.Hour, Scale: 0.25, WriteTimeout: 20 * time.Second},
		"shorter than two gaps":       {Target: "broker", Fleetmq: "x", Duration: time.Minute},
		"unknown target":              {Target: "mosquitto"},
		"address target, no address":  {Target: "addr"},
	} {
		if err := c.fill(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSoakShort is the soak's short form: fleetmq serve for two minutes
// with the schedule four times as fast and the timeouts compressed (write
// and connect timeout 2 s), so every idle period (the idle subscribers'
// 15 s, the slow reader's 4 s pauses) outlasts the write timeout and the
// keep alive limits. It asserts what must hold on any machine, however
// loaded: no acknowledged QoS 1/2 message lost, no connection closed
// without a stated reason, no duplicate the protocol forbids, and the
// canaries' closes explained. Memory and timing are reported, not judged.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the platform for two minutes")
	}
	bin := filepath.Join(t.TempDir(), "fleetmq")
	build := exec.Command("go", "build", "-o", bin, "github.com/fleetmq/fleetmq/cmd/fleetmq")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var progress bytes.Buffer
	r, err := RunSoak(context.Background(), SoakConfig{Target: "serve", Fleetmq: bin, Duration: 2 * time.Minute, Scale: 0.25,
		WriteTimeout: 2 * time.Second, ConnectTimeout: 2 * time.Second, progress: &progress})
	if err != nil {
		t.Fatalf("%v\n%s", err, &progress)
	}
	var report bytes.Buffer
	printSoak(&report, r)
	t.Logf("\n%s%s", &progress, &report)
	if r.Owed == 0 || r.Acked[1] == 0 || r.Acked[2] == 0 || r.Received[0] == 0 {
		t.Fatalf("the fleet did not run")
	}
	if r.Lost != 0 {
		t.Errorf("%d QoS 1/2 deliveries lost", r.Lost)
	}
	if r.Unexplained != 0 {
		t.Errorf("%d connections closed without a stated reason", r.Unexplained)
	}
	if r.DupBad != 0 || r.QoSAbove != 0 || r.SessionLost != 0 {
		t.Errorf("forbidden duplicates %d, copies above their QoS %d, sessions lost %d", r.DupBad, r.QoSAbove, r.SessionLost)
	}
	if r.Provoked["connect_timeout"] != 1 || r.Provoked["keepalive_timeout"] != 2 {
		t.Errorf("the canaries' closes were not all explained: %v", r.Provoked)
	}
}

// TestJudgeMemory: the second half's median RSS may exceed the first
// half's (after the first 10%) by the allowance, and the goroutines must
// come back down.
func TestJudgeMemory(t *testing.T) {
	cfg := SoakConfig{RSSGrowth: 0.05, RSSSlackMiB: 8}
	run := 100 * time.Second
	samples := func(rss func(i int) int64) []soakSample {
		var s []soakSample
		for i := 0; i <= 100; i++ {
			s = append(s, soakSample{At: time.Duration(i) * time.Second, RSSKiB: rss(i), Goroutines: 30})
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		rss       func(i int) int64
		after     float64
		failures  int
		allowedIs int64
	}{
		{"flat after a warm-up", func(i int) int64 { return 40000 + min(int64(i), 10)*1000 }, 21, 0, 50000*105/100 + 8192},
		{"sawtooth", func(i int) int64 { return 50000 + int64(i%3)*2000 }, 20, 0, 52000*105/100 + 8192},
		{"leaking 300 KiB a second", func(i int) int64 { return 50000 + int64(i)*300 }, 20, 1, 0},
		{"goroutines left behind", func(int) int64 { return 50000 }, 31, 1, 0},
	} {
		r := SoakResult{Goroutines: [3]float64{20, 0, tc.after}}
		r.judgeMemory(&cfg, samples(tc.rss), run)
		if len(r.Failures) != tc.failures {
			t.Errorf("%s: failures %q (halves %v, allowed %d)", tc.name, r.Failures, r.RSSHalvesKiB, r.RSSAllowedKiB)
		}
		if tc.allowedIs != 0 && r.RSSAllowedKiB != tc.allowedIs {
			t.Errorf("%s: allowed %d KiB, want %d", tc.name, r.RSSAllowedKiB, tc.allowedIs)
		}
		if r.RSS[0] != tc.rss(0) || r.RSS[1] != tc.rss(100) || r.Goroutines[1] != 30 {
			t.Errorf("%s: first/last/max %v, goroutines %v", tc.name, r.RSS, r.Goroutines)
		}
	}
}
