package platform_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/contract"
	"github.com/fleetmq/fleetmq/platform"
)

// version is a control plane whose version a change moves.
type version struct{ v atomic.Int64 }

func (s *version) Version(context.Context) (int64, error) { return s.v.Load(), nil }

func TestPollChangesContract(t *testing.T) {
	const every = 5 * time.Millisecond
	contract.Changes(t, func(*testing.T) (func(*testing.T), func(string) platform.Changes) {
		s := &version{}
		return func(*testing.T) { s.v.Add(1) },
			func(string) platform.Changes { return platform.PollChanges{Store: s, Interval: every} }
	}, 10*time.Second)
}
