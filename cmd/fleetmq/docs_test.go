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

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// docBlock returns the first ```sh block after the heading in a file of
// the repository.
func docBlock(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", file, heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("%s: no sh block after %q", file, heading)
	}
	block, _, _ := strings.Cut(rest, "```\n")
	return block
}

// TestDocsRunAsWritten runs the README's quickstart and the operator
// guide's command blocks as a newcomer would paste them, one after the
// other in one shell, against a real "fleetmq serve" on loopback ports
// (its log in fleetmq.log, as the guide suggests): every command must
// succeed, a credential made on one line connects on the next, the
// subscriber receives the device's message, and the log answers "my
// device's data does not arrive". Placeholders in the reference blocks
// (ACCOUNT_ID, CREDENTIAL_ID) are filled with a second account's values.
func TestDocsRunAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs serve")
	}
	testkit.NeedTools(t, "bash", "mosquitto_pub", "mosquitto_sub")
	dir := t.TempDir()
	// ./fleetmq is this test binary running the command (TestMain), so
	// nothing needs building.
	bin := filepath.Join(dir, "fleetmq")
	wrapper := "#!/bin/sh\n" + childEnv + "=1 exec '" + os.Args[0] + "' -test.run='^$' -- \"$@\"\n"
	if err := os.WriteFile(bin, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	port := testkit.FreePorts(t, 2)
	mqttPort, httpPort := strconv.Itoa(port), strconv.Itoa(port+1)
	serveForDocs(t, dir, bin, "-listen", "127.0.0.1:"+mqttPort, "-http-listen", "127.0.0.1:"+httpPort)

	// The reference blocks work on their own account.
	ref := func(args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("fleetmq %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	refAccount := ref("account", "create", "-name", "Reference", "-email", "ref@example.com", "-plan", "starter", "-print", "account_id")
	refCred := ref("credential", "create", refAccount, "-kind", "subscriber", "-print", "id")

	quickstart := docBlock(t, "README.md", "## Quickstart")
	quickstart = strings.Replace(quickstart, "go build -o fleetmq ./cmd/fleetmq\n", "", 1) // ./fleetmq is there
	steps := []string{
		quickstart,
		docBlock(t, "docs/operator.md", "## The operator CLI"),
		docBlock(t, "docs/operator.md", "### My device's data does not arrive"),
		strings.NewReplacer("ACCOUNT_ID", refAccount, "CREDENTIAL_ID", refCred).Replace(
			docBlock(t, "docs/operator.md", "### Plans") +
				docBlock(t, "docs/operator.md", "### Accounts") +
				docBlock(t, "docs/operator.md", "### MQTT clients and credentials") +
				docBlock(t, "docs/operator.md", "### Vendor wire layouts")),
	}
	script := "fleetmq() { ./fleetmq \"$@\"; }\n" + strings.Join(steps, "\n")
	script = strings.NewReplacer("-p 1883", "-p "+mqttPort, "localhost:8080", "127.0.0.1:"+httpPort).Replace(script)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	sh.Dir = dir
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		t.Fatalf("the docs' commands failed: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, &stdout, &stderr)
	}
	out := stdout.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^portal: owner@acme\.example / \S{16,}$`),
		regexp.MustCompile(`(?m)^[0-9a-f-]{36}/pump-17/state/summary \{"running":true\}$`), // mosquitto_sub -v
		regexp.MustCompile(`(?m)\spump-17\s+state/summary\s+1\s+\{"running":true\}$`),      // history query
		regexp.MustCompile(`msg="client connected" client_id=pump-17`),                     // the log grep
		regexp.MustCompile(`platform: \{account_id\}/pump-17/telemetry/temp`),              // layout dry-run
	} {
		if !want.MatchString(out) {
			t.Errorf("the output has nothing like %s", want)
		}
	}
	if strings.Contains(stderr.String(), "not running") || strings.Contains(stderr.String(), "not yet in force") {
		t.Errorf("a command did not see its change in force:\n%s", &stderr)
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out, &stderr)
	}
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
