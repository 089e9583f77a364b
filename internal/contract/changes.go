package contract

import (
	"context"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/platform"
)

// Changes runs the contract of platform.Changes. newShared returns, per
// case, a function that makes one control-plane change (committed when it
// returns) and a function giving the Changes a node uses; bound is the
// implementation's stated bound between a change and its notice on every
// node: each watcher hears each change within bound, changes in a burst
// are heard (at least once, after the last), and a watch ends with its
// context.
func Changes(t *testing.T, newShared func(t *testing.T) (change func(t *testing.T), node func(name string) platform.Changes), bound time.Duration) {
	heard := func(t *testing.T, what string, ch <-chan struct{}) {
		t.Helper()
		deadline := time.NewTimer(bound)
		defer deadline.Stop()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
		case <-deadline.C:
			t.Fatalf("%s: no notice within %v", what, bound)
		}
	}
	drain := func(chs ...<-chan struct{}) {
		for _, ch := range chs {
			for len(ch) > 0 {
				<-ch
			}
		}
	}

	t.Run("every watcher hears each change", func(t *testing.T) {
		change, node := newShared(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wa, wb, wa2 := node("a").Watch(ctx), node("b").Watch(ctx), node("a").Watch(ctx)
		for range 3 {
			drain(wa, wb, wa2)
			change(t)
			heard(t, "node a", wa)
			heard(t, "node b", wb)
			heard(t, "node a's second watch", wa2)
		}
	})

	t.Run("a burst is heard after its last change", func(t *testing.T) {
		change, node := newShared(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := node("b").Watch(ctx)
		for range 5 {
			change(t)
		}
		drain(w) // what was heard so far may predate the last change
		change(t)
		heard(t, "the burst's last change", w)
	})

	t.Run("the watch ends with its context", func(t *testing.T) {
		_, node := newShared(t)
		ctx, cancel := context.WithCancel(context.Background())
		w := node("a").Watch(ctx)
		cancel()
		deadline := time.NewTimer(bound)
		defer deadline.Stop()
		for {
			select {
			case _, ok := <-w:
				if !ok {
					return
				}
			case <-deadline.C:
				t.Fatalf("the channel was not closed within %v of the end of its context", bound)
			}
		}
	})
}
