package restauth_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/web/restauth"
)

// memReserver is a restauth.Reserver in memory, with the store's rules.
type memReserver struct {
	mu   sync.Mutex
	c    map[time.Time]map[string]int64
	fail bool // AddRESTRequests fails
	// lost: AddRESTRequests applies the counts, then fails (a commit
	// whose answer never came back).
	lost bool
}

func newMemReserver() *memReserver { return &memReserver{c: map[time.Time]map[string]int64{}} }

func (m *memReserver) AddRESTRequests(_ context.Context, w time.Time, counts map[string]int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return context.DeadlineExceeded
	}
	if m.c[w] == nil {
		m.c[w] = map[string]int64{}
	}
	for k, v := range counts {
		m.c[w][k] += v
	}
	if m.lost {
		return context.DeadlineExceeded
	}
	return nil
}

func (m *memReserver) RESTRequests(_ context.Context, w time.Time) (map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for k, v := range m.c[w] {
		out[k] = v
	}
	return out, nil
}

func (m *memReserver) ReserveRESTRequests(_ context.Context, w time.Time, tok string, n, limit int64) (int64, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c[w] == nil {
		m.c[w] = map[string]int64{}
	}
	count := m.c[w][tok]
	g := min(n, max((limit-count)/16, 1), max(limit-count, 0))
	m.c[w][tok] += g
	return g, m.c[w][tok], nil
}

func (m *memReserver) count(w time.Time, tok string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c[w][tok]
}

var window = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// api makes n requests as the REST API does (Peek, then Allow) and
// returns how many were allowed.
func api(l *restauth.Limiter, now time.Time, n int) (allowed int) {
	for range n {
		if l.Peek("tok", now).Allowed && l.Allow("tok", now).Allowed {
			allowed++
		}
	}
	return allowed
}

// allows calls Allow n times and returns how many were allowed.
func allows(l *restauth.Limiter, now time.Time, n int) (allowed int) {
	for range n {
		if l.Allow("tok", now).Allowed {
			allowed++
		}
	}
	return allowed
}

// TestSharedLimiterTakesWhatOthersGaveBack: a node that found a token at
// its limit asks the store again a second later, and gets what another
// node gave back: the limit in all, through the API's Peek and Allow.
func TestSharedLimiterTakesWhatOthersGaveBack(t *testing.T) {
	store := newMemReserver()
	ctx := context.Background()
	now := window.Add(10 * time.Minute)
	const limit = 100
	la, lb := restauth.NewSharedLimiter(store, limit), restauth.NewSharedLimiter(store, limit)
	n := api(la, now, 60) + api(lb, now, 100)
	if n > limit {
		t.Fatalf("%d allowed for a limit of %d", n, limit)
	}
	for range 2 { // a idle: what it held goes back
		if err := la.Flush(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	if d := lb.Peek("tok", now); d.Allowed {
		t.Fatalf("b's Peek right after it found the limit: %+v, want refused", d)
	}
	if n += api(lb, now.Add(time.Second), 100); n != limit {
		t.Fatalf("%d allowed in all once a gave back, want %d", n, limit)
	}
}

// TestSharedLimiterNearTheLimit: near the limit a node reserves at most a
// sixteenth of what is left, whatever it saw last: one request through a
// node that was idle all hour holds back at most that from another, and
// gives it back once idle.
func TestSharedLimiterNearTheLimit(t *testing.T) {
	store := newMemReserver()
	ctx := context.Background()
	now := window.Add(10 * time.Minute)
	const limit = 5000
	la, lb := restauth.NewSharedLimiter(store, limit), restauth.NewSharedLimiter(store, limit)
	allowed := allows(la, now, limit-60) + allows(lb, now, 1)
	last := allows(la, now, 59)
	allowed += last
	refused := 59 - last
	if refused > 60/16 {
		t.Fatalf("a was refused %d of the last 59 requests after b took one: b holds more than a sixteenth of what was left", refused)
	}
	for range 2 {
		if err := lb.Flush(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	if allowed += allows(la, now.Add(time.Second), refused); allowed != limit || store.count(window, "tok") != limit {
		t.Fatalf("%d allowed, the store counts %d; want the limit %d", allowed, store.count(window, "tok"), limit)
	}
}

// TestSharedLimiterGivesBackAtShutdown: GiveBack returns everything held,
// busy tokens' too.
func TestSharedLimiterGivesBackAtShutdown(t *testing.T) {
	store := newMemReserver()
	ctx := context.Background()
	now := window.Add(10 * time.Minute)
	l := restauth.NewSharedLimiter(store, 5000)
	l.Allow("tok", now)
	if c := store.count(window, "tok"); c <= 1 {
		t.Fatalf("the store counts %d after the first request, want the block reserved for it", c)
	}
	if err := l.GiveBack(ctx); err != nil {
		t.Fatal(err)
	}
	if c := store.count(window, "tok"); c != 1 {
		t.Fatalf("after one request and the shutdown's give-back the store counts %d, want 1", c)
	}
	// A limiter that is not shared has nothing to give back.
	if err := restauth.NewLimiter(nil, 10).GiveBack(ctx); err != nil {
		t.Fatal(err)
	}
}

// failingReserver cannot be asked.
type failingReserver struct{ *memReserver }

func (failingReserver) ReserveRESTRequests(context.Context, time.Time, string, int64, int64) (int64, int64, error) {
	return 0, 0, context.DeadlineExceeded
}

// TestSharedLimiterStoreOutOfReach: a request that needs a reservation
// while the store cannot be asked is refused for a second, and the
// decision says so instead of claiming the token used its hour.
func TestSharedLimiterStoreOutOfReach(t *testing.T) {
	l := restauth.NewSharedLimiter(failingReserver{newMemReserver()}, 5000)
	d := l.Allow("tok", window.Add(time.Minute))
	if d.Allowed || !d.Unavailable || d.RetryAfter != time.Second || d.Remaining != 0 {
		t.Fatalf("Allow with the store out of reach: %+v; want refused, unavailable, retry after 1 s, nothing remaining", d)
	}
}

// TestSharedLimiterNeverGivesBackTwice: a give-back whose outcome is not
// known (the store took it, the answer was lost) is not made again, which
// would count the token's requests below what they are and let it pass
// its limit; one that failed leaves the requests counted (the token may
// be refused early, never late).
func TestSharedLimiterNeverGivesBackTwice(t *testing.T) {
	ctx := context.Background()
	now := window.Add(10 * time.Minute)
	for _, tc := range []struct {
		name       string
		lost, fail bool
		want       func(reserved int64) int64
	}{
		{"taken, answer lost", true, false, func(int64) int64 { return 1 }},
		{"refused", false, true, func(reserved int64) int64 { return reserved }},
	} {
		store := newMemReserver()
		l := restauth.NewSharedLimiter(store, 5000)
		l.Allow("tok", now)
		reserved := store.count(window, "tok")
		store.mu.Lock()
		store.lost, store.fail = tc.lost, tc.fail
		store.mu.Unlock()
		if err := l.GiveBack(ctx); err == nil {
			t.Fatalf("%s: GiveBack returned no error", tc.name)
		}
		store.mu.Lock()
		store.lost, store.fail = false, false
		store.mu.Unlock()
		if err := l.GiveBack(ctx); err != nil {
			t.Fatal(err)
		}
		if c, want := store.count(window, "tok"), tc.want(reserved); c != want {
			t.Errorf("%s: after one request and two give-backs the store counts %d, want %d", tc.name, c, want)
		}
	}
}

// TestUnallowGivesTheRequestBack: a request Allow counted and the server
// then refused is given back, to a local and to a shared limiter alike:
// the token still has its whole hour, and the next Allow counts it once;
// one counted in an hour that has passed gives nothing back to the new.
func TestUnallowGivesTheRequestBack(t *testing.T) {
	now := window.Add(10 * time.Minute)
	for name, l := range map[string]*restauth.Limiter{
		"local":  restauth.NewLimiter(nil, 3),
		"shared": restauth.NewSharedLimiter(newMemReserver(), 3),
	} {
		t.Run(name, func(t *testing.T) {
			for range 5 { // more than the limit: each is given back
				d := l.Allow("tok", now)
				if !d.Allowed || d.Used != 1 {
					t.Fatalf("Allow: %+v, want the first of the hour", d)
				}
				l.Unallow("tok", d)
			}
			d := l.Allow("tok", now)
			next := now.Add(time.Hour)
			l.Unallow("tok", d) // the same hour
			if got := l.Allow("tok", next); !got.Allowed || got.Used != 1 {
				t.Fatalf("the next hour: %+v", got)
			}
			l.Unallow("tok", d) // of the hour before: nothing to give back
			if got := l.Peek("tok", next); got.Used != 1 {
				t.Fatalf("a give-back of the hour before changed the new one: %+v", got)
			}
		})
	}
}
