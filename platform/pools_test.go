package platform_test

import (
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/contract"
	"github.com/fleetmq/fleetmq/platform"
)

func TestLocalPoolsContract(t *testing.T) {
	contract.QoS2Pools(t, func(*testing.T) func(string) platform.QoS2Pools {
		p := platform.NewLocalPools()
		return func(string) platform.QoS2Pools { return p }
	})
}

// TestLocalPoolsArePolicyPools checks that the Pool the Policy takes from
// on the message path is the one LocalPools counts in.
func TestLocalPoolsArePolicyPools(t *testing.T) {
	pools := platform.NewLocalPools()
	now := time.Date(2026, 3, 1, 23, 0, 0, 0, time.UTC)
	if !pools.Pool("acct1").Take(now, 2) {
		t.Fatal("first unit refused")
	}
	if got, _ := pools.Take("acct1", "2026-03-01", 5, 2); got != 1 {
		t.Fatalf("Take after one unit used = %d, want 1", got)
	}
	if pools.Pool("acct1").Take(now, 2) {
		t.Fatal("a unit beyond the pool was given")
	}
	st := pools.Pool("acct1").State(now, 2)
	if !st.Demoted || st.Used != 2 || st.Demotions != 1 {
		t.Fatalf("state %+v; want demoted, 2 used, 1 demotion (the message refused)", st)
	}
}
