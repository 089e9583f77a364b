package main

// Tests of the data-directory and state-file locks: a second fleetmq on the
// same directory or state file is refused with a message naming the first
// one's pid, and the lock goes with the process, however it ends.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// stopped cancels an in-process serve or broker started by serve or
// startBroker and waits for it to return nil.
func stopped(t *testing.T, done chan error, stop context.CancelFunc) {
	t.Helper()
	stop()
	select {
	case err := <-done:
		done <- nil // for the starter's cleanup
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("did not return after its context was cancelled")
	}
}

// refused runs a command that must fail at start and returns its error.
func refused(t *testing.T, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var out, errOut lockedBuffer
	err := run(ctx, args, &out, &errOut)
	if err == nil {
		t.Fatalf("fleetmq %s started, want it refused:\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	}
	return err
}

// TestServeLocksDataDir: while one fleetmq serve runs on a data directory,
// another is refused, naming the first one's pid; once it ends (SIGKILL or
// a clean stop), a new one starts.
func TestServeLocksDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	second := []string{"serve", "-data", dir, "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0"}
	inUse := func(pid int) string {
		return fmt.Sprintf("data directory %s is in use by another fleetmq (pid %d); stop it or choose another -data", dir, pid)
	}

	// Another process serves the directory.
	child := startServe(t, dir)
	if err := refused(t, second...); err.Error() != inUse(child.cmd.Process.Pid) {
		t.Fatalf("second serve: %q\nwant %q", err, inUse(child.cmd.Process.Pid))
	}
	// The operator commands still work beside it.
	createAccount(t, dir, "Acme", "owner@acme.example")

	// SIGKILL leaves no lock behind.
	child.kill(t)
	_, _, done, stop := serve(t, dir)
	if err := refused(t, second...); err.Error() != inUse(os.Getpid()) {
		t.Fatalf("serve beside an in-process serve: %q\nwant %q", err, inUse(os.Getpid()))
	}
	// With PostgreSQL the directory still holds the broker state: locked
	// too (the lock is taken before the database is opened).
	if err := refused(t, append(second, "-database", "postgres://127.0.0.1:1/none")...); err.Error() != inUse(os.Getpid()) {
		t.Fatalf("serve -database beside a serve on the directory: %q", err)
	}

	// A clean stop releases it too.
	stopped(t, done, stop)
	_, _, done, stop = serve(t, dir)
	stopped(t, done, stop)
	if b, err := os.ReadFile(filepath.Join(dir, "fleetmq.lock")); err != nil || len(b) != 0 {
		t.Fatalf("lock file after a clean stop: %q, %v; want it empty", b, err)
	}
}

// startBroker runs "fleetmq broker" in-process until the test ends and
// waits for its "listening" line.
func startBroker(t *testing.T, extra ...string) (done chan error, stop context.CancelFunc) {
	t.Helper()
	done, stop, _ = startBrokerOut(t, extra...)
	return done, stop
}

// startBrokerOut is startBroker that also returns the broker's standard
// output.
func startBrokerOut(t *testing.T, extra ...string) (done chan error, stop context.CancelFunc, out *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	done = make(chan error, 1)
	args := append([]string{"broker", "-listen", "127.0.0.1:0"}, extra...)
	go func() { done <- run(ctx, args, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Errorf("broker did not stop")
		}
	})
	testkit.CheckFor(t, waitFor, func() error {
		if strings.Contains(stdout.String(), "fleetmq broker listening on ") {
			return nil
		}
		select {
		case err := <-done:
			t.Fatalf("broker returned %v before listening:\n%s", err, stderr.String())
		default:
		}
		return fmt.Errorf("broker printed no listening line:\n%s", stderr.String())
	})
	return done, cancel, &stdout
}

// TestBrokerLocksStateFile: two bare brokers saving one state file are
// refused; one on another file is not.
func TestBrokerLocksStateFile(t *testing.T) {
	state := filepath.Join(t.TempDir(), "broker.json")
	done, stop := startBroker(t, "-state", state)
	want := fmt.Sprintf("state file %s is in use by another fleetmq (pid %d); stop it or choose another -state", state, os.Getpid())
	if err := refused(t, "broker", "-listen", "127.0.0.1:0", "-state", state); err.Error() != want {
		t.Fatalf("second broker: %q\nwant %q", err, want)
	}
	startBroker(t, "-state", state+".other")
	stopped(t, done, stop)
	startBroker(t, "-state", state)
}
