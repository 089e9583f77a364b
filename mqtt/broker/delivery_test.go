package broker_test

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Helpers for delivery_test.go and persist_test.go (prefixed hc).

// hcAbsence is how long a test listens to show that nothing arrives. It is
// used only where the absence of a packet cannot be observed otherwise (a
// full inflight window holds back QoS 0 too, so no barrier can pass it).
const hcAbsence = 200 * time.Millisecond

// hcConnect connects a raw v5 client. expiry is the Session Expiry Interval
// (0: none); recvMax, when not 0, is the client's Receive Maximum; edit
// changes the CONNECT further.
func hcConnect(tb testing.TB, addr, id string, cleanStart bool, expiry uint32, recvMax uint16, edit ...func(*packet.Connect)) (*mqtttest.Raw, *packet.Connack) {
	tb.Helper()
	cp := &packet.Connect{ClientID: id, CleanStart: cleanStart, KeepAlive: 30}
	if expiry > 0 {
		cp.Properties.SetSessionExpiry(expiry)
	}
	if recvMax > 0 {
		cp.Properties.SetUint16(packet.PropReceiveMaximum, recvMax)
	}
	for _, e := range edit {
		e(cp)
	}
	return mqtttest.ConnectRaw(tb, addr, cp)
}

// hcSubscribe subscribes a raw client to one filter and checks the grant.
func hcSubscribe(tb testing.TB, rc *mqtttest.Raw, filter string, qos byte, subID uint32) {
	tb.Helper()
	s := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: qos}}}
	if subID != 0 {
		s.Properties.SubscriptionIDs = []uint32{subID}
	}
	rc.Must(tb, s)
	sa := rc.Expect(tb, packet.SUBACK).(*packet.Suback)
	if len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != packet.ReasonCode(qos) {
		tb.Fatalf("subscribe %s qos %d: suback %v", filter, qos, sa.ReasonCodes)
	}
}

// hcPayload is the payload of the i-th numbered message.
func hcPayload(i int) string { return fmt.Sprintf("m%03d", i) }

// hcPublishN publishes n numbered messages (payloads hcPayload(first..))
// from a raw client at qos with packet ids 1..n, pipelined, and returns
// once every flow has completed (PUBACK, or PUBREC/PUBREL/PUBCOMP).
func hcPublishN(tb testing.TB, pub *mqtttest.Raw, topic string, qos byte, first, n int) {
	tb.Helper()
	for i := range n {
		p := &packet.Publish{Topic: topic, QoS: qos, Payload: []byte(hcPayload(first + i))}
		if qos > 0 {
			p.PacketID = uint16(i + 1)
		}
		if err := pub.Send(p, false); err != nil {
			tb.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		tb.Fatal(err)
	}
	switch qos {
	case 1:
		for i := range n {
			a := pub.Expect(tb, packet.PUBACK).(*packet.Ack)
			if a.PacketID != uint16(i+1) || a.ReasonCode != packet.Success {
				tb.Fatalf("puback %d: %+v", i+1, a)
			}
		}
	case 2:
		for i := range n {
			a := pub.Expect(tb, packet.PUBREC).(*packet.Ack)
			if a.PacketID != uint16(i+1) || a.ReasonCode != packet.Success {
				tb.Fatalf("pubrec %d: %+v", i+1, a)
			}
			if err := pub.Send(&packet.Ack{Kind: packet.PUBREL, PacketID: a.PacketID}, false); err != nil {
				tb.Fatal(err)
			}
		}
		if err := pub.Flush(); err != nil {
			tb.Fatal(err)
		}
		for i := range n {
			a := pub.Expect(tb, packet.PUBCOMP).(*packet.Ack)
			if a.PacketID != uint16(i+1) || a.ReasonCode != packet.Success {
				tb.Fatalf("pubcomp %d: %+v", i+1, a)
			}
		}
	}
}

// hcExpectPub reads a PUBLISH and checks its payload, QoS and DUP flag.
func hcExpectPub(tb testing.TB, rc *mqtttest.Raw, payload string, qos byte, dup bool) *packet.Publish {
	tb.Helper()
	p := rc.Expect(tb, packet.PUBLISH).(*packet.Publish)
	if string(p.Payload) != payload || p.QoS != qos || p.Dup != dup {
		tb.Fatalf("got PUBLISH %q qos %d dup %v pid %d, want %q qos %d dup %v", p.Payload, p.QoS, p.Dup, p.PacketID, payload, qos, dup)
	}
	return p
}

// hcExpectAck reads an ack of the given kind for pid.
func hcExpectAck(tb testing.TB, rc *mqtttest.Raw, kind packet.Type, pid uint16) *packet.Ack {
	tb.Helper()
	a := rc.Expect(tb, kind).(*packet.Ack)
	if a.PacketID != pid {
		tb.Fatalf("got %v for packet id %d, want %d", kind, a.PacketID, pid)
	}
	return a
}

// hcAck sends an ack of kind for pid.
func hcAck(tb testing.TB, rc *mqtttest.Raw, kind packet.Type, pid uint16) {
	tb.Helper()
	rc.Must(tb, &packet.Ack{Kind: kind, PacketID: pid})
}

// hcAbsent checks that nothing arrives on rc for hcAbsence.
func hcAbsent(tb testing.TB, rc *mqtttest.Raw, what string) {
	tb.Helper()
	rc.Conn.SetReadDeadline(time.Now().Add(hcAbsence))
	defer rc.Conn.SetReadDeadline(time.Time{})
	p, err := rc.ReadPacket()
	if err == nil {
		tb.Fatalf("%s: unexpected %v %+v", what, p.Type(), p)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		tb.Fatalf("%s: read: %v", what, err)
	}
}

// hcDrop is the index of a drop reason in Stats().Drops, by name.
func hcDrop(tb testing.TB, name string) int {
	tb.Helper()
	i := slices.Index(broker.DropNames(), name)
	if i < 0 {
		tb.Fatalf("drop reason %q not in %v", name, broker.DropNames())
	}
	return i
}

// hcConns waits until the server counts n open connections (a closed
// client's session has then gone offline: detach runs before the count
// drops).
func hcConns(tb testing.TB, b *testBroker, n int64) {
	tb.Helper()
	eventually(tb, fmt.Sprintf("%d open connections", n), func() bool { return b.Stats().Connections == n })
}

// hcQueues waits until the server's inflight and queued gauges are as given.
func hcQueues(tb testing.TB, b *testBroker, inflight, queued int64) {
	tb.Helper()
	testkit.CheckFor(tb, waitFor, func() error {
		if st := b.Stats(); st.Inflight != inflight || st.Queued != queued {
			return fmt.Errorf("inflight %d queued %d, want %d and %d", st.Inflight, st.Queued, inflight, queued)
		}
		return nil
	})
}

// hcDropPolicy is the open policy that records Policy.Dropped calls.
type hcDropPolicy struct {
	broker.OpenPolicy
	mu    sync.Mutex
	drops map[broker.DropReason][]string // payloads by reason
}

func (p *hcDropPolicy) Dropped(_ *broker.Identity, m *broker.Message, r broker.DropReason) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drops == nil {
		p.drops = make(map[broker.DropReason][]string)
	}
	p.drops[r] = append(p.drops[r], string(m.Payload))
}

func (p *hcDropPolicy) dropped(r broker.DropReason) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.drops[r])
}

// TestDeliveryInflightWindow: with a window of 20 (set, and by default), a
// subscriber that withholds acknowledgements gets exactly 20 messages; the
// rest wait queued. Each completed flow (PUBACK; for QoS 2 PUBCOMP, not
// PUBREC) releases exactly one more, in order, and all 100 arrive once.
func TestDeliveryInflightWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts broker.Options
	}{
		{"MaxInflight20", broker.Options{MaxInflight: 20}},
		{"default", broker.Options{}},
	} {
		for qos := byte(1); qos <= 2; qos++ {
			t.Run(fmt.Sprintf("%s/qos%d", tc.name, qos), func(t *testing.T) {
				t.Parallel()
				b := startBroker(t, tc.opts)
				const total, window, k = 100, 20, 5
				// The subscriber's own Receive Maximum is far above the
				// window: the server's window is what holds.
				sub, _ := hcConnect(t, b.Addr, "win-sub", true, 0, 1000)
				hcSubscribe(t, sub, "w/#", qos, 0)
				pub, _ := hcConnect(t, b.Addr, "win-pub", true, 0, 0)
				hcPublishN(t, pub, "w/x", qos, 0, total)

				hcQueues(t, b, window, total-window)
				pids := make([]uint16, 0, window)
				for i := range window {
					p := hcExpectPub(t, sub, hcPayload(i), qos, false)
					if slices.Contains(pids, p.PacketID) || p.PacketID == 0 {
						t.Fatalf("packet id %d reused or zero among %v", p.PacketID, pids)
					}
					pids = append(pids, p.PacketID)
				}
				hcAbsent(t, sub, "window full")

				if qos == 2 {
					// PUBREC does not free the window: the server answers
					// PUBREL and still counts the message inflight.
					for _, pid := range pids[:k] {
						hcAck(t, sub, packet.PUBREC, pid)
					}
					for _, pid := range pids[:k] {
						hcExpectAck(t, sub, packet.PUBREL, pid)
					}
					hcQueues(t, b, window, total-window)
					hcAbsent(t, sub, "window full after PUBREC")
				}
				done := packet.PUBACK
				if qos == 2 {
					done = packet.PUBCOMP
				}
				for _, pid := range pids[:k] {
					hcAck(t, sub, done, pid)
				}
				for i := window; i < window+k; i++ {
					p := hcExpectPub(t, sub, hcPayload(i), qos, false)
					pids = append(pids, p.PacketID)
				}
				hcAbsent(t, sub, "window full again")
				hcQueues(t, b, window, total-window-k)

				// Drain, acknowledging as messages come (first the 20
				// held back); the client never holds more than the
				// window unacknowledged.
				first := packet.PUBACK
				if qos == 2 {
					first = packet.PUBREC
				}
				open := 0 // flows not completed by the client
				recv := func(pid uint16) {
					hcAck(t, sub, first, pid)
					if qos == 1 {
						return
					}
					open++
					if open > window {
						t.Fatalf("%d unacknowledged messages, window %d", open, window)
					}
				}
				for _, pid := range pids[k:] {
					recv(pid)
				}
				next := window + k
				for next < total || open > 0 {
					switch p := sub.Next(t).(type) {
					case *packet.Publish:
						if next >= total || string(p.Payload) != hcPayload(next) || p.QoS != qos || p.Dup {
							t.Fatalf("got PUBLISH %q qos %d dup %v, want %s", p.Payload, p.QoS, p.Dup, hcPayload(next))
						}
						next++
						recv(p.PacketID)
					case *packet.Ack:
						if p.Kind != packet.PUBREL || qos != 2 {
							t.Fatalf("unexpected %v", p.Kind)
						}
						hcAck(t, sub, packet.PUBCOMP, p.PacketID)
						open--
					default:
						t.Fatalf("unexpected %v", p.Type())
					}
				}
				hcQueues(t, b, 0, 0)
			})
		}
	}
}

// TestDeliveryQueueBound: behind a window of 5, a queue bounded at 10 keeps
// the oldest messages; the newest 35 of 50 are dropped as queue_full, and
// the Policy sees each drop. Only the 15 kept ones are ever delivered.
func TestDeliveryQueueBound(t *testing.T) {
	pol := &hcDropPolicy{}
	b := startBroker(t, broker.Options{Policy: pol, MaxQueued: 10, MaxInflight: 5})
	queueFull := hcDrop(t, "queue_full")

	sub, _ := hcConnect(t, b.Addr, "qb-sub", true, 0, 1000)
	hcSubscribe(t, sub, "qb/#", 1, 0)
	pub, _ := hcConnect(t, b.Addr, "qb-pub", true, 0, 0)
	hcPublishN(t, pub, "qb/x", 1, 0, 50)

	hcQueues(t, b, 5, 10)
	st := b.Stats()
	if st.Drops[queueFull] != 35 {
		t.Fatalf("queue_full drops %d, want 35 (drops %v)", st.Drops[queueFull], st.Drops)
	}
	var want []string
	for i := 15; i < 50; i++ {
		want = append(want, hcPayload(i))
	}
	if got := pol.dropped(broker.DropReason(queueFull)); !slices.Equal(got, want) {
		t.Fatalf("Policy.Dropped(queue_full) saw %v, want %v", got, want)
	}

	for i := range 15 {
		p := hcExpectPub(t, sub, hcPayload(i), 1, false)
		hcAck(t, sub, packet.PUBACK, p.PacketID)
	}
	hcQueues(t, b, 0, 0)
	// A marker published now is the next thing the subscriber sees: the
	// dropped messages are gone for good.
	hcPublishN(t, pub, "qb/x", 1, 1000, 1)
	hcExpectPub(t, sub, hcPayload(1000), 1, false)
	if st := b.Stats(); st.Drops[queueFull] != 35 {
		t.Fatalf("queue_full drops %d after draining, want 35", st.Drops[queueFull])
	}
}

// TestDeliveryOfflineQueue: an offline persistent session queues QoS 1 up to
// MaxQueued (the excess counted queue_full) and does not queue QoS 0
// (counted offline_qos0); on resume exactly the queued messages arrive.
func TestDeliveryOfflineQueue(t *testing.T) {
	pol := &hcDropPolicy{}
	b := startBroker(t, broker.Options{Policy: pol, MaxQueued: 10, MaxInflight: 5})
	queueFull, offline := hcDrop(t, "queue_full"), hcDrop(t, "offline_qos0")

	sub, ack := hcConnect(t, b.Addr, "off-sub", true, 300, 0)
	if ack.SessionPresent {
		t.Fatal("session present on a clean start")
	}
	hcSubscribe(t, sub, "off/#", 1, 0)
	pub, _ := hcConnect(t, b.Addr, "off-pub", true, 0, 0)
	sub.Conn.Close()
	hcConns(t, b, 1)

	hcPublishN(t, pub, "off/q0", 0, 100, 3) // QoS 0: not queued
	hcPublishN(t, pub, "off/q1", 1, 0, 12)  // QoS 1: 10 queued, 2 over
	hcQueues(t, b, 0, 10)
	st := b.Stats()
	if st.Drops[offline] != 3 || st.Drops[queueFull] != 2 {
		t.Fatalf("drops %v (%v), want offline_qos0 3 and queue_full 2", st.Drops, broker.DropNames())
	}
	if got, want := pol.dropped(broker.DropReason(offline)), []string{hcPayload(100), hcPayload(101), hcPayload(102)}; !slices.Equal(got, want) {
		t.Fatalf("Policy.Dropped(offline_qos0) saw %v, want %v", got, want)
	}
	if got, want := pol.dropped(broker.DropReason(queueFull)), []string{hcPayload(10), hcPayload(11)}; !slices.Equal(got, want) {
		t.Fatalf("Policy.Dropped(queue_full) saw %v, want %v", got, want)
	}

	sub, ack = hcConnect(t, b.Addr, "off-sub", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("session not present on resume")
	}
	for i := range 10 {
		p := hcExpectPub(t, sub, hcPayload(i), 1, false)
		hcAck(t, sub, packet.PUBACK, p.PacketID)
	}
	hcQueues(t, b, 0, 0)
	hcPublishN(t, pub, "off/q1", 1, 1000, 1)
	hcExpectPub(t, sub, hcPayload(1000), 1, false)
}

// TestDeliveryResume: a persistent session that disconnects with QoS 1 and
// QoS 2 deliveries unacknowledged gets them first on resume, as PUBLISH with
// DUP and the same packet ids (PUBREL for the one it had PUBREC'd), then the
// messages published while it was offline.
func TestDeliveryResume(t *testing.T) {
	b := startBroker(t, broker.Options{})
	sub, _ := hcConnect(t, b.Addr, "res-sub", true, 300, 0)
	hcSubscribe(t, sub, "res/#", 2, 0)
	pub, _ := hcConnect(t, b.Addr, "res-pub", true, 0, 0)

	// Published with packet ids 1..n each time; completed before the next.
	hcPublishN(t, pub, "res/a", 1, 0, 1)
	hcPublishN(t, pub, "res/a", 2, 1, 1)
	hcPublishN(t, pub, "res/a", 2, 2, 1)
	hcPublishN(t, pub, "res/a", 1, 3, 1)
	got := []*packet.Publish{
		hcExpectPub(t, sub, hcPayload(0), 1, false),
		hcExpectPub(t, sub, hcPayload(1), 2, false),
		hcExpectPub(t, sub, hcPayload(2), 2, false),
		hcExpectPub(t, sub, hcPayload(3), 1, false),
	}
	// Only message 2 gets its PUBREC (and the server's PUBREL).
	hcAck(t, sub, packet.PUBREC, got[2].PacketID)
	hcExpectAck(t, sub, packet.PUBREL, got[2].PacketID)
	sub.Conn.Close()
	hcConns(t, b, 1)
	hcQueues(t, b, 4, 0)

	// Offline: QoS 1 and QoS 2 are queued.
	hcPublishN(t, pub, "res/b", 1, 4, 1)
	hcPublishN(t, pub, "res/b", 2, 5, 1)
	hcQueues(t, b, 4, 2)

	sub, ack := hcConnect(t, b.Addr, "res-sub", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("session not present on resume")
	}
	// Retransmissions first, in the original order.
	for i, want := range got {
		if i == 2 {
			hcExpectAck(t, sub, packet.PUBREL, want.PacketID)
			continue
		}
		p := hcExpectPub(t, sub, string(want.Payload), want.QoS, true)
		if p.PacketID != want.PacketID || p.Topic != "res/a" {
			t.Fatalf("resent %q with packet id %d on %q, want id %d", p.Payload, p.PacketID, p.Topic, want.PacketID)
		}
	}
	// Then the offline queue, as new deliveries.
	q1 := hcExpectPub(t, sub, hcPayload(4), 1, false)
	q2 := hcExpectPub(t, sub, hcPayload(5), 2, false)
	for _, p := range append(got, q1, q2) {
		for _, o := range got {
			if p != o && p.PacketID == o.PacketID {
				t.Fatalf("packet id %d used twice while inflight", p.PacketID)
			}
		}
	}

	// Complete every flow; the server keeps nothing.
	hcAck(t, sub, packet.PUBACK, got[0].PacketID)
	hcAck(t, sub, packet.PUBREC, got[1].PacketID)
	hcExpectAck(t, sub, packet.PUBREL, got[1].PacketID)
	hcAck(t, sub, packet.PUBCOMP, got[1].PacketID)
	hcAck(t, sub, packet.PUBCOMP, got[2].PacketID)
	hcAck(t, sub, packet.PUBACK, got[3].PacketID)
	hcAck(t, sub, packet.PUBACK, q1.PacketID)
	hcAck(t, sub, packet.PUBREC, q2.PacketID)
	hcExpectAck(t, sub, packet.PUBREL, q2.PacketID)
	hcAck(t, sub, packet.PUBCOMP, q2.PacketID)
	hcQueues(t, b, 0, 0)

	// A second resume has nothing to resend: the next packet is new.
	sub.Conn.Close()
	hcConns(t, b, 1)
	sub, _ = hcConnect(t, b.Addr, "res-sub", false, 300, 0)
	hcPublishN(t, pub, "res/c", 1, 6, 1)
	hcExpectPub(t, sub, hcPayload(6), 1, false)
}

// TestDeliveryInboundQoS2Dedupe: a QoS 2 PUBLISH resent with DUP and the
// same packet id before PUBREL, on the same connection or after the
// publisher reconnects to its session, is delivered once.
func TestDeliveryInboundQoS2Dedupe(t *testing.T) {
	b := startBroker(t, broker.Options{})
	sub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("dd-sub"))
	sub.MustSubscribe(t, paho.SubscribeOptions{Topic: "dd/#", QoS: 2})
	marker := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("dd-marker"))

	pub, _ := hcConnect(t, b.Addr, "dd-pub", true, 300, 0)
	msg := &packet.Publish{Topic: "dd/x", QoS: 2, PacketID: 7, Payload: []byte("once")}
	pub.Must(t, msg)
	hcExpectAck(t, pub, packet.PUBREC, 7)
	dup := *msg
	dup.Dup = true
	pub.Must(t, &dup)
	// The retransmission is acknowledged again, not routed again.
	hcExpectAck(t, pub, packet.PUBREC, 7)
	hcAck(t, pub, packet.PUBREL, 7)
	if a := hcExpectAck(t, pub, packet.PUBCOMP, 7); a.ReasonCode != packet.Success {
		t.Fatalf("pubcomp reason %v", a.ReasonCode)
	}
	sub.Expect(t, "once")
	mqtttest.Barrier(t, marker, "dd/marker", sub)

	// Across a reconnect: the publisher sent the PUBLISH, lost the
	// connection before PUBREC, and resends it on its resumed session.
	msg = &packet.Publish{Topic: "dd/x", QoS: 2, PacketID: 8, Payload: []byte("twice?")}
	pub.Must(t, msg)
	sub.Expect(t, "twice?")
	pub.Conn.Close()
	hcConns(t, b, 2)
	pub, ack := hcConnect(t, b.Addr, "dd-pub", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("publisher session not present")
	}
	dup = *msg
	dup.Dup = true
	pub.Must(t, &dup)
	hcExpectAck(t, pub, packet.PUBREC, 8)
	hcAck(t, pub, packet.PUBREL, 8)
	if a := hcExpectAck(t, pub, packet.PUBCOMP, 8); a.ReasonCode != packet.Success {
		t.Fatalf("pubcomp reason %v", a.ReasonCode)
	}
	mqtttest.Barrier(t, marker, "dd/marker", sub)

	// Once released, the id is free: the same id carries a new message.
	msg = &packet.Publish{Topic: "dd/x", QoS: 2, PacketID: 8, Payload: []byte("new")}
	pub.Must(t, msg)
	hcExpectAck(t, pub, packet.PUBREC, 8)
	hcAck(t, pub, packet.PUBREL, 8)
	hcExpectAck(t, pub, packet.PUBCOMP, 8)
	sub.Expect(t, "new")
}

// hcCounted is a raw client whose socket bytes are counted both ways.
type hcCounted struct {
	*mqtttest.Raw
	in, out *hcCount
}

type hcCount struct {
	mu sync.Mutex
	n  int64
}

func (c *hcCount) add(n int) {
	c.mu.Lock()
	c.n += int64(n)
	c.mu.Unlock()
}

func (c *hcCount) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// hcCountConn counts the bytes read from and written to a connection.
type hcCountConn struct {
	net.Conn
	in, out *hcCount
}

func (c hcCountConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.add(n)
	return n, err
}

func (c hcCountConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.add(n)
	return n, err
}

// hcConnectCounted connects a raw client (v5 or 3.1.1, clean) that counts
// the bytes it sends (out) and receives (in), CONNECT and CONNACK included.
func hcConnectCounted(tb testing.TB, addr, id string, version byte) *hcCounted {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	in, out := &hcCount{}, &hcCount{}
	rc := mqtttest.RawOver(tb, hcCountConn{Conn: nc, in: in, out: out}, version)
	rc.Connect(tb, &packet.Connect{CleanStart: true, KeepAlive: 30, ClientID: id})
	return &hcCounted{Raw: rc, in: in, out: out}
}

// TestDeliveryCounters: after a known exchange, every counter of
// Server.Stats is exactly what the clients saw on the wire.
func TestDeliveryCounters(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := hcConnectCounted(t, b.Addr, "cnt-pub", packet.Version5)
	sub := hcConnectCounted(t, b.Addr, "cnt-sub", packet.Version5)
	hcSubscribe(t, sub.Raw, "cnt/#", 2, 0)

	// v5 publisher: one message at each QoS.
	pub.Must(t, &packet.Publish{Topic: "cnt/0", QoS: 0, Payload: []byte("zero")})
	pub.Must(t, &packet.Publish{Topic: "cnt/1", QoS: 1, PacketID: 1, Payload: []byte("one")})
	hcExpectAck(t, pub.Raw, packet.PUBACK, 1)
	pub.Must(t, &packet.Publish{Topic: "cnt/2", QoS: 2, PacketID: 2, Payload: []byte("two")})
	hcExpectAck(t, pub.Raw, packet.PUBREC, 2)
	hcAck(t, pub.Raw, packet.PUBREL, 2)
	hcExpectAck(t, pub.Raw, packet.PUBCOMP, 2)

	hcExpectPub(t, sub.Raw, "zero", 0, false)
	p1 := hcExpectPub(t, sub.Raw, "one", 1, false)
	hcAck(t, sub.Raw, packet.PUBACK, p1.PacketID)
	p2 := hcExpectPub(t, sub.Raw, "two", 2, false)
	hcAck(t, sub.Raw, packet.PUBREC, p2.PacketID)
	hcExpectAck(t, sub.Raw, packet.PUBREL, p2.PacketID)
	hcAck(t, sub.Raw, packet.PUBCOMP, p2.PacketID)

	// A 3.1.1 publisher: one QoS 1 message, a ping, a normal disconnect.
	v3 := hcConnectCounted(t, b.Addr, "cnt-v3", packet.Version311)
	v3.Must(t, &packet.Publish{Topic: "cnt/3", QoS: 1, PacketID: 1, Payload: []byte("three")})
	hcExpectAck(t, v3.Raw, packet.PUBACK, 1)
	v3.Must(t, &packet.Pingreq{})
	v3.Expect(t, packet.PINGRESP)
	v3.Must(t, &packet.Disconnect{})
	v3.Closed(t)
	p3 := hcExpectPub(t, sub.Raw, "three", 1, false)
	hcAck(t, sub.Raw, packet.PUBACK, p3.PacketID)

	// A ping on each remaining connection: everything before it has been
	// read and counted by the server.
	for _, c := range []*hcCounted{pub, sub} {
		c.Must(t, &packet.Pingreq{})
		c.Expect(t, packet.PINGRESP)
	}

	clients := []*hcCounted{pub, sub, v3}
	want := broker.Stats{
		Connections:      2,
		ConnectionsTotal: 3,
		Sessions:         2, // the clean 3.1.1 session ended with its connection
		PublishIn:        [3]int64{1, 2, 1},
		PublishOut:       [3]int64{1, 2, 1},
		Routed:           4,
		Subscriptions:    1,
	}
	want.ConnectionsBy[0] = 2                     // tcp (ListenerNames)
	want.Closes[broker.CloseClientDisconnect] = 1 // the 3.1.1 publisher's DISCONNECT
	in := map[packet.Type]int64{packet.CONNECT: 3, packet.SUBSCRIBE: 1, packet.PUBLISH: 4, packet.PUBACK: 2,
		packet.PUBREC: 1, packet.PUBREL: 1, packet.PUBCOMP: 1, packet.PINGREQ: 3, packet.DISCONNECT: 1}
	out := map[packet.Type]int64{packet.CONNACK: 3, packet.SUBACK: 1, packet.PUBLISH: 4, packet.PUBACK: 2,
		packet.PUBREC: 1, packet.PUBREL: 1, packet.PUBCOMP: 1, packet.PINGRESP: 3}
	for typ, n := range in {
		want.PacketsIn[typ] = n
	}
	for typ, n := range out {
		want.PacketsOut[typ] = n
	}
	testkit.CheckFor(t, waitFor, func() error {
		want.BytesIn, want.BytesOut = 0, 0
		for _, c := range clients {
			want.BytesIn += c.out.get()
			want.BytesOut += c.in.get()
		}
		if got := b.Stats(); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("stats\n got %+v\nwant %+v", got, want)
		}
		return nil
	})
}
