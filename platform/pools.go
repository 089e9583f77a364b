package platform

import (
	"sync"
	"time"
)

// QoS2Pools holds the daily QoS 2 pools of every account: the effective
// QoS 2 messages an account may send in one UTC day (its plan's
// QoS2DailyPool). The Policy takes one unit for each message it lets go
// out at QoS 2, and demotes the account's messages to QoS 1 once a Take
// gets nothing.
//
// LocalPools, the single-node implementation, counts in memory (the
// counts survive a restart through the stored usage, Pool.Restore); a
// Policy with Options.QoS2Pools takes from that instead. A
// cluster implementation counts in one row per account and day, taken
// with one atomic update (PostgreSQL: UPDATE … SET used = used + least(n,
// size - used) WHERE used < size RETURNING), and spends on the message
// path units it took in blocks, so no message waits for the database.
//
// The contract a second implementation must meet (the suite in
// internal/contract, QoS2Pools, checks it):
//   - Take(account, day, n, size) takes min(n, size - used) units of the
//     account's pool of day (a UTC date, "2006-01-02"), 0 when it is used
//     up, and returns how many it took. The units taken by every caller,
//     on every node and at once, of one account and day never sum above
//     size, and sum to size when more were asked for.
//   - Each account and each day has a pool of its own: a new day starts
//     empty. Days only move forward: a Take for a day before the latest
//     day taken from the account may take nothing.
//   - Used(account, day) reports the units taken of that pool (0 for a
//     pool never taken from).
//   - An error means nothing was taken.
type QoS2Pools interface {
	Take(account, day string, n, size int64) (int64, error)
	Used(account, day string) (int64, error)
}

// LocalPools is the QoS2Pools of a single process: one Pool per account.
// It is safe for concurrent use.
type LocalPools struct {
	mu    sync.Mutex
	pools map[string]*Pool
}

// NewLocalPools returns pools with nothing taken.
func NewLocalPools() *LocalPools { return &LocalPools{pools: make(map[string]*Pool)} }

// Pool returns the account's pool.
func (l *LocalPools) Pool(account string) *Pool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pools[account]
	if p == nil {
		p = &Pool{}
		l.pools[account] = p
	}
	return p
}

// Take takes up to n units of the account's pool of day.
func (l *LocalPools) Take(account, day string, n, size int64) (int64, error) {
	p := l.Pool(account)
	p.mu.Lock()
	defer p.mu.Unlock()
	took, _ := p.takeLocked(day, n, size, time.Time{})
	return took, nil
}

// existing returns the account's pool, nil when it has none yet.
func (l *LocalPools) existing(account string) *Pool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pools[account]
}

// poolsLowered begins the demotion, at now, of the accounts whose pool
// size went from cur to snap below what they used today (a plan
// lowered), and keeps its time with the day's usage.
func (p *Policy) poolsLowered(cur, snap *Snapshot, now time.Time) {
	if cur == nil {
		return
	}
	for id, acc := range snap.Accounts {
		old := cur.Accounts[id]
		if old == nil || acc.QoS2DailyPool >= old.QoS2DailyPool {
			continue
		}
		if pl := p.pools.existing(id); pl != nil && pl.lowered(now, acc.QoS2DailyPool) {
			p.meter.account(id).slot(now).demotedSince(now)
		}
	}
}

// Used reports the units taken of the account's pool of day.
func (l *LocalPools) Used(account, day string) (int64, error) {
	p := l.Pool(account)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.day != day {
		return 0, nil
	}
	return p.used, nil
}

// takeLocked takes up to n units of the pool of day, of size. at, when
// not zero, is the time of the take: when the pool is used up by it, or
// found used up with no demotion time (its size was lowered below what
// was used), the demotion begins then (began). The caller holds p.mu.
func (p *Pool) takeLocked(day string, n, size int64, at time.Time) (took int64, began bool) {
	switch {
	case p.day < day:
		p.day, p.used, p.demoted, p.demotedAt = day, 0, 0, time.Time{}
	case p.day > day:
		return 0, false // a past day's pool is closed
	}
	took = max(min(n, size-p.used), 0)
	p.used += took
	if n > 0 && p.used >= size && p.demotedAt.IsZero() && !at.IsZero() {
		p.demotedAt = at // the pool is used up from here on
		return took, true
	}
	return took, false
}

// takeQoS2 takes one unit of the account's pool of size at now: from the
// Policy's own pool pl, or from Options.QoS2Pools, whose answer pl then
// records (its State is this node's view). A shared pool that fails
// gives no unit: the message goes out at QoS 1, never above the pool.
func (p *Policy) takeQoS2(pl *Pool, slot *dayCounters, account string, now time.Time, size int64) bool {
	shared := p.opts.QoS2Pools
	if shared == nil {
		took, began := pl.take(now, size)
		if began {
			slot.demotedSince(now) // kept with the day's usage, for a restart
		}
		return took
	}
	day := utcDay(now)
	n, err := shared.Take(account, day, 1, size)
	took := err == nil && n == 1
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.takeLocked(day, 0, size, now) // the day's counters, rolled over if need be
	began := false
	if took {
		pl.used++
	} else if err == nil {
		pl.used = max(pl.used, size) // used up, by the other nodes too
	}
	if pl.used >= size && pl.demotedAt.IsZero() && (took || err == nil) {
		pl.demotedAt, began = now, true
	}
	if began {
		slot.demotedSince(now)
	}
	if !took {
		pl.demoted++
	}
	return took
}

// PoolState is the account's QoS 2 pool of now's day, of size, as the
// account's owner sees it: on several nodes (Options.QoS2Pools) the units
// taken by all of them, read from the shared pools (this node's count
// when they cannot be read).
func (p *Policy) PoolState(account string, now time.Time, size int64) PoolState {
	st := p.Pool(account).State(now, size)
	shared := p.opts.QoS2Pools
	if shared == nil {
		return st
	}
	used, err := shared.Used(account, st.Day)
	if err != nil || used == st.Used {
		return st
	}
	st.Used = used
	if demoted := used >= size; demoted != st.Demoted {
		st.Demoted = demoted
		if demoted {
			st.Since = now // this node has not demoted yet: when another ran out is not known here
		} else {
			st.Since = time.Time{}
		}
	}
	return st
}
