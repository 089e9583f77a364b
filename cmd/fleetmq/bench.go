package main

import (
	"context"
	"io"

	"github.com/fleetmq/fleetmq/internal/loadtest"
)

// runBench is "fleetmq bench": the load harness (see internal/loadtest).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return loadtest.Main(ctx, args, stdout, stderr)
}
