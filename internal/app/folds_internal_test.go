package app

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestFailedFoldsAreLogged: serve logs the history folds that failed since
// it last looked, once per look, with the count and the store's error,
// and says nothing while none fails.
func TestFailedFoldsAreLogged(t *testing.T) {
	var failures atomic.Uint64
	failures.Store(3) // failed before the watch began: not news
	stats := func() sqlstore.FoldStats {
		return sqlstore.FoldStats{Unfolded: 9000, Failures: failures.Load(), LastError: errors.New("disk I/O error")}
	}
	log, sink := testkit.NewLog()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); watchFolds(ctx, stats, 5*time.Millisecond, log) }()
	defer func() { cancel(); <-done }()
	const msg = "history folds fail: the records they would fold stay in memory, and their clients' queries read them apart"
	if testkit.Within(100*time.Millisecond, func() bool { return len(sink.Lines(msg)) > 0 }) {
		t.Fatalf("logged with no new failure: %s", sink.String())
	}
	failures.Add(2)
	testkit.Eventually(t, 5*time.Second, "the failures logged", func() bool { return len(sink.Lines(msg)) > 0 })
	if testkit.Within(100*time.Millisecond, func() bool { return len(sink.Lines(msg)) > 1 }) {
		t.Fatalf("the same failures logged twice: %s", sink.String())
	}
	line := sink.Lines(msg)[0]
	if line["failed"] != float64(2) || line["error"] != "disk I/O error" || line["unfolded"] != float64(9000) {
		t.Fatalf("logged %v; want 2 failures, the store's error and the unfolded count", line)
	}
}
