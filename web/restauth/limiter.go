package restauth

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRateLimit is the requests a token may make per hour (spec
// "Limits").
const DefaultRateLimit = 5000

// CounterStore keeps the request counts of hourly windows, shared by
// every process on one database; a fleetmq.ControlStore is one (SQLite on
// one node, PostgreSQL's atomic INSERT … ON CONFLICT DO UPDATE SET count =
// count + excluded.count on several). The Limiter counts in memory and
// flushes to it, so a token's standing is shared within a flush interval.
//
// The contract a second implementation must meet (the suite in
// internal/contract, RESTCounters, checks it):
//   - AddRESTRequests adds each count to the token's count in the window
//     (its start, a whole UTC hour); adds from any number of processes at
//     once sum exactly; a zero count or an empty map changes nothing.
//   - RESTRequests returns every token's count in the window (an empty
//     map, not an error, when none was added).
//   - Windows more than two hours before the latest one added to may be
//     forgotten.
type CounterStore interface {
	AddRESTRequests(ctx context.Context, window time.Time, counts map[string]int64) error
	RESTRequests(ctx context.Context, window time.Time) (map[string]int64, error)
}

// Decision is the outcome of Allow, with what the X-RateLimit-* headers
// and Retry-After report.
type Decision struct {
	Allowed    bool
	Limit      int           // requests per window
	Remaining  int           // requests left in the window (0 when denied)
	Used       int           // requests counted in the window, this one included when allowed
	Reset      time.Time     // end of the window (X-RateLimit-Reset, epoch seconds)
	RetryAfter time.Duration // denied: until Reset; allowed: 0
	// Unavailable says a shared limiter refused because its store could
	// not be asked (RetryAfter one second), not because the token used
	// its hour.
	Unavailable bool
}

// Limiter limits requests per token in fixed windows of one UTC hour. A
// denied request is not counted (as GitHub's API does: Remaining stays 0).
// Allow works on in-memory atomic counters; Flush adds what was counted to
// the store and reads back the window's totals, so counts survive a
// restart (Load at start) and several processes on one database converge
// on shared counts within a flush interval. It is safe for concurrent use.
type Limiter struct {
	store    CounterStore
	limit    uint64
	counters sync.Map   // token id -> *counter
	mu       sync.Mutex // serialises Load and Flush
	// shared, when set, makes the limit exact across the processes on
	// the store (NewSharedLimiter): requests are reserved there first.
	shared       Reserver
	reservations sync.Map // token id -> *reservation (shared only)
}

// counter packs a token's window (the hour since the Unix epoch) and the
// requests counted in it into one word, so a request's check, rollover and
// increment are one compare-and-swap.
type counter struct {
	state   atomic.Uint64 // hour<<32 | used
	flushed uint64        // the state as last flushed or loaded; guarded by Limiter.mu
}

const countMask = 1<<32 - 1

func pack(hour, n uint64) uint64       { return hour<<32 | n }
func unpack(s uint64) (hour, n uint64) { return s >> 32, s & countMask }

// hourOf is the window of t: whole hours since the Unix epoch, UTC.
func hourOf(t time.Time) uint64 {
	s := t.Unix()
	if s < 0 {
		return 0
	}
	return uint64(s / 3600)
}

func windowStart(hour uint64) time.Time { return time.Unix(int64(hour)*3600, 0).UTC() }

// NewLimiter returns a limiter of limit requests per token and hour
// (DefaultRateLimit when limit <= 0) whose counts persist in store (nil:
// in memory only).
func NewLimiter(store CounterStore, limit int) *Limiter {
	if limit <= 0 {
		limit = DefaultRateLimit
	}
	return &Limiter{store: store, limit: min(uint64(limit), countMask)}
}

func (l *Limiter) counter(tokenID string) *counter {
	if c, ok := l.counters.Load(tokenID); ok {
		return c.(*counter)
	}
	c, _ := l.counters.LoadOrStore(tokenID, new(counter))
	return c.(*counter)
}

// Allow counts a request of the token at now unless the token has used the
// window's limit.
func (l *Limiter) Allow(tokenID string, now time.Time) Decision {
	if l.shared != nil {
		return l.allowShared(tokenID, now)
	}
	c := l.counter(tokenID)
	for {
		h := hourOf(now)
		old := c.state.Load()
		oh, used := unpack(old)
		switch {
		case oh > h:
			// Another request, stamped later, already opened the next
			// window: count this one there too.
			h = oh
		case oh < h:
			used = 0 // a new window
		}
		if used >= l.limit {
			return l.decision(false, used, h, now)
		}
		if c.state.CompareAndSwap(old, pack(h, used+1)) {
			return l.decision(true, used+1, h, now)
		}
	}
}

// Unallow gives back the request Allow counted for the token with the
// decision d, which the server then refused for a reason of its own (a
// refused request is counted by no limit). Nothing is given back once
// the token's window moved past d's.
func (l *Limiter) Unallow(tokenID string, d Decision) {
	if !d.Allowed {
		return
	}
	h := hourOf(d.Reset) - 1
	if l.shared != nil {
		r := l.reservation(tokenID)
		r.mu.Lock()
		if r.hour == h && r.used > 0 {
			r.used--
		}
		r.mu.Unlock()
		return
	}
	c := l.counter(tokenID)
	for {
		old := c.state.Load()
		oh, used := unpack(old)
		if oh != h || used == 0 || c.state.CompareAndSwap(old, pack(oh, used-1)) {
			return
		}
	}
}

// Limit is the requests a token may make per hour.
func (l *Limiter) Limit() int { return int(l.limit) }

// Peek is the token's standing at now without counting a request: what
// the X-RateLimit-* headers of a response refused by another limit say.
func (l *Limiter) Peek(tokenID string, now time.Time) Decision {
	if l.shared != nil {
		return l.peekShared(tokenID, now)
	}
	h := hourOf(now)
	oh, used := unpack(l.counter(tokenID).state.Load())
	switch {
	case oh > h:
		h = oh
	case oh < h:
		used = 0
	}
	d := l.decision(true, used, h, now)
	d.Allowed = used < l.limit
	if !d.Allowed {
		d.RetryAfter = d.Reset.Sub(now)
	}
	return d
}

func (l *Limiter) decision(allowed bool, used, hour uint64, now time.Time) Decision {
	d := Decision{Allowed: allowed, Limit: int(l.limit), Used: int(used), Reset: windowStart(hour + 1)}
	if used < l.limit {
		d.Remaining = int(l.limit - used)
	}
	if !allowed {
		d.RetryAfter = d.Reset.Sub(now)
	}
	return d
}

// Load reads the counts of now's window from the store and adds them to
// the in-memory ones: call it at start, before serving.
func (l *Limiter) Load(ctx context.Context, now time.Time) error {
	if l.store == nil || l.shared != nil { // a shared limiter reads the store's count as it reserves
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sync(ctx, hourOf(now))
}

// sync reads the stored counts of window h and makes them the base of the
// in-memory counters: used = stored + counted here and not yet flushed.
func (l *Limiter) sync(ctx context.Context, h uint64) error {
	stored, err := l.store.RESTRequests(ctx, windowStart(h))
	if err != nil {
		return fmt.Errorf("restauth: load request counts: %w", err)
	}
	for id, n := range stored {
		if n < 0 {
			continue
		}
		base := min(uint64(n), countMask)
		c := l.counter(id)
		for {
			old := c.state.Load()
			oh, used := unpack(old)
			if oh > h {
				break // already counting a later window
			}
			var unflushed uint64
			if oh == h {
				unflushed = used
				if fh, fn := unpack(c.flushed); fh == h {
					unflushed -= fn
				}
			}
			if c.state.CompareAndSwap(old, pack(h, min(base+unflushed, countMask))) {
				c.flushed = pack(h, base)
				break
			}
		}
	}
	return nil
}

// Flush adds the requests counted since the last Flush (or Load) to the
// store, then reads back now's window so counts other processes flushed
// are included. Call it periodically and at shutdown. On error what was
// not written stays pending for the next Flush. A shared limiter
// (NewSharedLimiter) instead gives back what it reserved and did not use
// for the tokens idle here since the previous Flush.
func (l *Limiter) Flush(ctx context.Context, now time.Time) error {
	if l.store == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shared != nil {
		if err := l.release(ctx, false); err != nil {
			return fmt.Errorf("restauth: give back reserved requests: %w", err)
		}
		return nil
	}
	type mark struct {
		c     *counter
		state uint64
	}
	counts := map[uint64]map[string]int64{} // by window
	marks := map[uint64][]mark{}
	l.counters.Range(func(k, v any) bool {
		c := v.(*counter)
		st := c.state.Load()
		sh, n := unpack(st)
		if fh, fn := unpack(c.flushed); fh == sh {
			n -= fn
		}
		if n == 0 {
			return true
		}
		if counts[sh] == nil {
			counts[sh] = map[string]int64{}
		}
		counts[sh][k.(string)] = int64(n)
		marks[sh] = append(marks[sh], mark{c, st})
		return true
	})
	windows := make([]uint64, 0, len(counts))
	for h := range counts {
		windows = append(windows, h)
	}
	sort.Slice(windows, func(i, j int) bool { return windows[i] < windows[j] })
	for _, h := range windows {
		if err := l.store.AddRESTRequests(ctx, windowStart(h), counts[h]); err != nil {
			return fmt.Errorf("restauth: flush request counts: %w", err)
		}
		for _, m := range marks[h] {
			m.c.flushed = m.state
		}
	}
	return l.sync(ctx, hourOf(now))
}
