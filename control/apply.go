package control

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

// Applied says where a stored control-plane change stands on the running
// nodes (the "fleetmq serve" processes on this store).
type Applied struct {
	Version int64           // the change's control-plane version
	Nodes   []*fleetmq.Node // the live nodes
	Pending []*fleetmq.Node // the live nodes that have not applied it yet
}

// Running reports whether any node is live.
func (a *Applied) Running() bool { return len(a.Nodes) > 0 }

// Done reports whether every live node has applied the change (true when
// none is running: there is nothing to wait for).
func (a *Applied) Done() bool { return len(a.Pending) == 0 }

// String says it for an operator.
func (a *Applied) String() string {
	switch {
	case !a.Running():
		return "stored; fleetmq serve is not running on this store, the change applies when it starts"
	case a.Done():
		return fmt.Sprintf("in force on %s", plural(len(a.Nodes), "running node"))
	}
	ids := make([]string, len(a.Pending))
	for i, n := range a.Pending {
		ids[i] = fmt.Sprintf("%s (%s, pid %d, at version %d)", n.ID, n.Host, n.PID, n.Applied)
	}
	return fmt.Sprintf("stored, but not yet in force on %s: %s; it applies at their next reload",
		plural(len(a.Pending), "node"), strings.Join(ids, ", "))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// AwaitApplied waits up to wait until every live node has applied the
// store's current control-plane version (the change the caller has just
// made), checking every poll. It returns where the change stands then; an
// error only when the store cannot be read or ctx ends.
func (s *Service) AwaitApplied(ctx context.Context, wait, poll time.Duration) (*Applied, error) {
	deadline := time.Now().Add(wait)
	v, err := s.Store.Version(ctx)
	if err != nil {
		return nil, err
	}
	for {
		a, err := s.applied(ctx, v)
		if err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if a.Done() || left <= 0 {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(poll, left)):
		}
	}
}

func (s *Service) applied(ctx context.Context, v int64) (*Applied, error) {
	nodes, err := s.Store.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	a := &Applied{Version: v}
	now := time.Now() // the heartbeats are the machines' clocks, not s.Now
	for _, n := range nodes {
		if !n.Live(now) {
			continue
		}
		a.Nodes = append(a.Nodes, n)
		if n.Applied < v {
			a.Pending = append(a.Pending, n)
		}
	}
	return a, nil
}
