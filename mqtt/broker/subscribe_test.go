package broker_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestSubackGrantedQoS: SUBACK reports the granted QoS of each filter.
func TestSubackGrantedQoS(t *testing.T) {
	b := startBroker(t, broker.Options{})
	c := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("c"))
	sa := c.MustSubscribe(t,
		paho.SubscribeOptions{Topic: "g/2", QoS: 2},
		paho.SubscribeOptions{Topic: "g/0", QoS: 0},
		paho.SubscribeOptions{Topic: "g/1", QoS: 1})
	if want := []byte{2, 0, 1}; string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK reasons %v, want %v", sa.Reasons, want)
	}
	// The granted QoS caps delivery.
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	for _, f := range []string{"g/0", "g/1", "g/2"} {
		pub.MustPublish(t, &paho.Publish{Topic: f, QoS: 2, Payload: []byte(f)})
		if m := c.Expect(t, f)[0]; m.QoS != f[2]-'0' {
			t.Fatalf("%s delivered at QoS %d", f, m.QoS)
		}
	}
}

// TestSubscribeInvalidFilters: invalid filters are refused with 0x8F one by
// one while the valid filters of the same SUBSCRIBE are granted and work.
func TestSubscribeInvalidFilters(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	c := hbDial(t, b.Addr, "c")
	opts := []paho.SubscribeOptions{
		{Topic: "ok/1", QoS: 1},
		{Topic: "bad/#/x", QoS: 1},
		{Topic: "bad+", QoS: 0},
		{Topic: "ok/+/2", QoS: 0},
		{Topic: "$share/g", QoS: 1},
		{Topic: "bad/#x", QoS: 1},
	}
	sa, err := c.Subscribe(t.Context(), &paho.Subscribe{Subscriptions: opts})
	if sa == nil {
		t.Fatalf("subscribe: %v", err)
	}
	want := []byte{1, 0x8F, 0x8F, 0, 0x8F, 0x8F}
	if string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK reasons % x, want % x", sa.Reasons, want)
	}
	pub.MustPublish(t, &paho.Publish{Topic: "ok/1", QoS: 1, Payload: []byte("one")})
	pub.MustPublish(t, &paho.Publish{Topic: "ok/a/2", QoS: 1, Payload: []byte("two")})
	c.Expect(t, "one", "two")
	c.quiet(t, pub)
	if n := b.Stats().Subscriptions; n != 3 { // the two valid ones and the barrier
		t.Fatalf("Stats().Subscriptions = %d, want 3", n)
	}
}

func hbSubID(m *paho.Publish) int {
	if m.Properties == nil || m.Properties.SubscriptionIdentifier == nil {
		return 0
	}
	return *m.Properties.SubscriptionIdentifier
}

// TestSubscriptionIdentifiers: a message carries the identifier of the
// subscription it matched; with two overlapping subscriptions it is
// delivered once, at the higher QoS, with both identifiers (paho.golang
// shows one of them; overlap_test.go checks the wire; docs/broker.md,
// "Overlapping subscriptions").
func TestSubscriptionIdentifiers(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	c := hbDial(t, b.Addr, "c")
	sub := func(id int, o paho.SubscribeOptions) {
		t.Helper()
		sa, err := c.Subscribe(t.Context(), &paho.Subscribe{
			Properties:    &paho.SubscribeProperties{SubscriptionIdentifier: &id},
			Subscriptions: []paho.SubscribeOptions{o},
		})
		if err != nil || sa.Reasons[0] >= 0x80 {
			t.Fatalf("subscribe %s id %d: %v %v", o.Topic, id, err, sa)
		}
	}
	sub(7, paho.SubscribeOptions{Topic: "sid/only", QoS: 1})
	pub.MustPublish(t, &paho.Publish{Topic: "sid/only", QoS: 1, Payload: []byte("x")})
	if m := c.Expect(t, "x")[0]; hbSubID(m) != 7 {
		t.Fatalf("subscription id %d, want 7", hbSubID(m))
	}
	// The barrier subscription has no identifier.
	pub.MustPublish(t, &paho.Publish{Topic: c.bar, QoS: 1, Payload: []byte("nobody")})
	if m := c.Expect(t, "nobody")[0]; hbSubID(m) != 0 {
		t.Fatalf("subscription without identifier delivered id %d", hbSubID(m))
	}

	sub(1, paho.SubscribeOptions{Topic: "ov/#", QoS: 0})
	sub(2, paho.SubscribeOptions{Topic: "ov/+", QoS: 1})
	pub.MustPublish(t, &paho.Publish{Topic: "ov/a", QoS: 1, Payload: []byte("both")})
	if m := c.Expect(t, "both")[0]; m.QoS != 1 || hbSubID(m) != 1 && hbSubID(m) != 2 {
		t.Fatalf("copy at QoS %d with id %d, want QoS 1 and id 1 or 2", m.QoS, hbSubID(m))
	}
	c.quiet(t, pub) // one copy only
	// Only one subscription matches: one copy, its id.
	pub.MustPublish(t, &paho.Publish{Topic: "ov/a/b", QoS: 1, Payload: []byte("deep")})
	if m := c.Expect(t, "deep")[0]; hbSubID(m) != 1 {
		t.Fatalf("ov/a/b: id %d, want 1", hbSubID(m))
	}
	c.quiet(t, pub)
}

// TestSubscriptionIdentifiersRaw checks on the wire (paho.golang keeps
// only one identifier per PUBLISH) that the one copy of an overlapping
// match carries the identifiers of all the matching subscriptions.
func TestSubscriptionIdentifiersRaw(t *testing.T) {
	b := startBroker(t, broker.Options{})
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "raw", CleanStart: true, KeepAlive: 30})
	for i, f := range []string{"w/#", "w/+", "w/x"} {
		s := &packet.Subscribe{PacketID: uint16(i + 1), Subscriptions: []packet.Subscription{{Filter: f, QoS: 1}}}
		s.Properties.SubscriptionIDs = []uint32{uint32(10 + i)}
		rc.Must(t, s)
		if sa := rc.Expect(t, packet.SUBACK).(*packet.Suback); sa.ReasonCodes[0] != 1 {
			t.Fatalf("%s: SUBACK %v", f, sa.ReasonCodes)
		}
	}
	rc.Must(t, &packet.Publish{Topic: "w/x", Payload: []byte("p")}) // QoS 0, own message (No Local off)
	p := rc.Expect(t, packet.PUBLISH).(*packet.Publish)
	if ids := slices.Sorted(slices.Values(p.Properties.SubscriptionIDs)); !slices.Equal(ids, []uint32{10, 11, 12}) {
		t.Fatalf("copy carries ids %v, want 10, 11 and 12", ids)
	}
	// Nothing else: a PINGRESP is the next packet.
	rc.Must(t, &packet.Pingreq{})
	rc.Expect(t, packet.PINGRESP)
}

// TestPublishWithSubscriptionIdentifierIsAProtocolError: a PUBLISH from a
// client must not carry a Subscription Identifier ([MQTT-3.3.4-6]): the
// server ends the connection with DISCONNECT 0x82 and the message reaches
// no subscriber (nor the retained store), at any QoS. The subscriber's
// own copies still carry the identifiers of its subscriptions.
func TestPublishWithSubscriptionIdentifierIsAProtocolError(t *testing.T) {
	b := startBroker(t, broker.Options{})
	sub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "sid-sub", CleanStart: true, KeepAlive: 30})
	s := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "sidp/#", QoS: 2}}}
	s.Properties.SubscriptionIDs = []uint32{9}
	sub.Must(t, s)
	sub.Expect(t, packet.SUBACK)
	for qos := range byte(3) {
		rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: fmt.Sprintf("sid-pub%d", qos), CleanStart: true, KeepAlive: 30})
		p := &packet.Publish{Topic: "sidp/x", QoS: qos, Retain: true, Payload: []byte("smuggled")}
		if qos > 0 {
			p.PacketID = 1
		}
		p.Properties.SubscriptionIDs = []uint32{9}
		rc.Must(t, p)
		hAExpectDisconnect(t, rc, packet.ProtocolError)
	}
	// Nothing was delivered: the next PUBLISH the subscriber sees is a
	// clean one, with its subscription's identifier.
	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "sid-pub", CleanStart: true, KeepAlive: 30})
	pub.Must(t, &packet.Publish{Topic: "sidp/y", Payload: []byte("clean")})
	got := sub.Expect(t, packet.PUBLISH).(*packet.Publish)
	if string(got.Payload) != "clean" || !slices.Equal(got.Properties.SubscriptionIDs, []uint32{9}) {
		t.Fatalf("subscriber got %q on %s with ids %v, want \"clean\" with id 9", got.Payload, got.Topic, got.Properties.SubscriptionIDs)
	}
	if n := b.Stats().Retained; n != 0 {
		t.Fatalf("%d retained messages, want none", n)
	}
}

// TestNoLocal: with No Local a client does not receive its own messages;
// other clients' messages still arrive, and without No Local its own do.
func TestNoLocal(t *testing.T) {
	b := startBroker(t, broker.Options{})
	other := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("other"))
	nl := hbDial(t, b.Addr, "nl")
	nl.MustSubscribe(t, paho.SubscribeOptions{Topic: "nl/#", QoS: 1, NoLocal: true})
	loc := hbDial(t, b.Addr, "loc")
	loc.MustSubscribe(t, paho.SubscribeOptions{Topic: "nl/#", QoS: 1})

	nl.MustPublish(t, &paho.Publish{Topic: "nl/a", QoS: 1, Payload: []byte("from-nl")})
	loc.MustPublish(t, &paho.Publish{Topic: "nl/a", QoS: 1, Payload: []byte("from-loc")})
	other.MustPublish(t, &paho.Publish{Topic: "nl/a", QoS: 1, Payload: []byte("from-other")})
	nl.Expect(t, "from-loc", "from-other")
	nl.quiet(t, other)
	loc.Expect(t, "from-nl", "from-loc", "from-other")
	loc.quiet(t, other)
}

// TestSharedSubscriptions: members of one group share the messages
// round-robin (each exactly once across the group), every group gets every
// message, and a shared subscribe gets no retained messages.
func TestSharedSubscriptions(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	hbRetain(t, pub, "sh/ret", "retained")
	var members []*hbPeer
	for i := range 2 {
		m := hbDial(t, b.Addr, fmt.Sprintf("g1m%d", i))
		m.MustSubscribe(t, paho.SubscribeOptions{Topic: "$share/g1/sh/#", QoS: 1})
		members = append(members, m)
	}
	g2 := hbDial(t, b.Addr, "g2m0")
	g2.MustSubscribe(t, paho.SubscribeOptions{Topic: "$share/g2/sh/+", QoS: 1})
	for _, m := range append(members, g2) {
		m.quiet(t, pub) // no retained message on a shared subscribe
	}

	const n = 20
	var want []string
	for i := range n {
		p := "m" + strconv.Itoa(i)
		want = append(want, p)
		pub.MustPublish(t, &paho.Publish{Topic: "sh/x", QoS: 1, Payload: []byte(p)})
	}
	g2.Expect(t, want...)
	g2.quiet(t, pub)

	got := map[string]int{}
	counts := make([]int, len(members))
	deadline := time.After(waitFor)
	for len(got) < n {
		select {
		case m := <-members[0].Msgs:
			got[string(m.Payload)]++
			counts[0]++
		case m := <-members[1].Msgs:
			got[string(m.Payload)]++
			counts[1]++
		case <-deadline:
			t.Fatalf("group g1 received %d of %d messages", len(got), n)
		}
	}
	for _, m := range members {
		m.quiet(t, pub) // no duplicates arrive later
	}
	for p, k := range got {
		if k != 1 {
			t.Fatalf("%s delivered %d times in group g1", p, k)
		}
	}
	if counts[0] != n/2 || counts[1] != n/2 {
		t.Fatalf("round-robin split %v, want %d each", counts, n/2)
	}
}

// TestUnsubscribe: UNSUBACK says 0x00 for a removed subscription and 0x11
// for an unknown filter, and nothing arrives after unsubscribing.
func TestUnsubscribe(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	c := hbDial(t, b.Addr, "c")
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "un/a", QoS: 1}, paho.SubscribeOptions{Topic: "un/+", QoS: 0})
	pub.MustPublish(t, &paho.Publish{Topic: "un/a", QoS: 1, Payload: []byte("before")})
	if m := c.Expect(t, "before")[0]; m.QoS != 1 {
		t.Fatalf("before: QoS %d, want 1 (the higher of the two)", m.QoS)
	}
	c.quiet(t, pub) // one copy for the two subscriptions

	ua, err := c.Unsubscribe(t.Context(), &paho.Unsubscribe{Topics: []string{"un/a", "un/never", "un/+"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x00, 0x11, 0x00}; string(ua.Reasons) != string(want) {
		t.Fatalf("UNSUBACK reasons % x, want % x", ua.Reasons, want)
	}
	pub.MustPublish(t, &paho.Publish{Topic: "un/a", QoS: 1, Payload: []byte("after")})
	c.quiet(t, pub)
	ua, err = c.Unsubscribe(t.Context(), &paho.Unsubscribe{Topics: []string{"un/a"}})
	if err != nil || ua.Reasons[0] != 0x11 {
		t.Fatalf("second unsubscribe: %v % x, want 0x11", err, ua.Reasons)
	}
}

// TestDollarTopicsNotMatchedByWildcards: topics starting with '$' are not
// matched by '#' or '+/...' (live or retained), only by filters naming the
// first level.
func TestDollarTopicsNotMatchedByWildcards(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	hbRetain(t, pub, "$SYS/x", "sys-retained")

	all := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("all"))
	all.MustSubscribe(t, paho.SubscribeOptions{Topic: "#", QoS: 1})
	plus := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("plus"))
	plus.MustSubscribe(t, paho.SubscribeOptions{Topic: "+/x", QoS: 1})
	sys := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("sys"))
	sys.MustSubscribe(t, paho.SubscribeOptions{Topic: "$SYS/#", QoS: 1})
	sys.Expect(t, "sys-retained")

	pub.MustPublish(t, &paho.Publish{Topic: "$SYS/x", QoS: 1, Payload: []byte("sys-live")})
	pub.MustPublish(t, &paho.Publish{Topic: "$app/x", QoS: 1, Payload: []byte("app-live")})
	sys.Expect(t, "sys-live")
	// The markers match "#" and "+/x" respectively: each must be next.
	mqtttest.Barrier(t, pub, "barrier", all)
	mqtttest.Barrier(t, pub, "barrier/x", plus)
}

// TestPerTopicOrdering: 500 QoS 1 messages published back to back on one
// topic arrive in order at a QoS 1 and a QoS 0 subscriber.
func TestPerTopicOrdering(t *testing.T) {
	b := startBroker(t, broker.Options{})
	s1 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("s1"))
	s1.MustSubscribe(t, paho.SubscribeOptions{Topic: "ord/t", QoS: 1})
	s0 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("s0"))
	s0.MustSubscribe(t, paho.SubscribeOptions{Topic: "ord/t", QoS: 0})

	const n = 500
	// The publisher pipelines all 500 (paho.golang would wait for each
	// PUBACK), so many are in flight in the broker at once.
	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "pub", CleanStart: true, KeepAlive: 30})
	want := make([]string, n)
	for i := range n {
		want[i] = strconv.Itoa(i)
		if err := pub.Send(&packet.Publish{QoS: 1, Topic: "ord/t", PacketID: uint16(i + 1), Payload: []byte(want[i])}, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		a := pub.Expect(t, packet.PUBACK).(*packet.Ack)
		if a.PacketID != uint16(i+1) || a.ReasonCode != packet.Success {
			t.Fatalf("PUBACK %d: id %d code %v", i, a.PacketID, a.ReasonCode)
		}
	}
	for _, m := range s1.Expect(t, want...) {
		if m.QoS != 1 {
			t.Fatalf("QoS 1 subscriber got QoS %d", m.QoS)
		}
	}
	for _, m := range s0.Expect(t, want...) {
		if m.QoS != 0 {
			t.Fatalf("QoS 0 subscriber got QoS %d", m.QoS)
		}
	}
}

// hbV3 is a paho.mqtt.golang client whose messages, of every
// subscription, land in Msgs.
type hbV3 struct {
	*mqtttest.V3
	bar string
}

func hbDialV3(tb testing.TB, addr, id string) *hbV3 {
	tb.Helper()
	c := &hbV3{V3: mqtttest.DialV3(tb, addr, id), bar: "hbbar3/" + id}
	c.sub(tb, c.bar, 1)
	return c
}

// sub subscribes with a handler into Msgs and returns the granted QoS.
func (c *hbV3) sub(tb testing.TB, filter string, qos byte) byte {
	tb.Helper()
	tok := c.Subscribe(filter, qos, func(_ mqtt3.Client, m mqtt3.Message) { c.Msgs <- m })
	mqtttest.Await(tb, "subscribe "+filter, tok)
	return tok.(*mqtt3.SubscribeToken).Result()[filter]
}

func (c *hbV3) expect(tb testing.TB, topic, payload string, qos byte, retained bool) {
	tb.Helper()
	m := c.Next(tb)
	if m.Topic() != topic || string(m.Payload()) != payload || m.Qos() != qos || m.Retained() != retained {
		tb.Fatalf("got %s %q qos %d retain %v, want %s %q qos %d retain %v",
			m.Topic(), m.Payload(), m.Qos(), m.Retained(), topic, payload, qos, retained)
	}
}

// quiet proves nothing else has arrived (see mqtttest.Barrier).
func (c *hbV3) quiet(tb testing.TB, pub *hbV3) {
	tb.Helper()
	marker := fmt.Sprintf("barrier-%d", time.Now().UnixNano())
	pub.Pub(tb, c.bar, 1, false, marker)
	c.expect(tb, c.bar, marker, 1, false)
}

// TestV3SubscribeBehaviours: the same behaviours under MQTT 3.1.1 with
// paho.mqtt.golang: retained set and clear, wildcards, QoS downgrade to the
// granted QoS, unsubscribe.
func TestV3SubscribeBehaviours(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := hbDialV3(t, b.Addr, "v3pub")
	pub.Pub(t, "v3/r", 1, true, "keep")

	s0 := hbDialV3(t, b.Addr, "v3s0")
	if g := s0.sub(t, "v3/#", 0); g != 0 {
		t.Fatalf("granted %d, want 0", g)
	}
	s0.expect(t, "v3/r", "keep", 0, true) // retained, downgraded to QoS 0
	s1 := hbDialV3(t, b.Addr, "v3s1")
	if g := s1.sub(t, "v3/+/b", 1); g != 1 {
		t.Fatalf("granted %d, want 1", g)
	}
	s1.quiet(t, pub) // v3/r does not match v3/+/b

	pub.Pub(t, "v3/a/b", 2, false, "live")
	s0.expect(t, "v3/a/b", "live", 0, false)
	s1.expect(t, "v3/a/b", "live", 1, false)
	pub.Pub(t, "v3/a/c", 1, false, "other")
	s0.expect(t, "v3/a/c", "other", 0, false)
	s1.quiet(t, pub)

	// Clear: existing subscribers see the empty message, later ones nothing.
	pub.Pub(t, "v3/r", 1, true, "")
	s0.expect(t, "v3/r", "", 0, false)
	s2 := hbDialV3(t, b.Addr, "v3s2")
	s2.sub(t, "v3/#", 1)
	s2.quiet(t, pub)

	mqtttest.Await(t, "unsubscribe", s0.Unsubscribe("v3/#"))
	pub.Pub(t, "v3/a/b", 1, false, "gone")
	s0.quiet(t, pub)
	s1.expect(t, "v3/a/b", "gone", 1, false)
	s2.expect(t, "v3/a/b", "gone", 1, false)
}

// TestEmptyTopicFilterEndsTheConnection: a topic filter must have at least
// one character [MQTT-4.7.3-1]; a SUBSCRIBE or UNSUBSCRIBE with an empty
// one is a protocol violation that ends the connection (3.1.1: closed
// [MQTT-4.8.0-1]; 5: DISCONNECT 0x82 Protocol Error, then closed), with
// nothing answered to it.
func TestEmptyTopicFilterEndsTheConnection(t *testing.T) {
	b := startBroker(t, broker.Options{})
	for _, version := range []byte{packet.Version311, packet.Version5} {
		for _, p := range []packet.Packet{
			&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "ok/#"}, {Filter: ""}}},
			&packet.Unsubscribe{PacketID: 2, Filters: []string{""}},
		} {
			name := fmt.Sprintf("v%d %v", version, p.Type())
			rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "empty-filter", CleanStart: true, KeepAlive: 60, ProtocolLevel: version})
			rc.Must(t, p)
			pkts, err := hAUntilClosed(rc, waitFor)
			if err != nil {
				t.Fatalf("%s: the connection was not closed: %v (got %+v)", name, err, pkts)
			}
			switch {
			case version == packet.Version311 && len(pkts) != 0:
				t.Errorf("%s: got %+v before the close, want nothing", name, pkts)
			case version == packet.Version5:
				if len(pkts) != 1 {
					t.Fatalf("%s: got %+v before the close, want one DISCONNECT", name, pkts)
				}
				if d, ok := pkts[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.ProtocolError {
					t.Errorf("%s: got %+v, want DISCONNECT 0x82", name, pkts[0])
				}
			}
		}
	}
	// The last close is counted as its connection's reader ends, which may
	// be just after the client saw the socket close.
	eventually(t, "4 protocol_error closes counted", func() bool { return b.Stats().Closes[broker.CloseProtocolError] == 4 })
}

// TestControlCharactersRefused: the control characters U+0001..U+001F and
// U+007F..U+009F are refused by default, as the specifications allow, in
// the client id and user name and will topic of a CONNECT, the topic of a
// PUBLISH (the connection ends: v5 DISCONNECT 0x90, 3.1.1 closed), and the
// filters of SUBSCRIBE and UNSUBSCRIBE (0x8F for the filter; the rest of the
// packet is served); Options.AllowControlChars takes them.
func TestControlCharactersRefused(t *testing.T) {
	strict := startBroker(t, broker.Options{})
	lax := startBroker(t, broker.Options{AllowControlChars: true})
	for _, bad := range []string{"\x01", "\x1f", "\x7f", "\u0085", "\u009f"} {
		name := fmt.Sprintf("%U", []rune(bad)[0])
		for _, version := range []byte{packet.Version311, packet.Version5} {
			for _, tc := range []struct {
				what string
				c    packet.Connect
				want packet.ReasonCode // 3.1.1: 0x02 and 0x04, read back as these
			}{
				{"client id", packet.Connect{ClientID: "dev" + bad}, packet.ClientIdentifierNotValid},
				{"user name", packet.Connect{ClientID: "dev", HasUsername: true, Username: "u" + bad, HasPassword: true, Password: []byte("p")}, packet.BadUserNameOrPassword},
				{"will topic", packet.Connect{ClientID: "dev", Will: &packet.Will{Topic: "w" + bad, Payload: []byte("x")}}, packet.TopicNameInvalid},
			} {
				cp := tc.c
				cp.ProtocolName, cp.ProtocolLevel, cp.CleanStart, cp.KeepAlive = "MQTT", version, true, 60
				rc := mqtttest.DialRaw(t, strict.Addr, version)
				rc.Must(t, &cp)
				ack := rc.Expect(t, packet.CONNACK).(*packet.Connack)
				want := tc.want
				if version == packet.Version311 && want == packet.TopicNameInvalid {
					want = packet.ServerUnavailable // 3.1.1 has no code for it: 0x03
				}
				if ack.ReasonCode != want {
					t.Errorf("%s in the %s, v%d: CONNACK %v, want %v", name, tc.what, version, ack.ReasonCode, want)
				}
				cp2 := tc.c
				cp2.ProtocolName, cp2.ProtocolLevel, cp2.CleanStart, cp2.KeepAlive = "MQTT", version, true, 60
				mqtttest.ConnectRaw(t, lax.Addr, &cp2) // fails the test if refused
			}
		}
		// v5 SUBSCRIBE and UNSUBSCRIBE: the filter refused, the others served.
		rc, _ := mqtttest.ConnectRaw(t, strict.Addr, &packet.Connect{ClientID: "subber", CleanStart: true, KeepAlive: 60})
		rc.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "a" + bad + "/#"}, {Filter: "ok/#"}}})
		if sa := rc.Expect(t, packet.SUBACK).(*packet.Suback); sa.ReasonCodes[0] != packet.TopicFilterInvalid || sa.ReasonCodes[1] != packet.Success {
			t.Errorf("%s in a SUBSCRIBE filter: SUBACK %v, want [0x8F 0x00]", name, sa.ReasonCodes)
		}
		rc.Must(t, &packet.Unsubscribe{PacketID: 2, Filters: []string{"a" + bad + "/#", "ok/#"}})
		if ua := rc.Expect(t, packet.UNSUBACK).(*packet.Unsuback); ua.ReasonCodes[0] != packet.TopicFilterInvalid || ua.ReasonCodes[1] != packet.Success {
			t.Errorf("%s in an UNSUBSCRIBE filter: UNSUBACK %v, want [0x8F 0x00]", name, ua.ReasonCodes)
		}
		// PUBLISH: the connection ends, v5 with DISCONNECT 0x90.
		for _, version := range []byte{packet.Version311, packet.Version5} {
			pub, _ := mqtttest.ConnectRaw(t, strict.Addr, &packet.Connect{ClientID: "pub", CleanStart: true, KeepAlive: 60, ProtocolLevel: version})
			pub.Must(t, &packet.Publish{Topic: "t" + bad, Payload: []byte("x")})
			pkts, err := hAUntilClosed(pub, waitFor)
			if err != nil {
				t.Fatalf("%s in a PUBLISH topic, v%d: not closed: %v", name, version, err)
			}
			if version == packet.Version5 {
				if len(pkts) != 1 || pkts[0].(*packet.Disconnect).ReasonCode != packet.TopicNameInvalid {
					t.Errorf("%s in a PUBLISH topic, v5: got %+v, want DISCONNECT 0x90", name, pkts)
				}
			} else if len(pkts) != 0 {
				t.Errorf("%s in a PUBLISH topic, 3.1.1: got %+v before the close", name, pkts)
			}
		}
		// Allowed: a subscriber on the lax broker receives the message.
		sub, _ := mqtttest.ConnectRaw(t, lax.Addr, &packet.Connect{ClientID: "lax-sub", CleanStart: true, KeepAlive: 60})
		sub.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "t" + bad}}})
		sub.Expect(t, packet.SUBACK)
		pub, _ := mqtttest.ConnectRaw(t, lax.Addr, &packet.Connect{ClientID: "lax-pub", CleanStart: true, KeepAlive: 60})
		pub.Must(t, &packet.Publish{Topic: "t" + bad, Payload: []byte("x")})
		if p := sub.Expect(t, packet.PUBLISH).(*packet.Publish); p.Topic != "t"+bad {
			t.Errorf("allowed: got %q", p.Topic)
		}
	}
}
