package platform

import (
	"context"
	"time"
)

// Changes tells every node that the control plane changed (an account,
// plan, credential, client or layout was written), so each reloads its
// snapshot: a revoked credential or a suspended account takes effect on
// every node within the bound.
//
// PollChanges, today's implementation, reads the store's version every
// interval (Run does the same poll itself, every VersionPoll; a Changes
// set in Options.Changes only makes it react sooner). A cluster
// implementation announces each change as it is committed (PostgreSQL
// NOTIFY from the writing transaction, or a NATS subject) and keeps the
// poll as the fallback when a notice is lost.
//
// The contract a second implementation must meet (the suite in
// internal/contract, Changes, checks it):
//   - Watch(ctx) returns a channel that receives after each change
//     committed anywhere, on every node, within the implementation's
//     stated bound (PollChanges: its interval plus one version read).
//     A receive may stand for several changes (they coalesce), and one
//     may come without a change (a reload that finds nothing new costs
//     only a read): what is guaranteed is that after a change one receive
//     comes later than it.
//   - The channel is closed once ctx ends; the watch then holds nothing.
//   - Any number of watches, on any number of nodes, work at once.
type Changes interface {
	Watch(ctx context.Context) <-chan struct{}
}

// Versioner reports the control plane's version, which moves with every
// change (a fleetmq.ControlStore, a Source).
type Versioner interface {
	Version(ctx context.Context) (int64, error)
}

// PollChanges is the Changes of a store read every Interval: a change is
// told when the version differs from the one read before.
type PollChanges struct {
	Store    Versioner
	Interval time.Duration // VersionPoll when zero
}

// Watch polls the version until ctx ends. A read that fails is retried
// at the next interval.
func (p PollChanges) Watch(ctx context.Context) <-chan struct{} {
	every := p.Interval
	if every <= 0 {
		every = VersionPoll
	}
	out := make(chan struct{}, 1)
	last, err := p.Store.Version(ctx)
	known := err == nil
	go func() {
		defer close(out)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			v, err := p.Store.Version(ctx)
			if err != nil || known && v == last {
				continue
			}
			last, known = v, true
			select {
			case out <- struct{}{}:
			default: // one pending already stands for this change too
			}
		}
	}()
	return out
}
