// Package metrics writes fleetmq's counters in the Prometheus text
// exposition format (version 0.0.4). Collectors are functions read at scrape
// time, so nothing is counted twice and the message path only touches its
// own atomics. Label sets are fixed and small (packet types, QoS levels,
// drop reasons): no per-account, per-client or per-topic labels.
package metrics

import (
	"bufio"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Kind is a metric type.
type Kind string

// Metric kinds.
const (
	Counter Kind = "counter"
	Gauge   Kind = "gauge"
)

// Sample is one value with its labels (name=value pairs, in order).
type Sample struct {
	Labels []string
	Value  float64
}

// Family is a named metric with help text and a function that returns its
// samples at scrape time.
type Family struct {
	Name    string
	Help    string
	Kind    Kind
	Collect func() []Sample
}

// Registry holds families. Safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families []Family
}

// Add registers a family; a duplicate name panics (a programming error).
func (r *Registry) Add(f Family) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.families {
		if g.Name == f.Name {
			panic("metrics: duplicate family " + f.Name)
		}
	}
	r.families = append(r.families, f)
}

// Value is a Collect function for a single unlabelled value.
func Value(f func() float64) func() []Sample {
	return func() []Sample { return []Sample{{Value: f()}} }
}

// ServeHTTP writes every family in the text format.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	fams := append([]Family(nil), r.families...)
	r.mu.Unlock()
	sort.Slice(fams, func(i, j int) bool { return fams[i].Name < fams[j].Name })
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	for _, f := range fams {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Kind)
		for _, s := range f.Collect() {
			bw.WriteString(f.Name)
			if len(s.Labels) > 0 {
				bw.WriteByte('{')
				for i := 0; i+1 < len(s.Labels); i += 2 {
					if i > 0 {
						bw.WriteByte(',')
					}
					fmt.Fprintf(bw, "%s=%q", s.Labels[i], escapeLabel(s.Labels[i+1]))
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			bw.WriteString(strconv.FormatFloat(s.Value, 'g', -1, 64))
			bw.WriteByte('\n')
		}
	}
	bw.Flush()
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// escapeLabel prepares a label value for %q (which escapes quotes and
// backslashes itself); newlines become \n as the format requires.
func escapeLabel(s string) string { return strings.ReplaceAll(s, "\n", " ") }
