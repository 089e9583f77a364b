package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// runOut runs a command and returns its stdout and stderr.
func runOut(t *testing.T, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := run(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("fleetmq %s: %v\n%s%s", strings.Join(args, " "), err, &out, &errOut)
	}
	return out.String(), errOut.String()
}

// TestCLISaysWhereAChangeStands: a change made while serve is not running
// is stored and the command says it applies when serve starts; a read says
// nothing; a serve that was killed (its heartbeat old) counts as not
// running; one that is alive but has not applied the change within -wait
// is named, and the command still succeeds (the change is stored).
func TestCLISaysWhereAChangeStands(t *testing.T) {
	dir := t.TempDir()
	const notRunning = "stored; fleetmq serve is not running on this store, the change applies when it starts\n"
	out, errOut := runOut(t, "account", "create", "-data", dir, "-name", "Acme", "-email", "o@acme.example", "-plan", "starter")
	acc := field(t, out, "account_id")
	if errOut != notRunning {
		t.Fatalf("account create without serve: stderr %q, want %q", errOut, notRunning)
	}
	if _, errOut := runOut(t, "account", "list", "-data", dir); errOut != "" {
		t.Fatalf("account list said %q on stderr: a read changes nothing", errOut)
	}
	if _, errOut := runOut(t, "client", "add", "-data", dir, "-wait", "0", acc, "dev1"); errOut != "" {
		t.Fatalf("-wait 0 said %q", errOut)
	}

	st := openStore(t, dir)
	ctx := context.Background()
	v, err := st.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-fleetmq.NodeStaleAfter - time.Second)
	if err := st.PutNode(ctx, &fleetmq.Node{ID: "killed", Host: "h", PID: 1, Started: old, Heartbeat: old, Applied: v}); err != nil {
		t.Fatal(err)
	}
	if _, errOut := runOut(t, "client", "add", "-data", dir, acc, "dev2"); errOut != notRunning {
		t.Fatalf("with only a killed serve's row: stderr %q, want %q", errOut, notRunning)
	}

	now := time.Now()
	if err := st.PutNode(ctx, &fleetmq.Node{ID: "stuck", Host: "box", PID: 4242, Started: now, Heartbeat: now, Applied: v}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, errOut = runOut(t, "client", "add", "-data", dir, "-wait", "300ms", acc, "dev3")
	if !strings.Contains(out, "dev3") || !strings.Contains(errOut, "stored, but not yet in force on 1 node: stuck (box, pid 4242, at version") {
		t.Fatalf("with a serve that does not apply: stdout %q stderr %q", out, errOut)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("returned after %v, before -wait 300ms", took)
	}
	if cs, err := st.Clients(ctx, acc); err != nil || len(cs) != 3 {
		t.Fatalf("clients stored: %d (%v), want 3", len(cs), err)
	}
}
