package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// TestCLIProblems: "client problems" lists one client's recent problems
// with topic, reason code and detail, "account problems" every client's;
// neither shows another account's, and an unknown account is an error.
func TestCLIProblems(t *testing.T) {
	dir := t.TempDir()
	A := createAccount(t, dir, "Acme", "owner@acme.example", "-plan", "starter")
	B := createAccount(t, dir, "Bolt", "owner@bolt.example", "-plan", "starter")
	st := openStore(t, dir)
	now := time.Now().UTC().Truncate(time.Second)
	err := st.AddProblems(context.Background(), []fleetmq.ClientProblem{
		{AccountID: A.ID, ClientID: "pump-17", Kind: fleetmq.ProblemPublishRefused, Topic: A.ID + "/pump-17/data/level", QoS: 1,
			Code: 0x90, Reason: "topic_name_invalid", Detail: `topic class "data/" is not one of state, event, telemetry, sample`,
			Count: 12, First: now.Add(-time.Hour), Last: now.Add(-time.Minute)},
		{AccountID: A.ID, ClientID: "dashboard", Kind: fleetmq.ProblemDropped, Topic: A.ID + "/pump-17/state/level", QoS: 1,
			Reason: "queue_full", Detail: "the subscriber's queue was full", Count: 3, First: now, Last: now},
		{AccountID: B.ID, ClientID: "pump-17", Kind: fleetmq.ProblemConnectRefused, Code: 0x86, Reason: "bad_user_name_or_password",
			Detail: "wrong password for credential b-secret", Count: 1, First: now, Last: now},
	})
	if err != nil {
		t.Fatal(err)
	}

	out := mustCLI(t, dir, "client", "problems", A.ID, "pump-17")
	r := row(out, now.Add(-time.Minute).Format(time.RFC3339))
	if len(r) < 8 || r[1] != "pump-17" || r[2] != "publish" || r[3] != "refused" || r[4] != "12" || r[5] != A.ID+"/pump-17/data/level" ||
		!strings.Contains(out, `0x90 topic_name_invalid  topic class "data/" is not one of state, event, telemetry, sample`) {
		t.Fatalf("client problems:\n%s", out)
	}
	if strings.Contains(out, "dashboard") || strings.Contains(out, "wrong password") {
		t.Fatalf("client problems of pump-17 shows another client's or account's:\n%s", out)
	}
	out = mustCLI(t, dir, "account", "problems", A.ID)
	if !strings.Contains(out, "dashboard") || !strings.Contains(out, "queue_full") || !strings.Contains(out, "pump-17") || strings.Contains(out, "b-secret") {
		t.Fatalf("account problems of A:\n%s", out)
	}
	if i, j := strings.Index(out, "dashboard"), strings.Index(out, "data/level"); i > j {
		t.Fatalf("account problems not most recent first:\n%s", out)
	}
	if out := mustCLI(t, dir, "client", "problems", A.ID, "pump-17", "-since", "30s"); !strings.HasPrefix(out, "no problems in the last 30s") {
		t.Fatalf("client problems -since 30s:\n%s", out)
	}
	cliErr(t, dir, "not found", "account", "problems", "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a")
	// A window that reaches no time back is a mistake, not "no problems".
	for _, since := range []string{"-5h", "0s"} {
		cliErr(t, dir, "-since must be positive", "client", "problems", A.ID, "pump-17", "-since", since)
		cliErr(t, dir, "-since must be positive", "account", "problems", A.ID, "-since", since)
	}
}
