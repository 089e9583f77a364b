package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestNodesReportWithoutMovingTheVersion: a node's row is created, its
// heartbeat and applied version updated (its start kept), and deleted; none
// of it is a control-plane change, so serve does not reload for it.
func TestNodesReportWithoutMovingTheVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		v0, err := s.Version(ctx)
		must(t, err)
		n := &fleetmq.Node{ID: "n1", Host: "box", PID: 42, Started: t0, Heartbeat: t0, Applied: v0}
		must(t, s.PutNode(ctx, n))
		must(t, s.PutNode(ctx, &fleetmq.Node{ID: "n2", Host: "box", PID: 43, Started: t0, Heartbeat: t0, Applied: v0}))
		later := *n
		later.Started, later.Heartbeat, later.Applied = t0.Add(time.Hour), t0.Add(5*time.Second), v0+3
		must(t, s.PutNode(ctx, &later))
		got, err := s.Nodes(ctx)
		must(t, err)
		want := *n
		want.Heartbeat, want.Applied = later.Heartbeat, later.Applied
		if len(got) != 2 || !reflect.DeepEqual(*got[0], want) || got[1].ID != "n2" {
			t.Fatalf("nodes %+v, want n1 %+v and n2", got, want)
		}
		if !got[0].Live(t0.Add(5*time.Second+fleetmq.NodeStaleAfter-time.Millisecond)) || got[0].Live(t0.Add(5*time.Second+fleetmq.NodeStaleAfter)) {
			t.Fatal("liveness does not follow the heartbeat")
		}
		must(t, s.DeleteNode(ctx, "n2"))
		must(t, s.DeleteNode(ctx, "unknown"))
		if got, err := s.Nodes(ctx); err != nil || len(got) != 1 {
			t.Fatalf("after delete: %+v %v", got, err)
		}
		if v, err := s.Version(ctx); err != nil || v != v0 {
			t.Fatalf("control version moved from %d to %d (%v): nodes are not control-plane state", v0, v, err)
		}
	})
}

// TestRecordError: a write refused for what it holds is the record's fault
// (NUL in text on PostgreSQL, a constraint on either engine); a store that
// is closed is not.
func TestRecordError(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		bad := &fleetmq.Record{AccountID: accA, ClientID: "c1", Topic: accA + "/c1/state/s", Class: "state", QoS: 1, PublishedQoS: 1,
			Payload: []byte("x"), Received: t0}
		if s.Backend() == "postgres" {
			bad.StationControllerDeviceID = "a\x00b"
		} else { // SQLite takes NUL in text: a trigger on t0's day refuses this record instead
			if err := s.PrepareHistoryDays(ctx, t0); err != nil {
				t.Fatal(err)
			}
			if _, err := s.DB().ExecContext(ctx, `CREATE TRIGGER refuse BEFORE INSERT ON history_d`+t0.UTC().Format("20060102")+`
				WHEN NEW.topic LIKE '%/refused' BEGIN SELECT RAISE(ABORT, 'refused'); END`); err != nil {
				t.Fatal(err)
			}
			bad.Topic = accA + "/c1/state/refused"
		}
		err := s.AppendHistory(ctx, []*fleetmq.Record{bad})
		if err == nil || !s.RecordError(err) || s.StoreFault(err) {
			t.Fatalf("a record the store cannot hold: %v, RecordError %v, StoreFault %v", err, err != nil && s.RecordError(err), err != nil && s.StoreFault(err))
		}
		s.Close()
		ok := &fleetmq.Record{AccountID: accA, ClientID: "c1", Topic: accA + "/c1/state/s", Class: "state", QoS: 1, PublishedQoS: 1, Payload: []byte("x"), Received: t0}
		if err := s.AppendHistory(ctx, []*fleetmq.Record{ok}); err == nil || s.RecordError(err) {
			t.Fatalf("a closed store: %v, taken for the record's fault: %v", err, err != nil && s.RecordError(err))
		}
	})
}

// TestStoreFault: the failures that are the store's whatever it is given
// (a full disk, I/O, a lost or refused connection, a server shutting
// down) are told apart from those a record may cause (a constraint, a
// value out of range, a protocol violation) and from unknown ones.
func TestStoreFault(t *testing.T) {
	s := &sqlstore.Store{}
	wrap := func(err error) error { return fmt.Errorf("sqlstore: append history: %w", err) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{wrap(sqlite3.Error{Code: sqlite3.ErrFull}), true},
		{wrap(sqlite3.Error{Code: sqlite3.ErrIoErr}), true},
		{wrap(sqlite3.Error{Code: sqlite3.ErrConstraint}), false},
		{wrap(sqlite3.Error{Code: sqlite3.ErrTooBig}), false},
		{wrap(&pgconn.PgError{Code: "53100"}), true}, // disk full
		{wrap(&pgconn.PgError{Code: "57P01"}), true}, // admin shutdown
		{wrap(&pgconn.PgError{Code: "08006"}), true}, // connection failure
		{wrap(&pgconn.PgError{Code: "08P01"}), false},
		{wrap(&pgconn.PgError{Code: "22021"}), false},
		{wrap(&pgconn.PgError{Code: "23505"}), false},
		{wrap(&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}), true},
		{wrap(io.ErrUnexpectedEOF), true},
		{wrap(driver.ErrBadConn), true},
		{errors.New("something else"), false},
	} {
		if got := s.StoreFault(tc.err); got != tc.want {
			t.Errorf("StoreFault(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestConnectionRefusedByTheServerIsAStoreFault: a PostgreSQL server that
// refuses the store's new connections with an error of its own (here a
// database that takes no connections, as during maintenance; a password
// changed, too many clients, a database being recreated alike) fails every
// write whatever it holds: that is the store's fault, never the record's,
// so the ingest writer keeps such records and retries them rather than
// refusing them to their publishers when others went in on a connection
// that was already open.
func TestConnectionRefusedByTheServerIsAStoreFault(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	defer s.Close()
	ctx := ctxT(t)
	rec := func() []*fleetmq.Record {
		return []*fleetmq.Record{{AccountID: accA, ClientID: "c1", Topic: accA + "/c1/state/s", Class: "state", QoS: 1, PublishedQoS: 1,
			Payload: []byte("x"), Received: time.Now()}}
	}
	must(t, s.AppendHistory(ctx, rec()))
	admin, err := sql.Open("pgx", pgtest.Server(t))
	must(t, err)
	defer admin.Close()
	u, err := url.Parse(dsn)
	must(t, err)
	name := strings.TrimPrefix(u.Path, "/")
	_, err = admin.ExecContext(ctx, `ALTER DATABASE `+name+` ALLOW_CONNECTIONS false`)
	must(t, err)
	defer admin.ExecContext(context.Background(), `ALTER DATABASE `+name+` ALLOW_CONNECTIONS true`)
	_, err = admin.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name)
	must(t, err)

	// The pool's connections were ended: the write needs a new one, which
	// the server refuses.
	err = s.AppendHistory(ctx, rec())
	if err == nil || !s.StoreFault(err) || s.RecordError(err) {
		t.Fatalf("a write while the server refuses connections: %v; StoreFault %v, RecordError %v; want a store fault",
			err, err != nil && s.StoreFault(err), err != nil && s.RecordError(err))
	}
	_, err = admin.ExecContext(ctx, `ALTER DATABASE `+name+` ALLOW_CONNECTIONS true`)
	must(t, err)
	must(t, s.AppendHistory(ctx, rec()))
}
