package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestDocsRunAsWritten runs the README's quickstart and the operator
// guide's command blocks as a newcomer would paste them, one after the
// other in one shell, against a real "fleetmq serve" on loopback ports
// (its log in fleetmq.log, as the guide suggests): every command must
// succeed, a credential made on one line connects on the next, the
// subscriber receives the device's message, and the log answers "my
// device's data does not arrive". Placeholders in the reference blocks
// (ACCOUNT_ID, CREDENTIAL_ID) are filled with a second account's values;
// that account has had no connections, so it has no problems to show.
func TestDocsRunAsWritten(t *testing.T) {
	testkit.NeedTools(t, "mosquitto_pub", "mosquitto_sub")
	e := startDocsEnv(t)

	// The reference blocks work on their own account.
	refAccount := e.fleetmq(t, "account", "create", "-name", "Reference", "-email", "ref@example.com", "-plan", "starter", "-print", "account_id")
	refCred := e.fleetmq(t, "credential", "create", refAccount, "-kind", "subscriber", "-print", "id")

	quickstart, built := strings.CutPrefix(docBlock(t, "README.md", "## Quickstart"), "go build -o fleetmq ./cmd/fleetmq\n")
	if !built {
		t.Fatal("the quickstart does not start with the go build line the harness stands for (./fleetmq is the test binary)")
	}
	steps := []string{
		quickstart,
		docBlock(t, "docs/operator.md", "## The operator CLI"),
		docBlock(t, "docs/operator.md", "### My device's data does not arrive"),
		strings.NewReplacer("ACCOUNT_ID", refAccount, "CREDENTIAL_ID", refCred).Replace(
			docBlock(t, "docs/operator.md", "### What the account's owner sees") +
				docBlock(t, "docs/operator.md", "### Plans") +
				docBlock(t, "docs/operator.md", "### Accounts") +
				"NEW_PASSWORD='a new one, chosen'\n" + // the password the operator chose
				docBlock(t, "docs/operator.md", "#### A lost portal password") +
				docBlock(t, "docs/operator.md", "### MQTT clients and credentials") +
				docBlock(t, "docs/operator.md", "### Vendor wire layouts")),
	}
	out, stderr := e.run(t, strings.Join(steps, "\n"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^portal: owner@acme\.example / \S{16,}$`),
		regexp.MustCompile(`(?m)^[0-9a-f-]{36}/pump-17/state/summary \{"running":true\}$`),             // mosquitto_sub -v
		regexp.MustCompile(`(?m)\spump-17\s+state/summary\s+1\s+\{"running":true\}$`),                  // history query
		regexp.MustCompile(`msg="client connected" client_id=pump-17`),                                 // the log grep
		regexp.MustCompile(`(?m)^no problems in the last 24h0m0s$`),                                    // account problems -since 24h
		regexp.MustCompile(`(?m)^portal password of ref@example\.com \(account [0-9a-f-]{36}\) set\.`), // set-password -stdin
		regexp.MustCompile(`platform: \{account_id\}/pump-17/telemetry/temp`),                          // layout dry-run
		regexp.MustCompile(`(?m)^publish_rate:\s+100 msg/s, 262144 bytes/s$`),                          // plan show starter
		regexp.MustCompile(`(?m)^account_publish_rate:\s+30000 msg/s, 134217728 bytes/s$`),             // plan set keeps the rates not given
	} {
		if !want.MatchString(out) {
			t.Errorf("the output has nothing like %s", want)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr)
	}
}

// docsEnv is where the docs tests paste commands: a directory with
// ./fleetmq (this test binary running the command, see TestMain, so
// nothing needs building) and a "fleetmq serve" on loopback ports running
// in it, with its standard error in fleetmq.log as the operator guide
// suggests and its data in ./data.
type docsEnv struct {
	dir, bin           string
	mqttPort, httpPort string
}

// startDocsEnv starts serve in a new docsEnv, with extra serve flags.
func startDocsEnv(t *testing.T, serveArgs ...string) *docsEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("runs serve and the documentation's scripts")
	}
	testkit.NeedTools(t, "bash")
	e := &docsEnv{dir: t.TempDir()}
	e.bin = filepath.Join(e.dir, "fleetmq")
	// Under -race, a binary sleeps a second before it exits (GORACE
	// atexit_sleep_ms, for late reports of other goroutines): that would be
	// most of the time of the dozens of short commands the docs run.
	wrapper := "#!/bin/sh\nGORACE=\"${GORACE:-} atexit_sleep_ms=0\" " + childEnv + "=1 exec '" + os.Args[0] + "' -test.run='^$' -- \"$@\"\n"
	if err := os.WriteFile(e.bin, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	port := testkit.FreePorts(t, 2)
	e.mqttPort, e.httpPort = strconv.Itoa(port), strconv.Itoa(port+1)
	serveForDocs(t, e.dir, e.bin, append([]string{"-listen", "127.0.0.1:" + e.mqttPort, "-http-listen", "127.0.0.1:" + e.httpPort}, serveArgs...)...)
	return e
}

// fleetmq runs ./fleetmq with args in the directory and returns its
// standard output, trimmed.
func (e *docsEnv) fleetmq(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Dir = e.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fleetmq %s: %v\n%s", strings.Join(args, " "), err, &stderr)
	}
	return strings.TrimSpace(string(out))
}

// run runs script in the directory as one "bash -euo pipefail" script, as
// if it were pasted into a shell with fleetmq on PATH (a function runs
// ./fleetmq), after pointing it at serve's ports: 1883 and 8080 are
// written in the docs. It fails the test when the script fails, or when a
// CLI command says its change was not in force when it returned.
func (e *docsEnv) run(t *testing.T, script string) (stdout, stderr string) {
	t.Helper()
	script = "fleetmq() { ./fleetmq \"$@\"; }\n" + script
	script = strings.NewReplacer("-p 1883", "-p "+e.mqttPort, "localhost:8080", "127.0.0.1:"+e.httpPort).Replace(script)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	sh.Dir = e.dir
	var out, errs bytes.Buffer
	sh.Stdout, sh.Stderr = &out, &errs
	if err := sh.Run(); err != nil {
		t.Fatalf("the docs' commands failed: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, &out, &errs)
	}
	if strings.Contains(errs.String(), "not running") || strings.Contains(errs.String(), "not yet in force") {
		t.Errorf("a command did not see its change in force:\n%s", &errs)
	}
	return out.String(), errs.String()
}

// serveForDocs runs bin's serve in dir with its standard error
// in dir/fleetmq.log until the test ends (SIGTERM, then a clean exit).
func serveForDocs(t *testing.T, dir, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, "fleetmq.log"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout lockedBuffer
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve exited with %v", err)
			}
		case <-time.After(waitFor):
			cmd.Process.Kill()
			t.Error("serve did not stop on SIGTERM")
		}
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "fleetmq.log"))
			t.Logf("fleetmq.log:\n%s", b)
		}
	})
	testkit.Eventually(t, waitFor, "serve to start", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("serve exited before serving: %v", err)
		default:
		}
		return strings.Contains(stdout.String(), "fleetmq serving")
	})
}

// TestDocsPostgresRunsAsWritten runs docs/operator.md's PostgreSQL block
// on a fresh database of the FLEETMQ_TEST_POSTGRES server (skipped
// without it). Two of its lines are the harness's: "createdb -O fleetmq
// fleetmq" needs a PostgreSQL superuser and a fleetmq role, which the test
// server need not give, so pgtest.DSN's CREATE DATABASE stands for it; and
// "./fleetmq serve", which runs until stopped, is started by the harness
// with FLEETMQ_DATABASE set as the block sets it. The rest runs as written,
// with the example URL replaced by the test database's.
func TestDocsPostgresRunsAsWritten(t *testing.T) {
	dsn := pgtest.DSN(t)
	block := docBlock(t, "docs/operator.md", "## PostgreSQL")
	const exampleURL = "postgres://fleetmq:secret@db.example:5432/fleetmq?sslmode=require"
	if !strings.Contains(block, exampleURL) {
		t.Fatalf("the PostgreSQL block has no %s to replace:\n%s", exampleURL, block)
	}
	var script []string
	harness := map[string]bool{"createdb ": false, "./fleetmq serve ": false}
	for _, line := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		if strings.HasPrefix(line, "createdb ") {
			harness["createdb "] = true
			continue
		}
		if strings.HasPrefix(line, "./fleetmq serve ") {
			harness["./fleetmq serve "] = true
			continue
		}
		script = append(script, strings.ReplaceAll(line, exampleURL, dsn))
	}
	for prefix, seen := range harness {
		if !seen {
			t.Fatalf("the PostgreSQL block has no %q line, which the harness stands for:\n%s", prefix, block)
		}
	}

	t.Setenv("FLEETMQ_DATABASE", dsn) // for serve and the CLI, as the block exports it
	e := startDocsEnv(t)
	acc := e.fleetmq(t, "account", "create", "-name", "Bolt Logistics", "-email", "owner@bolt.example", "-plan", "starter", "-print", "account_id")
	t.Setenv("FLEETMQ_DATABASE", "") // the block's export sets it
	out, stderr := e.run(t, strings.Join(script, "\n"))
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(acc) + `\s.*owner@bolt\.example`).MatchString(out) {
		t.Errorf("account list does not list the account made on PostgreSQL:\n%s\nstderr:\n%s", out, stderr)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "data", "fleetmq.db")); !os.IsNotExist(err) {
		t.Errorf("data/fleetmq.db on PostgreSQL: %v, want none (operator.md: no SQLite file is created there)", err)
	}
}
