package broker_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// hcPublishOne publishes one message from a raw client and completes its
// flow (packet id 1).
func hcPublishOne(tb testing.TB, pub *mqtttest.Raw, p *packet.Publish) {
	tb.Helper()
	if p.QoS > 0 {
		p.PacketID = 1
	}
	pub.Must(tb, p)
	switch p.QoS {
	case 1:
		hcExpectAck(tb, pub, packet.PUBACK, 1)
	case 2:
		hcExpectAck(tb, pub, packet.PUBREC, 1)
		hcAck(tb, pub, packet.PUBREL, 1)
		hcExpectAck(tb, pub, packet.PUBCOMP, 1)
	}
}

// hcCloseBroker closes a server gracefully and fails on error.
func hcCloseBroker(tb testing.TB, b *testBroker) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		tb.Fatalf("close: %v", err)
	}
}

// TestPersistRestart: retained messages (with their age), persistent
// sessions (subscriptions, unacknowledged and queued deliveries) survive a
// graceful restart on the same state file; what expired while the server
// was down does not come back.
func TestPersistRestart(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	opts := broker.Options{StatePath: filepath.Join(dir, "state.json"), Now: clk.Now, SaveInterval: -1}
	b1 := startBroker(t, opts)

	pub, _ := hcConnect(t, b1.Addr, "p-pub", true, 0, 0)
	ra := &packet.Publish{Topic: "cfg/a", QoS: 1, Retain: true, Payload: []byte("A")}
	ra.Properties.SetMessageExpiry(100)
	ra.Properties.SetString(packet.PropContentType, "text/plain")
	hcPublishOne(t, pub, ra)
	hcPublishOne(t, pub, &packet.Publish{Topic: "cfg/b", QoS: 0, Retain: true, Payload: []byte("B")})
	rc := &packet.Publish{Topic: "cfg/c", QoS: 1, Retain: true, Payload: []byte("C")}
	rc.Properties.SetMessageExpiry(10) // expires while the server is down
	hcPublishOne(t, pub, rc)

	// dev1: persistent (300 s), offline at shutdown with one unacknowledged
	// and two queued messages. dev2: expiry 20 s, outlived by the downtime.
	// dev3: persistent and still connected at shutdown, with a QoS 2
	// delivery it has PUBREC'd but not completed. q2pub: a persistent
	// publisher with an inbound QoS 2 flow awaiting its PUBREL.
	dev1, _ := hcConnect(t, b1.Addr, "dev1", true, 300, 0)
	hcSubscribe(t, dev1, "cmd/#", 1, 7)
	dev2, _ := hcConnect(t, b1.Addr, "dev2", true, 20, 0)
	hcSubscribe(t, dev2, "cmd/#", 1, 0)
	dev3, _ := hcConnect(t, b1.Addr, "dev3", true, 300, 0)
	hcSubscribe(t, dev3, "live/#", 2, 0)

	hcPublishOne(t, pub, &packet.Publish{Topic: "cmd/0", QoS: 1, Payload: []byte("c0")})
	p0 := hcExpectPub(t, dev1, "c0", 1, false) // not acknowledged
	hcExpectPub(t, dev2, "c0", 1, false)
	dev1.Conn.Close()
	dev2.Conn.Close()
	hcConns(t, b1, 2) // pub and dev3

	hcPublishOne(t, pub, &packet.Publish{Topic: "live/r", QoS: 2, Payload: []byte("released")})
	rel := hcExpectPub(t, dev3, "released", 2, false)
	hcAck(t, dev3, packet.PUBREC, rel.PacketID)
	hcExpectAck(t, dev3, packet.PUBREL, rel.PacketID) // no PUBCOMP
	q2pub, _ := hcConnect(t, b1.Addr, "q2pub", true, 300, 0)
	q2 := &packet.Publish{Topic: "live/q", QoS: 2, PacketID: 5, Payload: []byte("q2")}
	q2pub.Must(t, q2)
	hcExpectAck(t, q2pub, packet.PUBREC, 5) // no PUBREL yet
	d := hcExpectPub(t, dev3, "q2", 2, false)
	hcAck(t, dev3, packet.PUBREC, d.PacketID)
	hcExpectAck(t, dev3, packet.PUBREL, d.PacketID)
	hcAck(t, dev3, packet.PUBCOMP, d.PacketID)
	hcPublishOne(t, pub, &packet.Publish{Topic: "cmd/1", QoS: 1, Payload: []byte("c1")})
	hcPublishOne(t, pub, &packet.Publish{Topic: "cmd/2", QoS: 2, Payload: []byte("c2")})
	// dev3's last PUBCOMP is handled on its connection's goroutine: poll.
	var st broker.Stats
	eventually(t, "3 retained, 5 sessions, 3 inflight and 4 queued before the restart", func() bool {
		st = b1.Stats()
		return st.Retained == 3 && st.Sessions == 5 && st.Inflight == 3 && st.Queued == 4
	})
	hcCloseBroker(t, b1)
	if _, err := os.Stat(opts.StatePath); err != nil {
		t.Fatalf("no state file after Close: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".state-*")); len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}

	clk.Add(40 * time.Second)
	b2 := startBroker(t, opts)
	// cfg/c expired and dev2 ended during the downtime; p-pub was a clean
	// session. dev1 keeps c0 inflight and c1, c2 queued; dev3 its released
	// delivery.
	if st := b2.Stats(); st.Retained != 2 || st.Sessions != 3 || st.Subscriptions != 2 || st.Inflight != 2 || st.Queued != 2 {
		t.Fatalf("after restart: %+v", st)
	}

	dev1, ack := hcConnect(t, b2.Addr, "dev1", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("dev1: session not present after restart")
	}
	r0 := hcExpectPub(t, dev1, "c0", 1, true)
	if r0.PacketID != p0.PacketID || r0.Topic != "cmd/0" {
		t.Fatalf("c0 resent with id %d on %q, want id %d", r0.PacketID, r0.Topic, p0.PacketID)
	}
	r1 := hcExpectPub(t, dev1, "c1", 1, false)
	r2 := hcExpectPub(t, dev1, "c2", 1, false) // granted QoS 1
	if r1.PacketID == r0.PacketID || r2.PacketID == r0.PacketID {
		t.Fatalf("packet ids %d and %d collide with inflight %d", r1.PacketID, r2.PacketID, r0.PacketID)
	}
	for _, p := range []*packet.Publish{r0, r1, r2} {
		if !slices.Equal(p.Properties.SubscriptionIDs, []uint32{7}) {
			t.Fatalf("%q: subscription ids %v, want [7]", p.Payload, p.Properties.SubscriptionIDs)
		}
		hcAck(t, dev1, packet.PUBACK, p.PacketID)
	}
	hcQueues(t, b2, 1, 0) // dev3's released delivery, until dev3 resumes

	// The restored subscriptions match new publishes.
	pub, _ = hcConnect(t, b2.Addr, "p-pub", true, 0, 0)
	hcPublishOne(t, pub, &packet.Publish{Topic: "cmd/3", QoS: 1, Payload: []byte("c3")})
	c3 := hcExpectPub(t, dev1, "c3", 1, false)
	hcAck(t, dev1, packet.PUBACK, c3.PacketID)
	dev3, ack = hcConnect(t, b2.Addr, "dev3", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("dev3 (connected at shutdown): session not present after restart")
	}
	hcExpectAck(t, dev3, packet.PUBREL, rel.PacketID)
	hcAck(t, dev3, packet.PUBCOMP, rel.PacketID)
	hcQueues(t, b2, 0, 0)
	// The inbound QoS 2 flow survives too: a retransmission is not routed
	// again, and the PUBREL completes it.
	q2pub, ack = hcConnect(t, b2.Addr, "q2pub", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("q2pub: session not present after restart")
	}
	q2.Dup = true
	q2pub.Must(t, q2)
	hcExpectAck(t, q2pub, packet.PUBREC, 5)
	hcAck(t, q2pub, packet.PUBREL, 5)
	if a := hcExpectAck(t, q2pub, packet.PUBCOMP, 5); a.ReasonCode != packet.Success {
		t.Fatalf("PUBCOMP after restart: %v", a.ReasonCode)
	}
	hcPublishOne(t, pub, &packet.Publish{Topic: "live/x", QoS: 2, Payload: []byte("L")})
	hcExpectPub(t, dev3, "L", 2, false)
	_, ack = hcConnect(t, b2.Addr, "dev2", false, 20, 0)
	if ack.SessionPresent {
		t.Fatal("dev2: expired session resumed")
	}

	// Retained messages are back with their age: cfg/a was published with
	// a 100 s expiry 40 s ago, so 60 s remain.
	viewer, _ := hcConnect(t, b2.Addr, "viewer", true, 0, 0)
	hcSubscribe(t, viewer, "cfg/#", 1, 0)
	got := map[string]*packet.Publish{}
	for range 2 {
		p := viewer.Expect(t, packet.PUBLISH).(*packet.Publish)
		got[p.Topic] = p
		if p.QoS > 0 {
			hcAck(t, viewer, packet.PUBACK, p.PacketID)
		}
	}
	a, b := got["cfg/a"], got["cfg/b"]
	if a == nil || b == nil {
		t.Fatalf("retained after restart: %v", got)
	}
	if string(a.Payload) != "A" || !a.Retain || a.QoS != 1 || a.Properties.MessageExpiry != 60 || !a.Properties.Has(packet.PropMessageExpiry) ||
		a.Properties.ContentType != "text/plain" {
		t.Fatalf("cfg/a after restart: %+v", a)
	}
	if string(b.Payload) != "B" || !b.Retain || b.QoS != 0 || b.Properties.Has(packet.PropMessageExpiry) {
		t.Fatalf("cfg/b after restart: %+v", b)
	}
	hcPublishOne(t, pub, &packet.Publish{Topic: "cfg/marker", QoS: 1, Payload: []byte("M")})
	hcExpectPub(t, viewer, "M", 1, false)

	// And once more: the age keeps counting across a second restart.
	hcCloseBroker(t, b2)
	clk.Add(50 * time.Second)
	b3 := startBroker(t, opts)
	viewer, _ = hcConnect(t, b3.Addr, "viewer", true, 0, 0)
	hcSubscribe(t, viewer, "cfg/a", 1, 0)
	if p := hcExpectPub(t, viewer, "A", 1, false); p.Properties.MessageExpiry != 10 {
		t.Fatalf("cfg/a after a second restart: expiry %d, want 10", p.Properties.MessageExpiry)
	}
}

// TestPersistRetainedMaxAge: retained messages keep their creation time
// across a restart, so a RetainedMaxAge configured on the new server
// applies to their real age: one older than the limit is not delivered
// (even before a sweep), a younger one carries the time it has left.
func TestPersistRetainedMaxAge(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "state.json")
	b1 := startBroker(t, broker.Options{StatePath: path, Now: clk.Now, SaveInterval: -1})
	pub, _ := hcConnect(t, b1.Addr, "ma-pub", true, 0, 0)
	hcPublishOne(t, pub, &packet.Publish{Topic: "ma/old", QoS: 1, Retain: true, Payload: []byte("old")})
	clk.Add(70 * time.Second)
	hcPublishOne(t, pub, &packet.Publish{Topic: "ma/young", QoS: 1, Retain: true, Payload: []byte("young")})
	hcCloseBroker(t, b1)

	clk.Add(30 * time.Second) // old is 100 s old, young 30 s
	b2 := startBroker(t, broker.Options{StatePath: path, Now: clk.Now, SaveInterval: -1, RetainedMaxAge: time.Minute})
	sub, _ := hcConnect(t, b2.Addr, "ma-sub", true, 0, 0)
	hcSubscribe(t, sub, "ma/#", 1, 0)
	p := hcExpectPub(t, sub, "young", 1, false)
	if !p.Retain || !p.Properties.Has(packet.PropMessageExpiry) || p.Properties.MessageExpiry != 30 {
		t.Fatalf("young retained: retain %v expiry %d (present %v), want 30 s left", p.Retain,
			p.Properties.MessageExpiry, p.Properties.Has(packet.PropMessageExpiry))
	}
	hcAck(t, sub, packet.PUBACK, p.PacketID)
	pub, _ = hcConnect(t, b2.Addr, "ma-pub", true, 0, 0)
	hcPublishOne(t, pub, &packet.Publish{Topic: "ma/marker", QoS: 1, Payload: []byte("M")})
	hcExpectPub(t, sub, "M", 1, false) // old was not delivered
}

// TestPersistPeriodicSave: with a SaveInterval the state is written while
// the server runs, so a server that dies without Close loses only what
// changed since the last save.
func TestPersistPeriodicSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	b := startBroker(t, broker.Options{StatePath: path, SaveInterval: 20 * time.Millisecond})
	pub, _ := hcConnect(t, b.Addr, "ps-pub", true, 0, 0)
	hcPublishOne(t, pub, &packet.Publish{Topic: "ps/retained", QoS: 1, Retain: true, Payload: []byte("R")})
	eventually(t, "a periodic save with the retained message", func() bool {
		data, err := os.ReadFile(path + ".retained")
		_, serr := os.Stat(path)
		return err == nil && serr == nil && strings.Contains(string(data), "ps/retained")
	})

	// A second server on a copy of the files (the first never closed, as
	// after a crash).
	crash := copyStateFiles(t, path, filepath.Join(dir, "crash.json"))
	b2 := startBroker(t, broker.Options{StatePath: crash, SaveInterval: -1})
	sub, _ := hcConnect(t, b2.Addr, "ps-sub", true, 0, 0)
	hcSubscribe(t, sub, "ps/#", 1, 0)
	if p := hcExpectPub(t, sub, "R", 1, false); !p.Retain || p.Topic != "ps/retained" {
		t.Fatalf("restored retained: %+v", p)
	}
}

// TestPersistBadStateFile: a corrupt or foreign state file makes New fail
// with an error naming the file, and the file is left as it was for the
// operator to inspect. A missing file is a first start.
func TestPersistBadStateFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"garbage":    "{not json",
		"truncated":  `{"version":1,"retained":[{"topic":"a","payl`,
		"empty":      "",
		"version":    `{"version":99,"retained":[],"sessions":[]}`,
		"no version": `{"sessions":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".json")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			srv, err := broker.New(broker.Options{StatePath: path})
			if err == nil {
				srv.Close(context.Background())
				t.Fatal("New accepted a bad state file")
			}
			if msg := err.Error(); !strings.Contains(msg, "load state") || !strings.Contains(msg, path) {
				t.Fatalf("error %q does not say it is the state file %s", msg, path)
			}
			if name == "version" && !strings.Contains(err.Error(), "version 99") {
				t.Fatalf("error %q does not name the version", err)
			}
			if data, _ := os.ReadFile(path); string(data) != content {
				t.Fatalf("state file changed to %q", data)
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		path := filepath.Join(dir, "sub", "missing.json")
		b := startBroker(t, broker.Options{StatePath: path, SaveInterval: -1})
		if st := b.Stats(); st.Retained != 0 || st.Sessions != 0 {
			t.Fatalf("fresh state: %+v", st)
		}
		hcCloseBroker(t, b)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("Close did not create the state file (and its directory): %v", err)
		}
	})

	t.Run("unwritable", func(t *testing.T) {
		// The state directory is replaced by a regular file while the
		// server runs: Close reports the failed save.
		sdir := filepath.Join(dir, "gone")
		if err := os.Mkdir(sdir, 0o755); err != nil {
			t.Fatal(err)
		}
		b := startBroker(t, broker.Options{StatePath: filepath.Join(sdir, "state.json"), SaveInterval: -1})
		if err := os.Remove(sdir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sdir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		err := b.Close(context.Background())
		if err == nil || !strings.Contains(err.Error(), "save state") {
			t.Fatalf("Close error %v, want a save state error", err)
		}
	})
}

// TestPersistCloseDisconnectsClients: Close tells v5 clients DISCONNECT 0x8B
// (Server shutting down), closes 3.1.1 connections, waits for them, publishes
// no wills and stops accepting.
func TestPersistCloseDisconnectsClients(t *testing.T) {
	b := startBroker(t, broker.Options{})
	raw5, _ := hcConnect(t, b.Addr, "sd-raw5", true, 0, 0)
	raw3, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: "sd-raw3",
		Will: &packet.Will{Topic: "sd/will", Payload: []byte("gone")}})
	p5 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("sd-paho5"))
	lost := make(chan error, 1)
	mqtttest.DialV3(t, b.Addr, "sd-paho3", func(o *mqtt3.ClientOptions) {
		o.SetConnectionLostHandler(func(_ mqtt3.Client, err error) { lost <- err })
	})
	hcConns(t, b, 4)

	hcCloseBroker(t, b)
	if st := b.Stats(); st.Connections != 0 || st.WillsPublished != 0 {
		t.Fatalf("after Close: %d connections, %d wills published", st.Connections, st.WillsPublished)
	}

	got := raw5.Closed(t)
	if len(got) != 1 || got[0].Type() != packet.DISCONNECT || got[0].(*packet.Disconnect).ReasonCode != packet.ServerShuttingDown {
		t.Fatalf("v5 client got %+v before close, want DISCONNECT 0x8B", got)
	}
	if got := raw3.Closed(t); len(got) != 0 {
		t.Fatalf("3.1.1 client got %+v before close, want nothing", got)
	}
	select {
	case d := <-p5.Disc:
		if d.ReasonCode != byte(packet.ServerShuttingDown) {
			t.Fatalf("paho v5 DISCONNECT reason 0x%02x", d.ReasonCode)
		}
	case <-time.After(waitFor):
		t.Fatal("paho v5 client got no DISCONNECT")
	}
	select {
	case <-lost:
	case <-time.After(waitFor):
		t.Fatal("paho 3.1.1 client did not lose its connection")
	}

	if nc, err := net.DialTimeout("tcp", b.Addr, waitFor); err == nil {
		nc.Close()
		t.Fatal("listener still accepting after Close")
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// copyStateFiles copies the state file at path and its retained log to
// dst (and dst's log), as they are now, and returns dst.
func copyStateFiles(t *testing.T, path, dst string) string {
	t.Helper()
	for _, suffix := range []string{"", ".retained"} {
		data, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
