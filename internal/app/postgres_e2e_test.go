package app_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/pgtest"
)

// TestPlatformOnPostgres runs the platform with its store in PostgreSQL:
// two accounts connect, publish and subscribe, each sees only its own
// messages, and the usage is metered into PostgreSQL. A second App on the
// same database (another fleetmq process, with its own data directory)
// takes the same control plane and adds to the same usage; its broker
// state still goes to its data directory.
func TestPlatformOnPostgres(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	p := startPlatform(t, func(c *app.Config) { c.Database = dsn })
	if b := p.Store.Backend(); b != "postgres" {
		t.Fatalf("the platform runs on %s, want postgres", b)
	}
	A := p.newTenant(t, "A", "starter", true)
	p.addClient(t, A, "dev1", 2)
	B := p.newTenant(t, "B", "starter", false, "dev1")
	p.synced(t)
	addr := p.MQTTAddr

	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subA.Sub(t, A.all(), 2)
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	subB.Sub(t, B.all(), 2)
	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)

	pubA.Pub(t, A.topic("dev1", "state/door"), 2, "open")
	if m := subA.ExpectOn(t, A.topic("dev1", "state/door"), "open"); m.QoS != 2 {
		t.Fatalf("A's QoS 2 state message (add-on, pool) arrived at QoS %d", m.QoS)
	}
	pubA.Pub(t, A.topic("dev1", "event/alarm"), 1, "smoke")
	subA.ExpectOn(t, A.topic("dev1", "event/alarm"), "smoke")
	pubA.Pub(t, A.topic("dev1", "telemetry/temp"), 0, "21.5")
	subA.ExpectOn(t, A.topic("dev1", "telemetry/temp"), "21.5")
	pubB.Pub(t, B.topic("dev1", "state/door"), 1, "closed")
	subB.ExpectOn(t, B.topic("dev1", "state/door"), "closed")         // B's first: none of A's crossed
	mqtttest.Barrier(t, pubA, A.topic("dev1", "event/barrier"), subA) // and none of B's reached A

	p.usage(t, A.ID, p.day(), "A: messages [1 2 1], pool 1", func(u fleetmq.DailyUsage) bool {
		return u.Messages == [3]int64{1, 2, 1} && u.PoolUsed == 1
	})
	p.usage(t, B.ID, p.day(), "B: messages [0 1 0]", func(u fleetmq.DailyUsage) bool {
		return u.Messages == [3]int64{0, 1, 0} && u.PoolUsed == 0
	})

	// A second platform process on the same database.
	dir2 := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	a2, err := app.Start(ctx, app.Config{
		DataDir:        dir2,
		Database:       dsn,
		Listeners:      app.Listeners{Listen: "127.0.0.1:0"},
		ReloadInterval: 20 * time.Millisecond,
		SweepInterval:  time.Hour,
		Now:            p.clock.Now,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			a2.Close(context.Background())
		}
	})
	// It restored A's QoS 2 pool use from the shared usage.
	if used := a2.Policy.Pool(A.ID).State(p.clock.Now(), 10_000).Used; used != 1 {
		t.Fatalf("the second process sees A's pool use %d, want 1", used)
	}
	subA2 := dialV5(t, a2.MQTTAddr, "subA2", A.SubUser, A.SubPass)
	subA2.Sub(t, A.all(), 1)
	pubB2 := dialV5(t, a2.MQTTAddr, "dev1", B.PubUser, B.PubPass)
	pubA2 := dialV5(t, a2.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	pubB2.Pub(t, B.topic("dev1", "state/door"), 1, "open again")
	pubA2.Pub(t, A.topic("dev1", "event/alarm"), 1, "smoke again")
	subA2.ExpectOn(t, A.topic("dev1", "event/alarm"), "smoke again") // B's message did not reach A

	// Closing flushes the second process's usage into the shared rows and
	// writes its broker state into its own data directory.
	cctx, ccancel := context.WithTimeout(context.Background(), waitFor)
	defer ccancel()
	closed = true
	if err := a2.Close(cctx); err != nil {
		t.Fatalf("close the second process: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, app.BrokerStateFile)); err != nil {
		t.Fatalf("broker state with PostgreSQL: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, "fleetmq.db")); !os.IsNotExist(err) {
		t.Fatalf("a SQLite database in the data directory of a PostgreSQL platform (stat: %v)", err)
	}
	p.usage(t, A.ID, p.day(), "A from both processes: messages [1 3 1]", func(u fleetmq.DailyUsage) bool {
		return u.Messages == [3]int64{1, 3, 1}
	})
	p.usage(t, B.ID, p.day(), "B from both processes: messages [0 2 0]", func(u fleetmq.DailyUsage) bool {
		return u.Messages == [3]int64{0, 2, 0}
	})
	cu, err := p.Store.ClientUsage(p.ctx, A.ID, p.day(), p.day())
	if err != nil {
		t.Fatal(err)
	}
	if len(cu) != 1 || cu[0].ClientID != "dev1" || cu[0].Messages != [3]int64{1, 3, 1} {
		t.Fatalf("A's per-client usage = %+v, want dev1 [1 3 1]", cu)
	}
}
