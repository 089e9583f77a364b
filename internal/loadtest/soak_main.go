package loadtest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func mainSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: fleetmq bench soak [flags]

Runs a mixed fleet against a broker for -duration and checks that it stays
healthy: no acknowledged QoS 1/2 message lost, no duplicate the protocol does
not allow, no connection closed without a stated reason, memory and goroutines
flat. Prints a report and a "RESULT {json}" line; exits non-zero on failure.

Flags:
`)
		fs.PrintDefaults()
	}
	var cfg SoakConfig
	fs.StringVar(&cfg.Target, "target", "serve", "broker under soak: serve (fleetmq serve on a fresh SQLite data directory), broker (fleetmq broker) or addr (the broker at -addr)")
	fs.StringVar(&cfg.Fleetmq, "fleetmq", "", "fleetmq binary for -target serve or broker (default: this program)")
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long the fleet runs (the drain comes after)")
	fs.Float64Var(&cfg.Scale, "scale", 1, "multiplies every period of the fleet's schedule and the default timeouts (0.25: four times as fast)")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", 0, "the server's write timeout, passed to serve/broker (default 30s x -scale, at least 1s); for -target addr, the one the broker has")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", 0, "the server's connect timeout, passed to serve/broker (default 10s x -scale, at least 1s); for -target addr, the one the broker has")
	fs.DurationVar(&cfg.Drain, "drain", time.Minute, "after the run, give up waiting for owed messages after this long without one arriving")
	fs.DurationVar(&cfg.Sample, "sample", 0, "how often the server's memory and goroutines are read (default -duration/120, within 1s-30s)")
	fs.IntVar(&cfg.Size, "size", 64, fmt.Sprintf("payload bytes (at least %d)", soakHeader))
	fs.IntVar(&cfg.Burst, "burst", 100, "messages in each burst of the burst devices")
	fs.Float64Var(&cfg.RSSGrowth, "rss-growth", 0.05, "allowed growth of the server's median RSS from the first half of the run to the second, as a fraction, on top of -rss-slack")
	fs.Float64Var(&cfg.RSSSlackMiB, "rss-slack", 8, "allowed growth of the server's median RSS in MiB, on top of -rss-growth")
	fs.StringVar(&cfg.ServerLog, "server-log", "", "also write the server's log (JSON lines) to this file")
	fs.BoolVar(&cfg.KeepData, "keep-data", false, "keep the data directory of -target serve")
	fs.StringVar(&cfg.Addr, "addr", "", "broker address for -target addr")
	fs.IntVar(&cfg.PID, "pid", 0, "PID of the broker at -addr, for memory figures")
	fs.StringVar(&cfg.MetricsURL, "metrics", "", "/metrics URL of the broker at -addr, for goroutine figures")
	fs.StringVar(&cfg.Account, "account", "soak", "topic root for -target addr (on a fleetmq platform: the account id, whose publishers fast-0..3, minute-0..2, burst-0..1 and flap-0..2 must exist with max QoS 2)")
	fs.StringVar(&cfg.PubUsername, "pub-username", "", "device username for -target addr")
	fs.StringVar(&cfg.PubPassword, "pub-password", "", "device password for -target addr")
	fs.StringVar(&cfg.SubUsername, "sub-username", "", "subscriber username for -target addr")
	fs.StringVar(&cfg.SubPassword, "sub-password", "", "subscriber password for -target addr")
	out := fs.String("out", "", "also write the full result, with every memory sample, as JSON to this file")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if !*quiet {
		cfg.progress = stderr
	}
	r, err := RunSoak(ctx, cfg)
	if err != nil {
		return err
	}
	printSoak(stdout, r)
	if *out != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if len(r.Failures) > 0 {
		return fmt.Errorf("soak failed: %d checks", len(r.Failures))
	}
	return nil
}

// printSoak writes the report and a RESULT line.
func printSoak(w io.Writer, r *SoakResult) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("soak %s: %.0fs at scale %g (write timeout %s, connect timeout %s), %d devices, %d subscribers",
		r.Target, r.Seconds, r.Scale, r.WriteTimeout, r.ConnectTimeout, r.Devices, r.Subscribers)
	p("published: QoS 0 %d, QoS 1 %d (acknowledged %d), QoS 2 %d (acknowledged %d); unacknowledged when a connection ended: %d",
		r.Published[0], r.Published[1], r.Acked[1], r.Published[2], r.Acked[2], r.Unacked[1]+r.Unacked[2])
	p("delivered: %d QoS 1/2 deliveries owed, %d lost; copies received at QoS 0 %d, QoS 1 %d, QoS 2 %d",
		r.Owed, r.Lost, r.Received[0], r.Received[1], r.Received[2])
	p("duplicates: %d allowed (QoS 1 redelivered with DUP after a reconnect), %d QoS 2 redelivered with DUP after a reconnect to a 3.1.1 client that keeps no QoS 2 state, %d forbidden",
		r.DupAllowed, r.DupV3QoS2, r.DupBad)
	if r.QoSAbove+r.QoSBelow+r.SessionLost+r.Foreign > 0 {
		p("also: %d copies above their QoS, %d below, %d sessions lost on resume, %d copies not from this run", r.QoSAbove, r.QoSBelow, r.SessionLost, r.Foreign)
	}
	p("connections: %d; closed by the harness %d; by the server with a stated reason %d (%s), of which provoked by the canaries %d, of well-behaved clients %d; unexplained %d",
		r.Connections, r.ClosedByHarness, sumCounts(r.ServerCloses), formatCounts(r.ServerCloses), sumCounts(r.Provoked), sumCounts(r.Unprovoked), r.Unexplained)
	if r.PingTimeouts > 0 {
		p("connections the client ended for want of a PINGRESP: %d", r.PingTimeouts)
	}
	for _, e := range r.UnexplainedExamples {
		p("  %s", e)
	}
	if r.ServerDisconnects != nil {
		p("the server's count of ended connections (by/reason): %s", formatCounts(r.ServerDisconnects))
	}
	p("server: messages dropped %s; error lines %d; log lines suppressed %d; connect failures %d, refusals %d",
		formatCounts(r.ServerDrops), r.ServerErrors, r.LogSuppressed, r.ConnectFailures, r.Refused)
	for _, e := range r.Problems {
		p("  %s", e)
	}
	if r.RSS[0] > 0 {
		p("memory: RSS first %d KiB, last %d KiB, max %d KiB; median %d KiB in the first half (after 10%%), %d KiB in the second (at most %d allowed); anonymous %d -> %d KiB; Go heap in use %.1f -> %.1f MiB",
			r.RSS[0], r.RSS[1], r.RSS[2], r.RSSHalvesKiB[0], r.RSSHalvesKiB[1], r.RSSAllowedKiB, r.AnonHalvesKiB[0], r.AnonHalvesKiB[1], r.HeapHalvesMiB[0], r.HeapHalvesMiB[1])
	}
	if r.Goroutines[0] > 0 {
		p("goroutines: %.0f before the fleet, %.0f at most, %.0f after every client left", r.Goroutines[0], r.Goroutines[1], r.Goroutines[2])
	}
	for _, e := range r.Examples {
		p("  %s", e)
	}
	if len(r.Failures) == 0 {
		p("PASS")
	} else {
		p("FAIL:\n  %s", strings.Join(r.Failures, "\n  "))
	}
	samples := r.Samples
	r.Samples = nil
	b, _ := json.Marshal(r)
	r.Samples = samples
	fmt.Fprintf(w, "RESULT %s\n", b)
}
