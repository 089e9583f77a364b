package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// hbPeer is a v5 client subscribed to a barrier topic of its own, so
// quiet can prove it has received nothing else.
type hbPeer struct {
	*mqtttest.V5
	bar string
}

func hbDial(tb testing.TB, addr, id string) *hbPeer {
	tb.Helper()
	c := mqtttest.DialV5(tb, addr, mqtttest.Clean(id))
	p := &hbPeer{V5: c, bar: "hbbar/" + id}
	c.MustSubscribe(tb, paho.SubscribeOptions{Topic: p.bar, QoS: 1})
	return p
}

// quiet checks that nothing but a marker published now (by pub) arrives.
func (p *hbPeer) quiet(tb testing.TB, pub *mqtttest.V5) {
	tb.Helper()
	mqtttest.Barrier(tb, pub, p.bar, p.V5)
}

func hbExpiry(m *paho.Publish) (uint32, bool) {
	if m.Properties == nil || m.Properties.MessageExpiry == nil {
		return 0, false
	}
	return *m.Properties.MessageExpiry, true
}

func hbRetain(tb testing.TB, pub *mqtttest.V5, topic, payload string, expiry ...uint32) {
	tb.Helper()
	p := &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(payload)}
	if len(expiry) > 0 {
		p.Properties = &paho.PublishProperties{MessageExpiry: &expiry[0]}
	}
	pub.MustPublish(tb, p)
}

func hbDropIndex(tb testing.TB, name string) int {
	tb.Helper()
	for i, n := range broker.DropNames() {
		if n == name {
			return i
		}
	}
	tb.Fatalf("no drop reason %q in %v", name, broker.DropNames())
	return -1
}

// hbByTopic receives n messages and indexes them by topic (retained
// messages of several topics come in no defined order).
func hbByTopic(tb testing.TB, c *mqtttest.V5, n int) map[string]*paho.Publish {
	tb.Helper()
	got := make(map[string]*paho.Publish, n)
	for range n {
		m := c.Next(tb)
		if _, dup := got[m.Topic]; dup {
			tb.Fatalf("two messages on %s", m.Topic)
		}
		got[m.Topic] = m
	}
	return got
}

// TestRetainedSetReplaceClear: a retained message is delivered to later
// subscribers with retain=1, a new one replaces it, and an empty retained
// payload clears it (existing subscribers still see the empty message).
func TestRetainedSetReplaceClear(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))

	hbRetain(t, pub, "ret/t", "v1")
	s1 := hbDial(t, b.Addr, "s1")
	s1.MustSubscribe(t, paho.SubscribeOptions{Topic: "ret/t", QoS: 1})
	if m := s1.Expect(t, "v1")[0]; !m.Retain || m.QoS != 1 {
		t.Fatalf("retained on subscribe: retain=%v qos=%d, want retain=true qos=1", m.Retain, m.QoS)
	}
	if n := b.Stats().Retained; n != 1 {
		t.Fatalf("Stats().Retained = %d, want 1", n)
	}

	hbRetain(t, pub, "ret/t", "v2")
	s1.Expect(t, "v2")
	s2 := hbDial(t, b.Addr, "s2")
	s2.MustSubscribe(t, paho.SubscribeOptions{Topic: "ret/#", QoS: 1})
	s2.Expect(t, "v2")
	s2.quiet(t, pub) // v1 is gone, not delivered as well
	if n := b.Stats().Retained; n != 1 {
		t.Fatalf("Stats().Retained after replace = %d, want 1", n)
	}

	hbRetain(t, pub, "ret/t", "")
	if m := s1.Next(t); len(m.Payload) != 0 || m.Topic != "ret/t" {
		t.Fatalf("existing subscriber: got %q on %s, want the empty clearing message", m.Payload, m.Topic)
	}
	if n := b.Stats().Retained; n != 0 {
		t.Fatalf("Stats().Retained after clear = %d, want 0", n)
	}
	s3 := hbDial(t, b.Addr, "s3")
	s3.MustSubscribe(t, paho.SubscribeOptions{Topic: "ret/t", QoS: 1})
	s3.MustSubscribe(t, paho.SubscribeOptions{Topic: "ret/#", QoS: 0})
	s3.quiet(t, pub)
}

// TestRetainHandling covers the three Retain Handling values.
func TestRetainHandling(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	hbRetain(t, pub, "rh/a", "A")

	t.Run("0 sends on every subscribe", func(t *testing.T) {
		c := hbDial(t, b.Addr, "rh0")
		for i := range 3 {
			c.MustSubscribe(t, paho.SubscribeOptions{Topic: "rh/#", QoS: 1, RetainHandling: 0})
			if m := c.Expect(t, "A")[0]; !m.Retain {
				t.Fatalf("subscribe %d: retain flag not set", i)
			}
		}
		c.quiet(t, pub)
	})
	t.Run("1 sends only for a new subscription", func(t *testing.T) {
		c := hbDial(t, b.Addr, "rh1")
		c.MustSubscribe(t, paho.SubscribeOptions{Topic: "rh/#", QoS: 1, RetainHandling: 1})
		c.Expect(t, "A")
		c.MustSubscribe(t, paho.SubscribeOptions{Topic: "rh/#", QoS: 1, RetainHandling: 1})
		c.quiet(t, pub)
		// After unsubscribing, the subscription is new again.
		ctx := t.Context()
		if _, err := c.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"rh/#"}}); err != nil {
			t.Fatal(err)
		}
		c.MustSubscribe(t, paho.SubscribeOptions{Topic: "rh/#", QoS: 1, RetainHandling: 1})
		c.Expect(t, "A")
		c.quiet(t, pub)
	})
	t.Run("2 never sends", func(t *testing.T) {
		c := hbDial(t, b.Addr, "rh2")
		c.MustSubscribe(t, paho.SubscribeOptions{Topic: "rh/#", QoS: 1, RetainHandling: 2})
		c.quiet(t, pub)
		// Live messages still arrive.
		pub.MustPublish(t, &paho.Publish{Topic: "rh/b", QoS: 1, Payload: []byte("live")})
		c.Expect(t, "live")
	})
}

// TestRetainAsPublished: live messages keep the retain flag only for a
// subscription with Retain As Published; retained messages sent because of
// a subscribe always carry retain=1.
func TestRetainAsPublished(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	rap := hbDial(t, b.Addr, "rap")
	rap.MustSubscribe(t, paho.SubscribeOptions{Topic: "rap/#", QoS: 1, RetainAsPublished: true})
	plain := hbDial(t, b.Addr, "plain")
	plain.MustSubscribe(t, paho.SubscribeOptions{Topic: "rap/#", QoS: 1})

	hbRetain(t, pub, "rap/x", "R")
	pub.MustPublish(t, &paho.Publish{Topic: "rap/x", QoS: 1, Payload: []byte("L")})
	for _, c := range []struct {
		p        *hbPeer
		wantKept bool
	}{{rap, true}, {plain, false}} {
		got := c.p.Expect(t, "R", "L")
		if got[0].Retain != c.wantKept {
			t.Errorf("%s: live retained message has retain=%v, want %v", c.p.bar, got[0].Retain, c.wantKept)
		}
		if got[1].Retain {
			t.Errorf("%s: non-retained message has retain=1", c.p.bar)
		}
	}

	// Retained on subscribe: retain=1 with or without RAP.
	for i, opt := range []bool{false, true} {
		c := hbDial(t, b.Addr, fmt.Sprintf("late%d", i))
		c.MustSubscribe(t, paho.SubscribeOptions{Topic: "rap/x", QoS: 1, RetainAsPublished: opt})
		if m := c.Expect(t, "R")[0]; !m.Retain {
			t.Errorf("RAP=%v: retained message sent on subscribe has retain=0", opt)
		}
	}
}

// TestRetainedMessageExpiry: the Message Expiry Interval delivered with a
// retained message is what remains of it, and an expired retained message
// is not delivered.
func TestRetainedMessageExpiry(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := startBroker(t, broker.Options{Now: clk.Now})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	hbRetain(t, pub, "exp/long", "long", 100)
	hbRetain(t, pub, "exp/short", "short", 5)
	hbRetain(t, pub, "exp/none", "none")

	c := hbDial(t, b.Addr, "c0")
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "exp/#", QoS: 1})
	got := hbByTopic(t, c.V5, 3)
	for topic, want := range map[string]uint32{"exp/long": 100, "exp/short": 5} {
		if e, ok := hbExpiry(got[topic]); !ok || e != want {
			t.Errorf("%s at t+0: expiry %d (set %v), want %d", topic, e, ok, want)
		}
	}
	if e, ok := hbExpiry(got["exp/none"]); ok {
		t.Errorf("exp/none carries expiry %d, want none", e)
	}

	clk.Add(10 * time.Second)
	c1 := hbDial(t, b.Addr, "c1")
	c1.MustSubscribe(t, paho.SubscribeOptions{Topic: "exp/#", QoS: 1})
	got = hbByTopic(t, c1.V5, 2)
	if got["exp/long"] == nil || got["exp/none"] == nil {
		t.Fatalf("after 10s got %v, want exp/long and exp/none", got)
	}
	if e, ok := hbExpiry(got["exp/long"]); !ok || e != 90 {
		t.Errorf("exp/long after 10s: expiry %d (set %v), want 90", e, ok)
	}
	c1.quiet(t, pub) // exp/short (expired) is not delivered
}

// TestRetainedMaxAge: with RetainedMaxAge, retained publishes get the max
// age as their expiry (or keep a shorter one), an older retained message is
// not delivered even before the sweep, and Sweep removes it.
func TestRetainedMaxAge(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := startBroker(t, broker.Options{Now: clk.Now, RetainedMaxAge: time.Minute})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	hbRetain(t, pub, "age/none", "none")
	hbRetain(t, pub, "age/long", "long", 3600)
	hbRetain(t, pub, "age/short", "short", 30)
	b.Publish(&broker.Message{Topic: "age/injected", Payload: []byte("inj"), QoS: 1, PublishedQoS: 1, Retain: true})

	c := hbDial(t, b.Addr, "c0")
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "age/#", QoS: 1})
	got := hbByTopic(t, c.V5, 4)
	for topic, want := range map[string]uint32{"age/none": 60, "age/long": 60, "age/short": 30, "age/injected": 60} {
		if e, ok := hbExpiry(got[topic]); !ok || e != want {
			t.Errorf("%s: expiry %d (set %v), want %d (max age 60s)", topic, e, ok, want)
		}
	}
	if n := b.Stats().Retained; n != 4 {
		t.Fatalf("Stats().Retained = %d, want 4", n)
	}

	clk.Add(time.Minute)
	c1 := hbDial(t, b.Addr, "c1")
	c1.MustSubscribe(t, paho.SubscribeOptions{Topic: "age/#", QoS: 1})
	c1.quiet(t, pub) // none is delivered, though not yet swept
	b.Sweep()
	if n := b.Stats().Retained; n != 0 {
		t.Fatalf("Stats().Retained after Sweep = %d, want 0", n)
	}
}

// TestRetainedMaxAgeAfterRestart: a retained message saved by a broker
// without a max age is not delivered by a restarted broker whose
// RetainedMaxAge it has outlived, even before the first sweep.
func TestRetainedMaxAgeAfterRestart(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	path := t.TempDir() + "/state.json"
	b1 := startBroker(t, broker.Options{Now: clk.Now, StatePath: path, SaveInterval: -1})
	pub := mqtttest.DialV5(t, b1.Addr, mqtttest.Clean("pub"))
	hbRetain(t, pub, "old/x", "old")
	pub.Disconnect(&paho.Disconnect{})
	if err := b1.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	clk.Add(2 * time.Hour)
	b2 := startBroker(t, broker.Options{Now: clk.Now, StatePath: path, SaveInterval: -1, RetainedMaxAge: time.Hour})
	pub2 := mqtttest.DialV5(t, b2.Addr, mqtttest.Clean("pub2"))
	c := hbDial(t, b2.Addr, "c")
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "old/#", QoS: 1})
	c.quiet(t, pub2)
}

// TestRetainedBurst: one SUBSCRIBE delivers at most MaxRetainedBurst
// retained messages; the rest are counted as retained_burst drops and live
// messages are not affected.
func TestRetainedBurst(t *testing.T) {
	b := startBroker(t, broker.Options{MaxRetainedBurst: 3})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	for i := range 10 {
		hbRetain(t, pub, fmt.Sprintf("burst/%d", i), fmt.Sprintf("r%d", i))
	}
	idx := hbDropIndex(t, "retained_burst")
	before := b.Stats().Drops[idx]

	c := hbDial(t, b.Addr, "c")
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: "burst/#", QoS: 1})
	got := hbByTopic(t, c.V5, 3)
	for topic, m := range got {
		if !m.Retain || string(m.Payload) != "r"+topic[len("burst/"):] {
			t.Errorf("%s: got %q retain=%v", topic, m.Payload, m.Retain)
		}
	}
	c.quiet(t, pub)
	eventually(t, "7 retained_burst drops", func() bool { return b.Stats().Drops[idx]-before == 7 })

	var live []string
	for i := range 20 {
		p := fmt.Sprintf("live%d", i)
		live = append(live, p)
		pub.MustPublish(t, &paho.Publish{Topic: fmt.Sprintf("burst/%d", i%10), QoS: 1, Payload: []byte(p)})
	}
	for _, m := range c.Expect(t, live...) {
		if m.Retain {
			t.Fatalf("live message %q has retain=1", m.Payload)
		}
	}
	if d := b.Stats().Drops[idx] - before; d != 7 {
		t.Fatalf("retained_burst drops = %d after live traffic, want 7", d)
	}
}

// TestRetainedUnderCounts: RetainedUnder follows every change of the
// retained messages under a first level — new topics, replacements,
// clears and the sweep — and nothing under another first level.
func TestRetainedUnderCounts(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := startBroker(t, broker.Options{Now: clk.Now, RetainedMaxAge: time.Minute})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"))
	want := func(topic string, count int, bytes int64, current int) {
		t.Helper()
		if c, by, cur := b.RetainedUnder(topic); c != count || by != bytes || cur != current {
			t.Fatalf("RetainedUnder(%s) = %d, %d, %d; want %d, %d, %d", topic, c, by, cur, count, bytes, current)
		}
	}
	want("acc1/x", 0, 0, -1)
	hbRetain(t, pub, "acc1/a", "12345")
	hbRetain(t, pub, "acc1/b/c", "123")
	hbRetain(t, pub, "acc2/a", "1234567")
	want("acc1/x", 2, 8, -1)
	want("acc1/a", 2, 8, 5)
	want("acc2/other", 1, 7, -1)
	hbRetain(t, pub, "acc1/a", "1") // replaced
	want("acc1/a", 2, 4, 1)
	pub.MustPublish(t, &paho.Publish{Topic: "acc1/b/c", QoS: 1, Retain: true}) // cleared
	want("acc1/b/c", 1, 1, -1)
	clk.Add(time.Minute)
	b.Sweep()
	want("acc1/a", 0, 0, -1)
	want("acc2/a", 0, 0, -1)
}
