package platform

import (
	"context"
	"crypto/rand"
	"log/slog"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Source builds snapshots of the control plane (the store, in production).
type Source interface {
	// Version changes whenever anything a Snapshot holds changes.
	Version(ctx context.Context) (int64, error)
	// Load builds a snapshot of the current state.
	Load(ctx context.Context) (*Snapshot, error)
}

// UsageSink stores metered usage increments: the Meter counts in memory
// on the message path, and Run flushes what it counted since the last
// flush. On several nodes every node flushes its own increments to the
// one sink (PostgreSQL, whose INSERT … ON CONFLICT DO UPDATE adds them),
// so the sink, not the meter, is what is shared. The contract a second
// implementation must meet (the suite in internal/contract, Usage, checks
// it): increments from any number of nodes, flushed at once, sum exactly
// per account and day (drops per reason, clients per client and day);
// an error means nothing was added (Run flushes the increments again),
// unless the sink is also an OnceUsageSink.
type UsageSink interface {
	AddUsage(ctx context.Context, daily []DailyDelta, clients []ClientDelta) error
}

// OnceUsageSink is a UsageSink that applies a write at most once per id.
// With one, a write whose outcome was not reported (an error from a commit
// that went through: the connection dropped after it) is sent again as it
// was, with its id, instead of being put back into the meter, where it
// would have been counted a second time.
type OnceUsageSink interface {
	AddUsageOnce(ctx context.Context, id string, daily []DailyDelta, clients []ClientDelta) error
}

// usageWrite is a usage write whose outcome is not known, to be sent
// again before anything else.
type usageWrite struct {
	id      string
	daily   []DailyDelta
	clients []ClientDelta
}

// VersionPoll is how often Run checks the source's version (when its
// interval is longer): a control-plane change is in force within it.
const VersionPoll = 100 * time.Millisecond

// Run keeps the policy current until ctx ends. Every VersionPoll (or
// interval, if shorter) it reloads the snapshot when the source's version
// moved and then disconnects the sessions the new snapshot no longer allows
// (credential revoked, account suspended, client deleted), ends the
// persistent sessions, connected or not, that can never be resumed (Gone)
// and holds the
// connected clients to their plans' per-client publish rates (the accounts'
// rates follow each new snapshot at once). Every interval it
// also disconnects the sessions whose credential expired meanwhile and
// flushes metered usage to sink (the per-client usage every
// Options.ClientUsageEvery); it flushes everything once more on the way out. srv
// also becomes the broker the live view reads retained messages from
// (SetBroker). A notice from Options.Changes starts a version check at
// once, between polls.
func (p *Policy) Run(ctx context.Context, src Source, sink UsageSink, srv *broker.Server, interval time.Duration, log *slog.Logger) {
	if srv != nil {
		p.SetBroker(srv)
	}
	t := time.NewTicker(min(interval, VersionPoll))
	defer t.Stop()
	last := p.Snapshot().Version
	lastFull := time.Now()
	lastClients := lastFull
	var expiry expiryWatch      // zero: the first full interval walks
	var notices <-chan struct{} // nil without Options.Changes: never ready
	if p.opts.Changes != nil {
		notices = p.opts.Changes.Watch(ctx)
	}
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			p.flush(fctx, sink, log)
			cancel()
			return
		case now = <-t.C:
		case _, ok := <-notices:
			if !ok {
				notices = nil
				continue
			}
			now = time.Now()
		}
		full := now.Sub(lastFull) >= interval
		changed := false
		if v, err := src.Version(ctx); err != nil {
			if full { // not every poll: a store that is down would flood the log
				log.Error("read control-plane version", "error", err)
			}
		} else if v != last {
			if err := p.Reload(ctx, src); err != nil {
				log.Error("reload control plane", "error", err)
			} else {
				last, changed = p.Snapshot().Version, true
				log.Debug("control plane reloaded", "version", last)
			}
		}
		// Between snapshots only an expiry can end a session: the pass
		// over every session waits for the next one (a million mostly
		// idle devices are not walked every second for nothing).
		if snap, at := p.snap.Load(), p.opts.Now(); changed || full && expiry.due(snap, at, now) {
			p.disconnectInvalidAt(srv, at)
			expiry.walked(snap, at, now, changed)
		}
		if changed {
			p.ApplyClientRates(srv)
		}
		if p.opts.Applied != nil {
			p.opts.Applied(ctx, p.Snapshot().Version)
		}
		if full {
			// Not cancelled by shutdown: a commit interrupted by the
			// cancellation may have gone through while reporting an
			// error, and its increments, put back for the final flush,
			// would then be counted twice.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			clients := now.Sub(lastClients) >= p.opts.ClientUsageEvery
			p.flushPart(fctx, sink, log, clients)
			cancel()
			lastFull = now
			if clients {
				lastClients = now
			}
		}
	}
}

// expiryWatch tells Run when its once-an-interval check of every session
// is due: when the snapshot is another one than at the last check, when a
// credential of it has expired since, once more one interval after a
// check for a new snapshot (a client authenticated against the old one
// while the check ran was not registered yet, and is then), and at least
// every expiryBackstop. The zero value is due.
type expiryWatch struct {
	snap  *Snapshot
	next  time.Time // the snapshot's next expiry after the check (policy clock; zero: none)
	again bool      // check once more: the last one was for a new snapshot
	last  time.Time // when the last check ran (Run's clock)
}

// expiryBackstop bounds the time between two checks of every session.
const expiryBackstop = time.Minute

// walked records a check of every session against snap at at (the policy's
// clock, read before the check began) and now (Run's).
func (e *expiryWatch) walked(snap *Snapshot, at, now time.Time, changed bool) {
	e.again = changed || snap != e.snap
	e.snap, e.next, e.last = snap, snap.nextExpiry(at), now
}

// due reports whether the sessions must be checked again with snap in
// force at at (policy clock) and now (Run's).
func (e *expiryWatch) due(snap *Snapshot, at, now time.Time) bool {
	return e.snap == nil || snap != e.snap || e.again || now.Sub(e.last) >= expiryBackstop ||
		!e.next.IsZero() && !at.Before(e.next)
}

// Reload takes the source's current snapshot, unless the one in force is
// newer (a reload that raced with another one finished first).
func (p *Policy) Reload(ctx context.Context, src Source) error {
	snap, err := src.Load(ctx)
	if err != nil {
		return err
	}
	for {
		cur := p.snap.Load()
		if cur != nil && cur.Version > snap.Version {
			return nil
		}
		if p.snap.CompareAndSwap(cur, snap) {
			p.applyRates(snap)
			p.poolsLowered(cur, snap, p.opts.Now())
			logChanges(p.opts.Logger, cur, snap)
			return nil
		}
	}
}

// DisconnectInvalid ends the sessions that the snapshot in force no longer
// allows (v5 clients get DISCONNECT 0x87 Not authorized).
func (p *Policy) DisconnectInvalid(srv *broker.Server) int {
	return p.disconnectInvalidAt(srv, p.opts.Now())
}

func (p *Policy) disconnectInvalidAt(srv *broker.Server, now time.Time) int {
	n := srv.Disconnect(func(id *broker.Identity) string { return p.Invalid(id, now) }, packet.NotAuthorized)
	srv.EndSessions(p.Gone, packet.NotAuthorized)
	return n
}

// ApplyClientRates holds the connected clients to the per-client publish
// rates of their plans in the snapshot in force (the accounts' rates
// follow the snapshot by themselves: applyRates). It reports how many
// connections' rates changed.
func (p *Policy) ApplyClientRates(srv *broker.Server) int {
	if srv == nil {
		return 0
	}
	snap := p.snap.Load()
	return srv.SetPublishRates(func(id *broker.Identity) (float64, float64, bool) {
		s := SessionOf(id)
		if s == nil {
			return 0, 0, false
		}
		acc := snap.Accounts[s.AccountID]
		if acc == nil {
			return 0, 0, false
		}
		return float64(acc.PublishRate), float64(acc.PublishBytesRate), true
	})
}

// flushTimeout bounds one flush of usage and problems.
const flushTimeout = 10 * time.Second

// flushChunk bounds the rows (problems, or accounts' and clients' usage)
// one write of a flush carries. On SQLite every write holds the one write
// lock, and history commits, with the acknowledgements they carry, wait
// for it: a flush of a problem burst or of thousands of clients' usage is
// many short writes the history writer takes turns with, not one long one.
const flushChunk = 32

// When a usage write takes longer than slowFlushWrite (it waited for the
// write lock behind long history commits: the store is busy, and its
// acknowledgements wait that long anyway), the next one carries twice as
// many rows, up to flushChunkMax: thousands of clients' usage still fit in
// one flush, instead of lagging further behind at every flush while the
// load lasts.
const (
	slowFlushWrite = 50 * time.Millisecond
	flushChunkMax  = 1024
)

// flush writes the client problems and all the metered usage to sink.
func (p *Policy) flush(ctx context.Context, sink UsageSink, log *slog.Logger) {
	p.flushPart(ctx, sink, log, true)
}

// flushPart is flush, leaving the per-client usage for a later flush
// unless withClients.
func (p *Policy) flushPart(ctx context.Context, sink UsageSink, log *slog.Logger, withClients bool) {
	if sink == nil {
		return
	}
	if ps, ok := sink.(ProblemSink); ok {
		if err := p.flushProblems(ctx, ps); err != nil {
			log.Error("flush client problems", "error", err)
		}
	}
	once, _ := sink.(OnceUsageSink)
	if w := p.unsure; w != nil && once != nil {
		if err := once.AddUsageOnce(ctx, w.id, w.daily, w.clients); err != nil {
			log.Error("flush usage", "error", err)
			return
		}
		p.unsure = nil
	}
	daily, clients := p.meter.collect(broker.DropNames(), withClients)
	chunk := flushChunk
	for len(daily) > 0 || len(clients) > 0 {
		nd := min(len(daily), chunk)
		nc := min(len(clients), chunk-nd)
		start := p.opts.Now()
		var err error
		if once != nil {
			id := rand.Text()
			if err = once.AddUsageOnce(ctx, id, daily[:nd], clients[:nc]); err != nil {
				// Perhaps written: sent again as it is, with its id.
				p.unsure = &usageWrite{id, daily[:nd], clients[:nc]}
				daily, clients = daily[nd:], clients[nc:]
			}
		} else {
			err = sink.AddUsage(ctx, daily[:nd], clients[:nc])
		}
		if err != nil {
			// Put back what was not written, so the next flush retries it.
			p.meter.restore(daily, clients, broker.DropNames())
			log.Error("flush usage", "error", err)
			return
		}
		if p.opts.Now().Sub(start) > slowFlushWrite {
			chunk = min(2*chunk, flushChunkMax)
		}
		daily, clients = daily[nd:], clients[nc:]
	}
}
