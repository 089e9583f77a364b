// Command fleetmq is the fleetmq binary: the MQTT broker, the platform and
// the operator tools in one program.
//
//	fleetmq serve    run the platform (broker, policy, store, HTTP)
//	fleetmq account, plan, client, credential, layout   operator commands
//	fleetmq broker   run the bare broker with an open policy
//	fleetmq bench    the load harness (internal/loadtest)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/procs"
)

func main() {
	control.ServeKeyWorkerIfAsked() // the child "fleetmq serve" hashes passwords in
	quietRuntimeMonitor(os.Args, os.Args[1:])
	keyWorkers = true
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 {
		fitProcessors(ctx, os.Args[1])
	}
	if err := runStdin(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "fleetmq:", err)
		os.Exit(1)
	}
}

// fitEnv, set to 0 (or false, off, no), keeps the long-running servers on
// all processors. By default they run on one while lightly loaded and on
// all once their CPU use or a goroutine's long wait for the one says so
// (package procs): a fifth less CPU per message for the bare broker at a
// steady few thousand messages a second, every tenant's latency within
// its targets (bench noisy-neighbour).
const fitEnv = "FLEETMQ_FIT_PROCESSORS"

// fitProcessors fits the processors of the long-running servers to their
// load until ctx ends, unless the operator turned it off (fitEnv); GOMAXPROCS
// set by the operator holds.
func fitProcessors(ctx context.Context, command string) {
	if (command == "serve" || command == "broker") && !isOff(os.Getenv(fitEnv)) {
		go procs.Fit(ctx, procs.Options{})
	}
}

// isOff reports whether an on/off setting says off.
func isOff(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "false", "off", "no":
		return true
	}
	return false
}

// keyWorkers is set when this is the fleetmq binary (not a test calling
// runServe in process): serve then hashes passwords in a child process of
// this executable (control.KeyWorker).
var keyWorkers bool

const usage = `fleetmq — a multi-tenant MQTT platform in one binary

Usage:
  fleetmq serve [flags]    run the platform on a data directory (default ./data)
  fleetmq account ...      accounts: create, list, show, suspend, resume, set-plan, addon, usage, set-password
  fleetmq plan ...         the plan catalog: list, set
  fleetmq client ...       MQTT clients of an account: add, list, set, remove
  fleetmq credential ...   publisher credentials and subscriber passwords: create, list, revoke
  fleetmq layout ...       vendor wire layouts: add, list, remove, dry-run
  fleetmq history ...      stored messages: query, export, latest, chart, prune
  fleetmq node list        the running serve processes (a cluster's nodes) and their sessions
  fleetmq broker [flags]   run the bare MQTT broker (open policy: anonymous, any topic)
  fleetmq bench MODE       load harness: pubsub, idle, compare (with Mosquitto), history, soak
  fleetmq version          print the version

Run "fleetmq COMMAND -h" for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=..."; a
// build without it reports its module version, or the VCS revision it was
// built from (go build in a git checkout), or "dev".
var version = buildVersion()

func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		return "dev"
	case dirty:
		return "dev-" + rev + "-dirty"
	}
	return "dev-" + rev
}

// run is runStdin with nothing on standard input, as the tests call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runStdin(ctx, args, strings.NewReader(""), stdout, stderr)
}

// runStdin runs one fleetmq command; stdin is read only by commands that
// take input (account set-password -stdin).
func runStdin(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "broker":
		return runBroker(ctx, args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "account":
		return runAdmin(ctx, "account", accountCmds(stdin), args[1:], stdout, stderr)
	case "plan":
		return runAdmin(ctx, "plan", planCmds(), args[1:], stdout, stderr)
	case "client":
		return runAdmin(ctx, "client", clientCmds(), args[1:], stdout, stderr)
	case "credential":
		return runAdmin(ctx, "credential", credentialCmds(), args[1:], stdout, stderr)
	case "layout":
		return runAdmin(ctx, "layout", layoutCmds(), args[1:], stdout, stderr)
	case "history":
		return runAdmin(ctx, "history", historyCmds(), args[1:], stdout, stderr)
	case "node":
		return runAdmin(ctx, "node", nodeCmds(), args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "fleetmq", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
