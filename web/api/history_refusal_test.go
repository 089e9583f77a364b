package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/app"
)

// TestHistoryRefusalsAreNotCounted: docs/api.md, "Rate limit": "Past
// any limit a request gets 429 with code rate_limited ... Refused requests
// are not counted by any limit". A GET /history refused with 429 by the
// account's history bound (2 at once, or its store time) leaves the
// token's hour as it was, and its headers say so.
func TestHistoryRefusalsAreNotCounted(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	reset := t0.Truncate(time.Hour).Add(time.Hour)

	r := e.get(t, A.Token, "/usage")
	r.ok(t, http.StatusOK, nil)
	rateHeaders(t, r, 5000, 1, reset)

	// The account's 2 history slots are taken (as two running exports or
	// portal device pages would).
	for i := 0; i < history.RequestsPerAccount; i++ {
		rel, _, ok := e.HistorySlots.Take(A.ID)
		if !ok {
			t.Fatal("could not take a history slot")
		}
		defer rel()
	}
	r = e.get(t, A.Token, "/history")
	p := r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	if !strings.Contains(p.Detail, "running already") {
		t.Fatalf("detail %q", p.Detail)
	}
	// A refusal shows the token's hour as it stands: 1 used.
	rateHeaders(t, r, 5000, 1, reset)
}

// TestHistoryStoreTimeRefusalIsNotCounted: the same for the store-time
// refusal.
func TestHistoryStoreTimeRefusalIsNotCounted(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	reset := t0.Truncate(time.Hour).Add(time.Hour)
	e.HistorySlots.Charge(A.ID, history.StoreTimeBurst+3*time.Second)
	for i := 0; i < 3; i++ {
		e.get(t, A.Token, "/history").problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	}
	r := e.get(t, A.Token, "/usage")
	r.ok(t, http.StatusOK, nil)
	rateHeaders(t, r, 5000, 1, reset) // the three 429s are not counted
}

// TestHistoryRefusalsTakeNoAccountBucket: nor do those refusals take
// requests from the account's bucket (-rest-account-burst).
func TestHistoryRefusalsTakeNoAccountBucket(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.Config) {
		c.RESTAccountLimits.Burst = 2
		c.RESTAccountLimits.Rate = 1
	})
	A := e.tenant(t, "A", "starter", allAddOns)
	for i := 0; i < history.RequestsPerAccount; i++ {
		rel, _, ok := e.HistorySlots.Take(A.ID)
		if !ok {
			t.Fatal("could not take a history slot")
		}
		defer rel()
	}
	for i := 0; i < 2; i++ {
		p := e.get(t, A.Token, "/history").problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
		if !strings.Contains(p.Detail, "running already") {
			t.Fatalf("detail %q", p.Detail)
		}
	}
	// The test clock stands still: the bucket of 2 is as full as it was.
	r := e.get(t, A.Token, "/usage")
	if r.Status != http.StatusOK {
		t.Fatalf("after two refused history requests: %s", r)
	}
}
