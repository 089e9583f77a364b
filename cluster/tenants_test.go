package cluster

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/lines"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// slowClaims is an OwnerStore whose claims of tenant "storm" wait until
// released, counting how many are under way at once.
type slowClaims struct {
	OwnerStore
	mu       sync.Mutex
	inStorm  int
	maxStorm int
	release  chan struct{}
}

func (s *slowClaims) ClaimSession(key, node string, fresh bool) (int64, string, int64, error) {
	if ns, _, _ := strings.Cut(key, "\x00"); ns != "storm" {
		return 1, "", 0, nil
	}
	s.mu.Lock()
	s.inStorm++
	s.maxStorm = max(s.maxStorm, s.inStorm)
	s.mu.Unlock()
	<-s.release
	s.mu.Lock()
	s.inStorm--
	s.mu.Unlock()
	return 1, "", 0, nil
}

// TestClaimsPerTenant: one account's reconnect storm holds at most
// claimsPerTenant claims under way on a node; another account's claim
// passes beside it at once.
func TestClaimsPerTenant(t *testing.T) {
	st := &slowClaims{release: make(chan struct{})}
	o := &Owners{store: st, tenants: lines.Lines{Per: claimsPerTenant}}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { o.Claim(fmt.Sprintf("storm\x00dev-%d", i), "n1", false) })
	}
	testkit.Eventually(t, 5*time.Second, "the storm's claims to reach the store", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.inStorm == claimsPerTenant
	})
	done := make(chan struct{})
	go func() {
		o.Claim("calm/cred\x00follower", "n1", false)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("another account's claim waited behind the storm's")
	}
	close(st.release)
	wg.Wait()
	if st.maxStorm != claimsPerTenant {
		t.Fatalf("%d of one account's claims were under way at once, want %d", st.maxStorm, claimsPerTenant)
	}
	if got := o.tenant("calm\x00follower"); got != "calm" {
		t.Fatalf("the tenant of calm\x00follower is %q, want its namespace", got)
	}
}
