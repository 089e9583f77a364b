package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestDocsAPIRunsAsWritten runs docs/api.md's command blocks in order as
// one script, as an API user would paste them, against a real serve's HTTP
// port, then the README's curl line and docs/history.md's commands (which
// need an account with stored messages: this one). The account has every
// add-on on and a device pump-17 that has published telemetry, a retained
// state and one refused publish, as api.md assumes; its REST API token is
// made as the portal makes one (control.Service.CreateRESTToken on
// serve's store). Every curl in the docs must be "curl -fsS", so an HTTP
// error fails the script.
func TestDocsAPIRunsAsWritten(t *testing.T) {
	testkit.NeedTools(t, "curl", "jq", "mosquitto_pub", "mosquitto_sub")
	e := startDocsEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	acc := e.fleetmq(t, "account", "create", "-name", "Bolt Logistics", "-email", "owner@bolt.example", "-plan", "starter", "-print", "account_id")
	for _, x := range []string{"history_download", "live_rest_api", "mgmt_rest_api", "qos2"} {
		e.fleetmq(t, "account", "addon", acc, x, "on")
	}
	st := openStore(t, filepath.Join(e.dir, "data"))
	svc := control.New(st)
	_, token, err := svc.CreateRESTToken(ctx, acc, control.NewRESTToken{Label: "docs"})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := svc.AwaitApplied(ctx, waitFor, 20*time.Millisecond); err != nil || !a.Running() || !a.Done() {
		t.Fatalf("serve did not take the REST token in: %v %v", a, err)
	}

	// pump-17 publishes a flow reading, a retained state, and on a topic
	// class that does not exist (a problem to list).
	e.fleetmq(t, "client", "add", acc, "pump-17", "-label", "Pump 17, north field")
	user, pass, _ := strings.Cut(e.fleetmq(t, "credential", "create", acc, "-kind", "publisher", "-print", "username,password"), " ")
	pub := func(args ...string) error {
		cmd := exec.Command("mosquitto_pub", append([]string{"-h", "127.0.0.1", "-p", e.mqttPort, "-u", user, "-P", pass, "-i", "pump-17"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("mosquitto_pub %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return err
	}
	if pub("-q", "1", "-t", acc+"/pump-17/telemetry/flow", "-m", `{"station_controller_device_id": "sc-4", "flow": 12.5}`) != nil ||
		pub("-q", "1", "-r", "-t", acc+"/pump-17/state/mode", "-m", `{"mode": "auto"}`) != nil {
		t.Fatal("pump-17 could not publish")
	}
	pub("-V", "mqttv5", "-q", "1", "-t", acc+"/pump-17/data/level", "-m", "3") // refused: its exit status does not matter
	testkit.Eventually(t, waitFor, "the refused publish among pump-17's problems", func() bool {
		ps, err := st.Problems(ctx, acc, "pump-17", time.Now().Add(-time.Hour), 10)
		return err == nil && slices.ContainsFunc(ps, func(p fleetmq.ClientProblem) bool { return p.Kind == fleetmq.ProblemPublishRefused })
	})
	// The day the reading was stored stands for the docs' example dates.
	latest, err := st.LatestHistory(ctx, acc, "pump-17")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(latest, func(r *fleetmq.Record) bool { return strings.HasSuffix(r.Topic, "/telemetry/flow") })
	if i < 0 {
		t.Fatalf("pump-17's flow reading is not stored: %d latest records", len(latest))
	}
	day := latest[i].Received.UTC().Truncate(24 * time.Hour)

	// What the docs write as placeholders or example values, and what
	// stands for it here (the ports are replaced by e.run).
	placeholders := []string{
		"svc_mqtt_rest_...", token, // from the portal: Settings, REST API tokens
		"2c9654d9-9c8e-437b-a391-699d4fb8c874", acc, // export ACCOUNT=... in api.md
		"ACCOUNT_ID", acc, // history.md's commands
		"mqtt.example.com", "127.0.0.1", // the MQTT host
		"2026-11-01", day.AddDate(0, 0, -7).Format(time.DateOnly), // a range start
		"2026-11-22", day.Format(time.DateOnly), // the day of the readings
		"2026-11-23", day.AddDate(0, 0, 1).Format(time.DateOnly), // the day after
	}
	var blocks []string
	for _, b := range []struct {
		heading string
		n       int
	}{
		{"# The subscriber REST API", 1}, {"## Tokens", 1}, {"## History", 1}, {"## History", 2},
		{"## Live state of the devices", 1}, {"## Why data does not arrive: recent problems", 1},
		{"## MQTT clients (publishers)", 1}, {"## Subscriber MQTT passwords", 1},
		{"## Fleet publisher credentials", 1}, {"## Usage", 1},
	} {
		blocks = append(blocks, docBlockN(t, "docs/api.md", b.heading, b.n))
	}
	blocks = append(blocks,
		docBlockN(t, "README.md", "## Quickstart", 2),
		docBlock(t, "docs/history.md", "## Export"),
		docBlock(t, "docs/history.md", "## Charts: numeric fields over time"))
	script := strings.NewReplacer(placeholders...).Replace(strings.Join(blocks, "\n"))
	if all, f := strings.Count(script, "curl "), strings.Count(script, "curl -fsS "); all != f {
		t.Errorf("%d of the docs' %d curl commands are not \"curl -fsS\": without -f, an HTTP error passes unnoticed", all-f, all)
	}
	out, stderr := e.run(t, script)

	q := regexp.QuoteMeta(acc)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`"account_id":"` + q + `","plan":"starter"`),                                         // usage
		regexp.MustCompile(`"topic":"` + q + `/pump-17/telemetry/flow".*"station_controller_device_id":"sc-4"`), // history
		regexp.MustCompile(`"retained":\[\{"topic":"` + q + `/pump-17/state/mode"`),                             // live
		regexp.MustCompile(`"kind":"publish_refused","topic":"` + q + `/pump-17/data/level"`),                   // problems
		regexp.MustCompile(`"client_id":"pump-18".*"max_publish_qos":0`),                                        // PATCH
		regexp.MustCompile(`(?m)^` + q + `/pump-17/state/mode \{"mode": "auto"\}$`),                             // mosquitto_sub -v
		regexp.MustCompile(`(?m)^\S+\s+[12]\s+12\.5\s+12\.5\s+12\.5\s+12\.5$`),                                  // history chart
	} {
		if !want.MatchString(out) {
			t.Errorf("the output has nothing like %s", want)
		}
	}
	for file, want := range map[string]string{
		"pump-17.ndjson": `"topic":"` + acc + `/pump-17/telemetry/flow"`,
		"state.csv":      acc + "/pump-17/state/mode",
		"history.ndjson": `"topic":"` + acc + `/pump-17/telemetry/flow"`,
		"telemetry.csv":  acc + "/pump-17/telemetry/flow",
	} {
		b, err := os.ReadFile(filepath.Join(e.dir, file))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s (%v) has no %s:\n%s", file, err, want, b)
		}
	}
	// What the script changed is in the store: the device it registered
	// is removed again, the publish with the new credential was stored,
	// and both credentials it made are revoked.
	if _, err := st.Client(ctx, acc, "pump-18"); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Errorf("pump-18 after DELETE: %v, want not_found", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "history.ndjson")); strings.Count(string(b), "/pump-17/telemetry/flow") != 2 {
		t.Errorf("history.ndjson has %d flow readings, want 2 (before the script, and with the credential it made):\n%s",
			strings.Count(string(b), "/pump-17/telemetry/flow"), b)
	}
	for kind, label := range map[string]string{"subscriber": "dashboard", "publisher": "fleet 2026"} {
		cs, err := st.Credentials(ctx, acc, kind)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range cs {
			if c.Label == label {
				found = true
				if c.RevokedAt.IsZero() {
					t.Errorf("the %s credential %q the script deleted is not revoked", kind, label)
				}
			}
		}
		if !found {
			t.Errorf("no %s credential %q: the script did not create it", kind, label)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr)
	}
}
