package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// What a soak run samples while it runs: the server's memory, goroutines
// and metrics, and the progress lines.

// metrics scrapes the target's /metrics.
func (t *soakTarget) metrics(ctx context.Context) (map[string]float64, error) {
	if t.metricsURL == "" {
		return nil, errors.New("no metrics")
	}
	return scrapeMetrics(ctx, t.metricsURL)
}

// sampler reads the server's memory and goroutines.
type sampler struct {
	target *soakTarget
	start  time.Time
	mu     sync.Mutex
	got    []soakSample
}

func newSampler(t *soakTarget, start time.Time) *sampler { return &sampler{target: t, start: start} }

func (s *sampler) run(ctx context.Context, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sample(ctx context.Context) {
	x := soakSample{At: time.Since(s.start)}
	if s.target.pid > 0 {
		if m, err := readProcMem(s.target.pid); err == nil {
			x.RSSKiB, x.AnonKiB, x.FileKiB = m.rss, m.anon, m.file
		}
	}
	if m, err := s.target.metrics(ctx); err == nil {
		x.HeapBytes, x.Goroutines = m["go_memstats_heap_inuse_bytes"], m["go_goroutines"]
		x.Conns, x.Queued = m["fleetmq_mqtt_connections"], m["fleetmq_mqtt_queued_messages"]
	}
	s.mu.Lock()
	s.got = append(s.got, x)
	s.mu.Unlock()
}

func (s *sampler) samples() []soakSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]soakSample(nil), s.got...)
}

func (s *sampler) last() soakSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 {
		return soakSample{}
	}
	return s.got[len(s.got)-1]
}

// reportProgress prints a line about every tenth of the run (at most once
// a minute) until ctx ends.
func reportProgress(ctx context.Context, w io.Writer, start time.Time, led *ledger, s *sampler, t *soakTarget) {
	deadline, _ := ctx.Deadline()
	every := min(max(deadline.Sub(start)/10, 10*time.Second), time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		led.mu.Lock()
		n := len(led.msgs)
		var got int64
		for _, b := range led.subs {
			got += b.received[0] + b.received[1] + b.received[2]
		}
		led.mu.Unlock()
		x := s.last()
		fmt.Fprintf(w, "soak: %v: %d published, %d copies received; server: RSS %d KiB, %.0f goroutines, %.0f connections, %.0f queued; alive %v\n",
			time.Since(start).Round(time.Second), n, got, x.RSSKiB, x.Goroutines, x.Conns, x.Queued, t.alive())
	}
}

// formatCounts is "a 1, b 2" in key order.
func formatCounts[V int | int64](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sumCounts[V int | int64](m map[string]V) V {
	var n V
	for _, v := range m {
		n += v
	}
	return n
}

// seriesBy collects the non-zero series of metric name by the values of
// labels, joined with "/" (nil when there are none).
func seriesBy(m map[string]float64, name string, labels ...string) map[string]int64 {
	var out map[string]int64
	for series, v := range m {
		rest, ok := strings.CutPrefix(series, name+"{")
		if !ok || v == 0 {
			continue
		}
		vals := make([]string, len(labels))
		for i, l := range labels {
			if _, after, ok := strings.Cut(rest, l+`="`); ok {
				vals[i], _, _ = strings.Cut(after, `"`)
			}
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[strings.Join(vals, "/")] += int64(v)
	}
	return out
}
