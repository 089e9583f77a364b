// Package metrics is fleetmq's side of the Prometheus client library: the
// registry every fleetmq process serves (the Go runtime, process and
// build-info collectors beside fleetmq's own families), its HTTP handler,
// and Snapshot, the collector of families read at scrape time from one
// snapshot of a component's counters. So the message path only touches its
// own atomics and nothing is counted twice. Label sets are fixed and small
// (packet types, QoS levels, reasons, listeners): no per-account,
// per-client or per-topic labels.
package metrics

import (
	"log/slog"
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetmq/fleetmq/internal/procs"
)

// NewRegistry returns a registry holding the Go runtime collector
// (go_*: memory, goroutines, GC), the process collector (process_*: CPU
// seconds, resident memory, open file descriptors and their limit),
// fleetmq_build_info{version, go_version}, always 1, and
// fleetmq_processor_raises_total{reason} (package procs).
func NewRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "fleetmq_build_info",
		Help:        "Always 1; the labels say which fleetmq is running and the Go release it was built with.",
		ConstLabels: prometheus.Labels{"version": version, "go_version": runtime.Version()},
	})
	build.Set(1)
	raises := func(reason string, read func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "fleetmq_processor_raises_total",
			Help:        "Times the server took more processors (GOMAXPROCS) while fitting them to its load, by reason: cpu (a 100 ms tick used more than 60% of them), wait (a goroutine waited 4 ms or more for one).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, read)
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		build,
		raises("cpu", func() float64 { busy, _ := procs.Raises(); return float64(busy) }),
		raises("wait", func() float64 { _, wait := procs.Raises(); return float64(wait) }),
	)
	return reg
}

// Handler serves reg in the exposition format the scraper asks for (the
// text format by default). A family that fails to collect is logged and
// left out; the others are served.
func Handler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// Kinds of a Family.
const (
	Counter = prometheus.CounterValue
	Gauge   = prometheus.GaugeValue
)

// Emit adds one sample of a family, with its label values in the order of
// Family.Labels.
type Emit func(value float64, labelValues ...string)

// Family is a metric family whose samples are read from a snapshot of T.
type Family[T any] struct {
	Name   string
	Help   string
	Kind   prometheus.ValueType // Counter or Gauge
	Labels []string             // label names
	// Collect emits the family's samples from one snapshot.
	Collect func(snap T, emit Emit)
}

// Value is a Family of one unlabelled sample.
func Value[T any](name, help string, kind prometheus.ValueType, f func(T) float64) Family[T] {
	return Family[T]{Name: name, Help: help, Kind: kind, Collect: func(snap T, emit Emit) { emit(f(snap)) }}
}

// Snapshot is a prometheus.Collector of families read at scrape time: each
// scrape takes one snapshot and emits every family from it, so the
// families of one scrape agree with each other.
type Snapshot[T any] struct {
	read  func() T
	fams  []Family[T]
	descs []*prometheus.Desc
}

// NewSnapshot returns a collector of fams, which read takes a snapshot for.
// Register it with a prometheus.Registerer; a family name registered twice
// is refused there.
func NewSnapshot[T any](read func() T, fams ...Family[T]) *Snapshot[T] {
	s := &Snapshot[T]{read: read, fams: fams}
	for _, f := range fams {
		s.descs = append(s.descs, prometheus.NewDesc(f.Name, f.Help, f.Labels, nil))
	}
	return s
}

// Describe implements prometheus.Collector.
func (s *Snapshot[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Snapshot[T]) Collect(ch chan<- prometheus.Metric) {
	snap := s.read()
	for i, f := range s.fams {
		d := s.descs[i]
		f.Collect(snap, func(v float64, labelValues ...string) {
			m, err := prometheus.NewConstMetric(d, f.Kind, v, labelValues...)
			if err != nil {
				m = prometheus.NewInvalidMetric(d, err)
			}
			ch <- m
		})
	}
}
