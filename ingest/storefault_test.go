package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
)

// TestDiskFullDoesNotRefuseLargeMessages: while the disk is full
// (docs/operator.md "When the database fails (disk full, ...)") the writer
// retries and acknowledges nothing until the database takes writes again;
// a message counts as refused for what it holds only for "a value it
// cannot hold". Here the disk is full but a small record still fits in
// the pages the database has; a large one, batched with it, does not: the
// small one is stored and acknowledged, the large one waits (never refused
// to its publisher, which would not send it again) and is stored and
// acknowledged once the disk has room.
func TestDiskFullDoesNotRefuseLargeMessages(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	w := newWriter(t, logStore{spy, t}, ingest.Options{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	warm := &ack{}
	w.Accept(rec(acctA, 1), warm) // today's table exists
	eventually(t, "the first record acknowledged", func() bool { return warm.n.Load() == 1 })
	spy.waitEntered(t) // its commit's
	big := rec(acctB, 1)
	big.Payload = []byte(strings.Repeat("x", 512*1024))

	db.SetMaxPages(1) // the disk is full: no page beyond those the database has
	release := db.lockDB(t)
	first := &ack{}
	w.Accept(rec(acctA, 1), first)
	spy.waitEntered(t)
	// Queued behind it: one batch of a small record and a large one.
	small, large := &ack{}, &ack{}
	w.Accept(rec(acctB, 1), small)
	w.Accept(big, large)
	release()

	eventually(t, "the small records acknowledged", func() bool { return first.n.Load() == 1 && small.n.Load() == 1 })
	eventually(t, "the large record retried", func() bool { return large.refused.Load() == 1 || w.Stats().StoreErrors >= 8 })
	if large.refused.Load() != 0 {
		st := w.Stats()
		t.Fatalf("the large record was refused to its publisher (not stored, never retried) because the disk is full: stats %+v, failing: %v", st, func() error { _, err := w.Failing(); return err }())
	}
	t.Logf("stats %+v large acked %d", w.Stats(), large.n.Load())
	db.SetMaxPages(0) // room again
	eventually(t, "the large record stored and acknowledged", func() bool { return large.n.Load() == 1 })
}

// TestCloseCountsTheRecordsItLeaves: Close returns "an error saying
// how many" records it leaves unstored and unacknowledged (Writer.Close).
// A record in the batch being retried when the deadline passes is one of
// them.
func TestCloseCountsTheRecordsItLeaves(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	spy.failFirst = 1 << 30 // the store refuses every commit
	w := newWriter(t, spy, ingest.Options{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	a := &ack{}
	w.Accept(rec(acctA, 1), a)
	eventually(t, "a failed commit", func() bool { return w.Stats().StoreErrors >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := w.Close(ctx)
	if err == nil {
		t.Fatal("Close returned nil with a record unstored")
	}
	if a.n.Load() != 0 {
		t.Fatal("the unstored record was acknowledged")
	}
	if st := w.Stats(); st.Abandoned != 1 {
		t.Errorf("stats %+v: want 1 abandoned", st)
	}
	if !strings.Contains(err.Error(), ": 1 records not stored") {
		t.Fatalf("Close: %v; want it to say 1 record was not stored", err)
	}
}

// logStore logs every append's records and outcome.
type logStore struct {
	*spyStore
	t *testing.T
}

func (s logStore) AppendHistory(ctx context.Context, recs []*fleetmq.Record) error {
	err := s.spyStore.AppendHistory(ctx, recs)
	sizes := make([]int, len(recs))
	for i, r := range recs {
		sizes[i] = len(r.Payload)
	}
	s.t.Logf("append %v: %v", sizes, err)
	return err
}

// abortStore stands in for a store at shutdown: the first commit waits for
// the test (so that the next two records gather into one batch), a commit
// of two records fails (a hiccup: the writer then stores them in halves),
// and a commit of the record late is in progress when Close's deadline
// passes: it ends with the context's error, as a real store's does.
type abortStore struct {
	fleetmq.HistoryStore
	gate    chan struct{}
	first   atomic.Bool
	late    *fleetmq.Record
	blocked chan struct{}
	once    sync.Once
}

func (s *abortStore) AppendHistory(ctx context.Context, recs []*fleetmq.Record) error {
	switch {
	case s.first.CompareAndSwap(false, true):
		<-s.gate
	case len(recs) == 2:
		return errors.New("injected: the database hiccups")
	case len(recs) == 1 && recs[0] == s.late:
		s.once.Do(func() { close(s.blocked) })
		<-ctx.Done()
		return fmt.Errorf("sqlstore: append history: %w", ctx.Err())
	}
	return s.HistoryStore.AppendHistory(ctx, recs)
}

// TestCloseDeadlineDoesNotRefuseRecords: "If ctx ends first, the records
// not yet stored are left unacknowledged (their publishers send them
// again)" (Writer.Close). That holds for a record whose commit the deadline
// cut off while the writer was storing its batch in halves: it is neither
// acknowledged nor refused to its publisher as if the store could not
// hold it.
func TestCloseDeadlineDoesNotRefuseRecords(t *testing.T) {
	db := openDB(t)
	r1, r2 := rec(acctA, 1), rec(acctA, 1)
	s := &abortStore{HistoryStore: db.Store, gate: make(chan struct{}), late: r2, blocked: make(chan struct{})}
	w := newWriter(t, s, ingest.Options{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	a0, a1, a2 := &ack{}, &ack{}, &ack{}
	w.Accept(rec(acctA, 1), a0)
	eventually(t, "the first commit under way", func() bool { return w.Stats().QueueDepth == 0 && s.first.Load() })
	w.Accept(r1, a1)
	w.Accept(r2, a2)
	close(s.gate)
	select {
	case <-s.blocked:
	case <-time.After(waitFor):
		t.Fatal("the writer never tried the second record alone")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := w.Close(ctx)
	t.Logf("Close: %v; stats %+v", err, w.Stats())
	if a0.n.Load() != 1 || a1.n.Load() != 1 {
		t.Fatalf("stored records acknowledged %d and %d times", a0.n.Load(), a1.n.Load())
	}
	if a2.refused.Load() != 0 || a2.n.Load() != 0 {
		t.Fatalf("the record cut off by Close's deadline was refused %d times, acknowledged %d times: want neither (its publisher sends it again); stats %+v",
			a2.refused.Load(), a2.n.Load(), w.Stats())
	}
}
