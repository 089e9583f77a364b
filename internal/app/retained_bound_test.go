package app_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	fleetplatform "github.com/fleetmq/fleetmq/platform"
)

// TestRetainedStateBoundedPerAccount: an account keeps at most its plan's
// retained messages (max_publisher_clients x 100); the one over is
// refused with Quota exceeded and a reason its owner sees, while replacing
// or clearing a retained message always works, and another account
// retains as before.
func TestRetainedStateBoundedPerAccount(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	p.plan(t, "tiny", 1, 10)
	A := p.newTenant(t, "A", "tiny", false, "dev1")
	B := p.newTenant(t, "B", "tiny", false, "dev1")
	p.synced(t)
	devA := dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	devB := dialV5(t, p.MQTTAddr, "dev1", B.PubUser, B.PubPass)
	retain := func(c *mqtttest.V5, topic, payload string) byte {
		t.Helper()
		r, err := c.TryPublish(&paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(payload)})
		if r == nil {
			t.Fatalf("retain %s: no PUBACK: %v", topic, err)
		}
		return r.ReasonCode
	}
	for i := range fleetplatform.RetainedPerClient {
		if rc := retain(devA, A.topic("dev1", fmt.Sprintf("state/s%d", i)), "v"); rc != 0 {
			t.Fatalf("retained message %d refused: 0x%02x", i, rc)
		}
	}
	over := A.topic("dev1", "state/one-too-many")
	if rc := retain(devA, over, "v"); rc != 0x97 {
		t.Fatalf("retained message %d: 0x%02x, want 0x97 Quota exceeded", fleetplatform.RetainedPerClient+1, rc)
	}
	if rc := retain(devA, A.topic("dev1", "state/s0"), "replaced"); rc != 0 {
		t.Fatalf("replacing a retained message: 0x%02x", rc)
	}
	if rc := retain(devA, A.topic("dev1", "state/s1"), ""); rc != 0 {
		t.Fatalf("clearing a retained message: 0x%02x", rc)
	}
	if rc := retain(devA, over, "v"); rc != 0 {
		t.Fatalf("a retained message after one was cleared: 0x%02x", rc)
	}
	if rc := retain(devB, B.topic("dev1", "state/s"), "v"); rc != 0 {
		t.Fatalf("the other account's retained message: 0x%02x", rc)
	}
	eventually(t, "the refusal among A's problems", func() bool {
		ps, err := p.Store.Problems(p.ctx, A.ID, "dev1", p.clock.Now().AddDate(0, 0, -1), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range ps {
			if pr.Kind == fleetmq.ProblemPublishRefused && pr.Topic == over && pr.Reason == "quota_exceeded" {
				return true
			}
		}
		return false
	})
}

// TestRetainedBoundSkipsLayoutsWithoutFanout: a retained message on a
// vendor layout without fanout is stored, never retained, so an account at
// its retained bound still has it accepted (it was refused with Quota
// exceeded, and a 3.1.1 device's copy discarded: never stored); with
// fanout the bound applies to its platform topic as to any.
func TestRetainedBoundSkipsLayoutsWithoutFanout(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	p.plan(t, "tiny", 1, 10)
	A := p.newTenant(t, "A", "tiny", false, "dev1")
	for _, l := range []*fleetmq.Layout{
		{Name: "bolt", WireRoot: "bolt", Rules: []string{"bolt/{client_id}/status=state/summary"}},
		{Name: "acme", WireRoot: "acme", Rules: []string{"acme/{client_id}/status=state/summary"}, Fanout: true},
	} {
		if err := p.Service.PutLayout(p.ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	p.synced(t)
	devA := dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	retain := func(topic, payload string) byte {
		t.Helper()
		r, err := devA.TryPublish(&paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(payload)})
		if r == nil {
			t.Fatalf("retain %s: no PUBACK: %v", topic, err)
		}
		return r.ReasonCode
	}
	for i := range fleetplatform.RetainedPerClient {
		if rc := retain(A.topic("dev1", fmt.Sprintf("state/s%d", i)), "v"); rc != 0 {
			t.Fatalf("retained message %d refused: 0x%02x", i, rc)
		}
	}
	if rc := retain("bolt/dev1/status", "not retained"); rc != 0 {
		t.Fatalf("a retained message on a layout without fanout, at the bound: 0x%02x, want 0 (stored, not retained)", rc)
	}
	if rc := retain("acme/dev1/status", "retained"); rc != 0x97 {
		t.Fatalf("a retained message on a layout with fanout, over the bound: 0x%02x, want 0x97", rc)
	}
	sub := dialV5(t, p.MQTTAddr, "subA", A.SubUser, A.SubPass)
	sub.Sub(t, A.topic("dev1", "state/summary"), 1)
	mqtttest.Barrier(t, devA, A.topic("dev1", "state/summary"), sub)
}

// TestRetainedBoundExactUnderConcurrentPublishers: devices of one account
// publishing retained messages on new topics at the same moment, through
// connections of their own, never take the account past its plan's
// retained messages: with some room left, a round of racing publishes
// (more than the room) fills the account exactly to its bound, round
// after round. The other account retains as before.
func TestRetainedBoundExactUnderConcurrentPublishers(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	const devices = 4
	p.plan(t, "four", devices, 10)
	names := make([]string, devices)
	for i := range names {
		names[i] = fmt.Sprintf("dev%d", i)
	}
	A := p.newTenant(t, "A", "four", false, names...)
	B := p.newTenant(t, "B", "four", false, "dev0")
	p.synced(t)
	bound := devices * fleetplatform.RetainedPerClient
	const rounds, perDevice, room = 300, 60, 40
	devs := make([]*mqtttest.V5, devices)
	for i, n := range names {
		devs[i] = dialV5(t, p.MQTTAddr, n, A.PubUser, A.PubPass)
	}
	stored := func() int {
		n, _, _ := p.Broker.RetainedUnder(A.topic("dev0", "state/x"))
		return n
	}
	// publish has every device publish its topics (retained, QoS 0, all
	// devices at once), then a QoS 1 publish: its PUBACK says the broker
	// has handled all before it.
	publish := func(topics func(dev int) []string, payload string) {
		t.Helper()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, devices)
		for i, c := range devs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for _, tp := range topics(i) {
					if _, err := c.TryPublish(&paho.Publish{Topic: tp, Retain: true, Payload: []byte(payload)}); err != nil {
						errs <- err
						return
					}
				}
				if r, err := c.TryPublish(&paho.Publish{Topic: A.topic(names[i], "event/fence"), QoS: 1, Payload: []byte("f")}); r == nil || r.ReasonCode != 0 {
					errs <- fmt.Errorf("%s: fence: %+v, %v", names[i], r, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	fill := func(dev int) []string {
		var ts []string
		for j := dev; j < bound-room; j += devices {
			ts = append(ts, A.topic(names[dev], fmt.Sprintf("state/fill/%d", j)))
		}
		return ts
	}
	publish(fill, "v")
	eventually(t, "the account filled to one below its bound", func() bool { return stored() == bound-room })

	deadline := time.Now().Add(time.Minute)
	for r := 0; r < rounds && time.Now().Before(deadline); r++ {
		race := func(dev int) []string {
			ts := make([]string, perDevice)
			for j := range ts {
				ts[j] = A.topic(names[dev], fmt.Sprintf("state/race/%d/%d", r, j))
			}
			return ts
		}
		publish(race, "v")
		if n := stored(); n != bound {
			t.Fatalf("round %d: %d devices racing for the last retained message of %d left the account with %d retained messages, want exactly %d",
				r, devices, bound, n, bound)
		}
		publish(race, "") // clear them all: one message of room again
		eventually(t, "the race's retained message cleared", func() bool { return stored() == bound-room })
	}

	devB := dialV5(t, p.MQTTAddr, "dev0", B.PubUser, B.PubPass)
	if r, err := devB.TryPublish(&paho.Publish{Topic: B.topic("dev0", "state/s"), QoS: 1, Retain: true, Payload: []byte("v")}); r == nil || r.ReasonCode != 0 {
		t.Fatalf("the other account's retained message: %+v, %v", r, err)
	}
}
