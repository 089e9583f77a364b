package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/pgtest"
)

const (
	foldAccA = "a1111111-1111-4111-8111-111111111111"
	foldAccB = "b2222222-2222-4222-8222-222222222222"
)

// foldRef is what a store must answer, computed in Go from every record
// appended and not deleted.
type foldRef struct{ recs []fleetmq.Record }

func (f *foldRef) client(acc, client string, from, to time.Time, asc bool) []fleetmq.Position {
	var out []fleetmq.Position
	for _, r := range f.recs {
		if r.AccountID == acc && r.ClientID == client && (from.IsZero() || !r.Received.Before(from)) && (to.IsZero() || r.Received.Before(to)) {
			out = append(out, r.Position())
		}
	}
	sortPositions(out, asc)
	return out
}

func (f *foldRef) latest(acc, client string) map[string]int64 {
	best := map[string]fleetmq.Record{}
	for _, r := range f.recs {
		if r.AccountID != acc || r.ClientID != client {
			continue
		}
		b, ok := best[r.Topic]
		if !ok || r.Received.After(b.Received) || r.Received.Equal(b.Received) && r.ID > b.ID {
			best[r.Topic] = r
		}
	}
	out := map[string]int64{}
	for t, r := range best {
		out[t] = r.ID
	}
	return out
}

func sortPositions(ps []fleetmq.Position, asc bool) {
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		less := a.Received.Before(b.Received) || a.Received.Equal(b.Received) && a.ID < b.ID
		if asc {
			return less
		}
		return !less && a != b
	})
}

// queryPositions runs a client query to its end in pages of size limit
// (0: one query), each continuing after the last position of the one before.
func queryPositions(t *testing.T, s *Store, q fleetmq.HistoryQuery, limit int) []fleetmq.Position {
	t.Helper()
	var out []fleetmq.Position
	q.Limit = limit
	for range 10_000 {
		got := 0
		err := s.QueryHistory(context.Background(), &q, func(r *fleetmq.Record) error {
			if r.AccountID != q.AccountID || r.ClientID != q.ClientID {
				t.Fatalf("query for %s/%s returned a record of %s/%s", q.AccountID, q.ClientID, r.AccountID, r.ClientID)
			}
			if want := fmt.Sprintf("payload-%s-%d", r.ClientID, r.Received.UnixMicro()); string(r.Payload) != want {
				t.Fatalf("record %d: payload %q, want %q", r.ID, r.Payload, want)
			}
			out = append(out, r.Position())
			got++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if limit == 0 || got < limit {
			return out
		}
		last := out[len(out)-1]
		q.After = &last
	}
	t.Fatal("query did not end")
	return nil
}

// checkFoldAnswers compares every client query shape and the latest
// values of every client of both accounts with the reference.
func checkFoldAnswers(t *testing.T, s *Store, ref *foldRef, t0 time.Time, stage string) {
	t.Helper()
	from, to := t0.Add(150*time.Millisecond), t0.Add(420*time.Millisecond)
	for _, acc := range []string{foldAccA, foldAccB} {
		for c := range 4 {
			client := fmt.Sprintf("dev-%d", c)
			for _, asc := range []bool{false, true} {
				for _, window := range [][2]time.Time{{}, {from, to}} {
					want := ref.client(acc, client, window[0], window[1], asc)
					q := fleetmq.HistoryQuery{AccountID: acc, ClientID: client, Ascending: asc, From: window[0], To: window[1]}
					for _, limit := range []int{0, 7} {
						got := queryPositions(t, s, q, limit)
						if !slices.Equal(got, want) {
							t.Fatalf("%s: %s/%s ascending %v window %v limit %d:\n got %d records %v\nwant %d records %v",
								stage, acc[:8], client, asc, !window[0].IsZero(), limit, len(got), got, len(want), want)
						}
					}
				}
			}
			latest, err := s.LatestHistory(context.Background(), acc, client)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, r := range latest {
				if r.AccountID != acc || r.ClientID != client {
					t.Fatalf("%s: latest of %s/%s holds a record of %s/%s", stage, acc[:8], client, r.AccountID, r.ClientID)
				}
				got[r.Topic] = r.ID
			}
			if want := ref.latest(acc, client); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: latest of %s/%s: got %v, want %v", stage, acc[:8], client, got, want)
			}
		}
	}
}

// TestFoldKeepsAnswers: the client queries (both orders, time windows,
// keyset pages) and the latest values answer the same whether the records
// are unfolded, partly folded or folded (on PostgreSQL, which keeps its
// indexes on commit, FoldHistory does nothing and the answers are the
// same), for two accounts whose clients share ids; records received out of
// order or in the same microsecond included. Retention's deletes remove a
// record from the client index and the unfolded rows alike.
func TestFoldKeepsAnswers(t *testing.T) {
	pgtest.ForEachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
		ref := &foldRef{}
		n := 0
		for batch := range 40 {
			var recs []*fleetmq.Record
			for i := range 1 + batch%9 {
				n++
				acc := foldAccA
				if n%3 == 0 {
					acc = foldAccB
				}
				client := fmt.Sprintf("dev-%d", n%4)
				// Mostly increasing times, some back in time, some in the
				// same microsecond as the record before, on its topic.
				at := t0.Add(time.Duration(n*2) * time.Millisecond)
				topic := acc + "/" + client + "/telemetry/" + strconv.Itoa(n%3)
				switch {
				case n%11 == 0:
					at = at.Add(-15 * time.Millisecond)
				case i > 0 && n%5 == 0:
					prev := recs[len(recs)-1]
					acc, client, topic, at = prev.AccountID, prev.ClientID, prev.Topic, prev.Received
				}
				recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: client, Topic: topic, Class: "telemetry", QoS: 1,
					PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at})
			}
			if err := s.AppendHistory(ctx, recs); err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				ref.recs = append(ref.recs, *r)
			}
			if batch%7 == 6 {
				if _, err := s.FoldHistory(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if batch%5 == 0 {
				checkFoldAnswers(t, s, ref, t0, fmt.Sprintf("after batch %d", batch))
			}
		}
		// The last batches are unfolded: delete across the fold's line.
		unfolded := int64(s.tail.len())
		if s.dialect == sqliteDialect && unfolded == 0 {
			t.Fatal("no unfolded rows before the deletes: the test does not cover them")
		}
		cut := ref.recs[len(ref.recs)-3].Received
		for {
			d, err := s.DeleteHistory(ctx, foldAccA, cut, 10)
			if err != nil {
				t.Fatal(err)
			}
			if d < 10 {
				break
			}
		}
		ref.recs = slices.DeleteFunc(ref.recs, func(r fleetmq.Record) bool {
			return r.AccountID == foldAccA && r.Received.Before(cut)
		})
		checkFoldAnswers(t, s, ref, t0, "after retention")
		if _, err := s.FoldHistory(ctx); err != nil {
			t.Fatal(err)
		}
		checkFoldAnswers(t, s, ref, t0, "folded after retention")
		if s.dialect == sqliteDialect {
			rows, indexed, left := sumTables(t, s, `SELECT COUNT(*) FROM %s`), sumTables(t, s, `SELECT COUNT(*) FROM %s_client`),
				sumTables(t, s, `SELECT COUNT(*) FROM %s WHERE `+unfoldedRows)
			if rows != len(ref.recs) || indexed != rows || left != 0 {
				t.Fatalf("after the last fold: %d rows, %d in the client index, %d unfolded; want %d, %d, 0", rows, indexed, left, len(ref.recs), len(ref.recs))
			}
		}
	})
}

// TestCommitsFold: on SQLite a history commit folds the unfolded rows
// once FoldRows of them have gathered, and not before; the unfolded rows
// survive a reopen; a fleet's rows, each of another client, fold
// foldMaxClients clients at a time, oldest first, so that what one commit
// carries is bounded.
func TestCommitsFold(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleetmq.db")
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	s.foldRows = 10
	unfolded := func() int {
		n := sumTables(t, s, `SELECT COUNT(*) FROM `+notFolded)
		if n != s.tail.len() {
			t.Fatalf("%d unfolded rows, the store lists %d", n, s.tail.len())
		}
		return n
	}
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	appendN := func(n int, client func(i int) string) []*fleetmq.Record {
		recs := make([]*fleetmq.Record, n)
		for i := range recs {
			t0 = t0.Add(time.Millisecond)
			c := client(i)
			recs[i] = &fleetmq.Record{AccountID: foldAccA, ClientID: c, Topic: foldAccA + "/" + c + "/state", Class: "state", QoS: 1, PublishedQoS: 1,
				Payload: []byte("{}"), Received: t0}
		}
		noErr(t, s.AppendHistory(ctx, recs))
		return recs
	}
	one := func(int) string { return "dev-1" }
	appendN(6, one)
	if got := unfolded(); got != 6 {
		t.Fatalf("%d unfolded rows after 6 records, want 6 (folded before FoldRows gathered)", got)
	}
	noErr(t, s.Close())
	if s, err = OpenSQLite(ctx, path); err != nil {
		t.Fatal(err)
	}
	s.foldRows = 10
	appendN(3, one)
	if got := unfolded(); got != 9 {
		t.Fatalf("%d unfolded rows after 9 records, want 9", got)
	}
	appendN(2, one)
	if got := unfolded(); got != 0 {
		t.Fatalf("%d unfolded rows after 11 records of one client with FoldRows 10, want 0 (all folded)", got)
	}
	latest, err := s.LatestHistory(ctx, foldAccA, "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(latest) != 1 || !latest[0].Received.Equal(t0) {
		t.Fatalf("latest after the fold: %v, want the record of %v", latest, t0)
	}

	// A fleet's rows, each device's in several commits, gather unfolded
	// until there are foldSpread per client; then commits of one record
	// fold foldMaxClients clients at a time, each with all its rows,
	// oldest first, so that what one commit carries is bounded.
	s.foldRows = 1 << 20
	var fleet [][]*fleetmq.Record // by round
	for range foldSpread + 1 {
		fleet = append(fleet, appendN(300, func(i int) string { return fmt.Sprintf("fleet-%d", i) }))
	}
	s.foldRows = 100
	per := foldSpread + 1
	for step, want := range []struct{ unfolded, oldest int }{
		{300*per + 1 - foldMaxClients*per, foldMaxClients},       // the oldest 128 clients folded
		{300*per + 2 - 2*foldMaxClients*per, 2 * foldMaxClients}, // 128 more
	} {
		appendN(1, func(int) string { return "dev-2" })
		oldest := int64(sumTables(t, s, `SELECT COALESCE(MIN(id), 0) FROM `+notFolded))
		if got := unfolded(); got != want.unfolded || oldest != fleet[0][want.oldest].ID {
			t.Fatalf("step %d: %d unfolded rows from id %d, want %d from %d (the fleet's record %d)",
				step, got, oldest, want.unfolded, fleet[0][want.oldest].ID, want.oldest)
		}
	}
	if _, err := s.FoldHistory(ctx); err != nil {
		t.Fatal(err)
	}
	if got := unfolded(); got != 0 {
		t.Fatalf("%d unfolded rows after FoldHistory, want 0", got)
	}

	// Retention deleted unfolded rows the store still lists: the next fold
	// reads the rows from the table, and indexes only those that exist.
	s.foldRows = 10
	appendN(8, func(i int) string { return fmt.Sprintf("gone-%d", i%3) })
	if _, err := s.DeleteHistory(ctx, foldAccA, t0.Add(-3*time.Millisecond), 10_000); err != nil {
		t.Fatal(err)
	}
	appendN(4*foldSpread-8, func(int) string { return "dev-3" }) // foldSpread rows per listed client
	rows, indexed := sumTables(t, s, `SELECT COUNT(*) FROM %s`), sumTables(t, s, `SELECT COUNT(*) FROM %s_client`)
	if got := unfolded(); got != 0 || indexed != rows {
		t.Fatalf("after a fold over deleted rows: %d unfolded, %d rows, %d in the client index (want 0 and as many as rows)", got, rows, indexed)
	}
}

// TestMigrationFoldsExistingHistory: a SQLite store written by the
// previous schema (the client index an index, history_latest kept by each
// commit) opens with every record in the new client index, the same
// answers, and nothing left to fold.
func TestMigrationFoldsExistingHistory(t *testing.T) {
	ctx := context.Background()
	path, db := oldSQLiteStore(t, 8)
	// History as the previous writer left it.
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	ref := writeOldHistory(t, db, t0, 300, true)
	noErr(t, db.Close())

	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var indexed int
	noErr(t, s.db.QueryRow(`SELECT COUNT(*) FROM history_client`).Scan(&indexed))
	if indexed != len(ref.recs) || int64(s.tail.len()) != 0 {
		t.Fatalf("after the migration: %d records in the client index, %d unfolded; want %d and 0", indexed, int64(s.tail.len()), len(ref.recs))
	}
	checkFoldAnswers(t, s, ref, t0, "migrated")
}

// TestFoldSurprises: a fold that a commit made but whose success was not
// reported (the store's list still holds its rows) is not made twice; a
// fold that fails leaves its commit's records stored (the fold is upkeep,
// and the records' acknowledgements must not wait for it), and a later
// commit folds them.
func TestFoldSurprises(t *testing.T) {
	ctx, s := context.Background(), openFoldStore(t)
	s.foldRows = 10
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	ref := &foldRef{}
	write := func(n int) {
		recs := make([]*fleetmq.Record, n)
		for i := range recs {
			t0 = t0.Add(time.Millisecond)
			client := fmt.Sprintf("dev-%d", i%4)
			recs[i] = &fleetmq.Record{AccountID: foldAccA, ClientID: client, Topic: foldAccA + "/" + client + "/state", Class: "state", QoS: 1,
				PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, t0.UnixMicro()), Received: t0}
		}
		noErr(t, s.AppendHistory(ctx, recs))
		for _, r := range recs {
			ref.recs = append(ref.recs, *r)
		}
	}
	unfolded := func() int { return sumTables(t, s, `SELECT COUNT(*) FROM `+notFolded) }
	write(6)
	// Folded behind the list's back, as by a commit whose success was lost.
	noErr(t, s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		_, _, err := foldAll(ctx, tx)
		return err
	}))
	write(4*foldSpread - 6) // foldSpread listed per client: folds the rows not yet folded
	if n := unfolded(); n != 0 || s.tail.len() != 0 {
		t.Fatalf("%d rows unfolded, %d listed after the fold, want none", n, s.tail.len())
	}
	checkFoldAnswers(t, s, ref, t0, "after a fold the list did not know of")

	// A fold that fails (a trigger refuses the client index's inserts).
	noErr(t, exec(s.db, `CREATE TRIGGER refuse_fold BEFORE INSERT ON `+clientTable(dayTable(dayStart(t0.UnixMicro())))+` BEGIN SELECT RAISE(ABORT, 'injected'); END`))
	write(3)
	write(4*foldSpread - 3) // a fold is due
	rows := sumTables(t, s, `SELECT COUNT(*) FROM %s`)
	if rows != len(ref.recs) || unfolded() != 4*foldSpread {
		t.Fatalf("%d records stored, %d unfolded; want %d and %d: a failed fold took its commit's records with it", rows, unfolded(), len(ref.recs), 4*foldSpread)
	}
	checkFoldAnswers(t, s, ref, t0, "after a failed fold")
	noErr(t, exec(s.db, `DROP TRIGGER refuse_fold`))
	write(1)
	if n := unfolded(); n != 0 {
		t.Fatalf("%d rows unfolded after the next commit, want 0 (folded)", n)
	}
	checkFoldAnswers(t, s, ref, t0, "folded by a later commit")
}

// TestIDsAfterRetention: retention deleted an idle store's newest rows
// while they were unfolded; the next records, another account's, get new
// ids (never the deleted ones': ids come from a counter), every record of
// the new account is found and none under the deleted account's name.
func TestIDsAfterRetention(t *testing.T) {
	ctx, s := context.Background(), openFoldStore(t)
	s.foldRows = 100_000
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	var old []*fleetmq.Record
	for i := range 200 {
		client := fmt.Sprintf("a-%d", i)
		old = append(old, &fleetmq.Record{AccountID: foldAccA, ClientID: client, Topic: foldAccA + "/" + client + "/state", Class: "state",
			QoS: 1, PublishedQoS: 1, Payload: []byte("A"), Received: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	noErr(t, s.AppendHistory(ctx, old))
	if _, err := s.DeleteHistory(ctx, foldAccA, t0.Add(time.Hour), 1000); err != nil {
		t.Fatal(err)
	}
	s.foldRows = 100
	ref := &foldRef{}
	var recs []*fleetmq.Record
	for i := range 1848 {
		at := t0.Add(2*time.Hour + time.Duration(i)*time.Millisecond)
		client := fmt.Sprintf("dev-%d", i%4)
		recs = append(recs, &fleetmq.Record{AccountID: foldAccB, ClientID: client, Topic: foldAccB + "/" + client + "/state", Class: "state",
			QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at})
	}
	for start := 0; start < len(recs); start += 462 {
		batch := recs[start : start+462]
		noErr(t, s.AppendHistory(ctx, batch))
		for _, r := range batch {
			ref.recs = append(ref.recs, *r)
		}
	}
	if recs[0].ID <= old[len(old)-1].ID {
		t.Fatalf("the new records got ids from %d, the deleted ones had up to %d: an id was used twice", recs[0].ID, old[len(old)-1].ID)
	}
	checkFoldAnswers(t, s, ref, t0, "after the fold over deleted rows")
	for _, r := range old[:5] {
		got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: r.ClientID}, 0)
		if len(got) != 0 {
			t.Fatalf("account A's deleted client %s still has records: %v", r.ClientID, got)
		}
	}
	rows := sumTables(t, s, `SELECT COUNT(*) FROM %s WHERE id <= (SELECT value FROM meta WHERE key = 'history_folded')`)
	if indexed := sumTables(t, s, `SELECT COUNT(*) FROM %s_client`); rows != indexed {
		t.Fatalf("%d rows folded, %d entries in the client index", rows, indexed)
	}
}

// TestFoldsKeepUp: commits each of hundreds of devices' records (more than
// foldMaxClients) still fold as much as they add: the unfolded rows stay
// bounded.
func TestFoldsKeepUp(t *testing.T) {
	ctx, s := context.Background(), openFoldStore(t)
	s.foldRows = 100
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	for c := range 30 {
		recs := make([]*fleetmq.Record, 512)
		for i := range recs {
			t0 = t0.Add(time.Microsecond)
			client := fmt.Sprintf("dev-%d", i)
			recs[i] = &fleetmq.Record{AccountID: foldAccA, ClientID: client, Topic: foldAccA + "/" + client + "/state", Class: "state",
				QoS: 1, PublishedQoS: 1, Payload: []byte("{}"), Received: t0}
		}
		noErr(t, s.AppendHistory(ctx, recs))
		if n := sumTables(t, s, `SELECT COUNT(*) FROM `+notFolded); n > foldSpread*512 {
			t.Fatalf("commit %d: %d rows unfolded: folds fall behind commits of 512 devices", c, n)
		}
	}
}

// TestNewRowsAfterDeletedNewest: when retention has deleted a SQLite
// store's newest rows (an idle store whose every record expired), the
// next records (their ids from the counter, after the deleted ones') are
// still unfolded and found, then folded.
func TestNewRowsAfterDeletedNewest(t *testing.T) {
	ctx, s := context.Background(), openFoldStore(t)
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	write := func(n int, from time.Time) []fleetmq.Position {
		recs := make([]*fleetmq.Record, n)
		for i := range recs {
			at := from.Add(time.Duration(i) * time.Millisecond)
			recs[i] = &fleetmq.Record{AccountID: foldAccA, ClientID: "dev-1", Topic: foldAccA + "/dev-1/state", Class: "state", QoS: 1,
				PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-dev-1-%d", at.UnixMicro()), Received: at}
		}
		noErr(t, s.AppendHistory(ctx, recs))
		var ps []fleetmq.Position
		for _, r := range recs {
			ps = append(ps, r.Position())
		}
		sortPositions(ps, false)
		return ps
	}
	write(20, t0)
	if _, err := s.FoldHistory(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteHistory(ctx, foldAccA, t0.Add(time.Hour), 100); err != nil {
		t.Fatal(err)
	}
	want := write(5, t0.Add(2*time.Hour))
	for _, stage := range []string{"unfolded", "folded"} {
		got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "dev-1"}, 0)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the client's records after its newest were deleted: %v, want %v", stage, got, want)
		}
		latest, err := s.LatestHistory(ctx, foldAccA, "dev-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(latest) != 1 || latest[0].Position() != want[0] {
			t.Fatalf("%s: latest %v, want the record at %v", stage, latest, want[0])
		}
		if _, err := s.FoldHistory(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// sumTables sums a number that query (with %s for the table) reads from
// each table of a SQLite store's history.
// notFolded is the rows of a day's table (%[1]s in a sumTables query)
// that its client index does not have.
const notFolded = `%[1]s h WHERE NOT EXISTS (SELECT 1 FROM %[1]s_client c WHERE c.account_id = h.account_id AND c.client_id = h.client_id
	AND c.received_us = h.received_us AND c.id = h.id)`

func sumTables(t *testing.T, s *Store, query string) int {
	t.Helper()
	parts, err := readSQLiteDays(context.Background(), s.db)
	noErr(t, err)
	n := 0
	for _, p := range parts {
		var c int
		noErr(t, s.db.QueryRow(fmt.Sprintf(query, p.name)).Scan(&c))
		n += c
	}
	return n
}

// writeOldHistory writes n records into the table history of a store of
// an earlier schema, from t0 a millisecond apart, two accounts and four
// clients, as its writer did (with history_latest when latest), and
// returns them.
func writeOldHistory(t *testing.T, db *sql.DB, t0 time.Time, n int, latest bool) *foldRef {
	t.Helper()
	ref := &foldRef{}
	for i := range n {
		acc := []string{foldAccA, foldAccB}[i%2]
		client := fmt.Sprintf("dev-%d", i%4)
		at := t0.Add(time.Duration(i) * time.Millisecond)
		topic := acc + "/" + client + "/state/" + strconv.Itoa(i%3)
		res, err := db.Exec(`INSERT INTO history (`+historyColumns+`) VALUES (?, ?, ?, 'state', 1, 1, 0, ?, '', 0, NULL, '', ?)`,
			acc, client, topic, fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), at.UnixMicro())
		noErr(t, err)
		id, _ := res.LastInsertId()
		if latest {
			noErr(t, exec(db, `INSERT INTO history_latest VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us`,
				acc, client, topic, id, at.UnixMicro()))
		}
		ref.recs = append(ref.recs, fleetmq.Record{ID: id, AccountID: acc, ClientID: client, Topic: topic, Class: "state", Received: at})
	}
	return ref
}

// openFoldStore opens a SQLite store in a temporary directory, closed when
// the test ends.
func openFoldStore(t *testing.T) *Store {
	t.Helper()
	s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "fleetmq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// oldSQLiteStore makes a SQLite file of the schema up to version, as a
// fleetmq of that schema left it, and returns its path and a connection
// to it (the test closes it before opening a Store).
func oldSQLiteStore(t *testing.T, version int) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleetmq.db")
	db, err := sql.Open(sqliteDriver, "file:"+path+"?_journal_mode=WAL&_foreign_keys=on")
	noErr(t, err)
	migrateUpTo(t, db, sqliteDialect, version)
	return path, db
}

// migrateUpTo applies the dialect's migrations up to version last to db,
// as a fleetmq of that schema left it.
func migrateUpTo(t *testing.T, db *sql.DB, d dialect, last int) {
	t.Helper()
	dir := "migrations/" + d.String()
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		t.Fatal(err)
	}
	noErr(t, exec(db, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`))
	record := `INSERT INTO schema_migrations VALUES (?, ?)`
	if d == postgresDialect {
		record = `INSERT INTO schema_migrations VALUES ($1, $2)`
	}
	for _, e := range entries {
		num, _, _ := strings.Cut(e.Name(), "_")
		v, _ := strconv.Atoi(num)
		if v > last {
			break
		}
		body, err := fs.ReadFile(migrations, dir+"/"+e.Name())
		if err != nil {
			t.Fatal(err)
		}
		noErr(t, exec(db, string(body)))
		noErr(t, exec(db, record, v, e.Name()))
	}
}

func exec(db *sql.DB, query string, args ...any) error {
	_, err := db.Exec(query, args...)
	return err
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFleetFoldsKeepAnswers: a fleet's rows fold client by client (each
// client with all its listed rows, the mark moving past the oldest), and
// the client queries and latest values answer the same at every step:
// read by the ids the store lists, by the range of their ids when a client
// has more than maxListedIDs unfolded, and from the tables (every row
// after the mark) in another process that gave no ids itself.
func TestFleetFoldsKeepAnswers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleetmq.db")
	s, err := OpenSQLite(ctx, path)
	noErr(t, err)
	defer s.Close()
	s.foldRows = 64
	other, err := OpenSQLite(ctx, path)
	noErr(t, err)
	defer other.Close()
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	ref := &foldRef{}
	n := 0
	rec := func(acc, client string) *fleetmq.Record {
		n++
		at := t0.Add(time.Duration(n) * 100 * time.Microsecond)
		topic := acc + "/" + client + "/state/" + strconv.Itoa(n%2)
		return &fleetmq.Record{AccountID: acc, ClientID: client, Topic: topic, Class: "state", QoS: 1, PublishedQoS: 1,
			Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at}
	}
	write := func(recs []*fleetmq.Record) {
		t.Helper()
		noErr(t, s.AppendHistory(ctx, recs))
		for _, r := range recs {
			ref.recs = append(ref.recs, *r)
		}
	}
	folds, pastMark := 0, 0 // commits that folded; that left folded rows after the mark
	for round := range 30 {
		// Every client of both accounts once, and 200 others, in batches
		// of 12, as a fleet's commits come.
		var recs []*fleetmq.Record
		for c := range 4 {
			recs = append(recs, rec(foldAccA, fmt.Sprintf("dev-%d", c)), rec(foldAccB, fmt.Sprintf("dev-%d", c)))
		}
		for c := range 200 { // more than a fold takes (foldMaxClients)
			recs = append(recs, rec(foldAccA, fmt.Sprintf("fleet-%d", c)))
		}
		for start := 0; start < len(recs); start += 12 {
			before := s.tail.len()
			write(recs[start:min(start+12, len(recs))])
			if s.tail.len() < before {
				folds++
			}
			if sumTables(t, s, `SELECT COUNT(*) FROM %s WHERE `+unfoldedRows) > s.tail.len() {
				// Folded rows after the mark: another process, which
				// reads every row after it, passes over those.
				if pastMark++; pastMark <= 3 {
					checkFoldAnswers(t, other, ref, t0, fmt.Sprintf("round %d, from another process", round))
				}
			}
		}
		if round%3 == 2 {
			checkFoldAnswers(t, s, ref, t0, fmt.Sprintf("round %d", round))
		}
	}
	if folds == 0 || pastMark == 0 || s.tail.len() == 0 {
		t.Fatalf("%d folds, %d commits left folded rows after the mark, %d rows listed unfolded: the test does not cover partly folded clients",
			folds, pastMark, s.tail.len())
	}

	// One client with more unfolded rows than a query names.
	s.foldRows = 1 << 20
	var many []*fleetmq.Record
	for range maxListedIDs + 200 {
		many = append(many, rec(foldAccA, "dev-1"))
		if len(many) == 100 {
			write(many)
			many = nil
		}
	}
	write(append(many, rec(foldAccB, "dev-1")))
	if ids := s.tail.unfoldedIDs(foldAccA, "dev-1", dayTable(dayStart(t0.UnixMicro()))); len(ids) <= maxListedIDs {
		t.Fatalf("dev-1 has %d listed rows, want more than %d", len(ids), maxListedIDs)
	}
	checkFoldAnswers(t, s, ref, t0, "a client with many unfolded rows")

	// Another process reads what this one wrote after it opened.
	write([]*fleetmq.Record{rec(foldAccA, "dev-2"), rec(foldAccB, "dev-3")})
	if listed, err := other.tail.current(ctx, other.reads); err != nil || listed {
		t.Fatalf("the other store's list is current (%v, %v) after this one wrote", listed, err)
	}
	checkFoldAnswers(t, other, ref, t0, "from another process")
	_, err = s.FoldHistory(ctx)
	noErr(t, err)
	checkFoldAnswers(t, s, ref, t0, "folded")
	checkFoldAnswers(t, other, ref, t0, "folded, from another process")
}

// listRec is a record of account A's client at a time, its payload what
// queryPositions checks.
func listRec(client string, at time.Time) *fleetmq.Record {
	return &fleetmq.Record{AccountID: foldAccA, ClientID: client, Topic: foldAccA + "/" + client + "/state", Class: "state", QoS: 1,
		PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at}
}

// findsOne fails unless s finds exactly one record of account A's client
// by a client query and one latest value.
func findsOne(t *testing.T, s *Store, client, stage string) {
	t.Helper()
	got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: client}, 0)
	latest, err := s.LatestHistory(context.Background(), foldAccA, client)
	noErr(t, err)
	if len(got) != 1 || len(latest) != 1 {
		t.Fatalf("%s: %s found %d times by a query and %d by the latest values, want once", stage, client, len(got), len(latest))
	}
}

// TestListFollowsOtherWriters: a store's list of unfolded rows holds what
// another process on the same file wrote, once either wrote: a query by
// client finds the other's record after this store's own commit, and
// this store's folds never move the mark past the other's unfolded rows
// (a store opened afterwards, which reads only the rows after the mark,
// finds them too).
func TestListFollowsOtherWriters(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleetmq.db")
	open := func() *Store {
		s, err := OpenSQLite(ctx, path)
		noErr(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	s, other := open(), open()
	s.foldRows, other.foldRows = 1<<20, 1<<20
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	noErr(t, other.AppendHistory(ctx, []*fleetmq.Record{listRec("dev-1", t0)}))
	findsOne(t, s, "dev-1", "before this store's commit")
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{listRec("dev-2", t0.Add(time.Millisecond))}))
	findsOne(t, s, "dev-1", "after this store's commit")

	// This store folds its dev-3's rows, written before and after the
	// other's dev-4: the mark stays before dev-4's row.
	s.foldRows = 8
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{listRec("dev-3", t0.Add(2*time.Millisecond))}))
	noErr(t, other.AppendHistory(ctx, []*fleetmq.Record{listRec("dev-4", t0.Add(3*time.Millisecond))}))
	var batch []*fleetmq.Record
	for i := range 10 {
		batch = append(batch, listRec("dev-3", t0.Add(time.Duration(4+i)*time.Millisecond)))
	}
	noErr(t, s.AppendHistory(ctx, batch))
	third := open()
	for _, st := range []*Store{s, other, third} {
		findsOne(t, st, "dev-1", "after this store's fold")
		findsOne(t, st, "dev-4", "after this store's fold")
	}
	_, err := s.FoldHistory(ctx)
	noErr(t, err)
	if n := sumTables(t, s, `SELECT COUNT(*) FROM `+notFolded); n != 0 {
		t.Fatalf("%d rows unfolded after FoldHistory", n)
	}
	findsOne(t, open(), "dev-4", "folded, from a store opened after")
}

// TestFoldsPassDroppedDays: rows listed unfolded whose day is dropped (by
// this store's retention or another process's) or reordered by another
// process are passed over by the folds, which go on with the rest: the
// list stays short and the mark moves on.
func TestFoldsPassDroppedDays(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	keep := map[string]time.Time{foldAccA: now.Add(-7 * 24 * time.Hour)}
	for _, c := range []struct {
		name string
		gone func(s, other *Store) // takes the listed rows' day away
	}{
		{"dropped here", func(s, _ *Store) {
			n, err := s.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), keep)
			noErr(t, err)
			if n != 1 {
				t.Fatalf("dropped %d days, want 1", n)
			}
		}},
		{"dropped by another process", func(_, other *Store) {
			n, err := other.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), keep)
			noErr(t, err)
			if n != 1 {
				t.Fatalf("dropped %d days, want 1", n)
			}
		}},
		{"reordered by another process", func(_, other *Store) {
			n, err := other.ReorderHistoryDays(ctx, now.Add(-7*24*time.Hour+time.Hour))
			noErr(t, err)
			if n != 1 {
				t.Fatalf("reordered %d days, want 1", n)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, other := twoSQLiteStores(t)
			s.foldRows = 1 << 20
			old := now.Add(-20 * 24 * time.Hour)
			for i := range 10 {
				noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/old", old.Add(time.Duration(i)*time.Second))}))
			}
			c.gone(s, other)
			s.foldRows = 4
			for i := range 50 {
				at := now.Add(time.Duration(i+1) * time.Millisecond)
				noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/a", at), reorderRec("state/b", at)}))
			}
			if s.tail.len() > 2*foldSpread {
				t.Fatalf("after 50 commits: %d rows listed unfolded: the folds stopped at the gone day's rows", s.tail.len())
			}
			parts, err := readSQLiteDays(ctx, s.db)
			noErr(t, err)
			unfolded := 0
			for _, p := range parts {
				if !p.clustered {
					var n int
					noErr(t, s.db.QueryRow(fmt.Sprintf(`SELECT COUNT(*) FROM `+notFolded, p.name)).Scan(&n))
					unfolded += n
				}
			}
			if unfolded != s.tail.len() {
				t.Fatalf("%d rows unfolded, %d listed", unfolded, s.tail.len())
			}
		})
	}
}

// TestListReadAgainBesideCommits: a list read again from the tables (after
// a failed commit) while another commit of the same store is in progress
// (two ingest writers) keeps that commit's rows: every record of both is
// found by a client query.
func TestListReadAgainBesideCommits(t *testing.T) {
	ctx := context.Background()
	s := openFoldStore(t)
	s.foldRows = 1 << 30
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	n := 0
	for attempt := range 20 {
		s.tail.markStale()
		client := fmt.Sprintf("big-%d", attempt)
		var big []*fleetmq.Record
		for range 2000 {
			n++
			big = append(big, listRec(client, t0.Add(time.Duration(n)*time.Microsecond)))
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, recs := range [][]*fleetmq.Record{big, {listRec("small", t0.Add(time.Duration(attempt+1)*time.Hour))}} {
			wg.Go(func() {
				<-start
				noErr(t, s.AppendHistory(ctx, recs))
			})
		}
		close(start)
		wg.Wait()
		if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: client}, 0); len(got) != len(big) {
			t.Fatalf("attempt %d: %d of %d committed records of %s found", attempt, len(got), len(big), client)
		}
	}
}

// checkMarkOverFolded fails if a row at or below the fold's mark is not
// in its client index.
func checkMarkOverFolded(t *testing.T, s *Store, stage string) {
	t.Helper()
	if n := sumTables(t, s, `SELECT COUNT(*) FROM `+notFolded+` AND h.id <= (SELECT value FROM meta WHERE key = 'history_folded')`); n != 0 {
		t.Fatalf("%s: %d unfolded rows at or below the mark", stage, n)
	}
}

// twoStoresWithDev3 opens two stores on one file (two processes), which
// fold only when told, the first holding a record of dev-3 at t0.
func twoStoresWithDev3(t *testing.T) (s, other *Store, t0 time.Time) {
	t.Helper()
	s, other = twoSQLiteStores(t)
	s.foldRows, other.foldRows = 1<<20, 1<<20
	t0 = time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	noErr(t, s.AppendHistory(context.Background(), []*fleetmq.Record{listRec("dev-3", t0)}))
	return s, other, t0
}

// foldDev3 appends 20 records of dev-3 with folds due.
func foldDev3(t *testing.T, s *Store, t0 time.Time) {
	t.Helper()
	s.foldRows = 8
	var batch []*fleetmq.Record
	for i := range 20 {
		batch = append(batch, listRec("dev-3", t0.Add(time.Duration(1+i)*time.Millisecond)))
	}
	noErr(t, s.AppendHistory(context.Background(), batch))
}

// TestFoldsSeeOtherProcessesDays: another process stores a record of a
// day this store has not read; this store's next commit lists it, and its
// fold folds it or leaves it after the mark, never under it unfolded.
func TestFoldsSeeOtherProcessesDays(t *testing.T) {
	ctx := context.Background()
	s, other, t0 := twoStoresWithDev3(t)
	noErr(t, other.AppendHistory(ctx, []*fleetmq.Record{listRec("dev-x", t0.Add(-3*24*time.Hour))})) // a day s never read
	foldDev3(t, s, t0)
	checkMarkOverFolded(t, s, "after this store's fold")
	findsOne(t, s, "dev-x", "this store")
	findsOne(t, other, "dev-x", "the other store")
}

// TestFailedCommitLeavesListStale: a commit that fails at COMMIT, after
// it listed its rows, leaves the list stale before another commit may
// begin; another process then stores a record under the ids it gave back,
// and this store's next commit reads the list again: its fold does not
// bury that record under the mark.
func TestFailedCommitLeavesListStale(t *testing.T) {
	ctx := context.Background()
	s, other, t0 := twoStoresWithDev3(t)
	// A deferred foreign key that dev-fail's rows break: checked at COMMIT.
	day := dayTable(dayStart(t0.UnixMicro()))
	noErr(t, exec(s.db, `CREATE TABLE zz_parent (id INTEGER PRIMARY KEY)`))
	noErr(t, exec(s.db, `CREATE TABLE zz_child (p INTEGER REFERENCES zz_parent (id) DEFERRABLE INITIALLY DEFERRED)`))
	noErr(t, exec(s.db, `CREATE TRIGGER zz_fail AFTER INSERT ON `+day+` WHEN NEW.client_id = 'dev-fail' BEGIN INSERT INTO zz_child VALUES (42); END`))
	if err := s.AppendHistory(ctx, []*fleetmq.Record{listRec("dev-fail", t0.Add(time.Second))}); err == nil {
		t.Fatal("the commit that breaks the foreign key went in")
	}
	noErr(t, exec(s.db, `DROP TRIGGER zz_fail`))
	if listed, err := s.tail.current(ctx, s.reads); err != nil || listed {
		t.Fatalf("after the failed commit the list is current (%v, %v)", listed, err)
	}
	x := listRec("dev-x", t0.Add(-24*time.Hour))
	noErr(t, other.AppendHistory(ctx, []*fleetmq.Record{x}))
	foldDev3(t, s, t0)
	checkMarkOverFolded(t, s, "after this store's fold")
	findsOne(t, s, "dev-x", "this store")
	findsOne(t, other, "dev-x", "the other store")
	if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "dev-fail"}, 0); len(got) != 0 {
		t.Fatalf("the failed commit's record is found: %v", got)
	}
}

// TestIDsCond: the condition a fold and a query name rows by keeps
// exactly the ids given, as ranges or as a list.
func TestIDsCond(t *testing.T) {
	s := openFoldStore(t)
	noErr(t, exec(s.db, `CREATE TABLE zz_ids (id INTEGER PRIMARY KEY)`))
	noErr(t, exec(s.db, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) INSERT INTO zz_ids SELECT i FROM n`))
	scattered := []int64{}
	for i := int64(1); i <= 200; i += 3 {
		scattered = append(scattered, i)
	}
	for _, ids := range [][]int64{{7}, {5, 6, 7, 8}, {9, 3, 4, 5, 20, 21}, {1, 200, 100, 101, 102}, scattered} {
		cond := idsCond("id", ids)
		rows, err := s.db.Query(`SELECT id FROM zz_ids WHERE ` + cond + ` ORDER BY id`)
		noErr(t, err)
		var got []int64
		for rows.Next() {
			var id int64
			noErr(t, rows.Scan(&id))
			got = append(got, id)
		}
		noErr(t, rows.Err())
		rows.Close()
		want := slices.Clone(ids)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s keeps %v, want %v", cond, got, want)
		}
	}
}

// TestFoldFailuresAreCounted: a fold the store refuses (here a trigger on
// the day's client index) leaves the commit in, its records listed and
// found, and is counted with its error (FoldStats: serve logs it and
// exports it); once folds succeed again the list empties.
func TestFoldFailuresAreCounted(t *testing.T) {
	ctx := context.Background()
	s := openFoldStore(t)
	s.foldRows = 8
	t0 := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{listRec("dev-1", t0)}))
	client := clientTable(dayTable(dayStart(t0.UnixMicro())))
	noErr(t, exec(s.db, `CREATE TRIGGER zz_refuse BEFORE INSERT ON `+client+` BEGIN SELECT RAISE(ABORT, 'the index refuses rows'); END`))
	at := t0
	appendN := func(n int) {
		t.Helper()
		var batch []*fleetmq.Record
		for range n {
			at = at.Add(time.Millisecond)
			batch = append(batch, listRec("dev-1", at))
		}
		noErr(t, s.AppendHistory(ctx, batch))
	}
	appendN(20)
	appendN(20)
	f := s.FoldStats()
	if f.Failures == 0 || f.LastError == nil || !strings.Contains(f.LastError.Error(), "the index refuses rows") {
		t.Fatalf("after folds the store refused: %+v; want failures counted with the store's error", f)
	}
	if f.Unfolded != 41 {
		t.Fatalf("%d records listed unfolded, want all 41", f.Unfolded)
	}
	if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "dev-1"}, 0); len(got) != 41 {
		t.Fatalf("a query by client finds %d records, want 41", len(got))
	}
	noErr(t, exec(s.db, `DROP TRIGGER zz_refuse`))
	failures := f.Failures
	appendN(20)
	if f := s.FoldStats(); f.Failures != failures || f.Unfolded != 0 {
		t.Fatalf("after the store took folds again: %+v; want no new failure and nothing unfolded", f)
	}
	if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "dev-1"}, 0); len(got) != 61 {
		t.Fatalf("a query by client finds %d records, want 61", len(got))
	}
}
