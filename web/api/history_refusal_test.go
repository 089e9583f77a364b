package api_test

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/testkit"
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
	holdHistorySlots(t, e, A.ID)
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
	holdHistorySlots(t, e, A.ID)
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

// TestHistoryRefusalHoldsNoPlaceWhileItWaits: a history request refused
// with 429 waits before its answer (as every refusal does, up to a
// second), and holds none of the account's places among its requests
// running meanwhile: with one place, the account's other requests go
// through during that wait (from 300 ms into it, well past the refused
// request's own handling).
func TestHistoryRefusalHoldsNoPlaceWhileItWaits(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.Config) { c.RESTAccountLimits.Concurrency = 1 })
	A := e.tenant(t, "A", "starter", allAddOns)
	holdHistorySlots(t, e, A.ID)
	refused := make(chan int, 1)
	began := time.Now()
	go func() { refused <- e.get(t, A.Token, "/history").Status }()
	// From 300 ms on (the history request is in its pause by then), a
	// request of the same account every 25 ms, each on its own: one that
	// met the history request while it still held the place is refused
	// and waits its own pause, and the next ones go on.
	var wentThrough atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	status, next, sent := 0, began.Add(300*time.Millisecond), 0
	testkit.Within(waitFor, func() bool {
		select {
		case status = <-refused:
			return true
		default:
		}
		if now := time.Now(); now.After(next) && sent < 200 {
			next, sent = now.Add(25*time.Millisecond), sent+1
			wg.Go(func() {
				if e.get(t, A.Token, "/usage").Status == http.StatusOK {
					wentThrough.Add(1)
				}
			})
		}
		return false
	})
	through := wentThrough.Load() // those that went through before the refusal came back
	if status != http.StatusTooManyRequests || time.Since(began) < 500*time.Millisecond {
		t.Fatalf("history: %d after %v, want 429 after its wait", status, time.Since(began))
	}
	if through == 0 {
		t.Fatal("no other request of the account went through while the refused history request waited: it held the account's one place")
	}
}

// holdHistorySlots takes every one of the account's history slots (as
// running exports or portal device pages would) until the test ends.
func holdHistorySlots(t *testing.T, e *env, accountID string) {
	t.Helper()
	for range history.RequestsPerAccount {
		rel, _, ok := e.HistorySlots.Take(accountID)
		if !ok {
			t.Fatal("could not take a history slot")
		}
		t.Cleanup(rel)
	}
}
