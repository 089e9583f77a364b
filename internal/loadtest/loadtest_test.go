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
	"sync"
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
	for _, client := range []string{ClientLean, ClientPaho3, ClientPahoV5} {
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

// TestSpreadPublishersStartApart: with Spread, the publishers of a fixed
// rate start at even offsets within their interval, so their messages
// arrive one at a time; without it, together. A spread run still counts
// every message.
func TestSpreadPublishersStartApart(t *testing.T) {
	const interval = 40 * time.Millisecond
	together, spread := PubSubConfig{Publishers: 4}, PubSubConfig{Publishers: 4, Spread: true}
	for i := range 4 {
		if d := time.Until(together.firstSend(i, interval)); d > time.Millisecond {
			t.Fatalf("publisher %d of 4 starts %v late without Spread; want at once", i, d)
		}
		want := time.Duration(i) * interval / 4
		if d := time.Until(spread.firstSend(i, interval)); d < want-5*time.Millisecond || d > want {
			t.Fatalf("publisher %d of 4 starts %v late with Spread; want %v, a quarter of the interval each", i, d, want)
		}
	}
	addr := inProcessBroker(t)
	r, err := RunPubSub(context.Background(), PubSubConfig{
		Addr: addr, Publishers: 4, Subscribers: 1, QoS: 1, Size: 64, Rate: 2000, Spread: true,
		Duration: 200 * time.Millisecond, BrokerPID: os.Getpid(), Client: ClientPaho3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent == 0 || r.Delivered != r.Expected || r.Lost != 0 || r.Duplicates != 0 {
		t.Fatalf("a spread run: %+v", r)
	}
}

// TestPubSubPahoV5 runs paho.golang (MQTT 5) publishers and subscribers
// at a low fixed rate for a second per QoS against the in-process broker:
// every message is acknowledged and delivered once to each subscriber.
func TestPubSubPahoV5(t *testing.T) {
	addr := inProcessBroker(t)
	for _, qos := range []byte{0, 1, 2} {
		r, err := RunPubSub(context.Background(), PubSubConfig{
			Addr: addr, Publishers: 5, Subscribers: 2, QoS: qos, Size: 100, Rate: 200,
			Duration: time.Second, BrokerPID: os.Getpid(), Client: ClientPahoV5,
		})
		if err != nil {
			t.Fatalf("qos %d: %v", qos, err)
		}
		t.Logf("qos %d: %s", qos, r.summary())
		if r.Sent < 100 || r.Sent > 210 || r.Delivered != 2*r.Sent || r.Lost != 0 || r.Duplicates != 0 {
			t.Fatalf("qos %d: sent %d at 200 msg/s for 1 s, delivered %d (lost %d, dup %d)", qos, r.Sent, r.Delivered, r.Lost, r.Duplicates)
		}
		if qos > 0 && r.Acked < r.Sent*9/10 { // acked while publishing: the last few may come after
			t.Fatalf("qos %d: %d of %d acknowledged while publishing", qos, r.Acked, r.Sent)
		}
		if r.P50Ms <= 0 || r.P99Ms < r.P50Ms {
			t.Fatalf("qos %d: latency %+v", qos, r)
		}
	}
	if _, err := RunPubSub(context.Background(), PubSubConfig{Addr: addr, Publishers: 1, Subscribers: 1, Client: "paho4"}); err == nil {
		t.Fatal("an unknown client was accepted")
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
	bin := fleetmqBinary(t)
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

var built struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// fleetmqBinary builds cmd/fleetmq once for the package's tests.
func fleetmqBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "fleetmq-loadtest-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "fleetmq")
		build := exec.Command("go", "build", "-o", built.bin, "github.com/fleetmq/fleetmq/cmd/fleetmq")
		built.out, built.err = build.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("build: %v\n%s", built.err, built.out)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.bin != "" {
		os.RemoveAll(filepath.Dir(built.bin))
	}
	os.Exit(code)
}

// TestFleetPayload: the devices' messages are JSON objects of 150-200
// bytes whose first fields the subscribers read back.
func TestFleetPayload(t *testing.T) {
	for _, state := range []bool{true, false} {
		p := fleetPayload(nil, 14999, 123456, state)
		var m map[string]any
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(p) < 120 || len(p) > 200 {
			t.Errorf("%d bytes: %s", len(p), p)
		}
		dev, seq, sent, st, ok := fleetHeader(p)
		if !ok || dev != 14999 || seq != 123456 || st != state || time.Since(time.Unix(0, sent)) > time.Minute {
			t.Fatalf("%s read back as %d %d %d %v %v", p, dev, seq, sent, st, ok)
		}
	}
	for _, bad := range []string{"", "{", `{"n":1,"seq":2}`, `{"n":x,"seq":2,"sent_ns":3,"kind":"state"}`} {
		if _, _, _, _, ok := fleetHeader([]byte(bad)); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestFleetShort runs the fleet load's short form: 50 devices (state and
// telemetry every 500 ms, for 2.5 s) into 3 subscribers, against
// fleetmq broker and fleetmq serve (provisioned devices, the platform's
// topic layout), each started from the built binary. Every QoS 1 state
// message reaches every subscriber, and the broker figures are there.
func TestFleetShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two brokers")
	}
	bin := fleetmqBinary(t)
	const devices = 50
	for _, target := range []string{"broker", "platform"} {
		t.Run(target, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePorts(t, 1))
			argv := []string{bin, "broker", "--listen", addr, "--log-level", "error"}
			var plat *platformSetup
			dir := t.TempDir()
			if target == "platform" {
				var err error
				if plat, err = provisionPlatform(ctx, dir, benchClientIDs(devices)); err != nil {
					t.Fatal(err)
				}
				argv = []string{bin, "serve", "-data", dir, "-listen", addr, "-http-listen", "", "-log-level", "error"}
			}
			var log bytes.Buffer
			b, err := startBroker(ctx, target, addr, argv, &log)
			if err != nil {
				t.Fatal(err)
			}
			defer b.stop()
			cfg := FleetConfig{Addr: addr, Devices: devices, Subscribers: 3, StateEvery: 500 * time.Millisecond,
				TelemetryEvery: 500 * time.Millisecond, Duration: 2500 * time.Millisecond, Client: ClientPaho3,
				Sources: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)}, BrokerPID: b.cmd.Process.Pid}
			if plat != nil {
				plat.fleet(&cfg)
			}
			r, err := RunFleet(ctx, cfg)
			if err != nil {
				t.Fatalf("%v\nbroker log:\n%s", err, &log)
			}
			t.Log(r.summary())
			// 5 state messages per device in 2.5 s, give or take one.
			if r.Sent < devices*4 || r.Sent > devices*6 || r.Acked != r.Sent || r.Expected != 3*r.Sent || r.Delivered != r.Expected || r.Lost != 0 || r.Duplicates != 0 {
				t.Fatalf("state messages: sent %d, acked %d, delivered %d of %d (lost %d, dup %d)", r.Sent, r.Acked, r.Delivered, r.Expected, r.Lost, r.Duplicates)
			}
			if r.TelemetrySent < devices*4 || r.TelemetryDelivered == 0 || r.DevicesStopped != 0 {
				t.Fatalf("telemetry sent %d, delivered %d; %d devices stopped (%s)", r.TelemetrySent, r.TelemetryDelivered, r.DevicesStopped, r.FirstError)
			}
			if r.WindowReceived == 0 || r.WindowDelivered == 0 || r.BrokerRSSKiB <= 0 || r.BrokerRSSConnectedKiB <= 0 {
				t.Fatalf("window or memory figures missing: %+v", r)
			}
			if r.P50Ms <= 0 || r.P99Ms < r.P50Ms || r.MaxMs < r.P99Ms {
				t.Fatalf("latency percentiles: %+v", r)
			}
			// CPU comes in 10 ms ticks; 2.5 s of 200 msg/s in and 600 out
			// take more than one.
			if r.BrokerCPUSeconds <= 0 || r.CPUPerMsgUs <= 0 || r.CPUPerInMsgUs <= r.CPUPerMsgUs {
				t.Fatalf("CPU figures: %.2f s, %.2f µs/delivered, %.2f µs/received", r.BrokerCPUSeconds, r.CPUPerMsgUs, r.CPUPerInMsgUs)
			}
			if plat != nil {
				// Acked means stored: history holds every acknowledged
				// state message (and the telemetry it had room for).
				b.stop()
				stored, err := plat.historyCount(ctx, dir)
				if err != nil {
					t.Fatal(err)
				}
				if stored < r.Acked || stored > r.Sent+r.TelemetrySent {
					t.Fatalf("history holds %d records; %d state messages acked, %d telemetry sent", stored, r.Acked, r.TelemetrySent)
				}
			}
		})
	}
}
