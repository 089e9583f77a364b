package contract

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fleetmq/fleetmq/platform"
)

// QoS2Pools runs the contract of platform.QoS2Pools. newShared returns,
// per case, new shared pools and a function giving the handle a node
// uses on them: takes never exceed the pool, even from 8 goroutines on
// two nodes at once; accounts and days have pools of their own.
func QoS2Pools(t *testing.T, newShared func(t *testing.T) func(node string) platform.QoS2Pools) {
	const d1, d2 = "2026-03-01", "2026-03-02"
	take := func(t *testing.T, p platform.QoS2Pools, acct, day string, n, size, want int64) {
		t.Helper()
		got, err := p.Take(acct, day, n, size)
		if err != nil || got != want {
			t.Fatalf("Take(%s, %s, %d, %d) = %d, %v; want %d", acct, day, n, size, got, err, want)
		}
	}
	used := func(t *testing.T, p platform.QoS2Pools, acct, day string, want int64) {
		t.Helper()
		if got, err := p.Used(acct, day); err != nil || got != want {
			t.Fatalf("Used(%s, %s) = %d, %v; want %d", acct, day, got, err, want)
		}
	}

	t.Run("take up to the size", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		used(t, a, "acct1", d1, 0)
		take(t, a, "acct1", d1, 3, 5, 3)
		take(t, b, "acct1", d1, 3, 5, 2) // another node sees what a took
		take(t, a, "acct1", d1, 1, 5, 0)
		used(t, b, "acct1", d1, 5)
		take(t, a, "acct2", d1, 4, 5, 4) // accounts are apart
		used(t, a, "acct2", d1, 4)
		used(t, a, "acct1", d1, 5)
		take(t, b, "acct1", d2, 5, 5, 5) // a new day starts empty
		used(t, a, "acct1", d2, 5)
		take(t, a, "acct1", d2, 1, 5, 0)
		take(t, a, "acct3", d1, 1, 0, 0) // a pool of size 0 gives nothing
	})

	t.Run("a past day never adds to today", func(t *testing.T) {
		node := newShared(t)
		a := node("a")
		take(t, a, "acct1", d2, 2, 3, 2)
		if _, err := a.Take("acct1", d1, 5, 3); err != nil {
			t.Fatal(err)
		}
		used(t, a, "acct1", d2, 2)
		take(t, a, "acct1", d2, 5, 3, 1)
	})

	t.Run("never exceeded by concurrent takers", func(t *testing.T) {
		node := newShared(t)
		const size, takers = 1000, 8
		var total atomic.Int64
		var wg sync.WaitGroup
		for g := range takers {
			h := node(fmt.Sprintf("n%d", g%2))
			wg.Go(func() {
				for i := 0; ; i++ {
					n := int64(1 + (g+i)%7) // 1 to 7 at a time
					got, err := h.Take("acct1", d1, n, size)
					if err != nil {
						t.Error(err)
						return
					}
					if got < 0 || got > n {
						t.Errorf("Take of %d took %d", n, got)
						return
					}
					total.Add(got)
					if got == 0 {
						return // used up
					}
				}
			})
		}
		wg.Wait()
		if got := total.Load(); got != size {
			t.Fatalf("the takers took %d units of a pool of %d", got, size)
		}
		used(t, node("n0"), "acct1", d1, size)
	})
}
