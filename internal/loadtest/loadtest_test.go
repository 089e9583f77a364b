package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

func inProcessBroker(t *testing.T) string {
	t.Helper()
	srv, err := broker.New(broker.Options{MaxQueued: 100000})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	return ln.Addr().String()
}

// TestPubSubCountsEveryMessage runs short loads at each QoS against the
// in-process broker: every message sent is delivered once, and the broker
// figures come from this very process.
func TestPubSubCountsEveryMessage(t *testing.T) {
	addr := inProcessBroker(t)
	for _, client := range []string{ClientLean, ClientPaho3} {
		t.Run(client, func(t *testing.T) { pubSubCountsEveryMessage(t, addr, client) })
	}
}

// pubSubCountsEveryMessage is TestPubSubCountsEveryMessage with one
// publisher client (PubSubConfig.Client).
func pubSubCountsEveryMessage(t *testing.T, addr, client string) {
	for _, qos := range []byte{0, 1, 2} {
		for _, rate := range []int{0, 2000} {
			r, err := RunPubSub(context.Background(), PubSubConfig{
				Addr: addr, Publishers: 4, Subscribers: 2, QoS: qos, Size: 64, Rate: rate,
				Duration: 200 * time.Millisecond, BrokerPID: os.Getpid(), Client: client,
			})
			if err != nil {
				t.Fatalf("qos %d rate %d: %v", qos, rate, err)
			}
			if r.Sent == 0 || r.Expected != 2*r.Sent || r.Delivered != r.Expected || r.Lost != 0 || r.Duplicates != 0 {
				t.Fatalf("qos %d rate %d: %+v", qos, rate, r)
			}
			if r.P50Ms <= 0 || r.P99Ms < r.P50Ms || r.MaxMs < r.P99Ms {
				t.Fatalf("qos %d: latency percentiles out of order: %+v", qos, r)
			}
			if r.BrokerRSSKiB <= 0 || r.BrokerCPUSeconds < 0 {
				t.Fatalf("qos %d: no process figures: %+v", qos, r)
			}
			if rate > 0 && (r.Sent > int64(rate) || r.Sent < int64(rate)/10) {
				t.Fatalf("rate %d for 200ms sent %d", rate, r.Sent)
			}
		}
	}
}

// TestPubSubReportsRefusal: a broker that refuses the connection makes the
// run fail with the broker's reason instead of reporting numbers.
func TestPubSubReportsRefusal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // nothing listens here now
	_, err = RunPubSub(context.Background(), PubSubConfig{Addr: ln.Addr().String(), Publishers: 1, Subscribers: 1, Duration: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("run against a closed port succeeded")
	}
}

// TestIdleOpensFromSeveralSources holds connections from two loopback
// source addresses and reports the broker's memory per connection.
func TestIdleOpensFromSeveralSources(t *testing.T) {
	addr := inProcessBroker(t)
	r, err := RunIdle(context.Background(), IdleConfig{
		Addr: addr, Conns: 200, Sources: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)}, BrokerPID: os.Getpid(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Conns != 200 || r.BrokerRSSKiB <= 0 {
		t.Fatalf("%+v", r)
	}
	if _, err := RunIdle(context.Background(), IdleConfig{Addr: addr, Conns: maxIdleConns + 1}); err == nil {
		t.Fatal("more connections than the open-file budget were accepted")
	}
}

func TestParseSources(t *testing.T) {
	ips, err := parseSources("127.0.0.1, 127.0.0.2,")
	if err != nil || len(ips) != 2 {
		t.Fatalf("%v %v", ips, err)
	}
	for _, bad := range []string{"10.0.0.1", "localhost", "127.0.0.1,8.8.8.8"} {
		if _, err := parseSources(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMedian(t *testing.T) {
	get := func(r *Result) float64 { return r.CPUPerMsgUs }
	rs := []*Result{{CPUPerMsgUs: 3}, {CPUPerMsgUs: 1}, {CPUPerMsgUs: 2}}
	if m := median(rs, get); m != 2 {
		t.Fatalf("median %v", m)
	}
	if m := median(rs[:2], get); m != 2 {
		t.Fatalf("median of 1,3 = %v", m)
	}
}

// TestCompareEndToEnd builds fleetmq, runs one short round of one load
// against it and Mosquitto, and checks the ratio table names both.
func TestCompareEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two brokers")
	}
	if _, err := os.Stat("/usr/sbin/mosquitto"); err != nil {
		if os.Getenv("FLEETMQ_REQUIRE_TOOLS") == "1" {
			t.Fatal("mosquitto is not installed (scripts/test.sh installs it)")
		}
		t.Skip("mosquitto is not installed")
	}
	bin := filepath.Join(t.TempDir(), "fleetmq")
	build := exec.Command("go", "build", "-o", bin, "github.com/fleetmq/fleetmq/cmd/fleetmq")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	port := testkit.FreePorts(t, 3) // fleetmq broker, Mosquitto, platform
	jsonl := filepath.Join(t.TempDir(), "out.jsonl")
	var out, errs bytes.Buffer
	err := Main(context.Background(), []string{"compare", "-fleetmq", bin, "-rounds", "1", "-only", "fixed-rate-qos1",
		"-duration", "300ms", "-rate", "400", "-publishers", "4", "-port", strconv.Itoa(port), "-out", jsonl}, &out, &errs)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, &out, &errs)
	}
	table := out.String()
	if !strings.Contains(table, "| fixed-rate-qos1") || !strings.Contains(table, "round 1 fleetmq") || !strings.Contains(table, "round 1 mosquitto") || !strings.Contains(table, "round 1 platform") {
		t.Fatalf("no comparison in:\n%s", table)
	}
	lines, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(lines), "\n"); n != 3 {
		t.Fatalf("%d JSON results, want 3:\n%s", n, lines)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.Lost != 0 || r.Delivered == 0 || r.BrokerRSSKiB <= 0 { // CPU ticks are 10 ms: too coarse for so short a run
			t.Fatalf("%s: %+v", r.Broker, r)
		}
	}
}

// TestRunHistory runs the history benchmark on a small SQLite store: it
// fills it, pages, exports and reads pages through the REST API, and a
// second run over the same store reuses the records instead of filling.
func TestRunHistory(t *testing.T) {
	cfg := HistoryConfig{Dir: t.TempDir(), Records: 20_000, Clients: 10, Size: 50, Queries: 3, Page: 500, FilterQueries: 1, FilterTimeout: time.Minute}
	var log bytes.Buffer
	r, err := RunHistory(context.Background(), cfg, &log)
	if err != nil {
		t.Fatal(err)
	}
	// Every tenth client is the neighbour's: 9 of 10 clients' records in
	// the bench account's 100-second window (one record per client per 10 ms).
	if r.Records != 20_000 || r.FillPerSec <= 0 || r.Exported != 2_000 || r.AccountExported != 9*2_000 {
		t.Fatalf("result %+v", r)
	}
	if r.NewestP50ms <= 0 || r.DeepP50ms <= 0 || r.APIPageP50ms <= 0 {
		t.Fatalf("timings missing: %+v", r)
	}
	// The filter shapes: those matching every record fill their page, the
	// others find nothing (18,000 rows of the account: within one budget).
	if len(r.Filters) != len(filterShapes()) {
		t.Fatalf("filters %+v", r.Filters)
	}
	for _, f := range r.Filters {
		want := 0
		if strings.Contains(f.Shape, "every record") {
			want = 100
		}
		if f.Records != want || f.Next != (want > 0) || f.TimedOut != 0 || f.P50ms <= 0 {
			t.Errorf("filter %+v, want %d records", f, want)
		}
	}
	if f := r.Follow; f == nil || f.Pages != 1 || f.TimedOut {
		t.Errorf("follow %+v", f)
	}
	again, err := RunHistory(context.Background(), cfg, &log)
	if err != nil {
		t.Fatal(err)
	}
	if again.FillPerSec != 0 || again.Records != 20_000 {
		t.Fatalf("second run refilled the store: %+v", again)
	}
}
