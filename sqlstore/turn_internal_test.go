package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// TestSQLiteWritesTakeTurns: on SQLite a write of this process waits for
// its turn behind the write in progress, in Go rather than in SQLite's
// busy handler: it gives up as soon as its context ends, and the writes
// queued behind the holder all go through once it commits.
func TestSQLiteWritesTakeTurns(t *testing.T) {
	s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), DatabaseFile))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.tx(context.Background(), func(*sql.Tx) error {
			close(in)
			<-release
			return nil
		})
	}()
	<-in

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		gaveUp <- s.PutNode(ctx, &fleetmq.Node{ID: "n-cancelled", Started: time.Now(), Heartbeat: time.Now()})
	}()
	cancel()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a write whose context ended while it waited: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write waiting for its turn ignored its context")
	}

	const queued = 8
	done := make(chan error, queued)
	for i := range queued {
		go func() {
			done <- s.PutNode(context.Background(), &fleetmq.Node{ID: "n" + string(rune('a'+i)), Started: time.Now(), Heartbeat: time.Now()})
		}()
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for range queued {
		if err := <-done; err != nil {
			t.Fatalf("a write queued behind another: %v", err)
		}
	}
	nodes, err := s.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != queued {
		t.Fatalf("%d nodes stored, want the %d queued writes' (not the cancelled one's)", len(nodes), queued)
	}
}
