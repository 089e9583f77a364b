package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// brokerProc is a broker under test, started and stopped by compare.
type brokerProc struct {
	name string
	addr string
	cmd  *exec.Cmd
}

// startBroker runs argv and waits until addr accepts connections.
func startBroker(ctx context.Context, name, addr string, argv []string, log io.Writer) (*brokerProc, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	b := &brokerProc{name: name, addr: addr, cmd: cmd}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("%s did not listen on %s: %w", name, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (b *brokerProc) stop() {
	b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-done
	}
}

// scenario is one standard load of the comparison.
type scenario struct {
	name  string
	qos   byte
	rate  int  // 0 = unthrottled
	idle  bool // idle-connections scenario
	fleet bool // the fleet of devices (opt-in: -only fleet)
}

var scenarios = []scenario{
	{name: "fixed-rate-qos0", qos: 0, rate: 4000},
	{name: "fixed-rate-qos1", qos: 1, rate: 4000},
	{name: "fixed-rate-qos2", qos: 2, rate: 4000},
	{name: "unthrottled-qos1", qos: 1},
	{name: "unthrottled-qos2", qos: 2},
	{name: "idle", idle: true},
	{name: "fleet", fleet: true},
}

func mainCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fleetmq := fs.String("fleetmq", "", "path to the fleetmq binary (required)")
	mosquitto := fs.String("mosquitto", "/usr/sbin/mosquitto", "path to the mosquitto binary")
	rounds := fs.Int("rounds", 3, "rounds; the order of the brokers alternates")
	duration := fs.Duration("duration", 15*time.Second, "publishing time per pubsub run")
	rate := fs.Int("rate", 4000, "offered msg/s of the fixed-rate loads")
	spread := fs.Bool("spread", false, "fixed-rate loads: start the publishers at even offsets within their interval, so that messages arrive one at a time (default: together, a burst of one message per publisher each interval, as devices reporting on the same tick)")
	pubs := fs.Int("publishers", 50, "publishers")
	size := fs.Int("size", 200, "payload bytes")
	conns := fs.Int("idle-conns", maxIdleConns, "connections of the idle load")
	quiet := fs.Duration("idle-quiet", 15*time.Second, "how long the idle load's connections stay idle before the memory is measured (fleetmq parks idle clients after -idle-park-after, 10 s by default)")
	sources := fs.String("sources", "127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4", "source addresses of the idle load")
	port := fs.Int("port", 18830, "first loopback port for the brokers")
	only := fs.String("only", "", "run only this scenario: fixed-rate-qos0/1/2, unthrottled-qos1/2, idle, or fleet (not run by default: "+
		"N devices, each connected all along and publishing a JSON state message at QoS 1 and telemetry at QoS 0 every few seconds, into a few wildcard subscribers; "+
		"broker CPU per message, memory per connected device, state latency)")
	client := fs.String("client", ClientLean, "the MQTT client of the publishers and the subscribers: lean (the repository's own, MQTT 5, batching writes when unthrottled), paho3 (paho.mqtt.golang over MQTT 3.1.1) or pahov5 (paho.golang over MQTT 5); the paho clients write one packet per write, as devices and most applications do")
	devices := fs.Int("devices", 15000, "fleet: devices, each connected all along (they need as many open files in this process)")
	deviceClient := fs.String("device-client", "", "fleet: the devices' client (lean, paho3 or pahov5; default: -client); 15,000 fit in the harness with each")
	fleetSubs := fs.Int("fleet-subscribers", 3, "fleet: wildcard subscribers receiving every device's messages")
	// 15,000 devices at 10 s: 3,000 msg/s in and 9,000 out, which a 2-core
	// machine carries with paho clients on both sides; at 5 s the
	// harness's subscribers fall seconds behind.
	stateEvery := fs.Duration("state-every", 10*time.Second, "fleet: each device's QoS 1 JSON state message period")
	telemetryEvery := fs.Duration("telemetry-every", 10*time.Second, "fleet: each device's QoS 0 JSON telemetry period")
	fleetDuration := fs.Duration("fleet-duration", 30*time.Second, "fleet: the measured window of steady publishing")
	out := fs.String("out", "", "also write every result as JSON lines to this file")
	servers := fs.String("brokers", "fleetmq,mosquitto,platform", "the servers to run, comma-separated: fleetmq (the bare broker), mosquitto, platform (fleetmq serve), cluster (two bare brokers routed together with NATS embedded: publishers on one, subscribers on the other; not run by default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	run := map[string]bool{}
	for _, name := range strings.Split(*servers, ",") {
		switch name = strings.TrimSpace(name); name {
		case "fleetmq", "mosquitto", "platform", "cluster":
			run[name] = true
		default:
			return fmt.Errorf("-brokers: unknown server %q (fleetmq, mosquitto, platform or cluster)", name)
		}
	}
	if *fleetmq == "" {
		return errors.New("-fleetmq is required (build it with: go build -o fleetmq ./cmd/fleetmq)")
	}
	ips, err := parseSources(*sources)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "fleetmq-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var jsonOut io.Writer = io.Discard
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = f
	}

	fleetAddr := "127.0.0.1:" + strconv.Itoa(*port)
	mosqAddr := "127.0.0.1:" + strconv.Itoa(*port+1)
	platAddr := "127.0.0.1:" + strconv.Itoa(*port+2)
	platDir := filepath.Join(work, "platform-data")
	platClients := *pubs
	if *only == "fleet" {
		platClients = max(platClients, *devices)
	}
	plat, err := provisionPlatform(ctx, platDir, benchClientIDs(platClients))
	if err != nil {
		return fmt.Errorf("provision the platform: %w", err)
	}
	conf := filepath.Join(work, "mosquitto.conf")
	// Mosquitto as shipped, except: loopback listener, anonymous access,
	// unlimited queues (so it does not drop under the unthrottled loads),
	// TCP_NODELAY like Go's default, and no persistence or logging.
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`listener %d 127.0.0.1
allow_anonymous true
max_queued_messages 0
max_queued_bytes 0
max_inflight_messages 20
set_tcp_nodelay true
persistence false
log_dest none
`, *port+1)), 0o644); err != nil {
		return err
	}
	// Raise the open-file limit for Mosquitto (Go does it for fleetmq).
	brokers := map[string][]string{
		"fleetmq":   {*fleetmq, "broker", "--listen", fleetAddr, "--max-inflight", "20", "--max-queued", "10000000", "--log-level", "error"},
		"mosquitto": {"/bin/sh", "-c", `ulimit -n "$(ulimit -Hn)"; exec "$0" -c "$1"`, *mosquitto, conf},
	}
	// "platform" is fleetmq serve: authenticated clients under real plan
	// rules (per-session queue bound max_publisher_clients x 3 = 3000).
	brokers["platform"] = []string{*fleetmq, "serve", "-data", platDir, "-listen", platAddr, "-http-listen", "", "-log-level", "error"}
	addrs := map[string]string{"fleetmq": fleetAddr, "mosquitto": mosqAddr, "platform": platAddr}
	// "cluster" is two bare brokers with NATS embedded, the second routed
	// to the first: the publishers connect to the first, the subscribers
	// to the second, so every message crosses; CPU is both processes'.
	clusterAddr, clusterSubAddr := "127.0.0.1:"+strconv.Itoa(*port+3), "127.0.0.1:"+strconv.Itoa(*port+4)
	clusterRoute := "127.0.0.1:" + strconv.Itoa(*port+5)
	brokers["cluster"] = []string{*fleetmq, "broker", "--listen", clusterAddr, "--max-inflight", "20", "--max-queued", "10000000",
		"--log-level", "error", "--node-id", "bench-a", "--cluster-listen", clusterRoute}
	clusterB := []string{*fleetmq, "broker", "--listen", clusterSubAddr, "--max-inflight", "20", "--max-queued", "10000000",
		"--log-level", "error", "--node-id", "bench-b", "--cluster-listen", "127.0.0.1:" + strconv.Itoa(*port+6), "--cluster-routes", clusterRoute}
	addrs["cluster"] = clusterAddr

	results := map[string]map[string][]*Result{} // scenario -> broker -> rounds
	for round := 1; round <= *rounds; round++ {
		// Rotate the order each round, so no broker always runs first.
		order := []string{"fleetmq", "mosquitto", "platform", "cluster"}
		for i := 1; i < round; i++ {
			order = append(order[1:], order[0])
		}
		for _, name := range order {
			if !run[name] {
				continue
			}
			for _, sc := range scenarios {
				if (*only != "" && sc.name != *only) || (*only == "" && sc.fleet) || (name == "cluster" && (sc.fleet || sc.idle)) {
					continue
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// A fresh broker per scenario, so no run inherits another's heap.
				b, err := startBroker(ctx, name, addrs[name], brokers[name], stderr)
				if err != nil {
					return err
				}
				pid := b.cmd.Process.Pid
				var other *brokerProc
				if name == "cluster" {
					if other, err = startBroker(ctx, "cluster node b", clusterSubAddr, clusterB, stderr); err != nil {
						b.stop()
						return err
					}
				}
				var r *Result
				var storedBefore int64
				if name == "platform" && !sc.idle {
					if storedBefore, err = plat.historyCount(ctx, platDir); err != nil {
						b.stop()
						return err
					}
				}
				switch {
				case sc.fleet:
					fc := FleetConfig{Addr: b.addr, Devices: *devices, Subscribers: *fleetSubs, StateEvery: *stateEvery,
						TelemetryEvery: *telemetryEvery, Duration: *fleetDuration, Sources: ips, Client: *client,
						DeviceClient: *deviceClient, BrokerPID: pid}
					if name == "platform" {
						plat.fleet(&fc)
					}
					r, err = RunFleet(ctx, fc)
				case sc.idle:
					ic := IdleConfig{Addr: b.addr, Conns: *conns, Sources: ips, BrokerPID: pid, Quiet: *quiet}
					if name == "platform" {
						plat.idle(&ic)
					}
					r, err = RunIdle(ctx, ic)
				default:
					pc := PubSubConfig{Addr: b.addr, Publishers: *pubs, Subscribers: 1, QoS: sc.qos,
						Size: *size, Rate: sc.rate * *rate / 4000, Duration: *duration, BrokerPID: pid, Client: *client, Spread: *spread}
					if name == "platform" {
						plat.pubsub(&pc)
					}
					if other != nil {
						pc.SubAddr, pc.OtherPIDs = clusterSubAddr, []int{other.cmd.Process.Pid}
					}
					r, err = RunPubSub(ctx, pc)
				}
				b.stop()
				if other != nil {
					other.stop()
				}
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", name, sc.name, round, err)
				}
				if name == "platform" && !sc.idle {
					after, err := plat.historyCount(ctx, platDir)
					if err != nil {
						return err
					}
					r.Stored = after - storedBefore
				}
				r.Broker, r.Scenario, r.Round = name, sc.name, round
				fmt.Fprintf(stdout, "round %d %-9s %-17s %s\n", round, name, sc.name, r.summary())
				line, _ := json.Marshal(r)
				fmt.Fprintf(jsonOut, "%s\n", line)
				if results[sc.name] == nil {
					results[sc.name] = map[string][]*Result{}
				}
				results[sc.name][name] = append(results[sc.name][name], r)
			}
		}
	}
	fmt.Fprintln(stdout)
	writeTable(stdout, results)
	return nil
}

// writeTable prints the medians of each scenario and the fleetmq/Mosquitto
// ratio of the figure that scenario is judged by.
func writeTable(w io.Writer, results map[string]map[string][]*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| scenario\t| figure (median)\t| fleetmq broker\t| mosquitto\t| fleetmq platform\t| broker/mosquitto\t| platform/broker\t| lost/dup: broker, mosquitto, platform\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, sc := range scenarios {
		byBroker := results[sc.name]
		if byBroker == nil {
			continue
		}
		figure, get := "broker CPU µs/msg", func(r *Result) float64 { return r.CPUPerMsgUs }
		switch {
		case sc.fleet:
			figure = "broker CPU µs/delivered msg"
		case sc.idle:
			figure, get = "KiB per idle connection", func(r *Result) float64 { return r.KiBPerConn }
		case sc.rate == 0:
			figure, get = "delivered msg/s", func(r *Result) float64 { return r.DeliveredPerSec }
		}
		f, m, p := median(byBroker["fleetmq"], get), median(byBroker["mosquitto"], get), median(byBroker["platform"], get)
		fmt.Fprintf(tw, "| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s\t| %s, %s, %s\t|\n", sc.name, figure, figureOr(f), figureOr(m), figureOr(p), ratio(f, m), ratio(p, f),
			lostDup(byBroker["fleetmq"]), lostDup(byBroker["mosquitto"]), lostDup(byBroker["platform"]))
	}
	tw.Flush()
	writeFleetTable(w, results)
	writeIngestTable(w, results)
	writeClusterTable(w, results)
}

// writeFleetTable prints the fleet load's figures per broker (medians).
func writeFleetTable(w io.Writer, results map[string]map[string][]*Result) {
	byBroker := results["fleet"]
	if byBroker == nil {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| fleet (medians)\t| fleetmq broker\t| mosquitto\t| fleetmq platform\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|")
	rows := []struct {
		name   string
		format string
		get    func(*Result) float64
	}{
		{"devices", "%.0f", func(r *Result) float64 { return float64(r.Devices) }},
		{"broker CPU µs per delivered msg", "%.2f", func(r *Result) float64 { return r.CPUPerMsgUs }},
		{"broker CPU µs per received msg", "%.2f", func(r *Result) float64 { return r.CPUPerInMsgUs }},
		{"KiB per connected device", "%.2f", func(r *Result) float64 { return r.KiBPerConn }},
		{"KiB per device, publishing", "%.2f", func(r *Result) float64 { return r.KiBPerConnSteady }},
		{"state (QoS 1) latency p50 ms", "%.2f", func(r *Result) float64 { return r.P50Ms }},
		{"state (QoS 1) latency p99 ms", "%.2f", func(r *Result) float64 { return r.P99Ms }},
		{"state sent", "%.0f", func(r *Result) float64 { return float64(r.Sent) }},
		{"state acked", "%.0f", func(r *Result) float64 { return float64(r.Acked) }},
		{"state received (all subscribers)", "%.0f", func(r *Result) float64 { return float64(r.Delivered) }},
		{"state lost", "%.0f", func(r *Result) float64 { return float64(r.Lost) }},
		{"telemetry sent", "%.0f", func(r *Result) float64 { return float64(r.TelemetrySent) }},
		{"telemetry received (all subscribers)", "%.0f", func(r *Result) float64 { return float64(r.TelemetryDelivered) }},
		{"telemetry lost", "%.0f", func(r *Result) float64 { return float64(r.TelemetryLost) }},
		{"devices stopped by a failed publish", "%.0f", func(r *Result) float64 { return float64(r.DevicesStopped) }},
		{"delivered msg/s in the window", "%.0f", func(r *Result) float64 { return r.DeliveredPerSec }},
		{"connect time of all devices s", "%.1f", func(r *Result) float64 { return r.ConnectSeconds }},
		{"history records added (platform)", "%.0f", func(r *Result) float64 { return float64(r.Stored) }},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "| %s", row.name)
		for _, b := range []string{"fleetmq", "mosquitto", "platform"} {
			if len(byBroker[b]) == 0 || (strings.HasSuffix(row.name, "(platform)") && b != "platform") {
				fmt.Fprint(tw, "\t| -")
				continue
			}
			fmt.Fprintf(tw, "\t| "+row.format, median(byBroker[b], row.get))
		}
		fmt.Fprintln(tw, "\t|")
	}
	tw.Flush()
}

// writeIngestTable prints, for the platform's QoS 1/2 loads, the rate at
// which publishes were acknowledged (acked means stored) and whether
// history holds every acknowledged message.
func writeIngestTable(w io.Writer, results map[string]map[string][]*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, sc := range scenarios {
		rs := results[sc.name]["platform"]
		if sc.idle || sc.qos == 0 || len(rs) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(tw, "| scenario\t| platform acked msg/s (median)\t| platform CPU µs/acked msg (median)\t| history holds every acked message\t|")
			fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|")
			header = true
		}
		all := "yes"
		for _, r := range rs {
			if r.Stored != r.Sent {
				all = fmt.Sprintf("no: round %d stored %d of %d", r.Round, r.Stored, r.Sent)
			}
		}
		fmt.Fprintf(tw, "| %s\t| %.0f\t| %.2f\t| %s\t|\n", sc.name,
			median(rs, func(r *Result) float64 { return r.AckedPerSec }),
			median(rs, func(r *Result) float64 { return r.BrokerCPUSeconds / float64(max(r.Sent, 1)) * 1e6 }), all)
	}
	tw.Flush()
}

// writeClusterTable prints, for the loads run on the two-node cluster, its
// CPU per delivered message (both nodes) against the bare broker's, where
// every message is delivered on the node that took it.
func writeClusterTable(w io.Writer, results map[string]map[string][]*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	perMsg := func(r *Result) float64 { return r.CPUPerMsgUs }
	for _, sc := range scenarios {
		rs := results[sc.name]["cluster"]
		if len(rs) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(tw, "| scenario\t| two-node cluster CPU µs/msg, both nodes (median)\t| bare broker CPU µs/msg (median)\t| cluster / broker\t| lost, duplicated\t|")
			fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|")
			header = true
		}
		var lost, dups int64
		for _, r := range rs {
			lost, dups = lost+r.Lost, dups+r.Duplicates
		}
		c, b := median(rs, perMsg), median(results[sc.name]["fleetmq"], perMsg)
		fmt.Fprintf(tw, "| %s\t| %.2f\t| %s\t| %s\t| %d, %d\t|\n", sc.name, c, figureOr(b), ratio(c, b), lost, dups)
	}
	tw.Flush()
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// figureOr formats a median, "-" for a server not run (-brokers).
func figureOr(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func median(rs []*Result, get func(*Result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = get(r)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func lostDup(rs []*Result) string {
	var lost, dup int64
	for _, r := range rs {
		lost += r.Lost
		dup += r.Duplicates
	}
	if len(rs) == 0 || rs[0].Mode == "idle" {
		return "-"
	}
	return fmt.Sprintf("%d/%d", lost, dup)
}
