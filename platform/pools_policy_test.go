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

// TestPolicyPoolStateWithBlocks: on a cluster each node takes units of the
// shared pool a block at a time; the pool's state a node reports (GET
// /usage) counts what it has spent, not its block: one QoS 2 message of a
// pool of 2 leaves one unit, and the pool is not run out, on the node that
// holds it; the other node, which cannot know the first one's block is
// unspent, counts it as used.
func TestPolicyPoolStateWithBlocks(t *testing.T) {
	shared := NewLocalPools()
	clk := testkit.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	n1 := NewPolicy(Options{Now: clk.Now, QoS2Pools: &BlockPools{Shared: shared, Block: 16}}, testSnapshot(t))
	n2 := NewPolicy(Options{Now: clk.Now, QoS2Pools: &BlockPools{Shared: shared, Block: 16}}, testSnapshot(t))
	id := connect(t, n1, "pub-a", "dev1")
	topic := accA + "/dev1/state/s"
	publish := func() byte {
		t.Helper()
		pk := &packet.Publish{Topic: topic, QoS: 2, Payload: []byte("x")}
		m := &broker.Message{Topic: topic, QoS: 2, PublishedQoS: 2, Payload: pk.Payload}
		if err := n1.Publish(id, pk, m); err != nil {
			t.Fatalf("publish: %v", err)
		}
		return m.QoS
	}
	if q := publish(); q != 2 {
		t.Fatalf("first QoS 2 message went out at QoS %d", q)
	}
	if st := n1.PoolState(accA, clk.Now(), 2); st.Used != 1 || st.Demoted {
		t.Fatalf("node 1, one unit of 2 spent: pool state %+v, want 1 used, not demoted", st)
	}
	if st := n2.PoolState(accA, clk.Now(), 2); st.Used != 2 || !st.Demoted {
		t.Fatalf("node 2, node 1 holding the pool: pool state %+v, want 2 used (node 1's block), demoted here", st)
	}
	if q := publish(); q != 2 {
		t.Fatalf("second QoS 2 message went out at QoS %d", q)
	}
	if st := n1.PoolState(accA, clk.Now(), 2); st.Used != 2 || !st.Demoted {
		t.Fatalf("node 1, both units spent: pool state %+v, want 2 used, demoted", st)
	}
}
