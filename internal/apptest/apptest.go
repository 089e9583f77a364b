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

	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// waitFor bounds Close at cleanup and the wait in Synced.
const waitFor = 10 * time.Second

// Config is a platform for a test: a temp data directory, MQTT over TCP
// and HTTP on 127.0.0.1 ports of the system's choice, control-plane
// changes picked up within 20 ms, the broker's sweep left to the test
// (an hour), now as the clock, and no log output.
func Config(t testing.TB, now func() time.Time) app.Config {
	return app.Config{
		DataDir:        t.TempDir(),
		Listeners:      app.Listeners{Listen: "127.0.0.1:0"},
		HTTPListen:     "127.0.0.1:0",
		ReloadInterval: 20 * time.Millisecond,
		SweepInterval:  time.Hour,
		Now:            now,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
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
