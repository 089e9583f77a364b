package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/contract"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestRetainedContract: a node's cluster retained store meets the
// contract of every retained store (alone, with a store under it).
func TestRetainedContract(t *testing.T) {
	contract.Retained(t, func(t *testing.T) broker.Retained {
		st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "fleetmq.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r, err := NewRetained(context.Background(), startNATS(t, "solo"), "solo", st, time.Now(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	})
}

// TestRetainedAcrossNodes: a message retained through one node is matched
// on the others; a node started later loads it from the store; a clear
// through another node clears it everywhere, in the store too; a copy
// older than what a node holds does not replace it.
func TestRetainedAcrossNodes(t *testing.T) {
	ctx := context.Background()
	st, err := sqlstore.OpenSQLite(ctx, filepath.Join(t.TempDir(), "fleetmq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n1 := startNATS(t, "r1")
	n2 := startNATS(t, "r2", n1.ClusterAddr())
	testkit.Eventually(t, 10*time.Second, "the route", func() bool { return n1.Routes() > 0 && n2.Routes() > 0 })
	newNode := func(n *NATS, name string) *Retained {
		r, err := NewRetained(ctx, n, name, st, time.Now(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	a, b := newNode(n1, "r1"), newNode(n2, "r2")
	payloadOn := func(r *Retained, topic string) string {
		for _, m := range r.Match(topic, time.Now()) {
			return string(m.Payload)
		}
		return ""
	}
	now := time.Now()
	a.Set(&broker.Message{Topic: "acct/dev/state/door", Payload: []byte("open"), QoS: 1, Retain: true, Created: now})
	testkit.Eventually(t, 10*time.Second, "node b to hold node a's retained message", func() bool {
		return payloadOn(b, "acct/dev/state/door") == "open"
	})
	// A copy created before what node b holds changes nothing there.
	b.setIfNewer(&broker.Message{Topic: "acct/dev/state/door", Payload: []byte("stale"), Retain: true, Created: now.Add(-time.Minute)})
	if p := payloadOn(b, "acct/dev/state/door"); p != "open" {
		t.Fatalf("an older copy replaced the message: %q", p)
	}
	// A node started later loads it from the store.
	testkit.Eventually(t, 10*time.Second, "a node started later to load it", func() bool {
		c, err := NewRetained(ctx, n2, "r3", st, time.Now(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return payloadOn(c, "acct/dev/state/door") == "open"
	})
	// Cleared through node b: cleared on a and in the store.
	b.Set(&broker.Message{Topic: "acct/dev/state/door", Retain: true, Created: now.Add(time.Second)})
	testkit.Eventually(t, 10*time.Second, "the clear to reach node a", func() bool {
		return payloadOn(a, "acct/dev/state/door") == "" && a.Len() == 0
	})
	testkit.Eventually(t, 10*time.Second, "the clear to reach the store", func() bool {
		c, err := NewRetained(ctx, n1, "r4", st, time.Now(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.Len() == 0
	})
	if got := a.Received.Load(); got == 0 {
		t.Errorf("node a counted no retained message from node b")
	}
	// A copy created before the clear, arriving after it, does not bring
	// the topic back.
	a.setIfNewer(&broker.Message{Topic: "acct/dev/state/door", Payload: []byte("late"), Retain: true, Created: now.Add(time.Second / 2)})
	if p := payloadOn(a, "acct/dev/state/door"); p != "" {
		t.Fatalf("a copy older than the clear brought the topic back: %q", p)
	}
	// Clocks apart: node a sets a message created later than the one node
	// b sets afterwards; both end with a's, and so does the store.
	a.Set(&broker.Message{Topic: "acct/dev/state/mode", Payload: []byte("from a, clock ahead"), Retain: true, Created: now.Add(5 * time.Second)})
	testkit.Eventually(t, 10*time.Second, "node b to hold a's message", func() bool {
		return payloadOn(b, "acct/dev/state/mode") == "from a, clock ahead"
	})
	b.Set(&broker.Message{Topic: "acct/dev/state/mode", Payload: []byte("from b"), Retain: true, Created: now.Add(2 * time.Second)})
	testkit.Eventually(t, 10*time.Second, "the store and both nodes to keep the newest", func() bool {
		c, err := NewRetained(ctx, n1, "r5", st, time.Now(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return payloadOn(c, "acct/dev/state/mode") == "from a, clock ahead"
	})
	for name, r := range map[string]*Retained{"a": a, "b": b} {
		if p := payloadOn(r, "acct/dev/state/mode"); p != "from a, clock ahead" {
			t.Errorf("node %s holds %q, want the message created last", name, p)
		}
	}
}

// TestOwnersContract: session claims in the database with notices on
// NATS meet the contract of session ownership, each node with a store
// handle and a NATS server of its own.
func TestOwnersContract(t *testing.T) {
	pgtest.ForEachDSN(t, func(t *testing.T, backend string) {
		owners(t, strings.HasPrefix(backend, "postgres"))
	})
}

func owners(t *testing.T, postgres bool) {
	contract.SessionOwners(t, func(t *testing.T) func(string) broker.SessionOwners {
		node := sharedOwners(t, postgres)
		return func(name string) broker.SessionOwners { return node(name) }
	})
	contract.SessionStates(t, func(t *testing.T) func(string) contract.OwnersStates {
		node := sharedOwners(t, postgres)
		return func(name string) contract.OwnersStates { return node(name) }
	})
}

// sharedOwners starts two routed NATS servers on a new database and
// returns a function giving each node its Owners, on one of them.
func sharedOwners(t *testing.T, postgres bool) func(node string) *Owners {
	path := filepath.Join(t.TempDir(), "fleetmq.db")
	if postgres {
		path = pgtest.DSN(t)
	}
	first := startNATS(t, "o1")
	second := startNATS(t, "o2", first.ClusterAddr())
	testkit.Eventually(t, 10*time.Second, "the route", func() bool { return first.Routes() > 0 })
	i := 0
	return func(node string) *Owners {
		st, err := sqlstore.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		n := first
		if i++; i%2 == 0 {
			n = second
		}
		o, err := NewOwners(n, node, st, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(o.Close)
		return o
	}
}
