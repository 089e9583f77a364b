package cluster

// Sessions moving between nodes. Each node of these clusters has its own
// embedded NATS (routed), a cluster Router, cluster Owners (the claims
// and states in one SQLite database shared by the nodes) and a state
// file, as internal/app wires `fleetmq serve` in cluster mode.

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/sqlstore"
)

type moveNode struct {
	name      string
	nats      *NATS
	db        string
	statePath string
	wrap      func(*Owners) broker.SessionOwners // nil: the Owners as they are

	store  *sqlstore.Store
	owners *Owners
	router *Router
	srv    *broker.Server
	addr   string
	up     bool
}

func (n *moveNode) start(t *testing.T) {
	t.Helper()
	st, err := sqlstore.OpenSQLite(context.Background(), n.db)
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewOwners(n.nats, n.name, st, quiet)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(n.nats, n.name, quiet)
	if err != nil {
		t.Fatal(err)
	}
	var owners broker.SessionOwners = o
	if n.wrap != nil {
		owners = n.wrap(o)
	}
	srv, err := broker.New(broker.Options{Router: r, Node: n.name, Owners: owners, States: o,
		StatePath: n.statePath, SaveInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.Attach(srv)
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.store, n.owners, n.router, n.srv, n.addr, n.up = st, o, r, srv, ln.Addr().String(), true
}

func (n *moveNode) stop() {
	if !n.up {
		return
	}
	n.up = false
	n.srv.Close(context.Background())
	n.router.Close()
	n.owners.Close()
	n.store.Close()
}

// moveCluster starts nodes named a, b, ... on one database; wraps[i], if
// any, wraps node i's SessionOwners.
func moveCluster(t *testing.T, count int, wraps ...func(*Owners) broker.SessionOwners) []*moveNode {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "fleetmq.db")
	var nodes []*moveNode
	for i := range count {
		name := string(rune('a' + i))
		var routes []string
		if i > 0 {
			routes = []string{nodes[0].nats.ClusterAddr()}
		}
		n := &moveNode{name: name, nats: startNATS(t, name, routes...), db: db,
			statePath: filepath.Join(dir, name, "state.json")}
		if i < len(wraps) {
			n.wrap = wraps[i]
		}
		n.start(t)
		t.Cleanup(n.stop)
		nodes = append(nodes, n)
	}
	testkit.Eventually(t, 10*time.Second, "the NATS routes", func() bool {
		for _, n := range nodes {
			if n.nats.Routes() < count-1 {
				return false
			}
		}
		return true
	})
	return nodes
}

func persistentV5(id string) *paho.Connect {
	e := uint32(3600)
	return &paho.Connect{ClientID: id, CleanStart: false, KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: &e}}
}

func cleanV5(id string) *paho.Connect {
	return &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}
}

// TestRestartDoesNotBringBackAnEndedSession: a node restarts on its state
// file holding a persistent session that ended elsewhere while it was
// down (its client started clean on another node and left: the claim is
// released). The session is not restored: the client's next CONNECT gets
// session present 0, and the discarded subscription gets nothing.
func TestRestartDoesNotBringBackAnEndedSession(t *testing.T) {
	nodes := moveCluster(t, 2)
	a, b := nodes[0], nodes[1]
	const id = "dev-1"

	c1 := mqtttest.DialV5(t, a.addr, persistentV5(id))
	c1.Sub(t, "old/topic", 1)
	c1.Disconnect(&paho.Disconnect{}) // offline on a, expiry 1 h

	a.stop() // saves the session in a's state file

	c2 := mqtttest.DialV5(t, b.addr, cleanV5(id))
	if c2.Connack.SessionPresent {
		t.Fatal("clean start on b: session present")
	}
	c2.Disconnect(&paho.Disconnect{})
	testkit.Eventually(t, 10*time.Second, "b to end the clean session (claim released)", func() bool {
		node, _, err := b.store.SessionOwner(id)
		return err == nil && node == ""
	})

	a.start(t) // restart on the same state file
	c3 := mqtttest.DialV5(t, a.addr, persistentV5(id))
	if c3.Connack.SessionPresent {
		t.Fatal("a's restart brought back the session that ended on b: session present 1")
	}
	pub := mqtttest.DialV5(t, a.addr, cleanV5("pub"))
	pub.Pub(t, "old/topic", 1, "after-clean-start")
	if testkit.Within(300*time.Millisecond, func() bool { return len(c3.Msgs) > 0 }) { // a proof of absence: bounded
		t.Fatalf("the discarded subscription got %q", (<-c3.Msgs).Payload)
	}
}

// heldWatch delays the takeover notices of a node until released: a
// notice the old node handles a few milliseconds after its own next claim
// of the session (the contract allows up to a second; a busy node's
// handler waits for its 64 slots or for the session's save in progress).
type heldWatch struct {
	*Owners
	release chan struct{}
	held    atomic.Int32
}

func (h *heldWatch) Watch(node string, lost func(broker.Claim)) func() {
	return h.Owners.Watch(node, func(c broker.Claim) {
		h.held.Add(1)
		<-h.release
		lost(c)
	})
}

// TestReclaimWhileNoticePendingKeepsTheSession: a client connected to
// node a (subscribed to two topics, the second after a's last save)
// connects through b, and at once again through a, before a handled b's
// takeover notice. a's CONNECT saves the copy it has before it resumes
// from the store: session present, both subscriptions kept.
func TestReclaimWhileNoticePendingKeepsTheSession(t *testing.T) {
	hw := &heldWatch{release: make(chan struct{})}
	nodes := moveCluster(t, 2, func(o *Owners) broker.SessionOwners { hw.Owners = o; return hw })
	a, b := nodes[0], nodes[1]
	const id = "dev-2"

	c1 := mqtttest.DialV5(t, a.addr, persistentV5(id))
	c1.Sub(t, "saved/topic", 1)
	if err := a.srv.Save(); err != nil { // a periodic save (-state-save-interval)
		t.Fatal(err)
	}
	c1.Sub(t, "later/topic", 1)

	// The client connects through b: b claims, and waits for a's hand-over.
	bDone := make(chan error, 1)
	go func() {
		_, _, err := mqtttest.TryV5(t, b.addr, persistentV5(id))
		bDone <- err
	}()
	testkit.Eventually(t, 10*time.Second, "b's takeover notice to reach a", func() bool { return hw.held.Load() == 1 })
	c3 := mqtttest.DialV5(t, a.addr, persistentV5(id)) // and through a again
	close(hw.release)
	<-bDone

	pub := mqtttest.DialV5(t, a.addr, cleanV5("pub"))
	pub.Pub(t, "saved/topic", 1, "one")
	pub.Pub(t, "later/topic", 1, "two")
	if !c3.Connack.SessionPresent {
		t.Fatal("reconnected to a: session not present")
	}
	for _, want := range []string{"one", "two"} {
		m := c3.Next(t)
		if string(m.Payload) != want {
			t.Fatalf("got %q on %s, want %q (the subscription made after the last save is lost)", m.Payload, m.Topic, want)
		}
	}
}

// TestSharedMemberMovesLosingNothing: a shared subscription
// ($share/g/jobs/#) has a member on node c that stays and a persistent
// member that moves between nodes a and b while a publisher on c sends
// QoS 1 messages. Every message reaches a member: those NATS gave the
// node the mover just left (its queue subscription not yet ended) are
// handed back to the group, and one chosen for a member whose session
// ended meanwhile goes to another.
func TestSharedMemberMovesLosingNothing(t *testing.T) {
	nodes := moveCluster(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]
	const share = "$share/g/jobs/#"
	stay := mqtttest.DialV5(t, c.addr, cleanV5("stay"))
	stay.Sub(t, share, 1)
	mover := mqtttest.DialV5(t, a.addr, persistentV5("mover"))
	mover.Sub(t, share, 1)
	pub := mqtttest.DialV5(t, c.addr, cleanV5("pub"))
	// Both members' queue subscriptions are heard on c.
	testkit.Eventually(t, 10*time.Second, "a's queue subscription to get messages", func() bool {
		pub.Pub(t, "jobs/probe", 1, "probe")
		return a.router.Stats().SharedReceived.Load() > 0
	})

	const n, moves = 6000, 3
	step := make(chan error, moves+1)
	go func() {
		for i := range n {
			if _, err := pub.TryPublish(&paho.Publish{Topic: "jobs/x", QoS: 1, Payload: []byte(fmtInt(i))}); err != nil {
				step <- err
				return
			}
			if i > 0 && i%(n/(moves+1)) == 0 && i/(n/(moves+1)) <= moves {
				step <- nil // a move starts
			}
		}
		step <- nil
	}()
	clients := []*mqtttest.V5{stay, mover}
	for k := range moves {
		if err := <-step; err != nil {
			t.Fatal(err)
		}
		to := []*moveNode{b, a}[k%2]
		moved := mqtttest.DialV5(t, to.addr, persistentV5("mover"))
		if !moved.Connack.SessionPresent {
			t.Fatalf("mover: session not present on %s", to.name)
		}
		clients = append(clients, moved)
	}
	if err := <-step; err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	collect := func() {
		for _, c := range clients {
			for ch := c.Msgs; len(ch) > 0; {
				if m := <-ch; m.Topic == "jobs/x" {
					got[string(m.Payload)]++
				}
			}
		}
	}
	testkit.Within(10*time.Second, func() bool { collect(); return len(got) == n }) // the report below says what is missing
	collect()
	var missing []int
	for i := range n {
		if got[fmtInt(i)] == 0 {
			missing = append(missing, i)
		}
	}
	for _, nd := range nodes {
		st := nd.router.Stats()
		t.Logf("node %s: shared received %d, handed back %d, lost %d", nd.name, st.SharedReceived.Load(), st.SharedRerouted.Load(), st.SharedLost.Load())
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d messages reached no member of the group (first: %v); %d moves between a and b", len(missing), n, missing[:min(10, len(missing))], moves)
	}
}

func fmtInt(i int) string { return strconv.Itoa(i) }
