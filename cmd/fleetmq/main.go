// Command fleetmq is the fleetmq binary: the MQTT broker, the platform and
// the operator tools in one program.
//
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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "fleetmq:", err)
		os.Exit(1)
	}
}

const usage = `fleetmq — a multi-tenant MQTT platform in one binary

Usage:
  fleetmq broker [flags]   run the bare MQTT broker (open policy: anonymous, any topic)
  fleetmq bench MODE       load harness: pubsub, idle, or compare with Mosquitto
  fleetmq version          print the version

Run "fleetmq COMMAND -h" for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "broker":
		return runBroker(ctx, args[1:], stdout, stderr)
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
