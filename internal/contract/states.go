package contract

import (
	"testing"

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
		cb, err := b.Claim("k", "b", true)
		if err != nil {
			t.Fatal(err)
		}
		save(t, a, ca, "a2") // the old node's hand-over comes too late
		cb2 := claim(t, b, "k", "b")
		wantState(t, b, cb2, "")
		_ = cb
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
		stop := a.Watch("a", func(old broker.Claim) {
			if err := a.Save(old, []byte("handed over")); err != nil {
				t.Error(err)
			}
		})
		defer stop()
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
	got, ok, err := o.Take(c)
	if err != nil {
		t.Fatalf("Take(%v): %v", c, err)
	}
	if ok != (want != "") || string(got) != want {
		t.Fatalf("Take(%v) = %q, %v; want %q", c, got, ok, want)
	}
}
