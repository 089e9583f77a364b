package platform_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/platform"
)

// TestBlockPoolsNeverExceed: three nodes' block pools over one shared
// pool, eight publishers each taking one unit at a time: the units spent
// never sum above the pool, and at most one and a half blocks per node are left unspent
// when it runs out (one and a half blocks: a block and the half fetched
// ahead); a new day starts a new pool.
func TestBlockPoolsNeverExceed(t *testing.T) {
	shared := platform.NewLocalPools()
	const size, block, nodes = 1000, 16, 3
	var spent atomic.Int64
	var wg sync.WaitGroup
	var pools []*platform.BlockPools
	for range nodes {
		pools = append(pools, &platform.BlockPools{Shared: shared, Block: block})
	}
	for g := range 8 {
		p := pools[g%nodes]
		wg.Go(func() {
			for misses := 0; misses < 50; {
				n, err := p.Take("acct", "2026-03-01", 1, size)
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					misses++
				}
				spent.Add(n)
			}
		})
	}
	wg.Wait()
	if got := spent.Load(); got > size || got < size-nodes*block*3/2 {
		t.Fatalf("spent %d units of a pool of %d (at most %d may stay in the nodes' blocks)", got, size, nodes*block*3/2)
	}
	if used, _ := shared.Used("acct", "2026-03-01"); used != size {
		t.Fatalf("the shared pool says %d taken, want all %d", used, size)
	}
	if n, _ := pools[1].Take("acct", "2026-03-02", 1, size); n != 1 {
		t.Fatalf("the next day's first take got %d units, want 1", n)
	}
	if n, _ := pools[1].Take("acct", "2026-03-01", 1, size); n != 0 {
		t.Fatalf("a take from the day before got %d units", n)
	}
	t.Logf("spent %d of %d", spent.Load(), size)
}

// TestBlockPoolsSpendWithoutTheStore: after the first block, takes are
// served from the node's block: the shared pool sees one take per block
// at most.
func TestBlockPoolsSpendWithoutTheStore(t *testing.T) {
	shared := &countingPools{QoS2Pools: platform.NewLocalPools()}
	p := &platform.BlockPools{Shared: shared, Block: 16}
	for i := range 160 {
		if n, err := p.Take("acct", "2026-03-01", 1, 10_000); n != 1 || err != nil {
			t.Fatalf("take %d: %d, %v", i, n, err)
		}
	}
	if c := shared.takes.Load(); c > 12 {
		t.Fatalf("160 units took %d takes from the shared pool, want about one per block of 16", c)
	}
}

type countingPools struct {
	platform.QoS2Pools
	takes atomic.Int64
}

func (c *countingPools) Take(account, day string, n, size int64) (int64, error) {
	c.takes.Add(1)
	return c.QoS2Pools.Take(account, day, n, size)
}

// TestBlockPoolsPlanGrows: a node whose pool ran dry takes again once the
// account's plan gives a larger pool the same day.
func TestBlockPoolsPlanGrows(t *testing.T) {
	p := &platform.BlockPools{Shared: platform.NewLocalPools(), Block: 16}
	for range 20 {
		p.Take("acct", "2026-03-01", 1, 20)
	}
	if n, _ := p.Take("acct", "2026-03-01", 1, 20); n != 0 {
		t.Fatalf("a take from a used-up pool got %d", n)
	}
	if n, _ := p.Take("acct", "2026-03-01", 1, 1000); n != 1 {
		t.Fatalf("after the pool grew to 1000, a take got %d units, want 1", n)
	}
}

// TestBlockPoolsFailingStore: while the database fails, takes fail at
// once after the first, instead of each waiting for it in turn.
func TestBlockPoolsFailingStore(t *testing.T) {
	slow := &failingPools{delay: 200 * time.Millisecond}
	p := &platform.BlockPools{Shared: slow}
	start := time.Now()
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if _, err := p.Take("acct", "2026-03-01", 1, 100); err == nil {
				t.Error("a take from a failing store succeeded")
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > time.Second {
		t.Fatalf("6 takes from a failing store took %v: they waited for it one after the other", took)
	}
	if c := slow.calls.Load(); c != 1 {
		t.Fatalf("the failing store was asked %d times, want once", c)
	}
}

type failingPools struct {
	delay time.Duration
	calls atomic.Int64
}

func (f *failingPools) Take(string, string, int64, int64) (int64, error) {
	f.calls.Add(1)
	time.Sleep(f.delay)
	return 0, errors.New("database down")
}

func (f *failingPools) Used(string, string) (int64, error) { return 0, errors.New("database down") }
