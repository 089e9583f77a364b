package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// dayTables lists the day tables of a SQLite store (without their client
// indexes), and whether the table history from before the days is there.
func dayTables(t *testing.T, s *Store) (days []string, legacy bool) {
	t.Helper()
	rows, err := s.db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'history*' ORDER BY name`)
	noErr(t, err)
	defer rows.Close()
	for rows.Next() {
		var name string
		noErr(t, rows.Scan(&name))
		switch {
		case name == legacyHistory:
			legacy = true
		case sqliteDayTable.MatchString(name):
			days = append(days, name)
		}
	}
	noErr(t, rows.Err())
	return days, legacy
}

// accountPositions runs an account query (optionally of a class or a
// station controller device) to its end in pages of 5.
func accountPositions(t *testing.T, s *Store, acc, class string, asc bool, device ...string) []fleetmq.Position {
	t.Helper()
	var out []fleetmq.Position
	q := fleetmq.HistoryQuery{AccountID: acc, Class: class, Ascending: asc, Limit: 5}
	if len(device) > 0 {
		q.StationControllerDeviceID = device[0]
	}
	for range 10_000 {
		got := 0
		noErr(t, s.QueryHistory(context.Background(), &q, func(r *fleetmq.Record) error {
			if r.AccountID != acc || class != "" && r.Class != class || r.StationControllerDeviceID != q.StationControllerDeviceID && q.StationControllerDeviceID != "" {
				t.Fatalf("account %s class %q device %q query returned %s's %s record of device %q", acc[:8], class, q.StationControllerDeviceID, r.AccountID[:8], r.Class, r.StationControllerDeviceID)
			}
			out = append(out, r.Position())
			got++
			return nil
		}))
		if got < q.Limit {
			return out
		}
		q.After = &out[len(out)-1]
	}
	t.Fatal("query did not end")
	return nil
}

// checkAccountAnswers compares the account and class queries of both
// accounts, in both orders, with the reference.
func checkAccountAnswers(t *testing.T, s *Store, ref *foldRef, stage string) {
	t.Helper()
	for _, acc := range []string{foldAccA, foldAccB} {
		for _, class := range []string{"", "state"} {
			for _, asc := range []bool{false, true} {
				var want []fleetmq.Position
				for _, r := range ref.recs {
					if r.AccountID == acc && (class == "" || r.Class == class) {
						want = append(want, r.Position())
					}
				}
				sortPositions(want, asc)
				if got := accountPositions(t, s, acc, class, asc); !slices.Equal(got, want) {
					t.Fatalf("%s: account %s class %q ascending %v: got %d records, want %d\n got %v\nwant %v", stage, acc[:8], class, asc, len(got), len(want), got, want)
				}
			}
		}
		for _, asc := range []bool{false, true} {
			var want []fleetmq.Position
			for _, r := range ref.recs {
				if r.AccountID == acc && r.StationControllerDeviceID == "sc-1" {
					want = append(want, r.Position())
				}
			}
			sortPositions(want, asc)
			if got := accountPositions(t, s, acc, "", asc, "sc-1"); !slices.Equal(got, want) {
				t.Fatalf("%s: account %s device sc-1 ascending %v: got %d records, want %d", stage, acc[:8], asc, len(got), len(want))
			}
		}
	}
}

// twoSQLiteStores opens two stores on one new SQLite file, as two
// processes would, closed when the test ends.
func twoSQLiteStores(t *testing.T) (*Store, *Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleetmq.db")
	var stores [2]*Store
	for i := range stores {
		s, err := OpenSQLite(context.Background(), path)
		noErr(t, err)
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	return stores[0], stores[1]
}

// deleteBefore deletes an account's records received before cut, batch
// at a time, as retention does, and from the reference.
func deleteBefore(t *testing.T, s *Store, ref *foldRef, acc string, cut time.Time, batch int) {
	t.Helper()
	for range 10_000 {
		d, err := s.DeleteHistory(context.Background(), acc, cut, batch)
		noErr(t, err)
		if d == 0 {
			break
		}
	}
	ref.recs = slices.DeleteFunc(ref.recs, func(r fleetmq.Record) bool { return r.AccountID == acc && r.Received.Before(cut) })
}

// TestSQLiteDaysAcrossMidnight: records of two days (around midnight) and
// late records of the day before go into a table per day; every query
// shape (client, account, class; both orders; pages; a window across
// midnight) and the latest values answer as from one table, unfolded,
// partly folded and folded, and after retention's row deletes; ids grow
// across days.
func TestSQLiteDaysAcrossMidnight(t *testing.T) {
	ctx, s := context.Background(), openFoldStore(t)
	s.foldRows = 40
	midnight := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	t0 := midnight.Add(-300 * time.Millisecond) // checkFoldAnswers' window, t0+150..420 ms, crosses midnight
	ref := &foldRef{}
	n := 0
	var lastID int64
	for batch := range 30 {
		var recs []*fleetmq.Record
		for i := range 1 + batch%7 {
			n++
			acc := []string{foldAccA, foldAccB}[n%2]
			client := fmt.Sprintf("dev-%d", n%4)
			at := t0.Add(time.Duration(n*3) * time.Millisecond)
			class := []string{"state", "telemetry"}[i%2]
			switch {
			case n%9 == 0:
				at = midnight.Add(-25*time.Hour + time.Duration(n)*time.Millisecond) // a late record of the day before yesterday
			case n%13 == 0:
				at = at.Add(-40 * time.Millisecond)
			}
			topic := acc + "/" + client + "/" + class + "/" + strconv.Itoa(n%3)
			recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: client, Topic: topic, Class: class, QoS: 1,
				PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at})
		}
		noErr(t, s.AppendHistory(ctx, recs))
		for _, r := range recs {
			if r.ID <= lastID {
				t.Fatalf("record %d after record ids up to %d: ids do not grow across days", r.ID, lastID)
			}
			lastID = r.ID
			ref.recs = append(ref.recs, *r)
		}
		if batch%10 == 9 {
			checkFoldAnswers(t, s, ref, t0, fmt.Sprintf("after batch %d", batch))
			checkAccountAnswers(t, s, ref, fmt.Sprintf("after batch %d", batch))
		}
	}
	days, legacy := dayTables(t, s)
	if want := []string{"history_d20261126", "history_d20261127", "history_d20261128"}; !slices.Equal(days, want) || !legacy {
		t.Fatalf("tables %v (history %v), want %v and the empty history from before the days", days, legacy, want)
	}
	if s.tail.len() == 0 {
		t.Fatal("nothing unfolded at the end: the test does not cover unfolded rows")
	}
	checkFoldAnswers(t, s, ref, t0, "partly folded")
	checkAccountAnswers(t, s, ref, "partly folded")
	_, err := s.FoldHistory(ctx)
	noErr(t, err)
	checkFoldAnswers(t, s, ref, t0, "folded")
	checkAccountAnswers(t, s, ref, "folded")

	// Row deletes across the days, one record at a time.
	deleteBefore(t, s, ref, foldAccA, midnight.Add(30*time.Millisecond), 1)
	checkFoldAnswers(t, s, ref, t0, "after row deletes")
	checkAccountAnswers(t, s, ref, "after row deletes")
	if rows, indexed := sumTables(t, s, `SELECT COUNT(*) FROM %s`), sumTables(t, s, `SELECT COUNT(*) FROM %s_client`); rows != len(ref.recs) || indexed != rows {
		t.Fatalf("%d rows, %d in the client indexes; want %d of each", rows, indexed, len(ref.recs))
	}
}

// TestSQLiteDropDays: retention drops a day's tables whole when no account
// that keeps part of the day has a record in it, with the latest values
// that pointed into it, and keeps the others; a second store on the same
// file (another process) that still lists the dropped day answers
// queries without it and stores a late record of it in a day made again.
func TestSQLiteDropDays(t *testing.T) {
	ctx := context.Background()
	s, other := twoSQLiteStores(t)

	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	rec := func(acc, client, sub string, at time.Time) *fleetmq.Record {
		return &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/" + sub, Class: "state", QoS: 1,
			PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at}
	}
	old, kept := now.Add(-20*24*time.Hour), now.Add(-10*24*time.Hour)
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{
		rec(foldAccA, "dev-1", "state/old", old), rec(foldAccA, "dev-1", "state/kept", kept),
		rec(foldAccB, "dev-1", "state/kept", kept), rec(foldAccA, "dev-1", "state/now", now),
	}))
	noErr(t, s.PrepareHistoryDays(ctx, now))
	noErr(t, other.PrepareHistoryDays(ctx, now)) // lists the days, the old one among them
	// A keeps 7 days; B keeps 30, so the day 10 days back is kept whole and
	// A's record in it is left to row deletes.
	expired := map[string]time.Time{foldAccA: now.Add(-7 * 24 * time.Hour), foldAccB: now.Add(-30 * 24 * time.Hour)}
	dropped, err := s.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), expired)
	noErr(t, err)
	days, legacy := dayTables(t, s)
	if want := []string{dayTable(dayStart(kept.UnixMicro())), "history_d20261127", "history_d20261128"}; dropped != 1 || !slices.Equal(days, want) || legacy {
		t.Fatalf("dropped %d; tables %v (history %v); want 1 and %v, history gone (it held nothing)", dropped, days, legacy, want)
	}
	latest, err := s.LatestHistory(ctx, foldAccA, "dev-1")
	noErr(t, err)
	var topics []string
	for _, r := range latest {
		topics = append(topics, r.Topic[len(foldAccA)+len("/dev-1/"):])
	}
	if !slices.Equal(topics, []string{"state/kept", "state/now"}) {
		t.Fatalf("latest of A's dev-1 after the drop: %v; want state/kept and state/now (state/old's day was dropped)", topics)
	}

	// The other store still lists the dropped day.
	got := queryPositions(t, other, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "dev-1", Ascending: true}, 0)
	if len(got) != 2 || !got[0].Received.Equal(kept) || !got[1].Received.Equal(now) {
		t.Fatalf("A's dev-1 from the other store after the drop: %v; want the records of %v and %v", got, kept, now)
	}
	// A writer that lists the dropped day (the query above made the other
	// store read the days again; a writer does not read them before its
	// commits).
	late := rec(foldAccA, "dev-1", "state/late", old.Add(time.Second))
	lo := dayStart(old.UnixMicro())
	other.days.set(append(other.days.list(), dayPartition{name: dayTable(lo), lo: lo, hi: lo + dayMicros, managed: true}))
	noErr(t, other.AppendHistory(ctx, []*fleetmq.Record{late}))
	got = queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "dev-1", Ascending: true}, 0)
	if len(got) != 3 || got[0] != late.Position() {
		t.Fatalf("A's dev-1 after a late record of the dropped day: %v; want it first of 3", got)
	}
}

// TestSQLiteMigrationToDays: a store of the schema before the days keeps
// its records in history, which then holds every time up to the midnight
// after its newest record; later records go into day tables, late ones of
// history's time into history; queries, latest values and folds read
// across both, and retention drops history once no account keeps
// anything in it.
func TestSQLiteMigrationToDays(t *testing.T) {
	ctx := context.Background()
	path, db := oldSQLiteStore(t, 10)
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	ref := writeOldHistory(t, db, t0, 100, false)
	noErr(t, db.Close())

	s, err := OpenSQLite(ctx, path)
	noErr(t, err)
	defer s.Close()
	parts := s.days.list()
	if len(parts) != 1 || parts[0].name != legacyHistory || parts[0].lo != math.MinInt64 || parts[0].hi != time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC).UnixMicro() {
		t.Fatalf("after the migration: %+v; want history alone, up to the midnight after its newest record", parts)
	}
	add := func(at time.Time, client string) {
		r := &fleetmq.Record{AccountID: foldAccA, ClientID: client, Topic: foldAccA + "/" + client + "/state/0", Class: "state", QoS: 1,
			PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at}
		noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{r}))
		if r.ID <= 100 {
			t.Fatalf("a new record got id %d, not after history's 100", r.ID)
		}
		ref.recs = append(ref.recs, *r)
	}
	add(t0.Add(24*time.Hour), "dev-1")                  // the next day: a day table
	add(t0.Add(time.Second), "dev-1")                   // history's time: into history
	add(t0.Add(24*time.Hour+time.Microsecond), "dev-2") // the next day again
	checkFoldAnswers(t, s, ref, t0, "after the migration")
	checkAccountAnswers(t, s, ref, "after the migration")
	if days, legacy := dayTables(t, s); !slices.Equal(days, []string{"history_d20261128"}) || !legacy {
		t.Fatalf("tables %v (history %v); want history_d20261128 and history", days, legacy)
	}
	_, err = s.FoldHistory(ctx)
	noErr(t, err)
	checkFoldAnswers(t, s, ref, t0, "folded after the migration")

	// Everything older than the day after expires: history goes whole.
	now := t0.Add(30 * 24 * time.Hour)
	expired := map[string]time.Time{foldAccA: t0.Add(48 * time.Hour), foldAccB: t0.Add(48 * time.Hour)}
	dropped, err := s.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), expired)
	noErr(t, err)
	if days, legacy := dayTables(t, s); dropped != 2 || legacy || len(days) != 0 {
		t.Fatalf("dropped %d; tables %v (history %v); want 2 (history and the day after), none left", dropped, days, legacy)
	}
	for _, c := range []string{"dev-1", "dev-2"} {
		if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: c}, 0); len(got) != 0 {
			t.Fatalf("A's %s after every day was dropped: %v", c, got)
		}
	}
}

// TestSQLiteReorderKeepsAnswers: a day that ended is rewritten in the
// client index's order (history_cYYYYMMDD), copied a few rows at a time:
// every query shape and the latest values answer as before; a record of
// the day stored while it is copied is in the rewritten day; a row
// deleted meanwhile makes the reorder give up, leaving the day as it was,
// and the next pass reorders it; a store that still lists the day in
// arrival order reads the rewritten one; late records, row deletes and the
// drop work on the rewritten day.
func TestSQLiteReorderKeepsAnswers(t *testing.T) {
	ctx := context.Background()
	s, other := twoSQLiteStores(t)
	s.foldRows = 30
	defer func(n, m int) { reorderChunk, retireChunk = n, m }(reorderChunk, retireChunk)
	reorderChunk, retireChunk = 7, 9

	midnight := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	t0 := midnight.Add(-300 * time.Millisecond)
	ref := &foldRef{}
	rec := func(n int, at time.Time) *fleetmq.Record {
		acc := []string{foldAccA, foldAccB}[n%2]
		client := fmt.Sprintf("dev-%d", n%4)
		class := []string{"state", "telemetry"}[n%3%2]
		r := &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/" + class + "/" + strconv.Itoa(n%3), Class: class,
			QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at}
		if n%5 == 0 {
			r.StationControllerDeviceID = "sc-1"
		}
		return r
	}
	store := func(st *Store, recs ...*fleetmq.Record) {
		t.Helper()
		noErr(t, st.AppendHistory(ctx, recs))
		for _, r := range recs {
			ref.recs = append(ref.recs, *r)
		}
	}
	for n := range 200 {
		store(s, rec(n, t0.Add(time.Duration(n*3)*time.Millisecond)))
	}
	noErr(t, other.freshDays(ctx)) // lists the day before midnight in arrival order
	day := dayTable(dayStart(t0.UnixMicro()))

	// A row deleted while the day is copied: the reorder gives up.
	afterReorderCopy = func(string) {
		_, err := s.DeleteHistory(ctx, foldAccA, t0.Add(time.Millisecond), 1)
		noErr(t, err)
	}
	defer func() { afterReorderCopy = nil }()
	if n, err := s.ReorderHistoryDays(ctx, midnight); n != 0 || !errors.Is(err, errReorderRace) {
		t.Fatalf("reorder with a row deleted during the copy: %d days, %v; want 0 and the race", n, err)
	}
	ref.recs = slices.DeleteFunc(ref.recs, func(r fleetmq.Record) bool {
		return r.AccountID == foldAccA && r.Received.Before(t0.Add(time.Millisecond))
	})
	if days, _ := dayTables(t, s); !slices.Contains(days, day) || sumTables(t, s, `SELECT COUNT(*) FROM sqlite_master WHERE name GLOB 'history_r*' AND '%s' <> ''`) != 0 {
		t.Fatalf("after a reorder gave up: tables %v; want %s kept and no copy left", days, day)
	}
	checkFoldAnswers(t, s, ref, t0, "after a reorder gave up")

	// A record of the day stored while it is copied.
	afterReorderCopy = func(string) { store(s, rec(1000, t0.Add(time.Microsecond))) }
	if n, err := s.ReorderHistoryDays(ctx, midnight); n != 1 || err != nil {
		t.Fatalf("reorder: %d days, %v; want 1", n, err)
	}
	afterReorderCopy = nil
	clustered := dayName("c", dayStart(t0.UnixMicro()))
	if days, _ := dayTables(t, s); !slices.Contains(days, clustered) || slices.Contains(days, day) {
		t.Fatalf("after the reorder: tables %v; want %s in place of %s", days, clustered, day)
	}
	var left int
	noErr(t, s.db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name GLOB 'history_[or][0-9]*'`).Scan(&left))
	if left != 0 {
		t.Fatalf("%d tables of the day's old rows or its copy left after the reorder", left)
	}
	checkFoldAnswers(t, s, ref, t0, "reordered")
	checkAccountAnswers(t, s, ref, "reordered")
	// Each query shape reads the rewritten day in an index's order: its
	// key (client) or an index table, never a scan or a sort.
	part, _ := s.days.partition(t0.UnixMicro())
	for _, q := range []fleetmq.HistoryQuery{{ClientID: "dev-1"}, {}, {Class: "state"}, {StationControllerDeviceID: "sc-1"}, {From: t0, To: midnight}} {
		q.AccountID = foldAccA
		p, err := planHistory(&q)
		noErr(t, err)
		for _, asc := range []bool{false, true} {
			query, args := p.selectSQL(sqliteDialect, part, asc, &fleetmq.Position{Received: t0.Add(time.Millisecond), ID: 5}, 10)
			text := sqlitePlan(t, s.db, query, args...)
			if strings.Contains(text, "TEMP B-TREE") || strings.Contains(text, "SCAN") || !strings.Contains(text, "received_us") {
				t.Errorf("%+v on the rewritten day (ascending %v): plan\n%s", q, asc, text)
			}
		}
	}
	// A store that lists the day in arrival order and the schema's current
	// version (it read the days just before the swap) finds the rewritten
	// one.
	other.days.set([]dayPartition{{name: day, lo: dayStart(t0.UnixMicro()), hi: midnight.UnixMicro(), managed: true}})
	noErr(t, other.db.QueryRow(`PRAGMA schema_version`).Scan(&other.days.version))
	if got := accountPositions(t, other, foldAccB, "", true); len(got) == 0 || got[0].Received.After(midnight) {
		t.Fatalf("the other store's account query: %v; want B's records of the rewritten day first", got)
	}

	// Late records, row deletes and the latest values on the rewritten day.
	store(s, rec(1001, t0.Add(2*time.Microsecond)), rec(1002, midnight.Add(-time.Microsecond)))
	deleteBefore(t, s, ref, foldAccB, t0.Add(30*time.Millisecond), 3)
	checkFoldAnswers(t, s, ref, t0, "late records and deletes on the rewritten day")
	checkAccountAnswers(t, s, ref, "late records and deletes on the rewritten day")

	// A second pass leaves the rewritten day, and empties and drops the
	// old tables of a day that a process which died left set aside.
	noErr(t, exec(s.db, sqliteDayDDL("history_o20261120")))
	for i := range 25 {
		noErr(t, exec(s.db, `INSERT INTO history_o20261120 (`+historyColumns+`) VALUES ('a', 'c', 't', 'state', 1, 1, 0, x'', '', 0, NULL, '', ?)`, i))
		noErr(t, exec(s.db, `INSERT INTO history_o20261120_client VALUES ('a', 'c', ?, ?)`, i, i))
	}
	if n, err := s.ReorderHistoryDays(ctx, midnight); n != 0 || err != nil {
		t.Fatalf("second reorder: %d days, %v; want none", n, err)
	}
	noErr(t, s.db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name GLOB 'history_o*'`).Scan(&left))
	if left != 0 {
		t.Fatalf("%d tables or indexes of a day set aside are left after the next pass", left)
	}
	expired := map[string]time.Time{foldAccA: midnight, foldAccB: midnight}
	if n, err := s.DropHistoryDays(ctx, midnight, expired); n != 1 || err != nil {
		t.Fatalf("drop: %d days, %v; want the rewritten day", n, err)
	}
	noErr(t, s.db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name GLOB ?`, clustered+"*").Scan(&left))
	if left != 0 {
		t.Fatalf("after the drop: %d tables, indexes or triggers of %s left", left, clustered)
	}
}

// reorderRec is a record of foldAccA's dev-1 on a topic at a time.
func reorderRec(topic string, at time.Time) *fleetmq.Record {
	return &fleetmq.Record{AccountID: foldAccA, ClientID: "dev-1", Topic: foldAccA + "/dev-1/" + topic, Class: "state", QoS: 1, PublishedQoS: 1,
		Payload: fmt.Appendf(nil, "payload-dev-1-%d", at.UnixMicro()), Received: at, StationControllerDeviceID: "sc-1"}
}

// TestSQLiteReorderAndLateRecords: the latest value of a topic whose first
// record is stored while its day is copied, and not folded before the
// swap, is that record after the swap; a pass reorders two days while
// records come in; a writer process that still lists a reordered day's
// old table goes on folding once its fold meets the renamed table.
func TestSQLiteReorderAndLateRecords(t *testing.T) {
	ctx := context.Background()
	midnight := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	s, w := twoSQLiteStores(t)
	w.foldRows = 1
	for d := 1; d <= 2; d++ {
		for i := range 10 {
			noErr(t, w.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/old", midnight.Add(-time.Duration(d)*20*time.Hour+time.Duration(i)*time.Second))}))
		}
	}
	noErr(t, w.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/today", midnight.Add(time.Minute))}))
	late := reorderRec("state/late", midnight.Add(-time.Microsecond))
	s.foldRows = 1 << 20 // the late record stays unfolded until the swap
	copies := 0
	afterReorderCopy = func(string) {
		if copies++; copies == 1 {
			noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{late}))
		}
	}
	defer func() { afterReorderCopy = nil }()
	if n, err := s.ReorderHistoryDays(ctx, midnight); n != 2 || err != nil {
		t.Fatalf("reorder of two days while records come in: %d, %v", n, err)
	}
	latest, err := s.LatestHistory(ctx, foldAccA, "dev-1")
	noErr(t, err)
	got := map[string]int64{}
	for _, r := range latest {
		got[strings.TrimPrefix(r.Topic, foldAccA+"/dev-1/")] = r.ID
	}
	if got["state/late"] != late.ID {
		t.Fatalf("latest after the swap: %v; want state/late = %d, stored during the copy", got, late.ID)
	}
	// The writer process lists the old tables; its folds go on.
	for i := range 20 {
		noErr(t, w.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/today", midnight.Add(time.Hour+time.Duration(i)*time.Second))}))
	}
	var folded, last int64
	noErr(t, w.db.QueryRow(`SELECT (SELECT value FROM meta WHERE key = 'history_folded'), (SELECT value FROM meta WHERE key = 'history_last_id')`).Scan(&folded, &last))
	if last-folded > 1 {
		t.Fatalf("after 20 commits of the writer that listed the reordered days: folded up to %d of %d (%d listed unfolded)", folded, last, w.tail.len())
	}
}

// TestSQLiteReorderLease: a reorder whose lease ended while it copied, and
// was taken by another process which reordered the day, stops without
// touching the other's tables: the day answers every query shape and takes
// late records. A reorder that gives up sets its copy aside, and the pass
// empties and drops it.
func TestSQLiteReorderLease(t *testing.T) {
	ctx := context.Background()
	midnight := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	s, other := twoSQLiteStores(t)
	ref := &foldRef{}
	for i := range 30 {
		r := reorderRec("state/a", midnight.Add(-time.Hour+time.Duration(i)*time.Second))
		noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{r}))
		ref.recs = append(ref.recs, *r)
	}
	nested := false
	afterReorderCopy = func(string) {
		if nested {
			return
		}
		nested = true
		noErr(t, exec(s.db, `UPDATE meta SET value = 1 WHERE key = 'history_reorder'`)) // its hour is over
		// The other process takes the lease, sets aside and retires the
		// copy it finds, and leaves the day to its next pass.
		if n, err := other.ReorderHistoryDays(ctx, midnight); n != 0 || !errors.Is(err, errReordered) {
			t.Errorf("the other process's reorder: %d, %v; want 0, the day left to the next pass", n, err)
		}
	}
	defer func() { afterReorderCopy = nil }()
	if n, err := s.ReorderHistoryDays(ctx, midnight); n != 0 || !errors.Is(err, errLeaseLost) {
		t.Fatalf("the reorder whose lease ended: %d, %v; want 0 and the lease lost", n, err)
	}
	checkAccountAnswers(t, s, ref, "after two reorders met")
	late := reorderRec("state/late", midnight.Add(-time.Minute))
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{late}))
	ref.recs = append(ref.recs, *late)
	checkAccountAnswers(t, s, ref, "a late record after two reorders met")
	afterReorderCopy = nil
	if n, err := other.ReorderHistoryDays(ctx, midnight); n != 1 || err != nil {
		t.Fatalf("the next pass: %d, %v; want the day reordered", n, err)
	}
	checkAccountAnswers(t, s, ref, "reordered by the next pass")

	// A give-up: the copy is set aside and retired by the pass.
	day := midnight.Add(24 * time.Hour)
	for i := range 30 {
		noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/b", day.Add(-time.Hour+time.Duration(i)*time.Second))}))
	}
	noErr(t, exec(s.db, `UPDATE meta SET value = 0 WHERE key = 'history_reorder'`))
	afterReorderCopy = func(string) { deleteBefore(t, s, ref, foldAccA, day.Add(-time.Hour+time.Second), 1) }
	if n, err := s.ReorderHistoryDays(ctx, day); n != 0 || !errors.Is(err, errReorderRace) {
		t.Fatalf("reorder with a delete during the copy: %d, %v", n, err)
	}
	var left []string
	rows, err := s.db.Query(`SELECT name FROM sqlite_master WHERE name GLOB 'history_[or][0-9]*' OR name GLOB 'history_c20261128*'`)
	noErr(t, err)
	for rows.Next() {
		var name string
		noErr(t, rows.Scan(&name))
		left = append(left, name)
	}
	rows.Close()
	if len(left) != 0 {
		t.Fatalf("after a give-up and its pass: %v left", left)
	}
}

// TestSQLiteDaysOtherProcessDrops: after another process dropped a day
// this store wrote (a retention pass of the CLI), this store's folds go
// on; after it dropped the table from before the days, a late record of
// that table's time is stored in a day made for it.
func TestSQLiteDaysOtherProcessDrops(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s, other := twoSQLiteStores(t)
	s.foldRows = 4
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/old", now.Add(-20*24*time.Hour))}))
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/now", now)}))
	_, err := s.FoldHistory(ctx)
	noErr(t, err)
	if n, err := other.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), map[string]time.Time{foldAccA: now.Add(-7 * 24 * time.Hour)}); n != 1 || err != nil {
		t.Fatalf("the other process's drop: %d, %v", n, err)
	}
	for i := range 100 {
		at := now.Add(time.Duration(i+1) * time.Millisecond)
		noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{reorderRec("state/a", at), reorderRec("state/b", at)}))
	}
	if _, err := s.FoldHistory(ctx); s.tail.len() > 10 || err != nil {
		t.Fatalf("after another process dropped a day this store wrote: %d rows unfolded, FoldHistory: %v", s.tail.len(), err)
	}
}

// TestSQLiteLateRecordAfterLegacyDropped: a record of the time of the
// table from before the days, which another process dropped (its only
// account's records expired), goes into a day of its own.
func TestSQLiteLateRecordAfterLegacyDropped(t *testing.T) {
	ctx := context.Background()
	path, db := oldSQLiteStore(t, 10)
	t0 := time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC)
	_, err := db.Exec(`INSERT INTO history (`+historyColumns+`) VALUES (?, 'dev-1', ?, 'state', 1, 1, 0, x'00', '', 0, NULL, '', ?)`,
		foldAccB, foldAccB+"/dev-1/state/0", t0.UnixMicro())
	noErr(t, err)
	noErr(t, db.Close())
	s, err := OpenSQLite(ctx, path)
	noErr(t, err)
	defer s.Close()
	other, err := OpenSQLite(ctx, path)
	noErr(t, err)
	defer other.Close()
	now := t0.Add(26 * 24 * time.Hour)
	_, err = other.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), // A keeps 30 days, B 7
		map[string]time.Time{foldAccA: now.Add(-30 * 24 * time.Hour), foldAccB: now.Add(-7 * 24 * time.Hour)})
	noErr(t, err)
	late := reorderRec("state/late", t0.Add(time.Second)) // a time A keeps
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{late}))
	if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "dev-1"}, 0); len(got) != 1 || got[0] != late.Position() {
		t.Fatalf("the late record after history was dropped: %v", got)
	}
}

// TestSQLiteLatestWithManyDays: the latest values read every day's
// unfolded rows, with more days than SQLite takes terms in one compound
// SELECT (500).
func TestSQLiteLatestWithManyDays(t *testing.T) {
	ctx, s := context.Background(), openFoldStore(t)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var days []int64
	for d := range 520 {
		days = append(days, dayStart(now.UnixMicro())-int64(d)*dayMicros)
	}
	noErr(t, s.createSQLiteDays(ctx, days))
	old := reorderRec("state/old", now.Add(-519*24*time.Hour))
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{old, reorderRec("state/now", now)}))
	latest, err := s.LatestHistory(ctx, foldAccA, "dev-1")
	if err != nil || len(latest) != 2 {
		t.Fatalf("latest with %d day tables: %d records, %v; want 2", len(s.days.list()), len(latest), err)
	}
}
