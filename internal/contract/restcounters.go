package contract

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/web/restauth"
)

// RESTCounters runs the contract of restauth.CounterStore. newShared
// returns, per case, new shared counters and a function giving the handle
// a node uses on them: adds of every node sum per token and hourly
// window, exactly, even at once; and two Limiters on the one store (two
// nodes) converge on the shared counts at each Flush.
func RESTCounters(t *testing.T, newShared func(t *testing.T) func(node string) restauth.CounterStore) {
	w := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // a window's start
	ctx := context.Background()
	add := func(t *testing.T, s restauth.CounterStore, window time.Time, counts map[string]int64) {
		t.Helper()
		if err := s.AddRESTRequests(ctx, window, counts); err != nil {
			t.Fatalf("AddRESTRequests: %v", err)
		}
	}
	read := func(t *testing.T, s restauth.CounterStore, window time.Time, want map[string]int64) {
		t.Helper()
		got, err := s.RESTRequests(ctx, window)
		if err != nil {
			t.Fatalf("RESTRequests: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("RESTRequests(%v) = %v, want %v", window, got, want)
		}
		for k, n := range want {
			if got[k] != n {
				t.Fatalf("RESTRequests(%v) = %v, want %v", window, got, want)
			}
		}
	}

	t.Run("adds sum per token and window", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		read(t, a, w, map[string]int64{})
		add(t, a, w, map[string]int64{"tok1": 3, "tok2": 1})
		add(t, b, w, map[string]int64{"tok1": 4, "tok3": 0})
		add(t, b, w.Add(time.Hour), map[string]int64{"tok1": 2})
		add(t, a, w, map[string]int64{})
		read(t, b, w, map[string]int64{"tok1": 7, "tok2": 1})
		read(t, a, w.Add(time.Hour), map[string]int64{"tok1": 2})
	})

	t.Run("concurrent adds are exact", func(t *testing.T) {
		node := newShared(t)
		const adders, each = 8, 25
		var wg sync.WaitGroup
		for g := range adders {
			h := node(fmt.Sprintf("n%d", g%2))
			wg.Go(func() {
				for i := range each {
					if err := h.AddRESTRequests(ctx, w, map[string]int64{"shared": 1, fmt.Sprintf("own%d", g): int64(i + 1)}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		want := map[string]int64{"shared": adders * each}
		for g := range adders {
			want[fmt.Sprintf("own%d", g)] = each * (each + 1) / 2
		}
		read(t, node("n0"), w, want)
	})

	t.Run("two limiters converge at Flush", func(t *testing.T) {
		node := newShared(t)
		now := w.Add(10 * time.Minute)
		la := restauth.NewLimiter(node("a"), 10)
		lb := restauth.NewLimiter(node("b"), 10)
		for range 3 {
			la.Allow("tok", now)
		}
		for range 4 {
			lb.Allow("tok", now)
		}
		if err := la.Flush(ctx, now); err != nil {
			t.Fatal(err)
		}
		if err := lb.Flush(ctx, now); err != nil {
			t.Fatal(err)
		}
		if err := la.Flush(ctx, now); err != nil { // reads back what b added
			t.Fatal(err)
		}
		for name, l := range map[string]*restauth.Limiter{"a": la, "b": lb} {
			if d := l.Peek("tok", now); d.Used != 7 || d.Remaining != 3 {
				t.Fatalf("node %s after the flushes: used %d, remaining %d; want 7 and 3", name, d.Used, d.Remaining)
			}
		}
		read(t, node("a"), w, map[string]int64{"tok": 7})
	})
}
