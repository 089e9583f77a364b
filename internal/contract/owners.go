package contract

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// SessionOwners runs the contract of broker.SessionOwners. newShared
// returns, per case, a new shared record and a function giving the
// handle a node uses on it (the single-node implementation gives every
// node the one LocalOwners; a cluster gives each node its own client of
// the shared engine): epochs grow, the latest claim owns, a takeover by
// another node tells the old node once, a release of a replaced claim
// changes nothing, and concurrent claims are ordered.
func SessionOwners(t *testing.T, newShared func(t *testing.T) func(node string) broker.SessionOwners) {
	t.Run("claims, owner, release", func(t *testing.T) {
		node := newShared(t)
		a := node("a")
		if _, ok, err := a.Owner("k"); err != nil || ok {
			t.Fatalf("Owner of an unclaimed key: ok %v, err %v; want none", ok, err)
		}
		c1 := claim(t, a, "k", "a")
		c2 := claim(t, a, "k", "a")
		if c1.From != "" {
			t.Fatalf("the first claim of a key comes from %q, want none", c1.From)
		}
		if c2.Epoch <= c1.Epoch {
			t.Fatalf("epochs %d then %d: a later claim must have the greater", c1.Epoch, c2.Epoch)
		}
		wantOwner(t, a, "k", c2)
		if ok, err := a.Release(c1); err != nil || ok {
			t.Fatalf("Release of a replaced claim = %v, %v; want false", ok, err)
		}
		wantOwner(t, a, "k", c2)
		if ok, err := a.Release(c2); err != nil || !ok {
			t.Fatalf("Release of the holding claim = %v, %v; want true", ok, err)
		}
		if _, ok, err := a.Owner("k"); err != nil || ok {
			t.Fatalf("Owner after release: ok %v, err %v; want none", ok, err)
		}
		if ok, err := a.Release(c2); err != nil || ok {
			t.Fatalf("a second Release = %v, %v; want false", ok, err)
		}
		// Keys are independent, and any bytes (a session key holds NUL).
		ck := claim(t, a, "k", "a")
		claim(t, a, "other", "a")
		wantOwner(t, a, "k", ck)
		nul := claim(t, a, "ns\x00client", "a")
		wantOwner(t, a, "ns\x00client", nul)
		if _, ok, err := a.Owner("ns\x00other"); err != nil || ok {
			t.Fatalf("Owner of another key with NUL: ok %v, err %v; want none", ok, err)
		}
	})

	t.Run("takeover tells the old node", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		lostA, stopA := watch(a, "a")
		defer stopA()
		lostB, stopB := watch(b, "b")
		defer stopB()
		reach(t, a, "a", b, "b", lostA.heard)
		reach(t, b, "b", a, "a", lostB.heard)
		ca := claim(t, a, "k", "a")
		claim(t, a, "k2", "a")
		again := claim(t, a, "k", "a") // the same node: no one is told
		cb := claim(t, b, "k", "b")
		if again.From != "a" || cb.From != "a" {
			t.Fatalf("claims replacing a's say they come from %q and %q, want a", again.From, cb.From)
		}
		if cb.Epoch <= again.Epoch {
			t.Fatalf("b's claim has epoch %d, a's before it %d", cb.Epoch, again.Epoch)
		}
		testkit.Eventually(t, within, "node a to learn of the takeover", func() bool { return len(lostA.all()) > 0 })
		wantOwner(t, b, "k", cb)
		wantOwner(t, a, "k", cb) // every node sees the new owner
		// The old node, ending its session late, frees nothing.
		if ok, err := a.Release(again); err != nil || ok {
			t.Fatalf("the old node's Release = %v, %v; want false", ok, err)
		}
		wantOwner(t, b, "k", cb)
		// And back: b is told, once; a's k2 was never touched.
		ca2 := claim(t, a, "k", "a")
		testkit.Eventually(t, within, "node b to learn of the takeover", func() bool { return len(lostB.all()) > 0 })
		if got := lostA.all(); len(got) != 1 || !got[0].Same(again) {
			t.Fatalf("node a was told %v; want once, the claim replaced (%v), not %v", got, again, ca)
		}
		if got := lostB.all(); len(got) != 1 || !got[0].Same(cb) {
			t.Fatalf("node b was told %v; want once, %v", got, cb)
		}
		wantOwner(t, b, "k", ca2)
		wantOwner(t, a, "k2", mustOwner(t, b, "k2"))
		if c := mustOwner(t, b, "k2"); c.Node != "a" {
			t.Fatalf("k2 is owned by %q, want a", c.Node)
		}
	})

	t.Run("stopped watch hears nothing", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		lost, stop := watch(a, "a")
		stop()
		claim(t, a, "k", "a")
		claim(t, b, "k", "b")
		// A takeover of a watched node later still arrives, so a notice
		// for the stopped watch would have had time to arrive too.
		lost2, stop2 := watch(a, "a")
		defer stop2()
		reach(t, a, "a", b, "b", lost2.heard)
		claim(t, a, "k2", "a")
		claim(t, b, "k2", "b")
		testkit.Eventually(t, within, "the second watch's notice", func() bool { return len(lost2.all()) > 0 })
		if got := lost.all(); len(got) != 0 {
			t.Fatalf("a stopped watch was told %v", got)
		}
	})

	t.Run("concurrent claims are ordered", func(t *testing.T) {
		node := newShared(t)
		const claimers, each = 8, 50
		var mu sync.Mutex
		seen := make(map[uint64]bool)
		var top broker.Claim
		var wg sync.WaitGroup
		for g := range claimers {
			name := fmt.Sprintf("n%d", g%2)
			h := node(name)
			wg.Go(func() {
				for range each {
					c, err := h.Claim("k", name, false)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if seen[c.Epoch] {
						t.Errorf("epoch %d given twice", c.Epoch)
					}
					seen[c.Epoch] = true
					if c.Epoch > top.Epoch {
						top = c
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != claimers*each {
			t.Fatalf("%d distinct epochs, want %d", len(seen), claimers*each)
		}
		wantOwner(t, node("n0"), "k", top)
	})
}

type notices struct {
	mu     sync.Mutex
	got    []broker.Claim
	probes int // notices of reach's probes, not in got
}

func (n *notices) heard() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.probes
}

func (n *notices) all() []broker.Claim {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]broker.Claim(nil), n.got...)
}

func watch(o broker.SessionOwners, node string) (*notices, func()) {
	n := &notices{}
	stop := o.Watch(node, func(c broker.Claim) {
		n.mu.Lock()
		if isProbe(c.Key) {
			n.probes++
		} else {
			n.got = append(n.got, c)
		}
		n.mu.Unlock()
	})
	return n, stop
}

// probePrefix starts the keys of reach's probes.
const probePrefix = "probe/"

func isProbe(key string) bool { return strings.HasPrefix(key, probePrefix) }

// reach waits until from's takeovers reach the watch of node (named
// node, handle o), which counts the probes it hears in heard: a cluster's
// servers learn of each other's subscriptions a moment after they are
// made, and a notice sent before that goes nowhere (a running node
// watches long before any of its sessions is taken over).
func reach(t *testing.T, o broker.SessionOwners, node string, from broker.SessionOwners, fromNode string, heard func() int) {
	t.Helper()
	n := 0
	testkit.Eventually(t, within, fmt.Sprintf("node %s to hear %s's takeovers", node, fromNode), func() bool {
		n++
		key := fmt.Sprintf("%s%d", probePrefix, n)
		claim(t, o, key, node)
		if _, err := from.Claim(key, fromNode, true); err != nil {
			t.Fatal(err)
		}
		return heard() > 0
	})
}

func claim(t *testing.T, o broker.SessionOwners, key, node string) broker.Claim {
	t.Helper()
	c, err := o.Claim(key, node, false)
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", key, node, err)
	}
	if c.Key != key || c.Node != node || c.Epoch == 0 {
		t.Fatalf("Claim(%s, %s) = %+v", key, node, c)
	}
	return c
}

func mustOwner(t *testing.T, o broker.SessionOwners, key string) broker.Claim {
	t.Helper()
	c, ok, err := o.Owner(key)
	if err != nil || !ok {
		t.Fatalf("Owner(%s): ok %v, err %v", key, ok, err)
	}
	return c
}

func wantOwner(t *testing.T, o broker.SessionOwners, key string, want broker.Claim) {
	t.Helper()
	if got := mustOwner(t, o, key); !got.Same(want) {
		t.Fatalf("Owner(%s) = %+v, want %+v", key, got, want)
	}
}
