package ingest_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// waitFor bounds every wait for something expected to happen.
const waitFor = 10 * time.Second

// quietLog discards the writer's logs.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// Two accounts, so every test can check records stay in their own.
const (
	acctA = "0b5b4f8e-1111-4a0e-9d55-000000000001"
	acctB = "0b5b4f8e-2222-4a0e-9d55-000000000002"
)

// testDB is a SQLite store in a temp directory and its file's path.
type testDB struct {
	*sqlstore.Store
	path string
}

func openDB(t testing.TB) *testDB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.db")
	s, err := sqlstore.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &testDB{Store: s, path: path}
}

// lockDB takes SQLite's write lock from a second connection (BEGIN
// IMMEDIATE), so every commit of the store waits. The returned function
// releases it.
func (d *testDB) lockDB(t *testing.T) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+d.path+"?_journal_mode=WAL&_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Close()
			db.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// count returns how many records an account has in history.
func (d *testDB) count(t testing.TB, account string) int {
	t.Helper()
	n := 0
	if err := d.QueryHistory(context.Background(), &fleetmq.HistoryQuery{AccountID: account}, func(*fleetmq.Record) error {
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// records returns an account's history, oldest first, as copies.
func (d *testDB) records(t testing.TB, account string) []*fleetmq.Record {
	t.Helper()
	var out []*fleetmq.Record
	if err := d.QueryHistory(context.Background(), &fleetmq.HistoryQuery{AccountID: account, Ascending: true}, func(r *fleetmq.Record) error {
		c := *r
		c.Payload = append([]byte{}, r.Payload...)
		c.UserProperties = append([]fleetmq.UserProperty(nil), r.UserProperties...)
		if len(c.UserProperties) == 0 {
			c.UserProperties = nil
		}
		out = append(out, &c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// stored reports whether a record with the payload is in an account's
// history (read on the store's own pool, another connection than the
// writer's transaction).
func (d *testDB) stored(account string, payload []byte) (bool, error) {
	found := false
	err := d.QueryHistory(context.Background(), &fleetmq.HistoryQuery{AccountID: account}, func(r *fleetmq.Record) error {
		if string(r.Payload) == string(payload) {
			found = true
		}
		return nil
	})
	return found, err
}

// newWriter starts a Writer and closes it at the end of the test.
func newWriter(t testing.TB, store fleetmq.HistoryStore, opts ingest.Options) *ingest.Writer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLog
	}
	w, err := ingest.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		w.Close(ctx)
	})
	return w
}

var seq atomic.Int64

// rec is a record of account on platform topic {account}/dev1/state/n,
// with a unique payload.
func rec(account string, qos byte) *fleetmq.Record {
	n := seq.Add(1)
	return &fleetmq.Record{
		AccountID:    account,
		ClientID:     "dev1",
		Topic:        fmt.Sprintf("%s/dev1/state/%d", account, n%7),
		Class:        "state",
		QoS:          qos,
		PublishedQoS: qos,
		Payload:      fmt.Appendf(nil, `{"n":%d}`, n),
		Received:     time.Now().UTC().Truncate(time.Microsecond),
	}
}

// ack counts its acknowledgements and refusals; hook, if set, runs on
// each acknowledgement.
type ack struct {
	n       atomic.Int32
	refused atomic.Int32
	hook    func()
}

func (a *ack) Refuse(packet.ReasonCode, string) { a.refused.Add(1) }

func (a *ack) Ack() {
	a.n.Add(1)
	if a.hook != nil {
		a.hook()
	}
}

// acked counts the acks with at least one acknowledgement, failing on any
// acknowledged twice.
func acked(t testing.TB, acks []*ack) int {
	t.Helper()
	n := 0
	for i, a := range acks {
		switch c := a.n.Load(); {
		case c == 1:
			n++
		case c > 1:
			t.Fatalf("record %d acknowledged %d times", i, c)
		}
	}
	return n
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// acceptAsync calls Accept on another goroutine (as a connection would)
// and returns a channel closed when it returns.
func acceptAsync(w *ingest.Writer, r *fleetmq.Record, a *ack) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if a == nil {
			w.Accept(r, nil)
		} else {
			w.Accept(r, a)
		}
	}()
	return done
}

// returned waits at most waitFor for an Accept to return.
func returned(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatalf("%s: Accept did not return", what)
	}
}

// spyStore wraps a store: it can fail the first attempts and tells when
// AppendHistory is entered.
type spyStore struct {
	fleetmq.HistoryStore
	failFirst int32
	// onFail runs at each injected failure (before it is returned).
	onFail  func()
	calls   atomic.Int32
	entered chan struct{} // receives once per call, if not full
}

func newSpy(s fleetmq.HistoryStore) *spyStore {
	return &spyStore{HistoryStore: s, entered: make(chan struct{}, 100)}
}

func (s *spyStore) AppendHistory(ctx context.Context, recs []*fleetmq.Record) error {
	n := s.calls.Add(1)
	select {
	case s.entered <- struct{}{}:
	default:
	}
	if n <= s.failFirst {
		if s.onFail != nil {
			s.onFail()
		}
		return fmt.Errorf("injected failure %d", n)
	}
	return s.HistoryStore.AppendHistory(ctx, recs)
}

// StoreFault is the wrapped store's, when it has one: a real store's
// judgement of its own failures reaches the writer through the spy.
func (s *spyStore) StoreFault(err error) bool {
	sf, ok := s.HistoryStore.(interface{ StoreFault(error) bool })
	return ok && sf.StoreFault(err)
}

// waitEntered waits until the writer is inside AppendHistory.
func (s *spyStore) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(waitFor):
		t.Fatal("the writer never started a commit")
	}
}
