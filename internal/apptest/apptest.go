// Package apptest starts whole fleetmq platforms (internal/app) for
// end-to-end tests: real SQLite in a temp directory, MQTT and HTTP on
// loopback ports, a clock the test controls, and a clean shutdown when the
// test ends.
package apptest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// waitFor bounds Close at cleanup and the wait in Synced.
const waitFor = 10 * time.Second

// Config is a platform for a test: a temp data directory, MQTT over TCP
// and HTTP on 127.0.0.1 ports of the system's choice, control-plane
// changes picked up and usage flushed within 20 ms, the broker's sweep left to the test
// (an hour), now as the clock, and no log output.
func Config(t testing.TB, now func() time.Time) app.Config {
	return app.Config{
		DataDir:             t.TempDir(),
		Listeners:           app.Listeners{Listen: "127.0.0.1:0"},
		HTTPListen:          "127.0.0.1:0",
		ReloadInterval:      20 * time.Millisecond,
		ClientUsageInterval: 20 * time.Millisecond,
		SweepInterval:       time.Hour,
		Now:                 now,
		Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// Start starts an App on cfg and closes it when the test ends, failing the
// test if the close does not finish cleanly (a test may Close it earlier:
// Close is idempotent).
func Start(t testing.TB, cfg app.Config) *app.App {
	t.Helper()
	a, err := app.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return a
}

// Synced waits until the policy's snapshot is the store's current
// version, so control-plane changes made so far are in force (through the
// reload loop, as the CLI's would be).
func Synced(t testing.TB, a *app.App) {
	t.Helper()
	testkit.Eventually(t, waitFor, "the policy to load the control plane", func() bool {
		v, err := a.Store.Version(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return a.Policy.Snapshot().Version == v
	})
}

// Cred is an MQTT credential made for a test, with its password.
type Cred struct{ ID, Username, Password string }

// Credentials creates a fleet publisher credential (label "fleet") and a
// subscriber password over the whole account (label "dashboard").
func Credentials(t testing.TB, a *app.App, accountID string) (pub, sub Cred) {
	t.Helper()
	for _, c := range []struct {
		kind, label string
		out         *Cred
	}{{fleetmq.KindPublisher, "fleet", &pub}, {fleetmq.KindSubscriber, "dashboard", &sub}} {
		cr, pw, err := a.Service.CreateCredential(context.Background(), accountID, control.NewCredential{Kind: c.kind, Label: c.label})
		if err != nil {
			t.Fatalf("create %s credential: %v", c.kind, err)
		}
		*c.out = Cred{ID: cr.ID, Username: cr.Username, Password: pw}
	}
	return pub, sub
}
