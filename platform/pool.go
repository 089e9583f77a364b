package platform

import (
	"sync"
	"time"
)

// Pool is one account's daily pool of effective QoS 2 messages. It resets
// at UTC midnight. Safe for concurrent use; Take is a short critical section
// with no I/O.
type Pool struct {
	mu        sync.Mutex
	day       string // UTC date of the counters
	used      int64
	demoted   int64 // QoS 2 messages demoted today
	demotedAt time.Time
}

// utcDay is the UTC calendar day of t.
func utcDay(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Take uses one unit of a pool of size at now. It reports false (and
// counts a demotion) once the day's pool is used up.
func (p *Pool) Take(now time.Time, size int64) bool {
	took, _ := p.take(now, size)
	return took
}

// take is Take; began reports that the demotion began with it (the pool
// is used up from now on).
func (p *Pool) take(now time.Time, size int64) (took, began bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, began := p.takeLocked(utcDay(now), 1, size, now)
	if n == 1 {
		return true, began
	}
	p.demoted++
	return false, began
}

// PoolState is a pool's state on a day.
type PoolState struct {
	Day       string
	Used      int64
	Demotions int64
	Demoted   bool      // the pool is used up: state/ and event/ go out as QoS 1
	Since     time.Time // when the demotion began (zero when not demoted)
	ResetsAt  time.Time // next UTC midnight
}

// State reports the pool at now for a pool of size.
func (p *Pool) State(now time.Time, size int64) PoolState {
	day := utcDay(now)
	u := now.UTC()
	next := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.day != day {
		return PoolState{Day: day, ResetsAt: next}
	}
	st := PoolState{Day: day, Used: p.used, Demotions: p.demoted, ResetsAt: next}
	if p.used >= size {
		st.Demoted = true
		st.Since = p.demotedAt
	}
	return st
}

// Restore sets today's usage (from stored usage after a restart): the
// units used, the demotions and since when the pool is used up (zero:
// it was not).
func (p *Pool) Restore(now time.Time, used, demotions int64, demotedSince time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.day, p.used, p.demoted, p.demotedAt = utcDay(now), used, demotions, demotedSince
}

// lowered applies a pool size lowered at now: when today's use is at or
// over the new size, the demotion begins now (it reports so), unless it
// had begun already.
func (p *Pool) lowered(now time.Time, size int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.day != utcDay(now) || p.used < size || !p.demotedAt.IsZero() {
		return false
	}
	p.demotedAt = now
	return true
}
