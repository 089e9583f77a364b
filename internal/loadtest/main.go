package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Result is what one load run measured. Broker figures are zero when no
// broker PID was given.
type Result struct {
	Broker      string `json:"broker,omitempty"`
	Scenario    string `json:"scenario,omitempty"`
	Round       int    `json:"round,omitempty"`
	Mode        string `json:"mode"`
	QoS         int    `json:"qos"`
	Publishers  int    `json:"publishers,omitempty"`
	Subscribers int    `json:"subscribers,omitempty"`
	Size        int    `json:"size,omitempty"`
	Rate        int    `json:"rate"` // offered msg/s; 0 = unthrottled

	Sent int64 `json:"sent,omitempty"`
	// Acked counts QoS 1/2 publishes acknowledged while publishing, and
	// AckedPerSec divides it by the publishing time: the accept rate (for
	// the platform, the rate at which messages were made durable).
	Acked       int64   `json:"acked,omitempty"`
	AckedPerSec float64 `json:"acked_per_sec,omitempty"`
	// Stored counts the records the platform added to history during the
	// run (counted after a clean stop); -1 when not counted.
	Stored          int64   `json:"stored,omitempty"`
	Expected        int64   `json:"expected,omitempty"`
	Delivered       int64   `json:"delivered,omitempty"`
	Lost            int64   `json:"lost"`
	Duplicates      int64   `json:"duplicates"`
	Seconds         float64 `json:"seconds"`
	DeliveredPerSec float64 `json:"delivered_per_sec,omitempty"`
	P50Ms           float64 `json:"p50_ms,omitempty"`
	P90Ms           float64 `json:"p90_ms,omitempty"`
	P99Ms           float64 `json:"p99_ms,omitempty"`
	MaxMs           float64 `json:"max_ms,omitempty"`

	BrokerCPUSeconds float64 `json:"broker_cpu_seconds,omitempty"`
	CPUPerMsgUs      float64 `json:"cpu_per_msg_us,omitempty"`
	BrokerRSSKiB     int64   `json:"broker_rss_kib,omitempty"`
	Conns            int     `json:"conns,omitempty"`
	KiBPerConn       float64 `json:"kib_per_conn,omitempty"`

	// The fleet load (Mode "fleet"): Sent .. Duplicates and the latencies
	// are the QoS 1 state messages'; the telemetry (QoS 0) is counted
	// apart. WindowReceived counts the messages the devices published in
	// the measured window (Seconds) and WindowDelivered those the
	// subscribers received in it: CPUPerMsgUs is the broker's CPU in the
	// window per message delivered, CPUPerInMsgUs per message received.
	// KiBPerConn is the broker's RSS with every device connected, less
	// its RSS before, per device; KiBPerConnSteady the same at the end of
	// the window.
	Devices                    int     `json:"devices,omitempty"`
	TelemetrySent              int64   `json:"telemetry_sent,omitempty"`
	TelemetryDelivered         int64   `json:"telemetry_delivered,omitempty"`
	TelemetryLost              int64   `json:"telemetry_lost,omitempty"`
	WindowReceived             int64   `json:"window_received,omitempty"`
	WindowDelivered            int64   `json:"window_delivered,omitempty"`
	CPUPerInMsgUs              float64 `json:"cpu_per_in_msg_us,omitempty"`
	BrokerRSSConnectedKiB      int64   `json:"broker_rss_connected_kib,omitempty"`
	KiBPerConnSteady           float64 `json:"kib_per_conn_steady,omitempty"`
	ConnectSeconds             float64 `json:"connect_seconds,omitempty"`
	DevicesStopped             int64   `json:"devices_stopped,omitempty"` // by a failed publish
	FirstError                 string  `json:"first_error,omitempty"`
	HarnessKiBPerDevice        float64 `json:"harness_kib_per_device,omitempty"` // the harness's own RSS per connected device
	HarnessRSSKiB              int64   `json:"harness_rss_kib,omitempty"`
	HarnessGoroutinesPerDevice float64 `json:"harness_goroutines_per_device,omitempty"`
}

// summary is the one-line human form of r.
func (r *Result) summary() string {
	if r.Mode == "fleet" {
		s := fmt.Sprintf("fleet: %d devices connected in %.1fs; state qos1 sent %d, acked %d, delivered %d/%d (lost %d, dup %d), latency p50 %.2fms p90 %.2fms p99 %.2fms max %.1fms; telemetry qos0 sent %d, delivered %d (lost %d); window %.1fs: %d in, %d out = %.0f msg/s out",
			r.Devices, r.ConnectSeconds, r.Sent, r.Acked, r.Delivered, r.Expected, r.Lost, r.Duplicates, r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs,
			r.TelemetrySent, r.TelemetryDelivered, r.TelemetryLost, r.Seconds, r.WindowReceived, r.WindowDelivered, r.DeliveredPerSec)
		if r.BrokerCPUSeconds > 0 {
			s += fmt.Sprintf("; broker CPU %.2fs = %.2f µs/delivered msg, %.2f µs/received msg; RSS %d KiB connected (%.2f KiB/device), %d KiB publishing (%.2f KiB/device)",
				r.BrokerCPUSeconds, r.CPUPerMsgUs, r.CPUPerInMsgUs, r.BrokerRSSConnectedKiB, r.KiBPerConn, r.BrokerRSSKiB, r.KiBPerConnSteady)
		}
		s += fmt.Sprintf("; harness %.1f KiB and %.1f goroutines per device (RSS %d KiB publishing)", r.HarnessKiBPerDevice, r.HarnessGoroutinesPerDevice, r.HarnessRSSKiB)
		if r.Stored > 0 {
			s += fmt.Sprintf("; history +%d records", r.Stored)
		}
		if r.DevicesStopped > 0 {
			s += fmt.Sprintf("; %d devices stopped by a failed publish, first: %s", r.DevicesStopped, r.FirstError)
		}
		return s
	}
	if r.Mode == "idle" {
		return fmt.Sprintf("idle: %d connections in %.1fs, broker RSS %d KiB, %.2f KiB/connection",
			r.Conns, r.Seconds, r.BrokerRSSKiB, r.KiBPerConn)
	}
	s := fmt.Sprintf("pubsub qos%d: sent %d, delivered %d/%d (lost %d, dup %d) in %.1fs = %.0f msg/s; latency p50 %.2fms p90 %.2fms p99 %.2fms max %.1fms",
		r.QoS, r.Sent, r.Delivered, r.Expected, r.Lost, r.Duplicates, r.Seconds, r.DeliveredPerSec, r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs)
	if r.Acked > 0 {
		s += fmt.Sprintf("; acked %d while publishing = %.0f msg/s", r.Acked, r.AckedPerSec)
	}
	if r.Stored > 0 {
		s += fmt.Sprintf("; history +%d records", r.Stored)
	}
	if r.BrokerCPUSeconds > 0 {
		s += fmt.Sprintf("; broker CPU %.2fs = %.2f µs/msg, RSS %d KiB", r.BrokerCPUSeconds, r.CPUPerMsgUs, r.BrokerRSSKiB)
	}
	return s
}

// printResult writes the summary and a machine-readable RESULT line.
func printResult(w io.Writer, r *Result) {
	fmt.Fprintln(w, r.summary())
	b, _ := json.Marshal(r)
	fmt.Fprintf(w, "RESULT %s\n", b)
}

const usage = `fleetmq bench — load harness

Usage:
  fleetmq bench pubsub [flags]    N publishers into M wildcard subscribers
  fleetmq bench idle [flags]      hold K idle connections, report memory per connection
  fleetmq bench compare [flags]   run the standard loads against fleetmq and Mosquitto, alternating
  fleetmq bench history [flags]   fill a history store, time deep queries and an NDJSON export
  fleetmq bench soak [flags]      run a mixed fleet for a while; fail on loss, bad duplicates, unexplained closes, growth
  fleetmq bench noisy-neighbour [flags]
                                  attack one account, measure another's latencies against the targets

Each prints a summary and a "RESULT {json}" line per run. Run with -h for flags.
`

// Main runs the harness with command-line args (after "bench").
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "pubsub":
		return mainPubSub(ctx, args[1:], stdout, stderr)
	case "idle":
		return mainIdle(ctx, args[1:], stdout, stderr)
	case "compare":
		return mainCompare(ctx, args[1:], stdout, stderr)
	case "history":
		return mainHistory(ctx, args[1:], stdout, stderr)
	case "soak":
		return mainSoak(ctx, args[1:], stdout, stderr)
	case "noisy-neighbour":
		return mainNoisy(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown bench mode %q", args[0])
}

func pubSubFlags(fs *flag.FlagSet, c *PubSubConfig) {
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:1883", "broker address")
	fs.IntVar(&c.Publishers, "publishers", 50, "publisher connections")
	fs.IntVar(&c.Subscribers, "subscribers", 1, "subscriber connections (each subscribes to -sub-filter)")
	fs.IntVar(&c.Size, "size", 200, "payload bytes (at least 20)")
	fs.IntVar(&c.Rate, "rate", 0, "total messages per second across publishers; 0 = unthrottled")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long publishers publish")
	fs.IntVar(&c.Window, "window", 64, "unacknowledged QoS 1/2 publishes per publisher (capped by the broker's Receive Maximum)")
	fs.DurationVar(&c.Drain, "drain", 5*time.Second, "give up waiting for deliveries after this long without progress")
	fs.IntVar(&c.BrokerPID, "broker-pid", 0, "PID of the broker process, for CPU and memory figures")
	fs.StringVar(&c.PubClientID, "pub-client-id", "bench-pub-{i}", "publisher client id template ({i} = index)")
	fs.StringVar(&c.PubTopic, "pub-topic", "bench/{i}/telemetry", "publisher topic template")
	fs.StringVar(&c.PubUsername, "pub-username", "", "publisher username")
	fs.StringVar(&c.PubPassword, "pub-password", "", "publisher password")
	fs.StringVar(&c.SubClientID, "sub-client-id", "bench-sub-{i}", "subscriber client id template")
	fs.StringVar(&c.SubFilter, "sub-filter", "bench/#", "subscriber topic filter")
	fs.StringVar(&c.SubUsername, "sub-username", "", "subscriber username")
	fs.StringVar(&c.SubPassword, "sub-password", "", "subscriber password")
}

func mainPubSub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench pubsub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg PubSubConfig
	pubSubFlags(fs, &cfg)
	qos := fs.Int("qos", 1, "QoS of publishes and subscriptions")
	version := fs.Int("version", 5, "MQTT protocol level: 4 (3.1.1) or 5")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *qos < 0 || *qos > 2 || (*version != 4 && *version != 5) {
		return errors.New("-qos must be 0..2 and -version 4 or 5")
	}
	cfg.QoS, cfg.Version = byte(*qos), byte(*version)
	r, err := RunPubSub(ctx, cfg)
	if err != nil {
		return err
	}
	printResult(stdout, r)
	return nil
}

func mainIdle(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg IdleConfig
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:1883", "broker address")
	fs.IntVar(&cfg.Conns, "conns", 10000, fmt.Sprintf("connections to open (at most %d)", maxIdleConns))
	sources := fs.String("sources", "127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4", "comma-separated source addresses used in turn")
	fs.IntVar(&cfg.Parallel, "parallel", 32, "concurrent connection attempts")
	fs.IntVar(&cfg.BrokerPID, "broker-pid", 0, "PID of the broker process, for memory figures")
	fs.StringVar(&cfg.ClientID, "client-id", "bench-idle-{i}", "client id template")
	fs.StringVar(&cfg.Username, "username", "", "username")
	fs.StringVar(&cfg.Password, "password", "", "password")
	hold := fs.Duration("hold", 0, "keep the connections open this long after measuring")
	fs.DurationVar(&cfg.Quiet, "quiet", 15*time.Second, "how long the connections stay idle before the broker's memory is measured (fleetmq parks idle clients after -idle-park-after, 10 s by default)")
	version := fs.Int("version", 5, "MQTT protocol level: 4 (3.1.1) or 5")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ips, err := parseSources(*sources)
	if err != nil {
		return err
	}
	cfg.Sources, cfg.Version = ips, byte(*version)
	r, err := runIdleHold(ctx, cfg, *hold)
	if err != nil {
		return err
	}
	printResult(stdout, r)
	return nil
}

func runIdleHold(ctx context.Context, cfg IdleConfig, hold time.Duration) (*Result, error) {
	if hold <= 0 {
		return RunIdle(ctx, cfg)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg.onMeasured = func() {
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
	}
	return RunIdle(ctx, cfg)
}

func parseSources(s string) ([]net.IP, error) {
	var ips []net.IP
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ip := net.ParseIP(f)
		if ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("source %q: must be a loopback address", f)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}
