package loadtest

import (
	"context"
	"sort"
	"sync"
	"time"
)

// probe times one kind of victim request (a QoS 1 publish, a REST page, a
// /readyz) offered at a steady rate for the whole run. Each request is
// timed from the tick that was due to send it, so a request that had to
// wait for an earlier one to finish counts its wait too.
type probe struct {
	mu      sync.Mutex
	samples []probeSample
	pending map[uint64]time.Time // started, not finished
	next    uint64
}

type probeSample struct {
	at  time.Time
	d   time.Duration
	err string // "" when it succeeded
}

// ProbeStats is what one probe measured over a phase's window.
type ProbeStats struct {
	N      int     `json:"n"`
	OK     int     `json:"ok"`
	Errors int     `json:"errors"`
	Stuck  int     `json:"stuck"` // still waiting when the window's drain ended
	PerSec float64 `json:"ok_per_sec"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	// FirstError is the first failure of the window, for the report.
	FirstError string `json:"first_error,omitempty"`
}

func newProbe() *probe { return &probe{pending: map[uint64]time.Time{}} }

// run calls fn every interval until ctx ends, at most inflight at once.
func (p *probe) run(ctx context.Context, interval time.Duration, inflight int, fn func(context.Context) error) {
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		var due time.Time
		select {
		case <-ctx.Done():
			return
		case due = <-tick.C:
		}
		// Pending from the tick on: a request that waits for a free slot
		// waits as a victim would.
		p.mu.Lock()
		id := p.next
		p.next++
		p.pending[id] = due
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := fn(ctx)
			d := time.Since(due)
			if ctx.Err() != nil {
				return // the run is over: not a failure of the server
			}
			s := probeSample{at: due, d: d}
			if err != nil {
				s.err = err.Error()
			}
			p.mu.Lock()
			delete(p.pending, id)
			p.samples = append(p.samples, s)
			p.mu.Unlock()
		}()
	}
}

// window waits (up to drain) for the requests due in [from, to) to
// finish, then summarizes them; a request still waiting counts as stuck,
// with its wait so far as its latency.
func (p *probe) window(from, to time.Time, drain time.Duration) ProbeStats {
	deadline := time.Now().Add(drain)
	for {
		p.mu.Lock()
		waiting := false
		for _, at := range p.pending {
			if !at.Before(from) && at.Before(to) {
				waiting = true
				break
			}
		}
		p.mu.Unlock()
		if !waiting || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var st ProbeStats
	var lats []time.Duration
	for _, s := range p.samples {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		st.N++
		if s.err != "" {
			st.Errors++
			if st.FirstError == "" {
				st.FirstError = s.err
			}
		} else {
			st.OK++
		}
		lats = append(lats, s.d)
	}
	now := time.Now()
	for _, at := range p.pending {
		if !at.Before(from) && at.Before(to) {
			st.N++
			st.Stuck++
			lats = append(lats, now.Sub(at))
		}
	}
	if secs := to.Sub(from).Seconds(); secs > 0 {
		st.PerSec = float64(st.OK) / secs
	}
	if len(lats) > 0 {
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		st.P50ms = msOf(lats[(len(lats)-1)*50/100])
		st.P99ms = msOf(lats[(len(lats)-1)*99/100])
		st.MaxMs = msOf(lats[len(lats)-1])
	}
	return st
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
