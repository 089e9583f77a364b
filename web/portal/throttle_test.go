package portal

import (
	"testing"
	"time"
)

// TestAttemptCountsBeforeTheCheck: attempts whose outcome is not known yet
// (their password checks still running, as when they arrive together)
// already count against the bound, so no more than the bound are
// admitted; a successful one is taken back from the address's count and
// clears the e-mail address's; one forgiven (a store error) counts for
// nothing.
func TestAttemptCountsBeforeTheCheck(t *testing.T) {
	th := newThrottle(5, 15*time.Minute)
	now := time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)
	pair, addr := signinKeys("owner@acme.example", "192.0.2.7")
	admitted := 0
	for range 20 {
		if _, ok := th.attempt(now, pair, addr); ok {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("%d of 20 attempts in flight admitted, want 5", admitted)
	}
	if until, ok := th.attempt(now, pair, addr); ok || !until.Equal(now.Add(15*time.Minute)) {
		t.Fatalf("the 21st: admitted %v until %v, want refused until the window ends", ok, until)
	}

	th.succeeded(now, pair, addr)
	if got := len(th.fails[addr]); got != 4 {
		t.Fatalf("after a success the address counts %d attempts, want 4 (the successful one taken back)", got)
	}
	if _, ok := th.attempt(now, pair, addr); !ok {
		t.Fatal("after a success the e-mail address is still blocked")
	}
	th.forgive(now, pair, addr)
	if got := len(th.fails[addr]); got != 4 {
		t.Fatalf("a forgiven attempt still counts: %d, want 4", got)
	}
}
