package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// hAPersistent is a v5 CONNECT resuming (or starting) a session that
// outlives the connection by expiry seconds.
func hAPersistent(id string, expiry uint32) *paho.Connect {
	return &paho.Connect{ClientID: id, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: paho.Uint32(expiry)}}
}

// hAClosedOrDisc waits until a paho client got a server DISCONNECT with
// code and shut down.
func hAClosedOrDisc(tb testing.TB, c *mqtttest.V5, code byte) {
	tb.Helper()
	select {
	case d := <-c.Disc:
		if d.ReasonCode != code {
			tb.Fatalf("server DISCONNECT 0x%02x, want 0x%02x", d.ReasonCode, code)
		}
	case <-time.After(waitFor):
		tb.Fatalf("no DISCONNECT 0x%02x from the server", code)
	}
	select {
	case <-c.Done():
	case <-time.After(waitFor):
		tb.Fatal("client still running after the server's DISCONNECT")
	}
}

// hANoMessage checks that nothing arrives at c for d (used only where the
// behaviour under test is "nothing happens when a timer would fire").
func hANoMessage(tb testing.TB, c *mqtttest.V5, d time.Duration) {
	tb.Helper()
	select {
	case m := <-c.Msgs:
		tb.Fatalf("unexpected message %q on %s", m.Payload, m.Topic)
	case <-time.After(d):
	}
}

// TestSessionCleanStartDiscards: a clean start discards the stored
// session: its subscriptions and its queued messages (counted
// session_expired), and CONNACK says no session was present.
func TestSessionCleanStartDiscards(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("cs-pub"))
	c := mqtttest.DialV5(t, b.Addr, hAPersistent("cs", 300))
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "cs/#", QoS: 1})
	c.Disconnect(&paho.Disconnect{})
	hAConns(t, b, 1)
	pub.MustPublish(t, &paho.Publish{Topic: "cs/1", QoS: 1, Payload: []byte("queued")})
	if q := b.Stats().Queued; q != 1 {
		t.Fatalf("queued %d, want 1 for the offline session", q)
	}

	c = mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "cs", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: paho.Uint32(300)}})
	if c.Connack.SessionPresent {
		t.Fatal("CONNACK session present after clean start")
	}
	st := b.Stats()
	if st.Queued != 0 || st.Subscriptions != 0 || hADrops(t, b, "session_expired") != 1 {
		t.Fatalf("after clean start: queued %d, subscriptions %d, session_expired drops %d; want 0, 0, 1",
			st.Queued, st.Subscriptions, hADrops(t, b, "session_expired"))
	}
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "cs-barrier", QoS: 1})
	pub.MustPublish(t, &paho.Publish{Topic: "cs/2", QoS: 1, Payload: []byte("old subscription")})
	mqtttest.Barrier(t, pub, "cs-barrier", c)
}

// TestSessionPersistentResume: a v5 session with an expiry interval keeps
// its subscriptions and its QoS 1/2 messages while offline (QoS 0 is not
// queued) and CONNACK says the session is present.
func TestSessionPersistentResume(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("ps-pub"))
	c := mqtttest.DialV5(t, b.Addr, hAPersistent("ps", 300))
	if c.Connack.SessionPresent {
		t.Fatal("new session reported present")
	}
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "ps/#", QoS: 1})
	c.Disconnect(&paho.Disconnect{})
	hAConns(t, b, 1)

	pub.MustPublish(t, &paho.Publish{Topic: "ps/a", QoS: 1, Payload: []byte("one")})
	pub.MustPublish(t, &paho.Publish{Topic: "ps/b", QoS: 0, Payload: []byte("zero")})
	pub.MustPublish(t, &paho.Publish{Topic: "ps/c", QoS: 2, Payload: []byte("two")})
	if n := hADrops(t, b, "offline_qos0"); n != 1 {
		t.Fatalf("offline_qos0 drops %d, want 1", n)
	}

	c = mqtttest.DialV5(t, b.Addr, hAPersistent("ps", 300))
	if !c.Connack.SessionPresent {
		t.Fatal("persistent session not present on resume")
	}
	for _, m := range c.Expect(t, "one", "two") {
		if m.QoS != 1 {
			t.Fatalf("%q delivered at QoS %d, want the subscription's 1", m.Payload, m.QoS)
		}
	}
	// The subscription is still there: live messages arrive without a
	// new SUBSCRIBE.
	pub.MustPublish(t, &paho.Publish{Topic: "ps/d", QoS: 1, Payload: []byte("live")})
	c.Expect(t, "live")
	if st := b.Stats(); st.Subscriptions != 1 || st.Sessions != 2 {
		t.Fatalf("subscriptions %d sessions %d, want 1 and 2", st.Subscriptions, st.Sessions)
	}
}

// TestSessionExpiry: an offline session lives for its expiry interval
// (capped by MaxSessionExpiry, which is also the expiry of 3.1.1 persistent
// sessions); then Sweep removes it with its subscriptions and queue, and an
// expired session is never resumed even before a sweep. A DISCONNECT may
// lower the expiry to 0 but not raise it from 0.
func TestSessionExpiry(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	b := startBroker(t, broker.Options{Now: clock.Now, MaxSessionExpiry: 100})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("se-pub"))

	c := mqtttest.DialV5(t, b.Addr, hAPersistent("se", 1000))
	if p := c.Connack.Properties.SessionExpiryInterval; p == nil || *p != 100 {
		t.Fatalf("CONNACK Session Expiry Interval %v, want the cap 100", p)
	}
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "se/#", QoS: 1})
	c.Disconnect(&paho.Disconnect{})
	v3, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "se-v3", KeepAlive: 30})
	v3.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "se/#", QoS: 1}}})
	v3.Expect(t, packet.SUBACK)
	v3.Must(t, &packet.Disconnect{})
	hAConns(t, b, 1)
	pub.MustPublish(t, &paho.Publish{Topic: "se/1", QoS: 1, Payload: []byte("queued")})

	state := func(sessions, subs, queued int64) {
		t.Helper()
		st := b.Stats()
		if st.Sessions != sessions || st.Subscriptions != subs || st.Queued != queued {
			t.Fatalf("sessions %d subscriptions %d queued %d, want %d %d %d",
				st.Sessions, st.Subscriptions, st.Queued, sessions, subs, queued)
		}
	}
	clock.Add(99 * time.Second)
	b.Sweep()
	state(3, 2, 2)
	clock.Add(2 * time.Second)
	b.Sweep()
	state(1, 0, 0)
	if n := hADrops(t, b, "session_expired"); n != 2 {
		t.Fatalf("session_expired drops %d, want 2", n)
	}
	c = mqtttest.DialV5(t, b.Addr, hAPersistent("se", 100))
	if c.Connack.SessionPresent {
		t.Fatal("expired session resumed")
	}
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "se-barrier", QoS: 1})
	mqtttest.Barrier(t, pub, "se-barrier", c)
	c.Disconnect(&paho.Disconnect{})
	hAConns(t, b, 1)

	// Expired but not yet swept: not resumed either.
	clock.Add(101 * time.Second)
	c = mqtttest.DialV5(t, b.Addr, hAPersistent("se", 100))
	if c.Connack.SessionPresent {
		t.Fatal("expired (unswept) session resumed")
	}

	// DISCONNECT with Session Expiry Interval 0 ends the session now.
	c.Disconnect(&paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: paho.Uint32(0)}})
	eventually(t, "session ended by DISCONNECT", func() bool { return b.Stats().Sessions == 1 })

	// Raising it from 0 is a protocol error; the session still ends.
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "se-zero", KeepAlive: 30})
	d := &packet.Disconnect{}
	d.Properties.SetSessionExpiry(60)
	rc.Must(t, d)
	hAExpectDisconnect(t, rc, packet.ProtocolError)
	eventually(t, "session with expiry 0 ended", func() bool { return b.Stats().Sessions == 1 })
}

// TestSessionTakeover: a second connection with the same client id takes
// the session over; the first gets DISCONNECT 0x8E and is closed (its will,
// without delay, is published); the subscriptions survive unless the new
// connection starts clean.
func TestSessionTakeover(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("to-pub"))
	pub.MustSubscribe(t, paho.SubscribeOptions{Topic: "to-will", QoS: 1})

	first := hAPersistent("to", 300)
	first.WillMessage = &paho.WillMessage{Topic: "to-will", QoS: 1, Payload: []byte("first gone")}
	a := mqtttest.DialV5(t, b.Addr, first)
	a.MustSubscribe(t, paho.SubscribeOptions{Topic: "take/#", QoS: 1})

	b1 := mqtttest.DialV5(t, b.Addr, hAPersistent("to", 300))
	if !b1.Connack.SessionPresent {
		t.Fatal("taken-over session not present")
	}
	hAClosedOrDisc(t, a, byte(packet.SessionTakenOver))
	pub.Expect(t, "first gone")
	pub.MustPublish(t, &paho.Publish{Topic: "take/1", QoS: 1, Payload: []byte("t1")})
	b1.Expect(t, "t1")

	// A clean start takes over too, but the subscriptions go.
	b2 := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "to", CleanStart: true, KeepAlive: 30})
	if b2.Connack.SessionPresent {
		t.Fatal("clean takeover reported a session present")
	}
	hAClosedOrDisc(t, b1, byte(packet.SessionTakenOver))
	b2.MustSubscribe(t, paho.SubscribeOptions{Topic: "to-barrier", QoS: 1})
	pub.MustPublish(t, &paho.Publish{Topic: "take/2", QoS: 1, Payload: []byte("t2")})
	mqtttest.Barrier(t, pub, "to-barrier", b2)
	// A taken-over connection is counted until its goroutine has ended.
	eventually(t, "2 sessions and 2 connections after the takeovers", func() bool {
		st := b.Stats()
		return st.Sessions == 2 && st.Connections == 2
	})

	// 3.1.1 has no DISCONNECT from the server: the old connection is
	// just closed.
	old, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "to3", CleanStart: true, KeepAlive: 30})
	cur, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "to3", CleanStart: true, KeepAlive: 30})
	if got := old.Closed(t); len(got) != 0 {
		t.Fatalf("3.1.1 connection got %+v before the takeover close", got)
	}
	cur.Must(t, &packet.Pingreq{})
	cur.Expect(t, packet.PINGRESP)
}

// TestSessionTakeoverOfEndingSession: a session that ends with its
// connection (3.1.1 Clean Session 1, v5 Session Expiry 0) is not resumed
// by a connection that takes it over: the takeover closes the old
// connection, so the session ends, and the new connection without a clean
// start gets a new session [MQTT-3.1.2-6, MQTT-3.1.2-23]: session present
// 0, none of the old subscriptions. A client told its session is present
// does not subscribe again, and would receive nothing.
func TestSessionTakeoverOfEndingSession(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("teo-pub"))
	for _, tc := range []struct {
		name string
		old  *packet.Connect
	}{
		{"3.1.1 clean session", &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "teo3", CleanStart: true, KeepAlive: 30}},
		{"v5 session expiry 0", &packet.Connect{ProtocolLevel: packet.Version5, ClientID: "teo5", CleanStart: false, KeepAlive: 30}},
	} {
		old, _ := mqtttest.ConnectRaw(t, b.Addr, tc.old)
		old.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: tc.old.ClientID + "/#", QoS: 1}}})
		old.Expect(t, packet.SUBACK)

		// The new connection does not start clean and keeps its session.
		resume := &packet.Connect{ProtocolLevel: tc.old.ProtocolLevel, ClientID: tc.old.ClientID, KeepAlive: 30}
		if resume.ProtocolLevel == packet.Version5 {
			resume.Properties.SetSessionExpiry(300)
		}
		cur, ack := mqtttest.ConnectRaw(t, b.Addr, resume)
		old.Closed(t)
		if ack.SessionPresent {
			t.Errorf("%s: a takeover resumed a session that ends with its connection (session present 1)", tc.name)
		}
		// None of the old subscriptions: a message on their filter does
		// not arrive, a PINGRESP does.
		pub.MustPublish(t, &paho.Publish{Topic: tc.old.ClientID + "/x", QoS: 1, Payload: []byte("not for the new session")})
		cur.Must(t, &packet.Pingreq{})
		if p := cur.Next(t); p.Type() != packet.PINGRESP {
			t.Errorf("%s: got %v before PINGRESP: the old session's subscription was kept", tc.name, p.Type())
		}
	}
}

// TestSessionTakeoverRace: of two CONNECTs with one client id sent at the
// same time, exactly one connection ends up owning the session; the other
// gets DISCONNECT 0x8E after its CONNACK, or, taken over before its
// CONNACK was written, is closed without a packet (no DISCONNECT may come
// before the CONNACK [MQTT-3.2.0-1]).
func TestSessionTakeoverRace(t *testing.T) {
	b := startBroker(t, broker.Options{})
	// outcome reports whether rc is still served (a PINGREQ is answered)
	// and what it received before.
	outcome := func(rc *mqtttest.Raw) (bool, []packet.Packet) {
		t.Helper()
		rc.Send(&packet.Pingreq{}, true) // may fail on the loser: it is closed
		rc.Conn.SetReadDeadline(time.Now().Add(waitFor))
		var got []packet.Packet
		for {
			p, err := rc.ReadPacket()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("neither PINGRESP nor close (got %+v)", got)
				}
				return false, got
			}
			if p.Type() == packet.PINGRESP {
				return true, got
			}
			got = append(got, p)
		}
	}
	for i := range 20 {
		id := fmt.Sprintf("race-%d", i)
		cp := &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version5, ClientID: id, KeepAlive: 30}
		cp.Properties.SetSessionExpiry(300)
		x, y := mqtttest.DialRaw(t, b.Addr, packet.Version5), mqtttest.DialRaw(t, b.Addr, packet.Version5)
		x.Must(t, cp)
		y.Must(t, cp)
		// Once each has its first packet (its CONNACK) or is closed,
		// both CONNECTs have been handled.
		first := func(rc *mqtttest.Raw) []packet.Packet {
			rc.Conn.SetReadDeadline(time.Now().Add(waitFor))
			p, err := rc.ReadPacket()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("%s: no CONNACK and no close", id)
				}
				return nil // closed before its CONNACK
			}
			return []packet.Packet{p}
		}
		xfirst, yfirst := first(x), first(y)
		xs, ys := false, false
		var xgot, ygot []packet.Packet
		if xfirst != nil {
			xs, xgot = outcome(x)
		}
		if yfirst != nil {
			ys, ygot = outcome(y)
		}
		xgot = append(xfirst, xgot...)
		ygot = append(yfirst, ygot...)
		if xs == ys {
			t.Fatalf("%s: served %v and %v, want exactly one", id, xs, ys)
		}
		win, lose := xgot, ygot
		if ys {
			win, lose = ygot, xgot
		}
		if len(win) != 1 || win[0].Type() != packet.CONNACK {
			t.Fatalf("%s: owner got %+v, want just CONNACK", id, win)
		}
		// The loser may have been taken over before its CONNACK went out:
		// then it got nothing.
		if n := len(lose); n != 0 && (n != 2 || lose[0].Type() != packet.CONNACK || lose[1].Type() != packet.DISCONNECT ||
			lose[1].(*packet.Disconnect).ReasonCode != packet.SessionTakenOver) {
			t.Fatalf("%s: the other connection got %v, want CONNACK then DISCONNECT 0x8E, or nothing", id, packetTypes(lose))
		}
	}
	if st := b.Stats(); st.Sessions != 20 {
		t.Fatalf("%d sessions, want 20", st.Sessions)
	}
}

// TestWillAbnormalClose: a will is published when the connection drops
// without DISCONNECT (v5 and 3.1.1).
func TestWillAbnormalClose(t *testing.T) {
	b := startBroker(t, broker.Options{})
	watcher := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("wa-watch"))
	watcher.MustSubscribe(t, paho.SubscribeOptions{Topic: "will/#", QoS: 1})

	c := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "wa5", CleanStart: true, KeepAlive: 30,
		WillMessage: &paho.WillMessage{Topic: "will/wa5", QoS: 1, Payload: []byte("v5 gone")}})
	c.Conn.Close()
	watcher.Expect(t, "v5 gone")

	v3, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "wa3", CleanStart: true, KeepAlive: 30,
		Will: &packet.Will{Topic: "will/wa3", QoS: 1, Payload: []byte("v3 gone")}})
	v3.Conn.Close()
	watcher.Expect(t, "v3 gone")
	if n := b.Stats().WillsPublished; n != 2 {
		t.Fatalf("wills published %d, want 2", n)
	}
}

// TestWillNormalDisconnect: DISCONNECT 0x00 deletes the will; v5
// DISCONNECT 0x04 (Disconnect with Will Message) publishes it.
func TestWillNormalDisconnect(t *testing.T) {
	b := startBroker(t, broker.Options{})
	watcher := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("wn-watch"))
	watcher.MustSubscribe(t, paho.SubscribeOptions{Topic: "will/#", QoS: 1})
	withWill := func(id string) *paho.Connect {
		return &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
			WillMessage: &paho.WillMessage{Topic: "will/" + id, QoS: 1, Payload: []byte(id + " will")}}
	}

	normal := mqtttest.DialV5(t, b.Addr, withWill("normal"))
	normal.Disconnect(&paho.Disconnect{ReasonCode: 0x00})
	hAConns(t, b, 1)
	mqtttest.Barrier(t, watcher, "will/barrier", watcher)

	v3, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "normal3", CleanStart: true, KeepAlive: 30,
		Will: &packet.Will{Topic: "will/normal3", QoS: 1, Payload: []byte("v3 will")}})
	v3.Must(t, &packet.Disconnect{})
	hAConns(t, b, 1)
	mqtttest.Barrier(t, watcher, "will/barrier", watcher)
	if n := b.Stats().WillsPublished; n != 0 {
		t.Fatalf("wills published %d after normal disconnects", n)
	}

	send := mqtttest.DialV5(t, b.Addr, withWill("send"))
	send.Disconnect(&paho.Disconnect{ReasonCode: byte(packet.DisconnectWithWill)})
	watcher.Expect(t, "send will")
}

// TestWillDelay: a will with a Will Delay Interval is published after the
// delay, not at all when the client resumes the session within it, at
// once when the session ends first (expiry 0), after the session expiry
// when that is shorter, and at once when a clean start ends the session
// within the delay.
func TestWillDelay(t *testing.T) {
	setup := func(t *testing.T, id string, delay, expiry uint32) (*testBroker, *mqtttest.V5, *paho.Connect) {
		b := startBroker(t, broker.Options{})
		watcher := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("wd-watch"))
		watcher.MustSubscribe(t, paho.SubscribeOptions{Topic: "will/#", QoS: 1})
		cp := hAPersistent(id, expiry)
		cp.WillMessage = &paho.WillMessage{Topic: "will/" + id, QoS: 1, Payload: []byte(id)}
		cp.WillProperties = &paho.WillProperties{WillDelayInterval: paho.Uint32(delay)}
		c := mqtttest.DialV5(t, b.Addr, cp)
		c.Conn.Close()
		return b, watcher, cp
	}
	t.Run("delayed", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		_, watcher, _ := setup(t, "delayed", 1, 300)
		watcher.Expect(t, "delayed")
		if d := time.Since(start); d < time.Second {
			t.Fatalf("will with a 1 s delay published after %v", d)
		}
	})
	t.Run("resumed", func(t *testing.T) {
		t.Parallel()
		b, watcher, cp := setup(t, "resumed", 1, 300)
		hAConns(t, b, 1)
		c := mqtttest.DialV5(t, b.Addr, cp)
		if !c.Connack.SessionPresent {
			t.Fatal("session not resumed")
		}
		hANoMessage(t, watcher, 1500*time.Millisecond)
		if n := b.Stats().WillsPublished; n != 0 {
			t.Fatalf("wills published %d", n)
		}
	})
	t.Run("session ends first", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		_, watcher, _ := setup(t, "expiry0", 60, 0)
		watcher.Expect(t, "expiry0")
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("will published after %v, want at once", d)
		}
	})
	t.Run("expiry shorter than delay", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		_, watcher, _ := setup(t, "expiry1", 60, 1)
		watcher.Expect(t, "expiry1")
		if d := time.Since(start); d < time.Second || d > 5*time.Second {
			t.Fatalf("will published after %v, want after the 1 s session expiry", d)
		}
	})
	t.Run("clean start within delay", func(t *testing.T) {
		t.Parallel()
		b, watcher, cp := setup(t, "cleaned", 60, 300)
		hAConns(t, b, 1)
		cp.CleanStart = true
		cp.WillMessage = nil
		cp.WillProperties = nil
		mqtttest.DialV5(t, b.Addr, cp)
		watcher.Expect(t, "cleaned")
	})
}

// TestWillPropertiesRetain: a will keeps its QoS, retain flag and v5
// properties (message expiry included), for live subscribers and as the
// retained message later subscribers get.
func TestWillPropertiesRetain(t *testing.T) {
	b := startBroker(t, broker.Options{})
	live := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("wp-live"))
	live.MustSubscribe(t, paho.SubscribeOptions{Topic: "wp/#", QoS: 2, RetainAsPublished: true})
	// The will goes in with fleetmq's codec: paho.golang v0.23 drops every
	// will property but the delay and user properties when it encodes
	// CONNECT (it packs them with the CONNECT property set).
	will := &packet.Will{Topic: "wp/status", QoS: 1, Retain: true, Payload: []byte("offline")}
	will.Properties.SetString(packet.PropContentType, "text/plain")
	will.Properties.SetString(packet.PropResponseTopic, "wp/reply")
	will.Properties.SetBytes(packet.PropCorrelationData, []byte{9, 8, 7})
	will.Properties.SetByte(packet.PropPayloadFormat, 1)
	will.Properties.SetMessageExpiry(100)
	will.Properties.User = []packet.UserProperty{{Key: "k", Value: "v"}}
	c, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "wp", CleanStart: true, KeepAlive: 30, Will: will})
	c.Conn.Close()

	check := func(who string, m *paho.Publish) {
		t.Helper()
		p := m.Properties
		if string(m.Payload) != "offline" || m.Topic != "wp/status" || m.QoS != 1 || !m.Retain {
			t.Fatalf("%s: got %q on %s QoS %d retain %v", who, m.Payload, m.Topic, m.QoS, m.Retain)
		}
		if p == nil || p.ContentType != "text/plain" || p.ResponseTopic != "wp/reply" ||
			!bytes.Equal(p.CorrelationData, []byte{9, 8, 7}) || p.PayloadFormat == nil || *p.PayloadFormat != 1 ||
			len(p.User) != 1 || p.User[0] != (paho.UserProperty{Key: "k", Value: "v"}) {
			t.Fatalf("%s: will properties not intact: %+v", who, p)
		}
		if p.MessageExpiry == nil || *p.MessageExpiry < 99 || *p.MessageExpiry > 100 {
			t.Fatalf("%s: message expiry %v, want about 100", who, p.MessageExpiry)
		}
	}
	check("live subscriber", live.Next(t))
	late := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("wp-late"))
	late.MustSubscribe(t, paho.SubscribeOptions{Topic: "wp/#", QoS: 2})
	check("later subscriber", late.Next(t))
	if n := b.Stats().Retained; n != 1 {
		t.Fatalf("%d retained messages, want the will", n)
	}
}

// injectPolicy is the open policy that, once armed, publishes a message
// from its Connected callback: that runs when the session is attached to
// the new connection and before the CONNACK is written, the moment at
// which any publisher's message may reach a resumed session.
type injectPolicy struct {
	broker.OpenPolicy
	srv   atomic.Pointer[broker.Server]
	armed atomic.Bool
}

func (p *injectPolicy) Connected(id *broker.Identity, _ *broker.Connection) {
	if p.armed.Load() {
		p.srv.Load().Publish(&broker.Message{Topic: id.ClientID + "/x", QoS: 1, PublishedQoS: 1, Payload: []byte("meanwhile")})
	}
}

// TestConnackComesFirst: a message routed to a resumed session while its
// new connection is being set up waits behind the CONNACK, which is the
// first packet the server sends [MQTT-3.2.0-1]; a client that gets a
// PUBLISH first drops the connection (paho.mqtt.golang: "non-CONNACK first
// packet received"). It then arrives after the CONNACK.
func TestConnackComesFirst(t *testing.T) {
	pol := &injectPolicy{}
	b := startBroker(t, broker.Options{Policy: pol})
	pol.srv.Store(b.Server)
	for _, v := range []byte{packet.Version311, packet.Version5} {
		id := fmt.Sprintf("cf%d", v)
		cp := func() *packet.Connect {
			c := &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: v, ClientID: id, KeepAlive: 30}
			if v == packet.Version5 {
				c.Properties.SetSessionExpiry(300)
			}
			return c
		}
		first, _ := mqtttest.ConnectRaw(t, b.Addr, cp())
		first.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: id + "/#", QoS: 1}}})
		first.Expect(t, packet.SUBACK)
		first.Must(t, &packet.Disconnect{})
		eventually(t, "the session to go offline", func() bool { return b.Stats().Connections == 0 })

		pol.armed.Store(true)
		again := mqtttest.DialRaw(t, b.Addr, v)
		again.Must(t, cp())
		if p := again.Next(t); p.Type() != packet.CONNACK {
			t.Fatalf("MQTT %d: first packet %v, want CONNACK", v, p.Type())
		} else if !p.(*packet.Connack).SessionPresent {
			t.Fatalf("MQTT %d: session not present", v)
		}
		if p, ok := again.Next(t).(*packet.Publish); !ok || string(p.Payload) != "meanwhile" {
			t.Fatalf("MQTT %d: after the CONNACK %+v, want the message published meanwhile", v, p)
		}
		pol.armed.Store(false)
		again.Must(t, &packet.Disconnect{})
		eventually(t, "the session to go offline", func() bool { return b.Stats().Connections == 0 })
	}
}

// packetTypes names the packets' types, with a DISCONNECT's reason code.
func packetTypes(ps []packet.Packet) []string {
	var out []string
	for _, p := range ps {
		s := p.Type().String()
		if d, ok := p.(*packet.Disconnect); ok {
			s += fmt.Sprintf(" 0x%02x", byte(d.ReasonCode))
		}
		out = append(out, s)
	}
	return out
}
