package app_test

import (
	"fmt"
	"testing"

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
