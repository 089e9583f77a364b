package cluster

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// RateSource is what Rates reads and sets on its node: the accounts'
// publish limiters (platform.Policy is one).
type RateSource interface {
	// AccountUsage calls fn for each account with a limiter on this node:
	// its plan's messages and bytes per second (0: unlimited), and the
	// counts (only growing) of PUBLISH packets that passed the limiter,
	// their bytes, and those that waited for it.
	AccountUsage(fn func(accountID string, planMsgs, planBytes float64, taken, bytes, waited uint64))
	// SetAccountShare sets the parts of the account's plan rates
	// (messages, bytes) this node allows.
	SetAccountShare(accountID string, msgs, bytes float64)
}

// ratesSubject carries each node's report of its accounts' publishing.
const ratesSubject = "fleetmq.rates"

// RatesEvery is how often the nodes report and the shares are set again.
const RatesEvery = time.Second

// reportsKept is how long a node's report counts: a node that stopped
// reporting (gone) no longer takes a share after it.
const reportsKept = 3 * RatesEvery

// Rates splits each account's publish rates (messages and bytes per second
// of its plan, for all its devices together) between the nodes its devices
// publish through, so that the account gets its plan's rates in the whole
// cluster, not on each node. Every RatesEvery each node reports, on NATS,
// the rates its accounts' devices published at there and whether they had
// to wait for the account's limit; then each node gives itself, per
// account and for messages and bytes alike (share):
//   - all of the rate when no other node reports the account, and 1% of
//     it when its own devices did not publish (devices that need more
//     wait; the node reports it, and gets a part a second later);
//   - when no node waited: what its devices used plus a quarter and 2% of
//     the plan (room to grow), scaled down with the others' when together
//     they would pass the plan;
//   - when some node waited: a node that did not wait keeps what it used
//     and the room to grow, up to an equal part; the nodes that waited
//     split what the others leave.
//
// The parts of the nodes whose devices publish sum to the plan (nodes
// where the account is idle hold 1% each), so the account's rates over
// the cluster stay within its plan's (within one report interval of a
// change), and they settle at a max-min fair split whatever node started
// first.
type Rates struct {
	nc   *nats.Conn
	node string
	src  RateSource
	log  *slog.Logger

	mu      sync.Mutex
	reports map[string]nodeReport // by node, the others'
	last    map[string]usage      // this node's counts at the previous tick
	lastAt  time.Time

	stop chan struct{}
	done chan struct{}
}

// rateReport is (part of) one node's report: per account, messages and
// bytes per second and whether its devices waited. A node with many
// active accounts sends several (reportChunk accounts each).
type rateReport struct {
	Node     string              `json:"node"`
	Accounts map[string]rateLoad `json:"accounts"`
}

// nodeReport is what a node reported lately, by account, each with the
// time it was heard.
type nodeReport map[string]heardLoad

type heardLoad struct {
	rateLoad
	at time.Time
}

type rateLoad struct {
	Rate   float64 `json:"rate"`
	Bytes  float64 `json:"bytes"`
	Waited bool    `json:"waited,omitempty"`
}

// usage is an account's counts at a tick, when they last grew, and
// whether its devices waited then.
type usage struct {
	taken, bytes, waited uint64
	active               time.Time
	waitedLast           bool
}

// reportChunk bounds the accounts of one report message (a few tens of
// KiB, far below NATS's maximum payload).
const reportChunk = 500

// StartRates starts sharing src's account rates with the other nodes.
func StartRates(n *NATS, node string, src RateSource, log *slog.Logger) (*Rates, error) {
	if log == nil {
		log = slog.Default()
	}
	nc, err := n.Connect("rates")
	if err != nil {
		return nil, err
	}
	r := &Rates{nc: nc, node: node, src: src, log: log, reports: map[string]nodeReport{}, last: map[string]usage{},
		lastAt: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	if _, err := nc.Subscribe(ratesSubject, r.heard); err != nil {
		nc.Close()
		return nil, err
	}
	go r.run()
	return r, nil
}

func (r *Rates) heard(msg *nats.Msg) {
	var rep rateReport
	if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Node == "" || rep.Node == r.node {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	nr := r.reports[rep.Node]
	if nr == nil {
		nr = nodeReport{}
		r.reports[rep.Node] = nr
	}
	for id, l := range rep.Accounts {
		nr[id] = heardLoad{l, now}
	}
}

func (r *Rates) run() {
	defer close(r.done)
	t := time.NewTicker(RatesEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.tick(now)
		}
	}
}

// tick reports this node's load and sets its shares.
func (r *Rates) tick(now time.Time) {
	secs := now.Sub(r.lastAt).Seconds()
	r.lastAt = now
	mine := map[string]rateLoad{}
	type plan struct{ msgs, bytes float64 }
	plans := map[string]plan{}
	seen := make(map[string]usage, len(r.last))
	r.src.AccountUsage(func(id string, planMsgs, planBytes float64, taken, bytes, waited uint64) {
		prev, had := r.last[id]
		u := usage{taken: taken, bytes: bytes, waited: waited, active: prev.active, waitedLast: prev.waitedLast}
		plans[id] = plan{planMsgs, planBytes}
		switch {
		case !had || secs <= 0:
		case taken != prev.taken:
			u.active, u.waitedLast = now, waited > prev.waited
			mine[id] = rateLoad{Rate: float64(taken-prev.taken) / secs, Bytes: float64(bytes-prev.bytes) / secs, Waited: u.waitedLast}
		case now.Sub(prev.active) <= reportsKept:
			// Nothing passed this second (its devices may all be
			// waiting for a small share): still there, as the others
			// must know.
			mine[id] = rateLoad{Waited: prev.waitedLast}
		}
		seen[id] = u
	})
	r.last = seen // accounts gone from the source are forgotten
	r.report(mine)
	r.mu.Lock()
	others := map[string][]rateLoad{}
	for node, nr := range r.reports {
		for id, l := range nr {
			if now.Sub(l.at) > reportsKept {
				delete(nr, id)
				continue
			}
			others[id] = append(others[id], l.rateLoad)
		}
		if len(nr) == 0 {
			delete(r.reports, node)
		}
	}
	r.mu.Unlock()
	for id, p := range plans {
		m, o := mine[id], others[id]
		r.src.SetAccountShare(id, share(p.msgs, m.Rate, m.Waited, o, func(l rateLoad) float64 { return l.Rate }),
			share(p.bytes, m.Bytes, m.Waited, o, func(l rateLoad) float64 { return l.Bytes }))
	}
}

// report sends this node's loads to the others, reportChunk accounts a
// message.
func (r *Rates) report(mine map[string]rateLoad) {
	chunk := rateReport{Node: r.node, Accounts: map[string]rateLoad{}}
	send := func() {
		data, err := json.Marshal(&chunk)
		if err == nil {
			err = r.nc.Publish(ratesSubject, data)
		}
		if err != nil {
			r.log.Warn("cluster: report the accounts' publish rates", "error", err)
		}
		chunk.Accounts = map[string]rateLoad{}
	}
	for id, l := range mine {
		chunk.Accounts[id] = l
		if len(chunk.Accounts) == reportChunk {
			send()
		}
	}
	if len(chunk.Accounts) > 0 {
		send()
	}
}

// idleShare is the part of a plan a node gives itself for an account
// whose devices publish elsewhere and not here: enough for an occasional
// message (and a burst of a second's worth); devices that need more wait,
// the node reports it, and it gets a part a second later. Ten such nodes
// hold a tenth of the plan that no one uses.
const idleShare = 0.01

// share is the part of an account's plan rate (messages or bytes per
// second; 0: unlimited) a node gives itself, with its own use and
// whether its devices waited, and the loads the other nodes reported
// (rate reads the dimension from a load). See Rates. When a node waits,
// no node that does not wait keeps more than an equal part (it waits in
// turn if it needs more, and then they split what is left): the parts
// settle where each node gets what it needs up to an equal part and the
// nodes that need more split the rest, whatever node started first.
func share(plan, mine float64, waited bool, others []rateLoad, rate func(rateLoad) float64) float64 {
	if len(others) == 0 || plan <= 0 {
		return 1
	}
	if mine == 0 && !waited {
		return idleShare
	}
	equal := 1 / float64(len(others)+1)
	anyWaited := waited
	for _, l := range others {
		anyWaited = anyWaited || l.Waited
	}
	need := func(r float64) float64 {
		n := min((r*1.25+plan*0.02)/plan, 1)
		if anyWaited {
			n = min(n, equal)
		}
		return n
	}
	needs, waiting := 0.0, 0.0
	for _, l := range others {
		if l.Waited {
			waiting++
		} else {
			needs += need(rate(l))
		}
	}
	if !waited {
		needs += need(mine)
		if needs > 1 { // no node waits: scaled to the plan
			return need(mine) / needs
		}
		return need(mine)
	}
	waiting++
	return max((1-needs)/waiting, idleShare)
}

// Close stops reporting; the node keeps the shares it set last.
func (r *Rates) Close() {
	close(r.stop)
	<-r.done
	r.nc.Close()
}
