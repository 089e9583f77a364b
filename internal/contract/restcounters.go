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

// RESTReservations runs the contract of restauth.Reserver: reservations
// from many processes at once never pass the limit, each at most a
// sixteenth of what is left (at least one); a negative add gives requests
// back; and two shared limiters on the store allow a token exactly the
// limit in all.
func RESTReservations(t *testing.T, newShared func(t *testing.T) func(node string) restauth.Reserver) {
	w := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()

	t.Run("reservations never pass the limit", func(t *testing.T) {
		node := newShared(t)
		const reservers, each, block, limit = 8, 20, 3, 100
		var mu sync.Mutex
		total := int64(0)
		var wg sync.WaitGroup
		for g := range reservers {
			h := node(fmt.Sprintf("n%d", g%2))
			wg.Go(func() {
				for range each {
					got, count, err := h.ReserveRESTRequests(ctx, w, "tok", block, limit)
					if err != nil {
						t.Error(err)
						return
					}
					if got < 0 || got > max((limit-(count-got))/16, 1) || got > block || count > limit {
						t.Errorf("ReserveRESTRequests(%d, limit %d) = %d, count %d", block, limit, got, count)
					}
					mu.Lock()
					total += got
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if total != limit {
			t.Fatalf("%d requests reserved in all for a limit of %d (asked %d)", total, limit, reservers*each*block)
		}
		got, count, err := node("n0").ReserveRESTRequests(ctx, w, "tok", 1, limit)
		if err != nil || got != 0 || count != limit {
			t.Fatalf("a reservation at the limit = %d, count %d, %v; want 0, %d", got, count, err, limit)
		}
		// Given back, reserved again; other tokens and windows apart.
		if err := node("n1").AddRESTRequests(ctx, w, map[string]int64{"tok": -4}); err != nil {
			t.Fatal(err)
		}
		for i := range 4 { // near the limit: one at a time
			if got, count, err := node("n0").ReserveRESTRequests(ctx, w, "tok", 10, limit); err != nil || got != 1 || count != limit-3+int64(i) {
				t.Fatalf("after 4 were given back, reservation %d: %d, count %d, %v; want 1, %d", i, got, count, err, limit-3+i)
			}
		}
		// The next window: a sixteenth of the limit at most.
		if got, _, err := node("n0").ReserveRESTRequests(ctx, w.Add(time.Hour), "tok", 10, limit); err != nil || got != limit/16 {
			t.Fatalf("the next window: reserved %d, %v; want %d", got, err, limit/16)
		}
		if got, _, err := node("n0").ReserveRESTRequests(ctx, w.Add(2*time.Hour), "tok", 3, limit); err != nil || got != 3 {
			t.Fatalf("a window with room: reserved %d of 3, %v", got, err)
		}
	})

	t.Run("two shared limiters allow the limit exactly", func(t *testing.T) {
		node := newShared(t)
		now := w.Add(10 * time.Minute)
		const limit = 30
		la, lb := restauth.NewSharedLimiter(node("a"), limit), restauth.NewSharedLimiter(node("b"), limit)
		allowed := 0
		for i := range 3 * limit {
			l := la
			if i%2 == 1 {
				l = lb
			}
			if d := l.Allow("tok", now); d.Allowed {
				allowed++
				if d.Used > limit || d.Remaining < 0 {
					t.Fatalf("request %d: used %d, remaining %d for a limit of %d", i, d.Used, d.Remaining, limit)
				}
			}
		}
		if allowed > limit || allowed < limit-2 {
			t.Fatalf("%d requests allowed over two limiters, want the limit %d (less at most one reserved on each)", allowed, limit)
		}
		// a stops; two of its Flushes later what it held is back, and b,
		// asking the store again a second later, gets the rest: the limit
		// in all.
		for range 2 {
			if err := la.Flush(ctx, now); err != nil {
				t.Fatal(err)
			}
		}
		for range limit {
			if lb.Allow("tok", now.Add(time.Second)).Allowed {
				allowed++
			}
		}
		if allowed != limit {
			t.Fatalf("%d requests allowed in all once a gave back what it held, want %d", allowed, limit)
		}
		if d := lb.Peek("tok", now.Add(time.Second)); d.Allowed || d.Remaining != 0 {
			t.Fatalf("Peek at the limit: %+v", d)
		}
	})
}
