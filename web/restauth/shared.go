package restauth

import (
	"context"
	"sync"
	"time"
)

// Reserver is a CounterStore that can also reserve requests: several
// processes (the nodes of a cluster) limit a token exactly together by
// each reserving its requests before it allows them. sqlstore.Store is
// one.
//
// The contract (internal/contract, RESTCounters, checks it):
//   - ReserveRESTRequests adds to the token's count in the window at
//     most n, at most a sixteenth of what the limit leaves (at least one),
//     never past limit, and returns how many it added (0 when the count
//     had reached limit) and the count after. Reservations from any number
//     of processes at once never take the count past limit. (The sixteenth
//     is read from the count in the store, so near the limit every process
//     reserves one at a time, whatever it last saw.)
//   - AddRESTRequests with a negative count gives reserved requests back.
type Reserver interface {
	CounterStore
	ReserveRESTRequests(ctx context.Context, window time.Time, tokenID string, n, limit int64) (granted, count int64, err error)
}

// reserveTimeout bounds one reservation: the request waits for it.
const reserveTimeout = 2 * time.Second

// maxBlock bounds the requests a node reserves at once; the store also
// grants at most a sixteenth of what the window has left, so that near
// the limit the nodes reserve one request at a time and none is left
// holding what another needs.
const maxBlock = 50

// reservation is a token's standing on a node of a shared limiter, in the
// current window (hour): reserved from the store, used here, and the
// token's count in the store after the last reservation.
type reservation struct {
	mu               sync.Mutex
	hour             uint64
	reserved, used   int64
	count            int64
	idleSinceRelease bool      // nothing was used since the last Flush
	tried            time.Time // the last reservation that found the limit reached
}

// retryReserve is how often a node asks the store again for a token it
// found at its limit: another node may have given requests back.
const retryReserve = time.Second

// NewSharedLimiter returns a limiter of limit requests per token and hour
// (DefaultRateLimit when limit <= 0) that several processes on one store
// share exactly: a request is allowed only once it is reserved in the
// store (in blocks, so most requests touch only memory), so the token's
// requests on every process together never pass the limit. What a
// process reserved and did not use is given back at each Flush, so a
// token whose requests move between processes is refused early by at
// most what the others hold until their next Flush. When the store cannot
// be reached a request that needs a reservation is refused (Retry-After
// one second).
func NewSharedLimiter(store Reserver, limit int) *Limiter {
	l := NewLimiter(store, limit)
	l.shared = store
	return l
}

func (l *Limiter) reservation(tokenID string) *reservation {
	if r, ok := l.reservations.Load(tokenID); ok {
		return r.(*reservation)
	}
	r, _ := l.reservations.LoadOrStore(tokenID, new(reservation))
	return r.(*reservation)
}

// allowShared is Allow of a shared limiter.
func (l *Limiter) allowShared(tokenID string, now time.Time) Decision {
	r := l.reservation(tokenID)
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.roll(hourOf(now))
	if r.used >= r.reserved && !r.atLimit(int64(l.limit), now) {
		ctx, cancel := context.WithTimeout(context.Background(), reserveTimeout)
		got, count, err := l.shared.ReserveRESTRequests(ctx, windowStart(h), tokenID, maxBlock, int64(l.limit))
		cancel()
		if err != nil {
			// The store cannot be asked: refused for a second, without
			// pretending the token used its hour.
			d := l.decision(false, uint64(max(r.count, 0)), h, now)
			d.Remaining, d.RetryAfter, d.Unavailable = 0, time.Second, true
			return d
		}
		r.reserved += got
		r.count = count
		if got == 0 {
			r.tried = now
		}
	}
	if r.used >= r.reserved {
		return l.decision(false, uint64(max(r.count, 0)), h, now)
	}
	r.used++
	r.idleSinceRelease = false
	return l.decision(true, uint64(r.count-(r.reserved-r.used)), h, now)
}

// peekShared is Peek of a shared limiter.
func (l *Limiter) peekShared(tokenID string, now time.Time) Decision {
	r := l.reservation(tokenID)
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.roll(hourOf(now))
	used := uint64(max(r.count-(r.reserved-r.used), 0))
	d := l.decision(true, used, h, now)
	// Refused only while this node holds nothing and the store said, a
	// moment ago, that the limit is reached (Allow asks it again once
	// retryReserve passed: other nodes may have given requests back).
	d.Allowed = r.used < r.reserved || !r.atLimit(int64(l.limit), now)
	if !d.Allowed {
		d.Remaining = 0
		d.RetryAfter = d.Reset.Sub(now)
	}
	return d
}

// atLimit reports whether the store said lately that the token's count
// reached the limit. The caller holds r.mu.
func (r *reservation) atLimit(limit int64, now time.Time) bool {
	return r.count >= limit && now.Sub(r.tried) < retryReserve
}

// roll moves the reservation to window h unless it is in a later one,
// and returns the window it is in. The caller holds r.mu.
func (r *reservation) roll(h uint64) uint64 {
	if r.hour > h {
		return r.hour // a request stamped later opened the next window
	}
	if r.hour < h {
		r.hour, r.reserved, r.used, r.count, r.tried = h, 0, 0, 0, time.Time{}
	}
	return h
}

// release gives back what this process reserved and did not use, of the
// tokens that used nothing since the last release (all of them: at
// shutdown). A give-back that fails is not tried again: the store may
// have taken it all the same (a commit whose answer was lost), and giving
// the same requests back twice would let the token's requests pass the
// limit. A failure leaves them counted in the store, so the token may be
// refused up to maxBlock requests early in that hour, never late. The
// caller holds l.mu.
func (l *Limiter) release(ctx context.Context, all bool) error {
	back := map[uint64]map[string]int64{}
	l.reservations.Range(func(k, v any) bool {
		r := v.(*reservation)
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.idleSinceRelease && !all {
			r.idleSinceRelease = true // given back at the next Flush if still idle
			return true
		}
		if unused := r.reserved - r.used; unused > 0 {
			if back[r.hour] == nil {
				back[r.hour] = map[string]int64{}
			}
			back[r.hour][k.(string)] = -unused
			r.reserved, r.count = r.used, r.count-unused
		}
		return true
	})
	var failed error
	for h, counts := range back {
		if err := l.store.AddRESTRequests(ctx, windowStart(h), counts); err != nil {
			failed = err
		}
	}
	return failed
}

// GiveBack gives back everything a shared limiter reserved and did not
// use (call it at shutdown, after the last request); a limiter that is
// not shared has nothing to give back.
func (l *Limiter) GiveBack(ctx context.Context) error {
	if l.shared == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.release(ctx, true)
}
