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
//   - ReserveRESTRequests adds at most n to the token's count in the
//     window, never past limit, and returns how many it added (0 when the
//     count had reached limit) and the count after. Reservations from any
//     number of processes at once never take the count past limit, and
//     each is granted in full while the limit allows.
//   - AddRESTRequests with a negative count gives reserved requests back.
type Reserver interface {
	CounterStore
	ReserveRESTRequests(ctx context.Context, window time.Time, tokenID string, n, limit int64) (granted, count int64, err error)
}

// reserveTimeout bounds one reservation: the request waits for it.
const reserveTimeout = 2 * time.Second

// maxBlock bounds the requests a node reserves at once; a block is also
// at most a sixteenth of what the window has left, so that near the limit
// the nodes reserve one request at a time and none is left holding what
// another needs.
const maxBlock = 50

// reservation is a token's standing on a node of a shared limiter, in the
// current window (hour): reserved from the store, used here, and the
// token's count in the store after the last reservation.
type reservation struct {
	mu               sync.Mutex
	hour             uint64
	reserved, used   int64
	count            int64
	idleSinceRelease bool // nothing was used since the last Flush
}

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
	if r.used >= r.reserved {
		left := int64(l.limit) - r.count
		want := min(max(left/16, 1), maxBlock)
		ctx, cancel := context.WithTimeout(context.Background(), reserveTimeout)
		got, count, err := l.shared.ReserveRESTRequests(ctx, windowStart(h), tokenID, want, int64(l.limit))
		cancel()
		if err != nil {
			d := l.decision(false, uint64(max(r.count, 0)), h, now)
			d.RetryAfter = time.Second
			return d
		}
		r.reserved += got
		r.count = count
	}
	if r.used >= r.reserved {
		return l.decision(false, uint64(r.count), h, now)
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
	d.Allowed = used < l.limit
	if !d.Allowed {
		d.RetryAfter = d.Reset.Sub(now)
	}
	return d
}

// roll moves the reservation to window h unless it is in a later one,
// and returns the window it is in. The caller holds r.mu.
func (r *reservation) roll(h uint64) uint64 {
	if r.hour > h {
		return r.hour // a request stamped later opened the next window
	}
	if r.hour < h {
		r.hour, r.reserved, r.used, r.count = h, 0, 0, 0
	}
	return h
}

// release gives back what the processes reserved and did not use, of the
// tokens that used nothing since the last release. The caller holds
// l.mu.
func (l *Limiter) release(ctx context.Context) error {
	back := map[uint64]map[string]int64{}
	var marks []*reservation
	l.reservations.Range(func(k, v any) bool {
		r := v.(*reservation)
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.idleSinceRelease {
			r.idleSinceRelease = true // given back at the next Flush if still idle
			return true
		}
		if unused := r.reserved - r.used; unused > 0 {
			if back[r.hour] == nil {
				back[r.hour] = map[string]int64{}
			}
			back[r.hour][k.(string)] = -unused
			r.reserved, r.count = r.used, r.count-unused
			marks = append(marks, r)
		}
		return true
	})
	for h, counts := range back {
		if err := l.store.AddRESTRequests(ctx, windowStart(h), counts); err != nil {
			// Kept by the store's count: the token may be refused early
			// this hour by what was not given back.
			return err
		}
	}
	return nil
}
