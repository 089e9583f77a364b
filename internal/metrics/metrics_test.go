package metrics_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq/internal/metrics"
)

// counts is a component's counters, as its Stats method would return them.
type counts struct {
	Done  int64
	ByQoS [3]int64
}

func TestSnapshotExposition(t *testing.T) {
	reg := metrics.NewRegistry("1.2.3")
	reads := 0
	cur := counts{Done: 1, ByQoS: [3]int64{5, 6, 7}}
	reg.MustRegister(metrics.NewSnapshot(func() counts { reads++; return cur },
		metrics.Value("fleetmq_test_done_total", "Things done.", metrics.Counter, func(c counts) float64 { return float64(c.Done) }),
		metrics.Family[counts]{Name: "fleetmq_test_by_qos", Help: "Things by QoS,\nwith a \\ in the help.", Kind: metrics.Gauge, Labels: []string{"qos"},
			Collect: func(c counts, emit metrics.Emit) {
				for q, n := range c.ByQoS {
					emit(float64(n), string(rune('0'+q)))
				}
			}},
	))
	h := metrics.Handler(reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	get := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
			t.Fatalf("/metrics: %d %q", rec.Code, rec.Header().Get("Content-Type"))
		}
		return rec.Body.String()
	}
	body := get()
	for _, want := range []string{
		"# HELP fleetmq_test_by_qos Things by QoS,\\nwith a \\\\ in the help.\n# TYPE fleetmq_test_by_qos gauge\n" +
			"fleetmq_test_by_qos{qos=\"0\"} 5\nfleetmq_test_by_qos{qos=\"1\"} 6\nfleetmq_test_by_qos{qos=\"2\"} 7\n",
		"# TYPE fleetmq_test_done_total counter\nfleetmq_test_done_total 1\n",
		`fleetmq_build_info{go_version="` + runtime.Version() + `",version="1.2.3"} 1`,
		"\nfleetmq_processor_raises_total{reason=\"cpu\"} 0\n",
		"\nfleetmq_processor_raises_total{reason=\"wait\"} 0\n",
		"\ngo_goroutines ",
		"\ngo_memstats_heap_alloc_bytes ",
		"\ngo_gc_duration_seconds_count ",
		"\nprocess_cpu_seconds_total ",
		"\nprocess_resident_memory_bytes ",
		"\nprocess_open_fds ",
		"\nprocess_max_fds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if reads != 1 {
		t.Errorf("one scrape read the counters %d times, want once (every family from one snapshot)", reads)
	}
	cur.Done = 2
	if body := get(); !strings.Contains(body, "\nfleetmq_test_done_total 2\n") {
		t.Errorf("values are not read at scrape time:\n%s", body)
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}

// TestSnapshotBadFamily: a family emitting the wrong number of label values
// is left out of the scrape; the rest is served.
func TestSnapshotBadFamily(t *testing.T) {
	reg := metrics.NewRegistry("dev")
	reg.MustRegister(metrics.NewSnapshot(func() int { return 3 },
		metrics.Family[int]{Name: "fleetmq_test_bad", Help: "Bad.", Kind: metrics.Gauge, Labels: []string{"a", "b"},
			Collect: func(n int, emit metrics.Emit) { emit(float64(n), "only-one") }},
		metrics.Value("fleetmq_test_good", "Good.", metrics.Gauge, func(n int) float64 { return float64(n) }),
	))
	var logged strings.Builder
	h := metrics.Handler(reg, slog.New(slog.NewTextHandler(&logged, nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != 200 || !strings.Contains(body, "\nfleetmq_test_good 3\n") || strings.Contains(body, "fleetmq_test_bad") {
		t.Fatalf("/metrics: %d\n%s", rec.Code, body)
	}
	if !strings.Contains(logged.String(), "fleetmq_test_bad") {
		t.Fatalf("the bad family was not logged: %q", logged.String())
	}
}

// TestDuplicateFamilyRefused: two collectors cannot both own a name.
func TestDuplicateFamilyRefused(t *testing.T) {
	reg := metrics.NewRegistry("dev")
	f := metrics.Value("fleetmq_test_x", "X.", metrics.Gauge, func(int) float64 { return 0 })
	reg.MustRegister(metrics.NewSnapshot(func() int { return 0 }, f))
	if err := reg.Register(metrics.NewSnapshot(func() int { return 0 }, f)); err == nil {
		t.Fatal("a second collector of fleetmq_test_x was registered")
	}
}
