package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestStalledReadsTakeNothingFromWritersOrTheControlPlane: tenants' history
// reads that hold every connection of the reads pool (an export whose
// client stopped reading, a slow query) leave the history writer and the
// control plane their own connections: commits, the change-version poll
// that readiness uses, and control-plane writes go on; another read waits
// for the reads pool only, and gets its connection when one is freed.
func TestStalledReadsTakeNothingFromWritersOrTheControlPlane(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		recs := make([]*fleetmq.Record, 50)
		for i := range recs {
			recs[i] = &fleetmq.Record{AccountID: accA, ClientID: "c1", Topic: accA + "/c1/state/s", Class: "state", QoS: 1,
				PublishedQoS: 1, Payload: []byte(`{"n":1}`), Received: t0.Add(time.Duration(i) * time.Millisecond)}
		}
		must(t, s.AppendHistory(ctx, recs))

		pool := sqlstore.SQLitePool
		if s.Backend() == "postgres" {
			pool = sqlstore.PostgresPool
		}
		// Every reads connection held by a query whose caller stalls after
		// its first row, as an export writing to a client that reads nothing.
		release := make(chan struct{})
		holding := make(chan struct{}, pool.Reads)
		done := make(chan error, pool.Reads)
		for range pool.Reads {
			go func() {
				first := true
				done <- s.QueryHistory(ctx, &fleetmq.HistoryQuery{AccountID: accA}, func(*fleetmq.Record) error {
					if first {
						first = false
						holding <- struct{}{}
						<-release
					}
					return nil
				})
			}()
		}
		for range pool.Reads {
			select {
			case <-holding:
			case <-ctx.Done():
				t.Fatal("the stalled reads never started")
			}
		}
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()

		quick, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := s.AppendHistory(quick, recs[:1]); err != nil {
			t.Fatalf("a history commit while every reads connection is held: %v", err)
		}
		if _, err := s.Version(quick); err != nil {
			t.Fatalf("the change version (readiness) while every reads connection is held: %v", err)
		}
		must(t, s.CreateClient(quick, client(accB, "b1", 1), 10))

		// The reads pool is bounded: one more read waits for a connection.
		short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancelShort()
		err := s.QueryHistory(short, &fleetmq.HistoryQuery{AccountID: accB}, func(*fleetmq.Record) error { return nil })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a read beyond the reads pool's %d connections: %v, want it to wait (deadline exceeded)", pool.Reads, err)
		}

		close(release)
		released = true
		for range pool.Reads {
			must(t, <-done)
		}
		var n int
		must(t, s.QueryHistory(ctx, &fleetmq.HistoryQuery{AccountID: accA}, func(*fleetmq.Record) error { n++; return nil }))
		if n != len(recs)+1 {
			t.Fatalf("read %d records after the stalled reads ended, want %d", n, len(recs)+1)
		}
	})
}

// TestReadsPoolGuards: on SQLite the reads pool's connections are
// query-only, so a write sent there by mistake fails instead of competing
// with the history writer for the write lock; on PostgreSQL its statements
// stop after ReadStatementTimeout.
func TestReadsPoolGuards(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		if s.Backend() == "sqlite" {
			if err := sqlstore.ExecOnReads(s, ctx, `DELETE FROM history`); err == nil {
				t.Fatal("a write on the reads pool succeeded")
			}
			return
		}
		got, err := sqlstore.QueryOnReads(s, ctx, `SELECT current_setting('statement_timeout')`)
		must(t, err)
		if want := "1min"; got != want {
			t.Fatalf("statement_timeout on the reads pool = %q, want %q", got, want)
		}
	})
}
