package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestExposition(t *testing.T) {
	var r Registry
	n := 0.0
	r.Add(Family{Name: "fleetmq_b_total", Help: "B things.", Kind: Counter, Collect: Value(func() float64 { n++; return n })})
	r.Add(Family{Name: "fleetmq_a", Help: "A\nthings.", Kind: Gauge, Collect: func() []Sample {
		return []Sample{{Labels: []string{"qos", "0"}, Value: 1.5}, {Labels: []string{"qos", "1", "reason", `say "hi"`}, Value: 2}}
	}})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := `# HELP fleetmq_a A\nthings.
# TYPE fleetmq_a gauge
fleetmq_a{qos="0"} 1.5
fleetmq_a{qos="1",reason="say \"hi\""} 2
# HELP fleetmq_b_total B things.
# TYPE fleetmq_b_total counter
fleetmq_b_total 1
`
	if got := rec.Body.String(); got != want {
		t.Fatalf("exposition:\n%s\nwant:\n%s", got, want)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "fleetmq_b_total 2\n") {
		t.Fatalf("values are not read at scrape time:\n%s", rec.Body.String())
	}
}

func TestDuplicatePanics(t *testing.T) {
	var r Registry
	r.Add(Family{Name: "x", Kind: Gauge, Collect: Value(func() float64 { return 0 })})
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate family did not panic")
		}
	}()
	r.Add(Family{Name: "x", Kind: Gauge, Collect: Value(func() float64 { return 0 })})
}
