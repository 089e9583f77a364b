package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/apptest"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// scrape reads url's Prometheus exposition into its families by name.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: not the text exposition format: %v", url, err)
	}
	return fams
}

// sample is the value of the sample of family name whose labels include
// every name=value pair of kv; ok is false if there is none.
func sample(fams map[string]*dto.MetricFamily, name string, kv ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(kv); i += 2 {
			if !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == kv[i] && l.GetValue() == kv[i+1] }) {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Summary != nil:
			return float64(m.Summary.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// TestMetricsAnOperatorWatches: with -metrics-listen, /metrics is served
// there and not on the public HTTP listener, and it has what an operator
// watches: the Go runtime and the process (memory, goroutines, GC, CPU,
// file descriptors against the limit), the build, connections by
// listener, refusals by reason code, and ingest commit latency and lag.
func TestMetricsAnOperatorWatches(t *testing.T) {
	p := startPlatform(t, func(c *app.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.MetricsListen = "127.0.0.1:0"
		c.Version = "9.8.7"
	})
	a := p.newTenant(t, "acme", "starter", false, "pump-17")
	b := p.newTenant(t, "beta", "starter", false)
	p.synced(t)

	if resp, err := http.Get("http://" + p.HTTPAddr + "/metrics"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/metrics on the public listener with -metrics-listen set: %v %v, want 404", resp, err)
	}
	for _, path := range []string{"/livez", "/readyz"} {
		if resp, err := http.Get("http://" + p.MetricsAddr + path); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s on the metrics listener: %v %v", path, resp, err)
		}
	}

	sub := dialV5(t, p.MQTTAddr, "dash", a.SubUser, a.SubPass)
	sub.Sub(t, a.all(), 1)
	dev := dialV5(t, p.MQTTAddr, "pump-17", a.PubUser, a.PubPass)
	dev.Pub(t, a.topic("pump-17", "state/level"), 1, "42")
	sub.ExpectOn(t, a.topic("pump-17", "state/level"), "42")
	// One refusal of each kind.
	refusedV5(t, p.MQTTAddr, "pump-17", a.PubUser, "not-the-password")
	refusedPub(t, dev, a.topic("pump-17", "data/level"))
	if code := sub.SubCode(t, b.all(), 1); code < 0x80 {
		t.Fatalf("A's subscriber subscribing to B's account: 0x%02x, want a refusal", code)
	}

	url := "http://" + p.MetricsAddr + "/metrics"
	var fams map[string]*dto.MetricFamily
	eventually(t, "the refused CONNECT counted", func() bool {
		fams = scrape(t, url)
		v, _ := sample(fams, "fleetmq_mqtt_connects_refused_total", "code", "bad_user_name_or_password")
		return v == 1
	})
	for _, c := range []struct {
		name string
		kv   []string
		ok   func(float64) bool
		want string
	}{
		{"fleetmq_build_info", []string{"version", "9.8.7"}, func(v float64) bool { return v == 1 }, "1"},
		{"fleetmq_mqtt_connections", []string{"listener", "tcp"}, func(v float64) bool { return v == 2 }, "2"},
		{"fleetmq_mqtt_connections", []string{"listener", "websocket"}, func(v float64) bool { return v == 0 }, "0"},
		{"fleetmq_mqtt_publish_refused_total", []string{"code", "topic_name_invalid"}, func(v float64) bool { return v == 1 }, "1"},
		{"fleetmq_mqtt_subscribe_refused_total", []string{"code", "not_authorized"}, func(v float64) bool { return v == 1 }, "1"},
		{"fleetmq_ingest_commit_duration_seconds", nil, func(v float64) bool { return v >= 1 }, "at least one commit"},
		{"fleetmq_ingest_lag_seconds", nil, func(v float64) bool { return v >= 1 }, "at least one record"},
		{"fleetmq_history_unfolded_records", nil, func(v float64) bool { return v >= 1 }, "the stored message, not yet folded"},
		{"fleetmq_history_fold_failures_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"go_goroutines", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"go_memstats_heap_inuse_bytes", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"go_gc_duration_seconds", nil, func(v float64) bool { return v >= 0 }, "present"},
		{"process_cpu_seconds_total", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"process_resident_memory_bytes", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"process_open_fds", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"process_max_fds", nil, func(v float64) bool { return v > 0 }, "> 0"},
	} {
		v, ok := sample(fams, c.name, c.kv...)
		if !ok || !c.ok(v) {
			t.Errorf("%s%v = %v (found %v), want %s", c.name, c.kv, v, ok, c.want)
		}
	}
	if t.Failed() {
		return
	}

	t.Run("the Grafana dashboard names only these metrics", func(t *testing.T) {
		checkDashboard(t, "../../docs/grafana/fleetmq.json", fams)
	})
}

// promqlWords are the PromQL functions, aggregations and keywords the
// dashboard may use; every other identifier in an expression is a metric.
var promqlWords = map[string]bool{
	"sum": true, "rate": true, "irate": true, "increase": true, "histogram_quantile": true,
	"max": true, "min": true, "avg": true, "by": true, "without": true, "topk": true,
	"and": true, "or": true, "unless": true, "on": true, "ignoring": true, "clamp_min": true,
}

var (
	promqlString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlRange  = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGroup  = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	promqlSel    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\}|\()?`)
	promqlLabel  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// checkDashboard parses a Grafana dashboard and checks every expression of
// every panel: each metric it names is a family fams has (a histogram's
// _bucket, _sum and _count series, and a summary's _sum and _count, count
// as the family), and each label
// it matches or groups by is one those metrics carry (instance and job
// are the scraper's).
func checkDashboard(t *testing.T, path string, fams map[string]*dto.MetricFamily) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
	labelsOf := func(metric string) map[string]bool {
		labels := map[string]bool{"instance": true, "job": true}
		name := metric
		f := fams[name]
		if f == nil {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base, ok := strings.CutSuffix(metric, suffix)
				if !ok || fams[base] == nil {
					continue
				}
				if typ := fams[base].GetType(); typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_SUMMARY && suffix != "_bucket" {
					f = fams[base]
					if suffix == "_bucket" {
						labels["le"] = true
					}
				}
			}
		}
		if f == nil {
			return nil
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				labels[l.GetName()] = true
			}
		}
		return labels
	}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			expr := promqlRange.ReplaceAllString(tg.Expr, "")
			// Grouping labels: each must be on some metric of the expression.
			var groups []string
			for _, g := range promqlGroup.FindAllStringSubmatch(expr, -1) {
				for _, l := range strings.Split(g[1], ",") {
					groups = append(groups, strings.TrimSpace(l))
				}
			}
			expr = promqlGroup.ReplaceAllString(expr, " ")
			have := map[string]bool{}
			metrics := 0
			for _, m := range promqlSel.FindAllStringSubmatch(expr, -1) {
				word, rest := m[1], m[2]
				if rest == "(" || promqlWords[word] {
					if !promqlWords[word] {
						t.Errorf("panel %q: unknown PromQL function %s in %s", p.Title, word, tg.Expr)
					}
					continue
				}
				metrics++
				labels := labelsOf(word)
				if labels == nil {
					t.Errorf("panel %q: metric %s does not exist (expr %s)", p.Title, word, tg.Expr)
					continue
				}
				for l := range labels {
					have[l] = true
				}
				matchers := promqlString.ReplaceAllString(rest, `""`)
				for _, lm := range promqlLabel.FindAllStringSubmatch(matchers, -1) {
					if !labels[lm[1]] {
						t.Errorf("panel %q: %s has no label %s (expr %s)", p.Title, word, lm[1], tg.Expr)
					}
				}
			}
			if metrics == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
			}
			for _, g := range groups {
				if !have[g] {
					t.Errorf("panel %q: grouped by %s, which none of its metrics has (expr %s)", p.Title, g, tg.Expr)
				}
			}
		}
	}
	if exprs < 20 {
		t.Fatalf("%s has %d expressions; the dashboard lost its panels", path, exprs)
	}
	t.Logf("%s: %d panels, %d expressions checked", dash.Title, len(dash.Panels), exprs)
}

// TestPprofOnlyOnTheMetricsListener: -pprof serves Go's runtime profiles
// on the private metrics listener, never on the public one, and is refused
// without a metrics listener.
func TestPprofOnlyOnTheMetricsListener(t *testing.T) {
	p := startPlatform(t, func(c *app.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.MetricsListen = "127.0.0.1:0"
		c.Pprof = true
	})
	resp, err := http.Get("http://" + p.MetricsAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutine profile on the metrics listener: %d %.80q", resp.StatusCode, body)
	}
	if resp, err := http.Get("http://" + p.HTTPAddr + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ on the public listener: %v %v, want 404", resp, err)
	}

	cfg := apptest.Config(t, time.Now)
	cfg.Pprof = true
	if _, err := app.Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "-metrics-listen") {
		t.Fatalf("-pprof without -metrics-listen: %v, want an error naming -metrics-listen", err)
	}
}

// TestMetricsGaugesReturnToBaseline: the gauges of what clients hold
// (connections, sessions, inflight and queued messages, subscriptions)
// go back to where they started once the clients are gone, however they
// went: a clean subscriber that never acknowledged what it was sent
// closing its connection, and a persistent subscriber holding inflight
// and queued messages offline whose password is revoked.
func TestMetricsGaugesReturnToBaseline(t *testing.T) {
	p := startPlatform(t, func(c *app.Config) { c.HTTPListen = "127.0.0.1:0" })
	a := p.newTenant(t, "acme", "starter", false, "pump-17")
	p.synced(t)
	url := "http://" + p.HTTPAddr + "/metrics"
	gauges := []string{"fleetmq_mqtt_sessions", "fleetmq_mqtt_subscriptions", "fleetmq_mqtt_inflight_messages", "fleetmq_mqtt_queued_messages", "fleetmq_mqtt_strangers_waiting"}
	read := func() map[string]float64 {
		fams := scrape(t, url)
		m := map[string]float64{}
		for _, g := range gauges {
			m[g], _ = sample(fams, g)
		}
		m["fleetmq_mqtt_connections"], _ = sample(fams, "fleetmq_mqtt_connections", "listener", "tcp")
		return m
	}
	base := read()
	atBase := func(what string) {
		t.Helper()
		var now map[string]float64
		defer func() {
			if t.Failed() {
				t.Logf("gauges %v, at the start %v", now, base)
			}
		}()
		eventually(t, what, func() bool {
			now = read()
			for k, v := range base {
				if now[k] != v {
					return false
				}
			}
			return true
		})
	}

	// A subscriber that never acknowledges: 20 messages in flight (the
	// window), the rest queued (the starter queue bound is 30).
	subscriber := func(clientID string, expiry uint32) *mqtttest.Raw {
		var props packet.Properties
		if expiry > 0 {
			props.SetSessionExpiry(expiry)
		}
		c, _ := mqtttest.ConnectRaw(t, p.MQTTAddr, &packet.Connect{ClientID: clientID, KeepAlive: 60, CleanStart: true,
			Username: a.SubUser, HasUsername: true, Password: []byte(a.SubPass), HasPassword: true, Properties: props})
		c.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: a.all(), QoS: 1}}})
		c.Expect(t, packet.SUBACK)
		return c
	}
	dev := dialV5(t, p.MQTTAddr, "pump-17", a.PubUser, a.PubPass)
	for round, expiry := range []uint32{0, 3600} {
		sub := subscriber(fmt.Sprintf("dash-%d", round), expiry)
		for i := range 25 {
			dev.Pub(t, a.topic("pump-17", "telemetry/n"), 1, strconv.Itoa(i))
		}
		eventually(t, "20 in flight and 5 queued", func() bool {
			m := read()
			return m["fleetmq_mqtt_inflight_messages"] == base["fleetmq_mqtt_inflight_messages"]+20 &&
				m["fleetmq_mqtt_queued_messages"] == base["fleetmq_mqtt_queued_messages"]+5
		})
		sub.Conn.Close()
		if expiry == 0 {
			base["fleetmq_mqtt_connections"]++ // the device is still there
			base["fleetmq_mqtt_sessions"]++
			atBase("the gauges back after a clean subscriber left")
			base["fleetmq_mqtt_connections"]--
			base["fleetmq_mqtt_sessions"]--
			continue
		}
		// Offline, the session keeps what it held; then its password goes.
		if err := p.Service.RevokeCredential(p.ctx, a.ID, a.SubCredID); err != nil {
			t.Fatal(err)
		}
	}
	dev.Conn.Close()
	atBase("the gauges back after every client left")
}
