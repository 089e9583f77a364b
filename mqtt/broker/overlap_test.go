package broker_test

// Overlapping subscriptions of one session: one copy at the highest granted
// QoS carrying every matching Subscription Identifier, No Local and Retain
// As Published applied per subscription, shared subscriptions apart
// (docs/broker.md, "Overlapping subscriptions").

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// ovSubscribe subscribes a paho.golang client with one SUBSCRIBE carrying
// Subscription Identifier id (0: none) and checks every filter is granted
// the QoS it asked for.
func ovSubscribe(tb testing.TB, c *hbPeer, id int, opts ...paho.SubscribeOptions) {
	tb.Helper()
	s := &paho.Subscribe{Subscriptions: opts}
	if id != 0 {
		s.Properties = &paho.SubscribeProperties{SubscriptionIdentifier: &id}
	}
	sa, err := c.Subscribe(tb.Context(), s)
	if err != nil {
		tb.Fatalf("subscribe id %d: %v", id, err)
	}
	for i, rc := range sa.Reasons {
		if rc != opts[i].QoS {
			tb.Fatalf("subscribe %s: reason 0x%02x, want %d", opts[i].Topic, rc, opts[i].QoS)
		}
	}
}

// TestOverlappingSubscriptions: with paho.golang, a message matching two
// subscriptions of one client (made by two SUBSCRIBEs, or by one) arrives
// once, at the higher granted QoS (capped by the published QoS), with a
// Subscription Identifier of theirs. paho.golang keeps one identifier per
// PUBLISH; TestOverlappingSubscriptionIDsRaw checks that all are sent.
func TestOverlappingSubscriptions(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	type step struct {
		topic         string
		pubQoS, wantQ byte
		ids           []int // the identifiers paho.golang may show
	}
	run := func(t *testing.T, c *hbPeer, steps []step) {
		t.Helper()
		for i, s := range steps {
			payload := fmt.Sprintf("%s-%d", s.topic, i)
			pub.MustPublish(t, &paho.Publish{Topic: s.topic, QoS: s.pubQoS, Payload: []byte(payload)})
			m := c.Expect(t, payload)[0]
			if m.QoS != s.wantQ || !slices.Contains(s.ids, hbSubID(m)) {
				t.Fatalf("%s published at QoS %d: delivered at QoS %d with id %d, want QoS %d and an id of %v",
					s.topic, s.pubQoS, m.QoS, hbSubID(m), s.wantQ, s.ids)
			}
			c.quiet(t, pub) // exactly one copy
		}
	}
	t.Run("two SUBSCRIBEs", func(t *testing.T) {
		c := hbDial(t, b.Addr, "two")
		ovSubscribe(t, c, 1, paho.SubscribeOptions{Topic: "A/#", QoS: 1})
		ovSubscribe(t, c, 2, paho.SubscribeOptions{Topic: "A/c1/+/x", QoS: 2})
		run(t, c, []step{
			{"A/c1/d/x", 2, 2, []int{1, 2}},
			{"A/c1/d/x", 1, 1, []int{1, 2}},
			{"A/c1/d/x", 0, 0, []int{1, 2}},
			{"A/c1/d", 2, 1, []int{1}}, // A/# alone
		})
	})
	t.Run("one SUBSCRIBE", func(t *testing.T) {
		c := hbDial(t, b.Addr, "one")
		ovSubscribe(t, c, 5, paho.SubscribeOptions{Topic: "B/#", QoS: 0}, paho.SubscribeOptions{Topic: "B/+/x", QoS: 2})
		run(t, c, []step{
			{"B/y/x", 2, 2, []int{5}},
			{"B/y/x", 1, 1, []int{5}},
			{"B/y", 2, 0, []int{5}}, // B/# alone
		})
	})
	t.Run("without identifiers", func(t *testing.T) {
		c := hbDial(t, b.Addr, "none")
		ovSubscribe(t, c, 0, paho.SubscribeOptions{Topic: "C/+", QoS: 1})
		ovSubscribe(t, c, 0, paho.SubscribeOptions{Topic: "C/#", QoS: 0})
		run(t, c, []step{{"C/z", 2, 1, []int{0}}})
	})
}

// TestOverlappingNoLocal: a client's own message is not forwarded to it
// through a No Local subscription, which adds neither its QoS nor its
// identifier to the copy; an overlapping subscription without No Local
// still delivers it. Other clients' messages use both.
func TestOverlappingNoLocal(t *testing.T) {
	b := startBroker(t, broker.Options{})
	other := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("other"))
	c := hbDial(t, b.Addr, "nl")
	ovSubscribe(t, c, 1, paho.SubscribeOptions{Topic: "nl/#", QoS: 2, NoLocal: true})
	ovSubscribe(t, c, 2, paho.SubscribeOptions{Topic: "nl/+", QoS: 0})

	c.MustPublish(t, &paho.Publish{Topic: "nl/a", QoS: 2, Payload: []byte("own")})
	if m := c.Expect(t, "own")[0]; m.QoS != 0 || hbSubID(m) != 2 {
		t.Fatalf("own message through nl/+: QoS %d id %d, want QoS 0 and id 2 only", m.QoS, hbSubID(m))
	}
	c.quiet(t, other)
	c.MustPublish(t, &paho.Publish{Topic: "nl/a/b", QoS: 1, Payload: []byte("own-deep")}) // nl/# (No Local) alone
	c.quiet(t, other)

	other.MustPublish(t, &paho.Publish{Topic: "nl/a", QoS: 2, Payload: []byte("theirs")})
	if m := c.Expect(t, "theirs")[0]; m.QoS != 2 {
		t.Fatalf("another client's message: QoS %d, want 2", m.QoS)
	}
	c.quiet(t, other)
}

// TestOverlappingRetainAsPublished: a live retained message keeps RETAIN=1
// when any of the subscriptions its one copy stands for has Retain As
// Published, and has RETAIN=0 when none has; a Retain As Published
// subscription that No Local leaves out does not count.
func TestOverlappingRetainAsPublished(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	check := func(c *hbPeer, from *mqtttest.V5, topic, payload string, wantQoS byte, wantRetain bool) {
		t.Helper()
		from.MustPublish(t, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(payload)})
		if m := c.Expect(t, payload)[0]; m.QoS != wantQoS || m.Retain != wantRetain {
			t.Fatalf("%s: QoS %d retain %v, want QoS %d retain %v", payload, m.QoS, m.Retain, wantQoS, wantRetain)
		}
		c.quiet(t, pub)
	}

	mixed := hbDial(t, b.Addr, "mixed")
	ovSubscribe(t, mixed, 1, paho.SubscribeOptions{Topic: "rp/#", QoS: 0, RetainAsPublished: true})
	ovSubscribe(t, mixed, 2, paho.SubscribeOptions{Topic: "rp/+", QoS: 1})
	check(mixed, pub, "rp/a", "mixed", 1, true)
	pub.MustPublish(t, &paho.Publish{Topic: "rp/a", QoS: 1, Payload: []byte("not-retained")})
	if m := mixed.Expect(t, "not-retained")[0]; m.Retain {
		t.Fatal("a message published without RETAIN delivered with it")
	}
	mixed.quiet(t, pub)

	plain := hbDial(t, b.Addr, "plain")
	ovSubscribe(t, plain, 3, paho.SubscribeOptions{Topic: "rq/#", QoS: 0})
	ovSubscribe(t, plain, 4, paho.SubscribeOptions{Topic: "rq/+", QoS: 1})
	check(plain, pub, "rq/a", "plain", 1, false)

	nl := hbDial(t, b.Addr, "nlrap")
	ovSubscribe(t, nl, 5, paho.SubscribeOptions{Topic: "rn/#", QoS: 1, NoLocal: true, RetainAsPublished: true})
	ovSubscribe(t, nl, 6, paho.SubscribeOptions{Topic: "rn/+", QoS: 0})
	check(nl, nl.V5, "rn/a", "own", 0, false)
	check(nl, pub, "rn/a", "theirs", 1, true)
}

// ovRawSub subscribes a raw v5 client with one SUBSCRIBE carrying
// identifier id (0: none) and checks every filter is granted its QoS.
func ovRawSub(tb testing.TB, rc *mqtttest.Raw, id uint32, subs ...packet.Subscription) {
	tb.Helper()
	s := &packet.Subscribe{PacketID: 1, Subscriptions: subs}
	if id != 0 {
		s.Properties.SubscriptionIDs = []uint32{id}
	}
	rc.Must(tb, s)
	sa := rc.Expect(tb, packet.SUBACK).(*packet.Suback)
	for i, code := range sa.ReasonCodes {
		if code != packet.ReasonCode(subs[i].QoS) {
			tb.Fatalf("subscribe %s: reason %v, want %d", subs[i].Filter, code, subs[i].QoS)
		}
	}
}

func ovSub(filter string, qos byte) packet.Subscription {
	return packet.Subscription{Filter: filter, QoS: qos}
}

// ovCollect reads n PUBLISHes from rc, completing their flows as the
// client (PUBACK, PUBREC, and PUBCOMP for each PUBREL on the way).
func ovCollect(tb testing.TB, rc *mqtttest.Raw, n int) []*packet.Publish {
	tb.Helper()
	var got []*packet.Publish
	for len(got) < n {
		switch p := rc.Next(tb).(type) {
		case *packet.Publish:
			got = append(got, p)
			switch p.QoS {
			case 1:
				hcAck(tb, rc, packet.PUBACK, p.PacketID)
			case 2:
				hcAck(tb, rc, packet.PUBREC, p.PacketID)
			}
		case *packet.Ack:
			if p.Kind != packet.PUBREL {
				tb.Fatalf("unexpected %v", p.Kind)
			}
			hcAck(tb, rc, packet.PUBCOMP, p.PacketID)
		default:
			tb.Fatalf("unexpected %v %+v", p.Type(), p)
		}
	}
	return got
}

// ovNothingMore proves rc gets no further PUBLISH: a PINGREQ's PINGRESP
// comes first (PUBRELs of completed flows are answered on the way).
func ovNothingMore(tb testing.TB, rc *mqtttest.Raw) {
	tb.Helper()
	rc.Must(tb, &packet.Pingreq{})
	for {
		switch p := rc.Next(tb).(type) {
		case *packet.Pingresp:
			return
		case *packet.Ack:
			if p.Kind != packet.PUBREL {
				tb.Fatalf("unexpected %v", p.Kind)
			}
			hcAck(tb, rc, packet.PUBCOMP, p.PacketID)
		default:
			tb.Fatalf("unexpected %v %+v", p.Type(), p)
		}
	}
}

// ovIDs is a PUBLISH's Subscription Identifiers in increasing order.
func ovIDs(p *packet.Publish) []uint32 {
	return slices.Sorted(slices.Values(p.Properties.SubscriptionIDs))
}

// ovCheck checks a PUBLISH's payload, QoS, RETAIN and identifiers.
func ovCheck(tb testing.TB, p *packet.Publish, payload string, qos byte, retain bool, ids ...uint32) {
	tb.Helper()
	if string(p.Payload) != payload || p.QoS != qos || p.Retain != retain || !slices.Equal(ovIDs(p), ids) {
		tb.Fatalf("got %q QoS %d retain %v ids %v, want %q QoS %d retain %v ids %v",
			p.Payload, p.QoS, p.Retain, ovIDs(p), payload, qos, retain, ids)
	}
}

// TestOverlappingSubscriptionIDsRaw checks on the wire that the one copy
// carries every matching subscription's identifier (the largest one
// included, none for a subscription without one, an identifier shared by
// the filters of one SUBSCRIBE once), that No Local leaves its
// subscription's identifier out of a client's own message, and that each
// matching shared subscription gets a copy of its own.
func TestOverlappingSubscriptionIDsRaw(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub, _ := hcConnect(t, b.Addr, "pub", true, 0, 0)
	rc, _ := hcConnect(t, b.Addr, "raw", true, 0, 0)
	ovRawSub(t, rc, 10, ovSub("w/#", 0))
	ovRawSub(t, rc, 11, ovSub("w/+", 1))
	ovRawSub(t, rc, packet.MaxVarint, ovSub("w/x", 2)) // 268,435,455, the largest
	ovRawSub(t, rc, 0, ovSub("+/x", 0))
	hcPublishOne(t, pub, &packet.Publish{Topic: "w/x", QoS: 2, Payload: []byte("p2")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "p2", 2, false, 10, 11, packet.MaxVarint)
	ovNothingMore(t, rc)
	hcPublishOne(t, pub, &packet.Publish{Topic: "w/y", QoS: 1, Payload: []byte("p1")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "p1", 1, false, 10, 11)
	ovNothingMore(t, rc)

	// One SUBSCRIBE, two filters: one identifier, sent once.
	ovRawSub(t, rc, 7, ovSub("v/#", 1), ovSub("v/+", 0))
	hcPublishOne(t, pub, &packet.Publish{Topic: "v/a", QoS: 1, Payload: []byte("v")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "v", 1, false, 7)
	ovNothingMore(t, rc)

	// No Local: the client's own message through the other subscription
	// only; another client's through both.
	ovRawSub(t, rc, 30, packet.Subscription{Filter: "n/#", QoS: 1, NoLocal: true})
	ovRawSub(t, rc, 31, ovSub("n/+", 0))
	rc.Must(t, &packet.Publish{Topic: "n/a", Payload: []byte("own")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "own", 0, false, 31)
	rc.Must(t, &packet.Publish{Topic: "n/a/b", Payload: []byte("own-deep")})
	ovNothingMore(t, rc)
	hcPublishOne(t, pub, &packet.Publish{Topic: "n/a", QoS: 1, Payload: []byte("theirs")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "theirs", 1, false, 30, 31)
	ovNothingMore(t, rc)

	// Shared subscriptions (this client the only member of each group):
	// one copy each, besides the one for the non-shared subscriptions.
	ovRawSub(t, rc, 20, ovSub("$share/g/w/+", 1))
	ovRawSub(t, rc, 21, ovSub("$share/h/w/x", 0))
	hcPublishOne(t, pub, &packet.Publish{Topic: "w/x", QoS: 1, Payload: []byte("s")})
	got := ovCollect(t, rc, 3)
	slices.SortFunc(got, func(a, b *packet.Publish) int {
		return len(b.Properties.SubscriptionIDs) - len(a.Properties.SubscriptionIDs)
	})
	ovCheck(t, got[0], "s", 1, false, 10, 11, packet.MaxVarint)
	if ovIDs(got[1])[0] == 21 {
		got[1], got[2] = got[2], got[1]
	}
	ovCheck(t, got[1], "s", 1, false, 20)
	ovCheck(t, got[2], "s", 0, false, 21)
	ovNothingMore(t, rc)
	if n := b.Stats().Routed; n != 8 {
		t.Fatalf("Stats().Routed = %d, want 8 (one per copy)", n)
	}
}

// TestOverlappingRetainedOnSubscribe: retained messages are sent per
// subscription as it is made: a second, overlapping SUBSCRIBE gets the
// retained messages matching its filter again, with its identifier only,
// and one SUBSCRIBE of two overlapping filters gets them once per filter
// [MQTT-3.8.4-5]. Live messages then come once, with both identifiers.
func TestOverlappingRetainedOnSubscribe(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub, _ := hcConnect(t, b.Addr, "pub", true, 0, 0)
	hcPublishOne(t, pub, &packet.Publish{Topic: "ro/a/x", QoS: 1, Retain: true, Payload: []byte("R")})

	rc, _ := hcConnect(t, b.Addr, "rc", true, 0, 0)
	ovRawSub(t, rc, 1, ovSub("ro/#", 1))
	ovCheck(t, ovCollect(t, rc, 1)[0], "R", 1, true, 1)
	ovRawSub(t, rc, 2, ovSub("ro/+/x", 0))
	ovCheck(t, ovCollect(t, rc, 1)[0], "R", 0, true, 2)
	ovNothingMore(t, rc)
	hcPublishOne(t, pub, &packet.Publish{Topic: "ro/a/x", QoS: 1, Payload: []byte("L")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "L", 1, false, 1, 2)
	ovNothingMore(t, rc)

	rc2, _ := hcConnect(t, b.Addr, "rc2", true, 0, 0)
	ovRawSub(t, rc2, 3, ovSub("ro/#", 1), ovSub("ro/a/+", 1))
	for _, p := range ovCollect(t, rc2, 2) {
		ovCheck(t, p, "R", 1, true, 3)
	}
	ovNothingMore(t, rc2)
}

// TestOverlappingIdentifierBound: one copy carries at most 64 distinct
// identifiers; a message matching subscriptions of a client with more goes
// out as one copy per subscription, each with its own.
func TestOverlappingIdentifierBound(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub, _ := hcConnect(t, b.Addr, "pub", true, 0, 0)
	rc, _ := hcConnect(t, b.Addr, "rc", true, 0, 0)
	// The 64 filters matching b/1/2/3/4/5/6 with a literal or '+' at each
	// of its last six levels, then b/#.
	var want []uint32
	for mask := range 64 {
		f := "b"
		for l := 1; l <= 6; l++ {
			if mask&(1<<(l-1)) != 0 {
				f += "/+"
			} else {
				f += fmt.Sprintf("/%d", l)
			}
		}
		ovRawSub(t, rc, uint32(1000+mask), ovSub(f, 1))
		want = append(want, uint32(1000+mask))
	}
	hcPublishOne(t, pub, &packet.Publish{Topic: "b/1/2/3/4/5/6", QoS: 1, Payload: []byte("64")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "64", 1, false, want...)
	ovNothingMore(t, rc)

	// A 65th subscription with an identifier already counted: still one.
	ovRawSub(t, rc, 1000, ovSub("b/#", 0))
	hcPublishOne(t, pub, &packet.Publish{Topic: "b/1/2/3/4/5/6", QoS: 1, Payload: []byte("64 again")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "64 again", 1, false, want...)
	ovNothingMore(t, rc)

	ovRawSub(t, rc, 2000, ovSub("b/#", 0)) // replaces it, with a 65th identifier
	want = append(want, 2000)
	hcPublishOne(t, pub, &packet.Publish{Topic: "b/1/2/3/4/5/6", QoS: 1, Payload: []byte("65")})
	var seen []uint32
	for _, p := range ovCollect(t, rc, 65) {
		ids := ovIDs(p)
		wantQoS := byte(1)
		if len(ids) == 1 && ids[0] == 2000 {
			wantQoS = 0
		}
		ovCheck(t, p, "65", wantQoS, false, ids...)
		if len(ids) != 1 {
			t.Fatalf("a copy carries ids %v, want one each", ids)
		}
		seen = append(seen, ids[0])
	}
	ovNothingMore(t, rc)
	if slices.Sort(seen); !slices.Equal(seen, want) {
		t.Fatalf("copies carry ids %v, want %v", seen, want)
	}
}

// TestOverlappingMaximumPacketSize: when the identifiers would make the one
// copy larger than the client's Maximum Packet Size, it gets one copy per
// subscription, each with one identifier, which fit; nothing is dropped.
func TestOverlappingMaximumPacketSize(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub, _ := hcConnect(t, b.Addr, "pub", true, 0, 0)
	cp := &packet.Connect{ClientID: "small", CleanStart: true, KeepAlive: 30}
	// A copy on mp/x with a 100-byte payload and one 4-byte identifier is
	// 116 bytes; with three it is 126.
	cp.Properties.SetUint32(packet.PropMaximumPacketSize, 120)
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, cp)
	ids := []uint32{packet.MaxVarint - 2, packet.MaxVarint - 1, packet.MaxVarint}
	for i, id := range ids {
		ovRawSub(t, rc, id, ovSub([]string{"mp/#", "mp/+", "mp/x"}[i], 1))
	}
	payload := strings.Repeat("p", 100)
	hcPublishOne(t, pub, &packet.Publish{Topic: "mp/x", QoS: 1, Payload: []byte(payload)})
	var seen []uint32
	for _, p := range ovCollect(t, rc, 3) {
		if len(p.Properties.SubscriptionIDs) != 1 {
			t.Fatalf("a copy carries ids %v, want one each", p.Properties.SubscriptionIDs)
		}
		ovCheck(t, p, payload, 1, false, p.Properties.SubscriptionIDs...)
		seen = append(seen, p.Properties.SubscriptionIDs[0])
	}
	ovNothingMore(t, rc)
	if slices.Sort(seen); !slices.Equal(seen, ids) {
		t.Fatalf("copies carry ids %v, want %v", seen, ids)
	}
	if n := b.Stats().Drops[hcDrop(t, "packet_too_large")]; n != 0 {
		t.Fatalf("%d messages dropped as too large", n)
	}
	// A shorter message fits with all three: one copy.
	hcPublishOne(t, pub, &packet.Publish{Topic: "mp/x", QoS: 1, Payload: []byte("short")})
	ovCheck(t, ovCollect(t, rc, 1)[0], "short", 1, false, ids...)
	ovNothingMore(t, rc)
}

// TestOverlappingPersisted: a queued copy with several identifiers keeps
// them across a restart.
func TestOverlappingPersisted(t *testing.T) {
	opts := broker.Options{StatePath: filepath.Join(t.TempDir(), "state")}
	b := startBroker(t, opts)
	rc, _ := hcConnect(t, b.Addr, "po", true, 300, 0)
	ovRawSub(t, rc, 1, ovSub("po/#", 1))
	ovRawSub(t, rc, 2, ovSub("po/+", 1))
	rc.Conn.Close()
	hcConns(t, b, 0)
	pub, _ := hcConnect(t, b.Addr, "pub", true, 0, 0)
	hcPublishOne(t, pub, &packet.Publish{Topic: "po/a", QoS: 1, Payload: []byte("q")})
	hcCloseBroker(t, b)

	b2 := startBroker(t, opts)
	rc2, ack := hcConnect(t, b2.Addr, "po", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("session not present after restart")
	}
	ovCheck(t, ovCollect(t, rc2, 1)[0], "q", 1, false, 1, 2)
	ovNothingMore(t, rc2)
}

// TestOverlappingV3: a 3.1.1 client with overlapping subscriptions (two
// SUBSCRIBEs, or one with both filters) gets each message once, at the
// higher granted QoS; retained messages come once per subscription made.
// paho.mqtt.golang calls the handler of every matching filter for one
// PUBLISH, so the client subscribes without handlers and counts PUBLISHes
// in its default handler.
func TestOverlappingV3(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := hbDialV3(t, b.Addr, "v3pub")
	c := mqtttest.DialV3(t, b.Addr, "v3o") // its default handler puts every PUBLISH in c.Msgs
	next := func(topic, payload string, qos byte, retained bool) {
		t.Helper()
		select {
		case m := <-c.Msgs:
			if m.Topic() != topic || string(m.Payload()) != payload || m.Qos() != qos || m.Retained() != retained {
				t.Fatalf("got %s %q qos %d retain %v, want %s %q qos %d retain %v",
					m.Topic(), m.Payload(), m.Qos(), m.Retained(), topic, payload, qos, retained)
			}
		case <-time.After(waitFor):
			t.Fatalf("no message %q arrived", payload)
		}
	}
	// quiet: a marker published now is the next message (one session's
	// messages arrive in order), so nothing else came before it.
	quiet := func(topic string, qos byte) {
		t.Helper()
		marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
		pub.Pub(t, topic, 1, false, marker)
		next(topic, marker, qos, false)
	}
	mqtttest.Await(t, "subscribe v3o/#", c.Subscribe("v3o/#", 0, nil))
	mqtttest.Await(t, "subscribe v3o/+/x", c.Subscribe("v3o/+/x", 2, nil))
	pub.Pub(t, "v3o/a/x", 2, false, "both")
	next("v3o/a/x", "both", 2, false)
	quiet("v3o/bar", 0)
	pub.Pub(t, "v3o/a/x", 1, false, "both1")
	next("v3o/a/x", "both1", 1, false)
	pub.Pub(t, "v3o/a/y", 2, false, "one")
	next("v3o/a/y", "one", 0, false)
	quiet("v3o/bar", 0)

	mqtttest.Await(t, "subscribe multiple", c.SubscribeMultiple(map[string]byte{"v3m/#": 1, "v3m/+": 2}, nil))
	pub.Pub(t, "v3m/a", 2, false, "multi")
	next("v3m/a", "multi", 2, false)
	quiet("v3m/bar", 1)

	pub.Pub(t, "v3r/a", 1, true, "R")
	mqtttest.Await(t, "subscribe v3r/#", c.Subscribe("v3r/#", 1, nil))
	next("v3r/a", "R", 1, true)
	mqtttest.Await(t, "subscribe v3r/+", c.Subscribe("v3r/+", 0, nil))
	next("v3r/a", "R", 0, true) // again, for the new subscription
	quiet("v3r/bar", 1)
	pub.Pub(t, "v3r/a", 1, true, "R2") // live: once, RETAIN 0 [MQTT-3.3.1-9]
	next("v3r/a", "R2", 1, false)
	quiet("v3r/bar", 1)
}

// TestSubscribeWhileRouting: a SUBSCRIBE or UNSUBSCRIBE (which holds its
// session's lock while it updates the index) racing with messages routed
// to the same session through the same index shard does not deadlock.
// Routing once enqueued under the index's read lock, taking the session's
// lock there: the two waited for each other for ever.
func TestSubscribeWhileRouting(t *testing.T) {
	b := startBroker(t, broker.Options{MaxQueued: 1 << 20})
	sub, _ := hcConnect(t, b.Addr, "s", true, 0, 0)
	pub, _ := hcConnect(t, b.Addr, "p", true, 0, 0)
	ovRawSub(t, sub, 0, ovSub("dl/keep/#", 0))
	// pong reads c until its PINGRESP.
	pong := func(c *mqtttest.Raw) chan error {
		ch := make(chan error, 1)
		go func() {
			for {
				p, err := c.ReadPacket()
				if err != nil || p.Type() == packet.PINGRESP {
					ch <- err
					return
				}
			}
		}()
		return ch
	}
	subDone, pubDone := pong(sub), pong(pub)
	go func() {
		for i := range 2000 {
			id := uint16(2*i%60000 + 2)
			sub.Send(&packet.Subscribe{PacketID: id, Subscriptions: []packet.Subscription{{Filter: "dl/churn/+"}}}, false)
			sub.Send(&packet.Unsubscribe{PacketID: id + 1, Filters: []string{"dl/churn/+"}}, i%8 == 7)
		}
		sub.Send(&packet.Pingreq{}, true)
	}()
	for i := range 20000 {
		pub.Send(&packet.Publish{Topic: "dl/keep/x", Payload: []byte("x")}, i%16 == 15)
	}
	pub.Send(&packet.Pingreq{}, true)
	for _, ch := range []chan error{subDone, pubDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitFor):
			t.Fatal("no PINGRESP: the broker is stuck")
		}
	}
}
