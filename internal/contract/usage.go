package contract

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/fleetmq/fleetmq"
)

// Usage runs the contract of the metering seam: the usage store every
// node's meter flushes its increments to (platform.UsageSink, read back
// through fleetmq.UsageStore). newShared returns, per case, a new shared
// store and a function giving the handle a node uses on it: increments
// from every node sum exactly per account and day (and per client), even
// when flushed at once; accounts and days stay apart.
func Usage(t *testing.T, newShared func(t *testing.T) func(node string) fleetmq.UsageStore) {
	const acc1, acc2 = "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a", "9e1d2c3b-4a59-4687-8f6e-5d4c3b2a1908"
	const d1, d2 = "2026-03-01", "2026-03-02"
	ctx := context.Background()
	delta := func(acc, day string, k int64) fleetmq.DailyUsage {
		return fleetmq.DailyUsage{AccountID: acc, Day: day, Messages: [3]int64{k, 2 * k, 3 * k}, Bytes: [3]int64{10 * k, 20 * k, 30 * k},
			PoolUsed: 3 * k, Demotions: k, Refused: k, Drops: map[string]int64{"queue_full": k}}
	}
	daily := func(t *testing.T, s fleetmq.UsageStore, acc, day string, want fleetmq.DailyUsage) {
		t.Helper()
		got, err := s.Usage(ctx, acc, day, day)
		if err != nil {
			t.Fatalf("Usage: %v", err)
		}
		if len(got) != 1 {
			t.Fatalf("Usage(%s, %s) = %+v, want one day", acc, day, got)
		}
		g := got[0]
		if g.Day != day || g.Messages != want.Messages || g.Bytes != want.Bytes || g.PoolUsed != want.PoolUsed ||
			g.Demotions != want.Demotions || g.Refused != want.Refused || !maps.Equal(g.Drops, want.Drops) {
			t.Fatalf("Usage(%s, %s) = %+v, want %+v", acc, day, g, want)
		}
	}

	t.Run("increments of every node sum", func(t *testing.T) {
		node := newShared(t)
		a, b := node("a"), node("b")
		if err := a.AddUsage(ctx, []fleetmq.DailyUsage{delta(acc1, d1, 1), delta(acc2, d1, 5)},
			[]fleetmq.ClientUsage{{AccountID: acc1, ClientID: "dev-1", Day: d1, Messages: [3]int64{1, 2, 3}}}); err != nil {
			t.Fatal(err)
		}
		if err := b.AddUsage(ctx, []fleetmq.DailyUsage{delta(acc1, d1, 2), delta(acc1, d2, 7)},
			[]fleetmq.ClientUsage{{AccountID: acc1, ClientID: "dev-1", Day: d2, Messages: [3]int64{1, 0, 0}},
				{AccountID: acc1, ClientID: "dev-2", Day: d1, Messages: [3]int64{0, 1, 0}}}); err != nil {
			t.Fatal(err)
		}
		daily(t, a, acc1, d1, delta(acc1, d1, 3))
		daily(t, b, acc1, d2, delta(acc1, d2, 7))
		daily(t, b, acc2, d1, delta(acc2, d1, 5))
		cs, err := a.ClientUsage(ctx, acc1, d1, d2)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][3]int64{}
		for _, c := range cs {
			if c.AccountID != "" && c.AccountID != acc1 {
				t.Fatalf("ClientUsage of %s returned %+v", acc1, c)
			}
			got[c.ClientID] = c.Messages
		}
		if want := map[string][3]int64{"dev-1": {2, 2, 3}, "dev-2": {0, 1, 0}}; !maps.Equal(got, want) {
			t.Fatalf("ClientUsage = %v, want %v", got, want)
		}
	})

	t.Run("flushes at once sum exactly", func(t *testing.T) {
		node := newShared(t)
		const flushers, each = 8, 25
		var wg sync.WaitGroup
		for g := range flushers {
			h := node(fmt.Sprintf("n%d", g%2))
			wg.Go(func() {
				for range each {
					if err := h.AddUsage(ctx, []fleetmq.DailyUsage{delta(acc1, d1, 1)},
						[]fleetmq.ClientUsage{{AccountID: acc1, ClientID: "dev-1", Day: d1, Messages: [3]int64{1, 0, 0}}}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		daily(t, node("n0"), acc1, d1, delta(acc1, d1, flushers*each))
	})
}
