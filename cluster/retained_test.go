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
	ctx, st, n1, n2, a, b := retainedNodes(t, "r")
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

// TestRetainedBoundAcrossNodes: an account's retained bound is checked by
// each node against its own copy. Two nodes that each reserve all the
// room left before the other's messages arrive both get it, so the
// account ends with up to the room times the nodes (what docs/cluster.md
// says); the room every reservation took is given back once its message
// is set, so what each node counts afterwards is exactly what it holds:
// after messages from the other node, a clear from the other node, and on
// a node that loads them from the store at its start. Another account's
// room is untouched.
func TestRetainedBoundAcrossNodes(t *testing.T) {
	ctx, st, _, n2, a, b := retainedNodes(t, "b")
	const bound, size = 4, 10
	// room reserves one more new topic of acct on r and reports the count
	// and bytes r held there (messages and reservations), giving the room
	// back at once.
	room := func(r *Retained, acct string) (int, int64, bool) {
		m := &broker.Message{Topic: acct + "/probe/state/x", Payload: make([]byte, size), Retain: true, Created: time.Now()}
		n, by, ok := r.Reserve(m, bound, bound*size)
		r.Release(m)
		return n, by, ok
	}
	now := time.Now()
	var ms []*broker.Message
	for i := range bound {
		for j, r := range []*Retained{a, b} {
			m := &broker.Message{Topic: "acme/dev/state/" + string(rune('a'+2*i+j)), Payload: make([]byte, size), Retain: true, Created: now}
			if _, _, ok := r.Reserve(m, bound, bound*size); !ok {
				t.Fatalf("node %d refused retained message %d of a bound of %d", j+1, i+1, bound)
			}
			ms = append(ms, m)
		}
	}
	for i, m := range ms {
		[]*Retained{a, b}[i%2].Set(m)
	}
	for i, r := range []*Retained{a, b} {
		testkit.Eventually(t, 10*time.Second, "both nodes to hold both nodes' messages", func() bool {
			n, _, _ := r.Under("acme/dev/state/a")
			return n == 2*bound
		})
		if n, by, ok := room(r, "acme"); ok || n != 2*bound || by != 2*bound*size {
			t.Fatalf("node %d: a reservation found %d messages, %d bytes (ok %v); want %d, %d, refused", i+1, n, by, ok, 2*bound, 2*bound*size)
		}
		if n, by, ok := room(r, "beta"); !ok || n != 0 || by != 0 {
			t.Fatalf("node %d: beta's room %d, %d (ok %v); want empty", i+1, n, by, ok)
		}
	}
	// Node b clears all but bound-1 of them: node a has room for one.
	for _, m := range ms[bound-1:] {
		b.Set(&broker.Message{Topic: m.Topic, Retain: true, Created: now.Add(time.Second)})
	}
	for i, r := range []*Retained{a, b} {
		testkit.Eventually(t, 10*time.Second, "the clears to reach both nodes", func() bool {
			n, _, _ := r.Under("acme/dev/state/a")
			return n == bound-1
		})
		if n, by, ok := room(r, "acme"); !ok || n != bound-1 || by != (bound-1)*size {
			t.Fatalf("node %d after the clears: %d messages, %d bytes (ok %v); want %d, %d, room for one", i+1, n, by, ok, bound-1, (bound-1)*size)
		}
	}
	// A node starting loads them from the store with nothing held.
	testkit.Eventually(t, 10*time.Second, "a node started later to load them", func() bool {
		c, err := NewRetained(ctx, n2, "b3", st, time.Now(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n, by, ok := room(c, "acme")
		return ok && n == bound-1 && by == (bound-1)*size
	})
}

// retainedNodes starts two NATS servers routed together (named prefix+"1"
// and prefix+"2") and a retained store on each, over one SQLite store.
func retainedNodes(t *testing.T, prefix string) (ctx context.Context, st *sqlstore.Store, n1, n2 *NATS, a, b *Retained) {
	ctx = context.Background()
	st, err := sqlstore.OpenSQLite(ctx, filepath.Join(t.TempDir(), "fleetmq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n1 = startNATS(t, prefix+"1")
	n2 = startNATS(t, prefix+"2", n1.ClusterAddr())
	testkit.Eventually(t, 10*time.Second, "the route", func() bool { return n1.Routes() > 0 && n2.Routes() > 0 })
	for _, x := range []struct {
		n    *NATS
		name string
		r    **Retained
	}{{n1, prefix + "1", &a}, {n2, prefix + "2", &b}} {
		r, err := NewRetained(ctx, x.n, x.name, st, time.Now(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		*x.r = r
	}
	return ctx, st, n1, n2, a, b
}
