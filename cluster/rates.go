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
	// its plan's messages per second, and the counts (only growing) of
	// PUBLISH packets that passed the limiter and that waited for it.
	AccountUsage(fn func(accountID string, planRate float64, taken, waited uint64))
	// SetAccountShare sets the part of the account's plan rates this node
	// allows.
	SetAccountShare(accountID string, share float64)
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
// publish through, so that the account gets its plan's rate in the whole
// cluster, not on each node. Every RatesEvery each node reports, on NATS,
// the rate its accounts' devices published at there and whether they had
// to wait for the account's limit; then each node gives itself, per
// account:
//   - all of the rate when no other node reports the account;
//   - otherwise, when its devices did not wait, what they used plus a
//     quarter and 2% of the plan (room to grow: a node that needs more
//     waits, reports it, and gets more a second later);
//   - and when they waited, an equal part, with the other nodes that
//     waited, of what the nodes that did not wait leave.
//
// No node gets less than a tenth of an equal part, so a node where an
// account starts publishing is not shut out until the next report. The
// nodes that did not wait use less than they were given, so the account's
// rate over the cluster stays within its plan's (within one report
// interval of a change).
type Rates struct {
	nc   *nats.Conn
	node string
	src  RateSource
	log  *slog.Logger

	mu      sync.Mutex
	reports map[string]rateReport // by node, the others'
	last    map[string][2]uint64  // this node's counts at the previous tick
	lastAt  time.Time

	stop chan struct{}
	done chan struct{}
}

// rateReport is one node's report: per account, messages per second and
// whether its devices waited.
type rateReport struct {
	Node     string              `json:"node"`
	Accounts map[string]rateLoad `json:"accounts"`
	at       time.Time
}

type rateLoad struct {
	Rate   float64 `json:"rate"`
	Waited bool    `json:"waited,omitempty"`
}

// StartRates starts sharing src's account rates with the other nodes.
func StartRates(n *NATS, node string, src RateSource, log *slog.Logger) (*Rates, error) {
	if log == nil {
		log = slog.Default()
	}
	nc, err := n.Connect("rates")
	if err != nil {
		return nil, err
	}
	r := &Rates{nc: nc, node: node, src: src, log: log, reports: map[string]rateReport{}, last: map[string][2]uint64{},
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
	rep.at = time.Now()
	r.mu.Lock()
	r.reports[rep.Node] = rep
	r.mu.Unlock()
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
	mine := rateReport{Node: r.node, Accounts: map[string]rateLoad{}}
	plans := map[string]float64{}
	r.src.AccountUsage(func(id string, plan float64, taken, waited uint64) {
		prev, seen := r.last[id]
		r.last[id] = [2]uint64{taken, waited}
		plans[id] = plan
		if !seen || secs <= 0 || taken == prev[0] {
			return
		}
		mine.Accounts[id] = rateLoad{Rate: float64(taken-prev[0]) / secs, Waited: waited > prev[1]}
	})
	if data, err := json.Marshal(&mine); err == nil {
		if err := r.nc.Publish(ratesSubject, data); err != nil {
			r.log.Warn("cluster: report the accounts' publish rates", "error", err)
		}
	}
	r.mu.Lock()
	var others []rateReport
	for node, rep := range r.reports {
		if now.Sub(rep.at) > reportsKept {
			delete(r.reports, node)
			continue
		}
		others = append(others, rep)
	}
	r.mu.Unlock()
	for id, plan := range plans {
		r.src.SetAccountShare(id, share(plan, mine.Accounts[id], loadsOf(others, id)))
	}
}

func loadsOf(reports []rateReport, account string) []rateLoad {
	var out []rateLoad
	for _, rep := range reports {
		if l, ok := rep.Accounts[account]; ok {
			out = append(out, l)
		}
	}
	return out
}

// share is the part of an account's plan rate a node gives itself, with
// its own load and the other nodes' (see Rates).
func share(plan float64, mine rateLoad, others []rateLoad) float64 {
	if len(others) == 0 || plan <= 0 {
		return 1
	}
	need := func(l rateLoad) float64 { return min((l.Rate*1.25+plan*0.02)/plan, 1) }
	nodes := float64(len(others) + 1)
	floor := 0.1 / nodes
	left, waiting := 1.0, 0.0
	for _, l := range append(others, mine) {
		if l.Waited {
			waiting++
		} else {
			left -= need(l)
		}
	}
	if !mine.Waited {
		return max(need(mine), floor)
	}
	return max(left/waiting, floor)
}

// Close stops reporting; the node keeps the shares it set last.
func (r *Rates) Close() {
	close(r.stop)
	<-r.done
	r.nc.Close()
}
