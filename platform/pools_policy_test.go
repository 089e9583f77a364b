package platform

import (
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestPolicySharedQoS2Pool: two policies (two nodes) on one QoS2Pools
// give account A's pool of 2 out once between them: the third QoS 2 state
// publish, on either node, goes out at QoS 1, and each node's own pool
// shows the pool used up.
func TestPolicySharedQoS2Pool(t *testing.T) {
	shared := NewLocalPools()
	clk := testkit.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	n1 := NewPolicy(Options{Now: clk.Now, QoS2Pools: shared}, testSnapshot(t))
	n2 := NewPolicy(Options{Now: clk.Now, QoS2Pools: shared}, testSnapshot(t))
	publish := func(p *Policy) byte {
		t.Helper()
		id := connect(t, p, "pub-a", "dev1")
		topic := accA + "/dev1/state/s"
		pk := &packet.Publish{Topic: topic, QoS: 2, Payload: []byte("x")}
		m := &broker.Message{Topic: topic, QoS: 2, PublishedQoS: 2, Payload: pk.Payload}
		if err := p.Publish(id, pk, m); err != nil {
			t.Fatalf("publish: %v", err)
		}
		return m.QoS
	}
	got := []byte{publish(n1), publish(n2), publish(n1), publish(n2)}
	if want := []byte{2, 2, 1, 1}; string(got) != string(want) {
		t.Fatalf("effective QoS %v, want %v", got, want)
	}
	if used, _ := shared.Used(accA, "2026-11-22"); used != 2 {
		t.Fatalf("shared pool used %d, want 2", used)
	}
	for name, p := range map[string]*Policy{"n1": n1, "n2": n2} {
		st := p.Pool(accA).State(clk.Now(), 2)
		if !st.Demoted || st.Used != 2 || st.Demotions != 1 {
			t.Fatalf("%s's pool state %+v; want demoted, 2 used, 1 demotion", name, st)
		}
	}
}
