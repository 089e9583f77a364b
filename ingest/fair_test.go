package ingest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
)

// gateStore commits nothing until the test lets each commit through, and
// keeps every commit's records in order.
type gateStore struct {
	fleetmq.HistoryStore
	entered chan int // the number of records of each commit, as it begins
	pass    chan struct{}
	opened  chan struct{} // closed: every commit goes through
	kept    chan struct{} // receives once per commit, once it is in commits
	mu      sync.Mutex
	commits [][]*fleetmq.Record
}

// newGate returns a closed gate. Open it (defer g.open()) before the
// writer's Close, so that Close commits what is left.
func newGate() *gateStore {
	return &gateStore{entered: make(chan int, 100_000), pass: make(chan struct{}), opened: make(chan struct{}),
		kept: make(chan struct{}, 100_000)}
}

func (g *gateStore) open() { close(g.opened) }

// committed counts the records committed so far.
func (g *gateStore) committed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.commits {
		n += len(c)
	}
	return n
}

func (g *gateStore) AppendHistory(ctx context.Context, recs []*fleetmq.Record) error {
	g.entered <- len(recs)
	select {
	case <-g.pass:
	case <-g.opened:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	g.commits = append(g.commits, append([]*fleetmq.Record(nil), recs...))
	g.mu.Unlock()
	g.kept <- struct{}{}
	return nil
}

// next lets one commit through once it has begun, and waits until it is
// in commits.
func (g *gateStore) next(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(waitFor):
		t.Fatal("no commit began")
	}
	g.pass <- struct{}{}
	<-g.kept
}

// TestOneAccountsFloodDoesNotQueueAheadOfAnother: with thousands of one
// account's records queued, a record of another account goes into the
// very next commit, after at most AccountTurn of the first account's, and
// that commit is one round of turns: its publisher's acknowledgement waits
// for one short commit more, not for the flood. Each account's records
// keep their order.
func TestOneAccountsFloodDoesNotQueueAheadOfAnother(t *testing.T) {
	g := newGate()
	w := newWriter(t, g, ingest.Options{QueueSize: 10_000, AccountQueueSize: 5_000, MaxBatch: 100, AccountTurn: 10, MaxDelay: -1})
	defer g.open()
	var flood []*fleetmq.Record
	for range 3000 {
		r := rec(acctA, 1)
		flood = append(flood, r)
		w.Accept(r, nil) // the queue has room: returns at once
	}
	select { // the writer took the first batch and is committing it
	case <-g.entered:
	case <-time.After(waitFor):
		t.Fatal("no commit began")
	}
	quiet := rec(acctB, 1)
	a := &ack{}
	returned(t, "the quiet account's record", acceptAsync(w, quiet, a))
	g.pass <- struct{}{} // the first batch: A's oldest 100
	<-g.kept
	g.next(t) // the next: must hold B's record
	eventually(t, "the quiet account's acknowledgement after two commits", func() bool { return a.n.Load() == 1 })

	g.mu.Lock()
	second := g.commits[1]
	g.mu.Unlock()
	pos := -1
	for i, r := range second {
		if r == quiet {
			pos = i
		}
	}
	if pos < 0 || pos > 10 {
		t.Fatalf("the quiet account's record at %d of the second commit, want within the first account's turn of 10", pos)
	}
	// That commit is one round of turns, short: not MaxBatch of the flood.
	if len(second) > 11 {
		t.Fatalf("the commit with the quiet account's record holds %d records, want at most one turn of each account (11)", len(second))
	}
	// The rest of the flood, in order.
	for g.committed() < len(flood)+1 {
		g.next(t)
	}
	var got []*fleetmq.Record
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.commits {
		for _, r := range c {
			if r.AccountID == acctA {
				got = append(got, r)
			}
		}
	}
	if len(got) != len(flood) {
		t.Fatalf("%d of the flood's %d records committed", len(got), len(flood))
	}
	for i := range got {
		if got[i] != flood[i] {
			t.Fatalf("the flood's record %d committed out of order", i)
		}
	}
}

// TestFullQueueAdmitsAQuietAccount: when other accounts' floods fill the
// queue (each within its own share), a QoS 1 record of an account with
// nothing queued is still taken at once: its publisher is not stopped.
// An account that has filled its share waits.
func TestFullQueueAdmitsAQuietAccount(t *testing.T) {
	g := newGate()
	w := newWriter(t, g, ingest.Options{QueueSize: 100, AccountQueueSize: 50, MaxBatch: 10, MaxDelay: -1})
	defer g.open()
	acctC := "0b5b4f8e-3333-4a0e-9d55-000000000003"
	w.Accept(rec(acctA, 1), nil)
	select { // the writer is committing the first record
	case <-g.entered:
	case <-time.After(waitFor):
		t.Fatal("no commit began")
	}
	for range 50 {
		returned(t, "A's share", acceptAsync(w, rec(acctA, 1), nil))
		returned(t, "C's share", acceptAsync(w, rec(acctC, 1), nil))
	}
	if d := w.Stats().QueueDepth; d != 100 {
		t.Fatalf("queue depth %d, want 100 (full)", d)
	}
	waiting := acceptAsync(w, rec(acctA, 1), nil)
	eventually(t, "A's record past its share to wait", func() bool { return w.Stats().AcceptWaits == 1 })
	returned(t, "the quiet account's record with the queue full", acceptAsync(w, rec(acctB, 1), nil))
	for {
		g.pass <- struct{}{}
		select {
		case <-waiting:
			return
		case <-g.entered:
		case <-time.After(waitFor):
			t.Fatal("A's waiting record never admitted")
		}
	}
}

// TestAStreamsBatchingDelayIsNotAQuietAccounts: while the writer waits
// for more of one account's stream to fill a batch (MaxDelay, here a
// minute), a record of an account that sent nothing before ends the wait:
// the commit that holds it begins at once, not when the stream's delay
// runs out.
func TestAStreamsBatchingDelayIsNotAQuietAccounts(t *testing.T) {
	g := newGate()
	w := newWriter(t, g, ingest.Options{MaxDelay: time.Minute})
	defer g.open()
	w.Accept(rec(acctA, 1), nil) // A's first record: quiet, committed at once
	select {
	case n := <-g.entered:
		if n != 1 {
			t.Fatalf("the first commit holds %d records, want 1", n)
		}
	case <-time.After(waitFor):
		t.Fatal("a lone record waited for company")
	}
	w.Accept(rec(acctA, 1), nil) // A streams: its next record waits for company
	g.pass <- struct{}{}
	<-g.kept
	quiet := &ack{}
	w.Accept(rec(acctB, 1), quiet)
	select {
	case n := <-g.entered:
		if n != 2 {
			t.Fatalf("the commit after the quiet account's record holds %d records, want A's and B's (2)", n)
		}
	case <-time.After(waitFor):
		t.Fatal("the quiet account's record waited for the stream's batching delay")
	}
	g.pass <- struct{}{}
	<-g.kept
	eventually(t, "the quiet account's acknowledgement", func() bool { return quiet.n.Load() == 1 })
}

// TestALingeringBatchGoesOnceFull: while the writer waits for company
// (MaxDelay), a stream's records join the batch without waking it one by
// one, and the batch goes as soon as it is full, not when the wait ends;
// the records that came during a wait are all in the commit that ends it.
func TestALingeringBatchGoesOnceFull(t *testing.T) {
	g := newGate()
	defer g.open()
	const maxBatch = 10
	w := newWriter(t, g, ingest.Options{MaxDelay: time.Minute, MaxBatch: maxBatch})
	w.Accept(rec(acctA, 1), nil) // quiet: committed at once
	g.next(t)
	w.Accept(rec(acctA, 1), nil) // A streams: the writer waits for company
	for range maxBatch - 1 {
		select {
		case n := <-g.entered:
			t.Fatalf("a commit of %d records began before the batch was full", n)
		default:
		}
		w.Accept(rec(acctA, 1), nil)
	}
	select {
	case n := <-g.entered:
		if n != maxBatch {
			t.Fatalf("the commit holds %d records, want a full batch of %d", n, maxBatch)
		}
	case <-time.After(waitFor):
		t.Fatal("a full batch waited for the end of the batching delay")
	}
	g.pass <- struct{}{}
	<-g.kept

	// Records that come during a short wait are committed when it ends.
	w2 := newWriter(t, g, ingest.Options{MaxDelay: time.Second, MaxBatch: 2048})
	w2.Accept(rec(acctB, 1), nil)
	g.next(t)
	for range 5 {
		w2.Accept(rec(acctB, 1), nil)
	}
	select {
	case n := <-g.entered:
		if n != 5 {
			t.Fatalf("the commit after the wait holds %d records, want the 5 that came during it", n)
		}
	case <-time.After(waitFor):
		t.Fatal("no commit when the batching delay ended")
	}
	g.pass <- struct{}{}
	<-g.kept
}
