package api_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/app"
)

// rateHeaders fails unless r carries the X-RateLimit-* headers with these
// values (reset: the end of the window, in epoch seconds).
func rateHeaders(t *testing.T, r *response, limit, used int, reset time.Time) {
	t.Helper()
	want := map[string]string{
		"X-RateLimit-Limit":     strconv.Itoa(limit),
		"X-RateLimit-Used":      strconv.Itoa(used),
		"X-RateLimit-Remaining": strconv.Itoa(max(limit-used, 0)),
		"X-RateLimit-Reset":     strconv.FormatInt(reset.Unix(), 10),
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Fatalf("%s: %s %q, want %q (headers %v)", r, k, got, v, r.Header)
		}
	}
}

// TestRateLimit with a limit of 5 requests per token and hour: every
// response to an authenticated caller has the X-RateLimit-* headers with
// the right values, whatever its status (200, 404, 422, 403); the 6th
// request is 429 rate_limited with Retry-After until the next UTC hour
// and is not counted; a second token of the account has its own budget;
// the next UTC hour starts afresh; counts survive a restart on the same
// data directory (the limiter flushes at Close and loads at Start: the
// periodic flush is an hour away, so only Close can have written them).
func TestRateLimit(t *testing.T) {
	t.Parallel()
	const limit = 5
	// No periodic flush during the test (the first tick is an hour away):
	// what survives a restart was written at Close.
	e := start(t, func(c *app.Config) {
		c.RESTRateLimit = limit
		c.ReloadInterval = time.Hour
		c.RESTAccountLimits.RefusalPause = time.Millisecond // TestRefusalPause
	})
	tn := e.tenant(t, "A", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	other, _ := e.token(t, tn.ID, "other")
	reset := time.Date(2030, 3, 10, 13, 0, 0, 0, time.UTC) // t0 is 12:20

	calls := []struct {
		method, path string
		body         any
		status       int
	}{
		{http.MethodGet, "/usage", nil, http.StatusOK},
		{http.MethodGet, "/publishers/nope", nil, http.StatusNotFound},
		{http.MethodPost, "/publishers", map[string]any{"client_id": 7}, http.StatusUnprocessableEntity},
		{http.MethodGet, "/history", nil, http.StatusForbidden}, // no history add-on
		{http.MethodGet, "/publishers", nil, http.StatusOK},
	}
	for i, c := range calls {
		r := e.req(t, tn.Token, c.method, c.path, c.body)
		if r.Status != c.status {
			t.Fatalf("%s: want %d", r, c.status)
		}
		rateHeaders(t, r, limit, i+1, reset)
	}
	e.clock.Add(10 * time.Minute) // 12:30
	for i := 0; i < 3; i++ {
		e.get(t, tn.Token, "/usage").problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	}
	r := e.get(t, tn.Token, "/usage")
	r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	rateHeaders(t, r, limit, limit, reset) // refused requests are not counted
	if got := r.Header.Get("Retry-After"); got != strconv.Itoa(30*60) {
		t.Fatalf("%s: Retry-After %q, want %d (seconds to 13:00)", r, got, 30*60)
	}
	// Every route is refused, even one that does not exist for the account.
	e.req(t, tn.Token, http.MethodPost, "/publishers", map[string]any{"client_id": "dev1"}).problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	if cs, _ := e.Store.Clients(e.ctx, tn.ID); len(cs) != 0 {
		t.Fatalf("a rate-limited POST registered %d clients", len(cs))
	}

	// Another token of the account has its own budget.
	r = e.get(t, other, "/usage").ok(t, http.StatusOK, nil)
	rateHeaders(t, r, limit, 1, reset)

	// A second before the hour: still limited, Retry-After 1.
	e.clock.Set(reset.Add(-time.Second))
	r = e.get(t, tn.Token, "/usage")
	r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	if got := r.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("%s: Retry-After %q, want 1", r, got)
	}
	// The next UTC hour starts afresh.
	e.clock.Set(reset.Add(5 * time.Minute))
	next := reset.Add(time.Hour)
	for i := 1; i <= 3; i++ {
		rateHeaders(t, e.get(t, tn.Token, "/usage").ok(t, http.StatusOK, nil), limit, i, next)
	}
	rateHeaders(t, e.get(t, other, "/usage").ok(t, http.StatusOK, nil), limit, 1, next)

	// A restart keeps the window's counts: 3 and 1 were used.
	e.restart(t)
	rateHeaders(t, e.get(t, tn.Token, "/usage").ok(t, http.StatusOK, nil), limit, 4, next)
	rateHeaders(t, e.get(t, tn.Token, "/usage").ok(t, http.StatusOK, nil), limit, 5, next)
	e.get(t, tn.Token, "/usage").problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	rateHeaders(t, e.get(t, other, "/usage").ok(t, http.StatusOK, nil), limit, 2, next)
	// And again, with requests that were counted in the new process only.
	e.restart(t)
	r = e.get(t, tn.Token, "/usage")
	r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	rateHeaders(t, r, limit, limit, next)
	rateHeaders(t, e.get(t, other, "/usage").ok(t, http.StatusOK, nil), limit, 3, next)
}

// TestRateLimitPerToken: two accounts' tokens and a revoked token: one
// token's exhausted budget never limits another's, and unauthenticated
// requests (no token, a revoked one) count against nobody.
func TestRateLimitPerToken(t *testing.T) {
	t.Parallel()
	const limit = 3
	e := start(t, func(c *app.Config) { c.RESTRateLimit = limit })
	A := e.tenant(t, "A", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	B := e.tenant(t, "B", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	revoked, revokedID := e.token(t, A.ID, "gone")
	if err := e.Service.RevokeRESTToken(e.ctx, A.ID, revokedID); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		e.get(t, "", "/usage").problem(t, http.StatusUnauthorized, fleetmq.CodeInvalidToken)
		e.get(t, revoked, "/usage").problem(t, http.StatusUnauthorized, fleetmq.CodeTokenRevoked)
	}
	reset := time.Date(2030, 3, 10, 13, 0, 0, 0, time.UTC)
	for i := 1; i <= limit; i++ {
		rateHeaders(t, e.get(t, A.Token, "/usage").ok(t, http.StatusOK, nil), limit, i, reset)
	}
	e.get(t, A.Token, "/usage").problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	rateHeaders(t, e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil), limit, 1, reset)
}
