package sqlstore_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestSQLiteCheckpointsOffTheCommitPath: on SQLite no commit copies the
// WAL into the database file (a commit that did would hold up every
// acknowledgement waiting for it); the store's checkpointer does, in the
// background, with the history writer's help between commits past a
// bound, so the history reaches the database file and the WAL does not
// grow with what is written, even when commits come back to back.
func TestSQLiteCheckpointsOffTheCommitPath(t *testing.T) {
	const batches, perBatch = 100, 400
	payload := bytes.Repeat([]byte("x"), 1000)
	write := func(t *testing.T, interval time.Duration) (dir string, maxWAL int64) {
		old := sqlstore.CheckpointInterval
		sqlstore.CheckpointInterval = interval
		defer func() { sqlstore.CheckpointInterval = old }()
		dir = t.TempDir()
		s, err := sqlstore.OpenDir(ctxT(t), dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		twoAccounts(t, s)
		wal := filepath.Join(dir, sqlstore.DatabaseFile+"-wal")
		n := 0
		for range batches {
			recs := make([]*fleetmq.Record, perBatch)
			for i := range recs {
				n++
				recs[i] = &fleetmq.Record{AccountID: accA, ClientID: "c1", Topic: accA + "/c1/telemetry/t", Class: "telemetry", QoS: 1,
					PublishedQoS: 1, Payload: payload, Received: t0.Add(time.Duration(n) * time.Millisecond)}
			}
			must(t, s.AppendHistory(ctxT(t), recs))
			s.AfterCommit(ctxT(t)) // as the history writer does after acknowledging
			if fi, err := os.Stat(wal); err == nil {
				maxWAL = max(maxWAL, fi.Size())
			}
		}
		return dir, maxWAL
	}
	written := int64(batches * perBatch * len(payload))

	// Without the checkpointer's turn, the WAL holds everything: no commit
	// checkpointed (SQLite's default would have every 1,000 pages).
	_, maxWAL := write(t, time.Hour)
	if maxWAL < written {
		t.Fatalf("WAL at most %d bytes after %d bytes of payloads with no background checkpoint: a commit checkpointed", maxWAL, written)
	}

	// With it, the history reaches the database file, and the WAL stays
	// well below what was written.
	dir, maxWAL := write(t, 20*time.Millisecond)
	db := filepath.Join(dir, sqlstore.DatabaseFile)
	testkit.CheckFor(t, 10*time.Second, func() error {
		fi, err := os.Stat(db)
		if err != nil {
			return err
		}
		if fi.Size() < written {
			return fmt.Errorf("database file %d bytes: the checkpointer did not copy the %d bytes written", fi.Size(), written)
		}
		return nil
	})
	if bound := int64(2 * 4096 * 4096); maxWAL > bound {
		t.Errorf("WAL reached %d bytes for %d bytes written with a checkpoint every 20ms; want at most %d", maxWAL, written, bound)
	}
	t.Logf("written %d bytes of payloads; WAL at most %d bytes with the checkpointer", written, maxWAL)
}
