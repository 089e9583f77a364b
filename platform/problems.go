package platform

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Problems: every refusal, server-side close and drop is also recorded
// per client for its account's owner (the portal's device page, the REST
// API, "fleetmq client problems"). The broker reports them (Refused,
// Disconnected, Dropped); repeats are aggregated in memory and written to
// the store with the usage, every reload interval.

// ProblemSink stores aggregated problems (a fleetmq.ProblemStore).
type ProblemSink interface {
	AddProblems(ctx context.Context, ps []fleetmq.ClientProblem) error
}

// Bounds of the problems waiting for the next flush: one account can add
// at most maxPendingPerAccount distinct problems (repeats of those still
// count), all accounts together about maxPendingProblems, so a device
// flooding distinct topics costs bounded memory and does not crowd out the
// problems of other accounts.
const (
	maxPendingProblems   = 20000
	maxPendingPerAccount = 500
)

// problemShards spreads accounts over locks, so that the drops of one
// account's overloaded subscriber do not contend with other accounts'.
const problemShards = 16

// problemKey identifies one problem of one client.
type problemKey struct{ account, client, kind, topic, reason string }

func keyOf(p *fleetmq.ClientProblem) problemKey {
	return problemKey{p.AccountID, p.ClientID, p.Kind, p.Topic, p.Reason}
}

// problemLog aggregates problems between flushes.
type problemLog struct {
	seed      maphash.Seed
	shards    [problemShards]problemShard
	overflown atomic.Int64 // distinct problems not recorded (bounds reached), since start
}

// problemShard holds the pending problems of some accounts.
type problemShard struct {
	mu      sync.Mutex
	pending map[problemKey]*fleetmq.ClientProblem
	perAcct map[string]int
}

func (l *problemLog) shard(account string) *problemShard {
	return &l.shards[maphash.String(l.seed, account)%problemShards]
}

// add records one occurrence of p at now.
func (l *problemLog) add(p fleetmq.ClientProblem, now time.Time) {
	sh := l.shard(p.AccountID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := sh.pending[keyOf(&p)]; q != nil {
		q.Count++
		q.Last, q.QoS, q.Code, q.Detail = now, p.QoS, p.Code, p.Detail
		return
	}
	p.Count, p.First, p.Last = 1, now, now
	if !sh.insertLocked(p) {
		l.overflown.Add(1)
	}
}

// insertLocked adds a problem not pending yet, within the bounds; false
// if a bound was reached.
func (sh *problemShard) insertLocked(p fleetmq.ClientProblem) bool {
	if sh.pending == nil {
		sh.pending, sh.perAcct = make(map[problemKey]*fleetmq.ClientProblem), make(map[string]int)
	}
	if len(sh.pending) >= maxPendingProblems/problemShards || sh.perAcct[p.AccountID] >= maxPendingPerAccount {
		return false
	}
	sh.pending[keyOf(&p)] = &p
	sh.perAcct[p.AccountID]++
	return true
}

// take returns what was recorded since the last take and starts afresh.
func (l *problemLog) take() []fleetmq.ClientProblem {
	var out []fleetmq.ClientProblem
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		pending := sh.pending
		sh.pending, sh.perAcct = nil, nil
		sh.mu.Unlock()
		for _, p := range pending {
			out = append(out, *p)
		}
	}
	return out
}

// restore puts back problems a failed flush did not store (within the
// bounds), merged with those recorded since, so the next flush retries
// them.
func (l *problemLog) restore(ps []fleetmq.ClientProblem) {
	for _, p := range ps {
		sh := l.shard(p.AccountID)
		sh.mu.Lock()
		if q := sh.pending[keyOf(&p)]; q != nil {
			q.Count += p.Count
			q.First = p.First
		} else if !sh.insertLocked(p) {
			l.overflown.Add(1)
		}
		sh.mu.Unlock()
	}
}

// Refused records a refusal for the client's account: one the platform
// decided or one of the broker's own. A CONNECT refused before the
// account was known (an unknown username) belongs to no account and is
// only in the operator's log.
func (p *Policy) Refused(id *broker.Identity, r broker.Refusal) {
	account := accountOf(id)
	if account == "" {
		return
	}
	kind := fleetmq.ProblemConnectRefused
	switch r.What {
	case broker.RefusedPublish:
		kind = fleetmq.ProblemPublishRefused
	case broker.RefusedSubscribe:
		kind = fleetmq.ProblemSubscribeRefused
	case broker.RefusedWill:
		kind = fleetmq.ProblemWillRefused
	}
	p.problems.add(fleetmq.ClientProblem{AccountID: account, ClientID: id.ClientID, Kind: kind,
		Topic: r.Topic, QoS: int(r.QoS), Code: int(r.Code), Reason: r.Code.Name(), Detail: r.Detail}, p.opts.Now())
}

// NotStored records, for its account's owner, a message the store
// refused (ingest set it aside and refused it to its publisher).
func (p *Policy) NotStored(rec *fleetmq.Record, err error) {
	p.problems.add(fleetmq.ClientProblem{AccountID: rec.AccountID, ClientID: rec.ClientID, Kind: fleetmq.ProblemPublishRefused,
		Topic: rec.Topic, QoS: int(rec.PublishedQoS), Code: int(packet.ImplementationSpecificError), Reason: "not_stored",
		Detail: "the history store refused this message, so it was not kept: " + err.Error()}, p.opts.Now())
}

// recordDrop records a message not delivered to a session.
func (p *Policy) recordDrop(id *broker.Identity, m *broker.Message, r broker.DropReason) {
	account := accountOf(id)
	if account == "" {
		return
	}
	pr := fleetmq.ClientProblem{AccountID: account, ClientID: id.ClientID, Kind: fleetmq.ProblemDropped, Reason: r.String(), Detail: r.Detail()}
	if m != nil {
		pr.Topic, pr.QoS = m.Topic, int(m.QoS)
	}
	p.problems.add(pr, p.opts.Now())
}

// recordClose records a connection the server ended, except at shutdown.
func (p *Policy) recordClose(id *broker.Identity, d broker.Disconnection) {
	account := accountOf(id)
	if account == "" || !d.ByServer() || d.Reason == broker.CloseShutdown {
		return
	}
	p.problems.add(fleetmq.ClientProblem{AccountID: account, ClientID: id.ClientID, Kind: fleetmq.ProblemDisconnected,
		Code: int(d.Code), Reason: d.Reason.String(), Detail: d.Detail}, p.opts.Now())
}

// accountOf is the account an identity belongs to: a platform session's,
// or the one Authenticate named with a refusal; "" if none.
func accountOf(id *broker.Identity) string {
	if id == nil {
		return ""
	}
	if s := SessionOf(id); s != nil {
		return s.AccountID
	}
	return namespaceAccount(id.Namespace) // a refusal's, or a session restored from the state file
}

// flushProblems writes the problems recorded since the last flush, at
// most flushChunk per write. What a failed write leaves is kept for the
// next flush.
func (p *Policy) flushProblems(ctx context.Context, sink ProblemSink) error {
	ps := p.problems.take()
	for len(ps) > 0 {
		n := min(len(ps), flushChunk)
		if err := sink.AddProblems(ctx, ps[:n]); err != nil {
			p.problems.restore(ps)
			return err
		}
		ps = ps[n:]
	}
	return nil
}
