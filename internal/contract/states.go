package contract

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// OwnersStates is a cluster's session claims and states: one handle a
// node uses for both.
type OwnersStates interface {
	broker.SessionOwners
	broker.SessionStates
}

// SessionStates runs the contract of broker.SessionStates beside the
// SessionOwners it goes with. newShared is as in SessionOwners: per case a
// new shared record and the handle each node uses on it. A state is taken
// by the claim that resumes the session, and from then on no earlier
// claim can save over it; a fresh claim discards it; a release removes
// it; and a claim that resumes waits for the old node's hand-over.
func SessionStates(t *testing.T, newShared func(t *testing.T) func(node string) OwnersStates) {
	t.Run("the next claim takes the state", func(t *testing.T) {
		node := newShared(t)
		a, b, c := node("a"), node("b"), node("c")
		ca := claim(t, a, "k", "a")
		save(t, a, ca, "a1")
		save(t, a, ca, "a2") // the holder saves as often as it likes
		cb := claim(t, b, "k", "b")
		wantState(t, b, cb, "a2")
		// a, late, cannot overwrite what b resumed.
		save(t, a, ca, "a3")
		save(t, b, cb, "b1")
		cc := claim(t, c, "k", "c")
		wantState(t, c, cc, "b1")
		save(t, b, cb, "b2")
		save(t, c, cc, "c1")
		cc2 := claim(t, c, "k", "c")
		wantState(t, c, cc2, "c1")
		// Keys are independent.
		cx := claim(t, a, "x", "a")
		wantState(t, a, cx, "")
	})

	t.Run("a fresh claim discards the state", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		ca := claim(t, a, "k", "a")
		save(t, a, ca, "a1")
		if _, err := b.Claim("k", "b", true); err != nil {
			t.Fatal(err)
		}
		save(t, a, ca, "a2") // the old node's hand-over comes too late
		cb2 := claim(t, b, "k", "b")
		wantState(t, b, cb2, "")
	})

	t.Run("a new key's first claim discards what an older claim saves", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		ca := claim(t, a, "k", "a")
		if ok, err := a.Release(ca); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		cb := claim(t, b, "k", "b") // the key is free: a new row
		save(t, a, ca, "stale")     // a, late with its old claim
		wantState(t, b, cb, "")
	})

	t.Run("rounds say until when a state was current", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		ca := claim(t, a, "k", "a")
		save(t, a, ca, "a1")
		at := time.Date(2026, 5, 1, 10, 0, 0, 123456000, time.UTC)
		if err := a.Round("a", at); err != nil {
			t.Fatal(err)
		}
		if err := a.Round("other", at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		state, through, ok, err := b.Take(claim(t, b, "k", "b"))
		if err != nil || !ok || string(state) != "a1" || !through.Equal(at) {
			t.Fatalf("Take = %q, through %v, %v, %v; want a1 through a's round %v", state, through, ok, err, at)
		}
		// b dies before it saves: c takes the same state, and a's rounds
		// say nothing of it any more (b held it since).
		c := node("c")
		state, through, ok, err = c.Take(claim(t, c, "k", "c"))
		if err != nil || !ok || string(state) != "a1" || !through.IsZero() {
			t.Fatalf("Take after b took it = %q, through %v, %v, %v; want a1 with no round", state, through, ok, err)
		}
	})

	t.Run("a fresh claim's notice says so", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		lost, stop := watch(a, "a")
		defer stop()
		reach(t, a, "a", b, "b", lost.heard)
		claim(t, a, "k", "a")
		if _, err := b.Claim("k", "b", true); err != nil {
			t.Fatal(err)
		}
		claim(t, a, "k2", "a")
		claim(t, b, "k2", "b") // resumes: waits for a's answer
		testkit.Eventually(t, within, "both notices", func() bool { return len(lost.all()) == 2 })
		for _, c := range lost.all() {
			if want := c.Key == "k"; c.Fresh != want {
				t.Fatalf("the notice of %s says fresh %v, want %v", c.Key, c.Fresh, want)
			}
		}
	})

	t.Run("nothing to resume", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		ca := claim(t, a, "k", "a")
		save(t, a, ca, "a1")
		if err := a.Save(ca, nil); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, claim(t, b, "k", "b"), "")
	})

	t.Run("a release removes the state", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		ca := claim(t, a, "k", "a")
		save(t, a, ca, "a1")
		if ok, err := a.Release(ca); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		wantState(t, b, claim(t, b, "k", "b"), "")
	})

	t.Run("a resuming claim waits for the hand-over", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		// a saves the session's last state when it hears of the
		// takeover, as a broker does; b's claim returns after that.
		var probes atomic.Int32
		stop := a.Watch("a", func(old broker.Claim) {
			if isProbe(old.Key) {
				probes.Add(1)
				return
			}
			if err := a.Save(old, []byte("handed over")); err != nil {
				t.Error(err)
			}
		})
		defer stop()
		reach(t, a, "a", b, "b", func() int { return int(probes.Load()) })
		ca := claim(t, a, "k", "a")
		save(t, a, ca, "before")
		wantState(t, b, claim(t, b, "k", "b"), "handed over")
	})
}

func save(t *testing.T, o OwnersStates, c broker.Claim, state string) {
	t.Helper()
	if err := o.Save(c, []byte(state)); err != nil {
		t.Fatalf("Save(%v, %q): %v", c, state, err)
	}
}

// wantState takes c's state and checks it is want ("" for none).
func wantState(t *testing.T, o OwnersStates, c broker.Claim, want string) {
	t.Helper()
	got, _, ok, err := o.Take(c)
	if err != nil {
		t.Fatalf("Take(%v): %v", c, err)
	}
	if ok != (want != "") || string(got) != want {
		t.Fatalf("Take(%v) = %q, %v; want %q", c, got, ok, want)
	}
}
