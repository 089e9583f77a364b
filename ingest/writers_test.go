package ingest_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
)

// parallelStore keeps every commit's records, holds the commits that
// carry a record of account held until opened, and reports (through
// overlap) a commit that began while another commit of one of its
// accounts was in progress.
type parallelStore struct {
	fleetmq.HistoryStore
	held    string
	entered chan struct{} // receives when a commit of held begins
	opened  chan struct{}

	mu       sync.Mutex
	inFlight map[string]bool
	overlap  []string
	commits  [][]*fleetmq.Record
}

func newParallelStore(held string) *parallelStore {
	return &parallelStore{held: held, entered: make(chan struct{}, 100), opened: make(chan struct{}), inFlight: map[string]bool{}}
}

func (s *parallelStore) AppendHistory(ctx context.Context, recs []*fleetmq.Record) error {
	accounts := map[string]bool{}
	for _, r := range recs {
		accounts[r.AccountID] = true
	}
	s.mu.Lock()
	for a := range accounts {
		if s.inFlight[a] {
			s.overlap = append(s.overlap, a)
		}
		s.inFlight[a] = true
	}
	s.mu.Unlock()
	if accounts[s.held] {
		s.entered <- struct{}{}
		select {
		case <-s.opened:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	runtime.Gosched() // give another writer the chance to overlap, were it allowed to
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits = append(s.commits, append([]*fleetmq.Record(nil), recs...))
	for a := range accounts {
		s.inFlight[a] = false
	}
	return nil
}

// committed returns the records committed so far, in commit order.
func (s *parallelStore) committed() []*fleetmq.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*fleetmq.Record
	for _, c := range s.commits {
		out = append(out, c...)
	}
	return out
}

// TestSecondWriterTakesOtherAccounts: with two writers, while one commit
// of account A cannot finish, account B's record is committed and
// acknowledged by the other writer; A's records accepted meanwhile wait
// for A's commit in progress (an account is in one commit at a time) and
// then go in, in order.
func TestSecondWriterTakesOtherAccounts(t *testing.T) {
	s := newParallelStore(acctA)
	w := newWriter(t, s, ingest.Options{Writers: 2, MaxDelay: -1})
	a1 := rec(acctA, 1)
	w.Accept(a1, nil)
	select {
	case <-s.entered:
	case <-time.After(waitFor):
		t.Fatal("A's commit never began")
	}
	a2, a3 := rec(acctA, 1), rec(acctA, 1)
	w.Accept(a2, nil)
	w.Accept(a3, nil)
	b := &ack{}
	b1 := rec(acctB, 1)
	w.Accept(b1, b)
	eventually(t, "B's acknowledgement while A's commit is held", func() bool { return b.n.Load() == 1 })
	if got := s.committed(); len(got) != 1 || got[0] != b1 {
		t.Fatalf("while A's first commit is held, committed %d records, want B's only", len(got))
	}
	close(s.opened)
	eventually(t, "A's records committed", func() bool { return len(s.committed()) == 4 })
	var as []*fleetmq.Record
	for _, r := range s.committed() {
		if r.AccountID == acctA {
			as = append(as, r)
		}
	}
	if len(as) != 3 || as[0] != a1 || as[1] != a2 || as[2] != a3 {
		t.Fatalf("A's records committed out of order")
	}
	if len(s.overlap) > 0 {
		t.Fatalf("commits of one account overlapped: %v", s.overlap)
	}
}

// TestWritersKeepEachAccountsOrder: three writers and four accounts'
// publishers at once: every record is stored once, each account's in the
// order accepted, and no two commits of one account are ever in progress
// together.
func TestWritersKeepEachAccountsOrder(t *testing.T) {
	s := newParallelStore("")
	close(s.opened)
	w := newWriter(t, s, ingest.Options{Writers: 3, MaxBatch: 16, AccountTurn: 4, MaxDelay: -1})
	accounts := []string{acctA, acctB, "0b5b4f8e-3333-4a0e-9d55-000000000003", "0b5b4f8e-4444-4a0e-9d55-000000000004"}
	const each = 500
	sent := make([][]*fleetmq.Record, len(accounts))
	var wg sync.WaitGroup
	for i, a := range accounts {
		wg.Go(func() {
			for range each {
				r := rec(a, 1)
				sent[i] = append(sent[i], r)
				w.Accept(r, nil)
			}
		})
	}
	wg.Wait()
	eventually(t, "every record committed", func() bool { return len(s.committed()) == len(accounts)*each })
	got := map[string][]*fleetmq.Record{}
	for _, r := range s.committed() {
		got[r.AccountID] = append(got[r.AccountID], r)
	}
	for i, a := range accounts {
		if len(got[a]) != each {
			t.Fatalf("account %d: %d records committed, want %d", i, len(got[a]), each)
		}
		for j := range each {
			if got[a][j] != sent[i][j] {
				t.Fatalf("account %d: record %d committed out of order", i, j)
			}
		}
	}
	if len(s.overlap) > 0 {
		t.Fatalf("commits of one account overlapped: %v", s.overlap)
	}
}

// TestCloseWithTwoWritersDrainsHeldLanes: at Close, a record waiting
// behind its account's commit in progress (held by one writer) is taken
// once that commit ends, and Close returns with everything stored.
func TestCloseWithTwoWritersDrainsHeldLanes(t *testing.T) {
	s := newParallelStore(acctA)
	w, err := ingest.New(s, ingest.Options{Writers: 2, MaxDelay: -1, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	w.Accept(rec(acctA, 1), nil)
	select {
	case <-s.entered:
	case <-time.After(waitFor):
		t.Fatal("A's commit never began")
	}
	w.Accept(rec(acctA, 1), nil) // behind the held commit
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		closed <- w.Close(ctx)
	}()
	close(s.opened)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(2 * waitFor):
		t.Fatal("Close never returned")
	}
	if got := len(s.committed()); got != 2 {
		t.Fatalf("%d records stored at Close, want 2", got)
	}
}
