package restauth_test

import (
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/web/restauth"
)

// TestAccountLimiter: an account's burst, then its rate (Retry-After until
// the bucket holds a request again, at least a second); a refused request
// takes nothing, a refunded one comes back; requests in flight are bounded
// until released (twice is harmless); accounts are apart; a clock that
// goes back refills nothing.
func TestAccountLimiter(t *testing.T) {
	l := restauth.NewAccountLimiter(restauth.AccountLimits{Concurrency: 2, Rate: 2, Burst: 3})
	now := t0
	admit := func(acc string) (func(), restauth.AccountDecision) { return l.Admit(acc, now) }
	for i := range 3 {
		release, d := admit(accA)
		if d.Refused != "" {
			t.Fatalf("request %d of the burst refused: %+v", i+1, d)
		}
		release()
		release()
	}
	if _, d := admit(accA); d.Refused != restauth.RefusedRate || d.RetryAfter != time.Second {
		t.Fatalf("past the burst: %+v, want refused by the rate, Retry-After 1s (half a second, rounded up)", d)
	}
	if _, d := admit(accB); d.Refused != "" {
		t.Fatalf("another account: %+v", d)
	}
	l.Refund(accA)
	release, d := admit(accA)
	if d.Refused != "" {
		t.Fatalf("after a refund: %+v", d)
	}
	release()
	now = now.Add(-time.Minute) // the clock went back
	if _, d := admit(accA); d.Refused != restauth.RefusedRate {
		t.Fatalf("a clock that went back refilled: %+v", d)
	}
	now = now.Add(time.Minute + time.Second) // two requests refilled
	r1, d1 := admit(accA)
	r2, d2 := admit(accA)
	if d1.Refused != "" || d2.Refused != "" {
		t.Fatalf("a second later: %+v, %+v", d1, d2)
	}
	now = now.Add(time.Hour)
	if _, d := admit(accA); d.Refused != restauth.RefusedConcurrency || d.RetryAfter != time.Second {
		t.Fatalf("a third in flight: %+v, want refused by the concurrency bound", d)
	}
	r1()
	r1()
	if _, d := admit(accA); d.Refused != "" {
		t.Fatalf("after one was answered: %+v", d)
	}
	r2()
}
