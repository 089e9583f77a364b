package loadtest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

func mainNoisy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench noisy-neighbour", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: fleetmq bench noisy-neighbour [flags]

Starts fleetmq serve on loopback ports with a victim and an attacker
account and measures the victim (a QoS 1 publisher, REST history pages,
/readyz, a new device's connect) in a baseline phase, during each attack
and in a recovery phase. Prints a table with a verdict per phase and a
"RESULT {json}" line per phase. Phases: %s.

Flags:
`, strings.Join(noisyPhases, ", "))
		fs.PrintDefaults()
	}
	var cfg NoisyConfig
	fs.StringVar(&cfg.Bin, "bin", "", "the fleetmq binary to run serve with (default: this program)")
	fs.StringVar(&cfg.Database, "database", "", "PostgreSQL URL of an existing database for serve (default: SQLite in a temporary data directory)")
	phases := fs.String("phases", strings.Join(noisyPhases, ","), "comma-separated attacks to run, in this order (the baseline and recovery always run)")
	fs.DurationVar(&cfg.Duration, "phase-duration", 30*time.Second, "how long each phase measures (30 s: the victim's p99 is over 1,500 acknowledgements; over the 500 of a 10 s phase it is the 5th slowest, and moves by 2x from run to run on a 2-core machine)")
	fs.IntVar(&cfg.AckRate, "ack-rate", 50, "victim QoS 1 publishes per second")
	fs.IntVar(&cfg.RESTRate, "rest-rate", 5, "victim GET /history pages per second")
	fs.IntVar(&cfg.ReadyRate, "readyz-rate", 10, "GET /readyz per second")
	fs.IntVar(&cfg.AttackerClients, "attacker-clients", 20, "the attacker plan's max_publisher_clients (its retained bound is 100 times this)")
	fs.StringVar(&cfg.AttackerRates, "attacker-rates", "scale", "the catalog plan whose publish rates the attacker's plan has, or \"none\" (no publish rates)")
	fs.IntVar(&cfg.AttackerRecords, "attacker-records", 100_000, "attacker history records, stored through the store before serve starts")
	fs.IntVar(&cfg.Exports, "exports", 10, "export-stall: unread NDJSON exports")
	fs.IntVar(&cfg.FilterLoops, "filter-loops", 8, "expensive-filter: concurrent GET /history loops")
	fs.IntVar(&cfg.BigConnects, "big-connects", 2000, "big-connect: unauthenticated sockets")
	fs.IntVar(&cfg.BigConnectSize, "big-connect-size", 1<<20, "big-connect: remaining length every other CONNECT header declares (the others 65,000)")
	fs.IntVar(&cfg.HTTPIdle, "http-idle", 2000, "http-idle: idle keep-alive connections (the target is 20,000: raise the file limit first, see docs/benchmarks.md)")
	fs.IntVar(&cfg.HTTPSlow, "http-slow", 0, "http-idle: slow-body connections (default -http-idle/10)")
	fs.IntVar(&cfg.RetainedTopics, "retained-topics", 20_000, "retained-flood: retained messages on distinct topics")
	fs.IntVar(&cfg.UserProps, "user-props", 120_000, "user-properties: User Properties per PUBLISH")
	fs.IntVar(&cfg.UserPropsRepeats, "user-props-repeats", 20, "user-properties: PUBLISHes (one connection each)")
	fs.IntVar(&cfg.Signins, "signins", 150, "signin-burst: simultaneous wrong-password sign-ins")
	fs.IntVar(&cfg.RESTRateLimit, "rest-rate-limit", 1_000_000, "serve's -rest-rate-limit (requests per token and hour; high, so the hourly quota is not what stops an attack)")
	serveFlags := fs.String("serve-flags", "", "more flags for serve, space-separated, e.g. \"-http-max-conns 30000\"")
	fs.StringVar(&cfg.ServerLog, "server-log", "", "also write serve's log (JSON lines) to this file")
	fs.BoolVar(&cfg.KeepData, "keep-data", false, "keep serve's data directory")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, p := range strings.Split(*phases, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Phases = append(cfg.Phases, p)
		}
	}
	cfg.ServeArgs = strings.Fields(*serveFlags)
	if !*quiet {
		cfg.progress = stderr
	}
	r, err := RunNoisy(ctx, cfg)
	if r != nil && len(r.Phases) > 0 {
		printNoisy(stdout, r)
	}
	return err
}

// printNoisy writes the table (Markdown, to paste into the docs), the
// attack figures, the verdicts and a RESULT line per phase.
func printNoisy(w io.Writer, r *NoisyResult) {
	fmt.Fprintf(w, "noisy-neighbour on %s, %s; attacker history %d records\n\n", r.Database, r.Started.Format("2006-01-02 15:04 UTC"), r.AttackerRecords)
	fmt.Fprintln(w, "| phase | ack p50 ms | ack p99 ms | ack max ms | acks/s | REST p50 ms | REST p99 ms | REST err | readyz p99 ms | readyz max ms | connect ms | RSS MiB | fds | verdict |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, ph := range r.Phases {
		v := "ok"
		if len(ph.Verdict) > 0 {
			v = "**missed**: " + strings.Join(ph.Verdict, "; ")
		}
		connect := fmt.Sprintf("%.1f", ph.ConnectMs)
		if ph.ConnectMs < 0 {
			connect = "failed"
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f | %d | %.1f | %.1f | %s | %.0f | %d | %s |\n",
			ph.Phase, ph.Ack.P50ms, ph.Ack.P99ms, ph.Ack.MaxMs, ph.Ack.PerSec, ph.REST.P50ms, ph.REST.P99ms, ph.REST.Errors+ph.REST.Stuck,
			ph.Ready.P99ms, ph.Ready.MaxMs, connect, float64(ph.RSSKiB)/1024, ph.FDs, v)
	}
	fmt.Fprintln(w)
	for _, ph := range r.Phases {
		if ph.Figure != "" {
			fmt.Fprintf(w, "- %s: %s\n", ph.Phase, ph.Figure)
		}
		for _, e := range []string{ph.Ack.FirstError, ph.REST.FirstError, ph.Ready.FirstError, ph.ConnectError} {
			if e != "" {
				fmt.Fprintf(w, "  - %s: first error: %s\n", ph.Phase, e)
			}
		}
	}
	fmt.Fprintf(w, "\nserve: %d error lines; refusals logged: %s\n", r.ServerErrors, formatCounts(r.ServerRefusals))
	for _, l := range r.ServerErrorLines {
		fmt.Fprintf(w, "  %s\n", l)
	}
	for _, ph := range r.Phases {
		b, _ := json.Marshal(ph)
		fmt.Fprintf(w, "RESULT %s\n", b)
	}
}
