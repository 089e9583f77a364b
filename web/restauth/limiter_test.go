package restauth_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/sqlstore"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// hour10 is 10:00 UTC, the start of t0's window.
var hour10 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

func wantDecision(t *testing.T, what string, got, want restauth.Decision) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func TestLimiterWindow(t *testing.T) {
	l := restauth.NewLimiter(nil, 3)
	now := hour10.Add(15 * time.Minute)
	reset := hour10.Add(time.Hour)
	for i := 1; i <= 3; i++ {
		wantDecision(t, fmt.Sprintf("request %d", i), l.Allow("tok-a", now),
			restauth.Decision{Allowed: true, Limit: 3, Remaining: 3 - i, Used: i, Reset: reset})
	}
	// Denied requests are not counted: Used stays at the limit.
	for i := 0; i < 3; i++ {
		wantDecision(t, "over the limit", l.Allow("tok-a", now),
			restauth.Decision{Allowed: false, Limit: 3, Remaining: 0, Used: 3, Reset: reset, RetryAfter: 45 * time.Minute})
	}
	// Another token has its own count.
	wantDecision(t, "another token", l.Allow("tok-b", now),
		restauth.Decision{Allowed: true, Limit: 3, Remaining: 2, Used: 1, Reset: reset})

	// The window ends at the UTC hour, not an hour after the first request.
	last := reset.Add(-time.Microsecond)
	wantDecision(t, "last instant of the window", l.Allow("tok-a", last),
		restauth.Decision{Allowed: false, Limit: 3, Remaining: 0, Used: 3, Reset: reset, RetryAfter: time.Microsecond})
	wantDecision(t, "first instant of the next", l.Allow("tok-a", reset),
		restauth.Decision{Allowed: true, Limit: 3, Remaining: 2, Used: 1, Reset: reset.Add(time.Hour)})
	// A request stamped a little earlier, handled after the rollover,
	// counts in the new window.
	wantDecision(t, "late request of the old window", l.Allow("tok-a", last),
		restauth.Decision{Allowed: true, Limit: 3, Remaining: 1, Used: 2, Reset: reset.Add(time.Hour)})
	// Windows are UTC hours whatever the caller's time zone.
	tz := time.FixedZone("UTC+5:30", 5*3600+1800)
	wantDecision(t, "a time in another zone", l.Allow("tok-c", now.In(tz)),
		restauth.Decision{Allowed: true, Limit: 3, Remaining: 2, Used: 1, Reset: reset})
	// Two idle hours later everything is fresh.
	wantDecision(t, "hours later", l.Allow("tok-a", reset.Add(2*time.Hour+time.Second)),
		restauth.Decision{Allowed: true, Limit: 3, Remaining: 2, Used: 1, Reset: reset.Add(3 * time.Hour)})

	if d := restauth.NewLimiter(nil, 0).Allow("x", now); d.Limit != 5000 || d.Remaining != 4999 {
		t.Fatalf("default limit: %+v, want 5000", d)
	}
}

func TestLimiterCountsSurviveRestart(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		ctx := ctxT(t)
		s := openStore(t, dsn)
		now := t0
		l := restauth.NewLimiter(s, 5)
		must(t, l.Load(ctx, now))
		for range 3 {
			l.Allow("tok-a", now)
		}
		l.Allow("tok-b", now)
		must(t, l.Flush(ctx, now))
		must(t, l.Flush(ctx, now)) // nothing new: nothing added twice
		stored, err := s.RESTRequests(ctx, hour10)
		must(t, err)
		if stored["tok-a"] != 3 || stored["tok-b"] != 1 || len(stored) != 2 {
			t.Fatalf("stored counts %v, want tok-a 3, tok-b 1", stored)
		}

		// A restart: a new limiter on the same database (reopened) goes on
		// from the stored counts.
		s.Close()
		s = openStore(t, dsn)
		l = restauth.NewLimiter(s, 5)
		must(t, l.Load(ctx, now.Add(time.Minute)))
		wantDecision(t, "tok-a after the restart", l.Allow("tok-a", now.Add(time.Minute)),
			restauth.Decision{Allowed: true, Limit: 5, Remaining: 1, Used: 4, Reset: hour10.Add(time.Hour)})
		l.Allow("tok-a", now)
		if d := l.Allow("tok-a", now); d.Allowed || d.Used != 5 {
			t.Fatalf("6th request of the hour across a restart: %+v", d)
		}
		must(t, l.Flush(ctx, now))
		stored, err = s.RESTRequests(ctx, hour10)
		must(t, err)
		if stored["tok-a"] != 5 {
			t.Fatalf("stored %v after the restart, want tok-a 5 (denied requests not counted)", stored)
		}

		// Loaded in the next hour, the old counts do not apply.
		l = restauth.NewLimiter(s, 5)
		must(t, l.Load(ctx, hour10.Add(time.Hour)))
		if d := l.Allow("tok-a", hour10.Add(time.Hour)); d.Used != 1 {
			t.Fatalf("next hour: %+v, want a fresh count", d)
		}
	})
}

// TestLimitersShareAStore: two processes on one database count each
// other's requests once they flush.
func TestLimitersShareAStore(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		ctx := ctxT(t)
		s := openStore(t, dsn)
		l1, l2 := restauth.NewLimiter(s, 10), restauth.NewLimiter(s, 10)
		for range 3 {
			l1.Allow("tok", t0)
		}
		l2.Allow("tok", t0)
		must(t, l1.Flush(ctx, t0))
		must(t, l2.Flush(ctx, t0)) // adds 1, reads back 4
		if d := l2.Allow("tok", t0); d.Used != 5 {
			t.Fatalf("l2 after flushing: %+v, want used 5 (3 of l1, 2 of its own)", d)
		}
		must(t, l1.Flush(ctx, t0)) // reads back 4 (l2's 5th is not flushed)
		if d := l1.Allow("tok", t0); d.Used != 5 {
			t.Fatalf("l1 after flushing: %+v, want used 5", d)
		}
		must(t, l1.Flush(ctx, t0))
		must(t, l2.Flush(ctx, t0))
		stored, err := s.RESTRequests(ctx, hour10)
		must(t, err)
		if stored["tok"] != 6 {
			t.Fatalf("stored %v, want 6 requests in all", stored)
		}
	})
}

// failingCounts fails AddRESTRequests while fail is set.
type failingCounts struct {
	*sqlstore.Store
	mu   sync.Mutex
	fail bool
}

func (s *failingCounts) AddRESTRequests(ctx context.Context, w time.Time, c map[string]int64) error {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail {
		return errors.New("database unavailable")
	}
	return s.Store.AddRESTRequests(ctx, w, c)
}

func TestLimiterFlushErrorKeepsCounts(t *testing.T) {
	ctx := ctxT(t)
	s := &failingCounts{Store: openStore(t, filepath.Join(t.TempDir(), sqlstore.DatabaseFile)), fail: true}
	l := restauth.NewLimiter(s, 100)
	for range 4 {
		l.Allow("tok", t0)
	}
	if err := l.Flush(ctx, t0); err == nil {
		t.Fatal("Flush on a failing store returned nil")
	}
	l.Allow("tok", t0)
	s.mu.Lock()
	s.fail = false
	s.mu.Unlock()
	must(t, l.Flush(ctx, t0))
	stored, err := s.RESTRequests(ctx, hour10)
	must(t, err)
	if stored["tok"] != 5 {
		t.Fatalf("stored %v, want the 5 requests counted across the failed flush", stored)
	}
	if d := l.Allow("tok", t0); d.Used != 6 {
		t.Fatalf("after the flushes: %+v, want used 6", d)
	}
}

// TestLimiterConcurrent: many goroutines on one token, with flushes going
// on, allow exactly the limit, and every allowed request gets its own
// Used value. Run under -race.
func TestLimiterConcurrent(t *testing.T) {
	ctx := ctxT(t)
	s := openStore(t, filepath.Join(t.TempDir(), sqlstore.DatabaseFile))
	const limit, goroutines, each = 1000, 8, 200
	l := restauth.NewLimiter(s, limit)
	var wg sync.WaitGroup
	used := make([][]int, goroutines)
	denied := make([]int, goroutines)
	stop := make(chan struct{})
	flushed := make(chan error, 1)
	go func() {
		var err error
		for {
			select {
			case <-stop:
				flushed <- err
				return
			default:
			}
			if e := l.Flush(ctx, t0); e != nil && err == nil {
				err = e
			}
		}
	}()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				d := l.Allow("tok", t0)
				if d.Allowed {
					used[g] = append(used[g], d.Used)
				} else {
					denied[g]++
					if d.Remaining != 0 || d.Used != limit {
						t.Errorf("denied with %+v", d)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	must(t, <-flushed)
	seen := map[int]bool{}
	nDenied := 0
	for g := range goroutines {
		nDenied += denied[g]
		for _, u := range used[g] {
			if seen[u] || u < 1 || u > limit {
				t.Fatalf("Used %d given twice or out of range", u)
			}
			seen[u] = true
		}
	}
	if len(seen) != limit || nDenied != goroutines*each-limit {
		t.Fatalf("%d allowed and %d denied, want %d and %d", len(seen), nDenied, limit, goroutines*each-limit)
	}
	must(t, l.Flush(ctx, t0))
	stored, err := s.RESTRequests(ctx, hour10)
	must(t, err)
	if stored["tok"] != limit {
		t.Fatalf("stored %d requests, want exactly %d", stored["tok"], limit)
	}
}
