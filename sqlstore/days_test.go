package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/pgtest"
)

// openPostgres opens n stores on one fresh PostgreSQL database (n
// processes sharing it), closed when the test ends.
func openPostgres(t *testing.T, n int) []*Store {
	t.Helper()
	dsn := pgtest.DSN(t)
	stores := make([]*Store, n)
	for i := range stores {
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	return stores
}

// dayRecord is a record of client c of the account at the time, with the
// payload queryPositions checks.
func dayRecord(acc string, at time.Time) *fleetmq.Record {
	return &fleetmq.Record{AccountID: acc, ClientID: "c", Topic: acc + "/c/state/x", Class: "state",
		QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-c-%d", at.UnixMicro()), Received: at}
}

// daysOf returns history's partitions as the database has them.
func daysOf(t *testing.T, s *Store) []dayPartition {
	t.Helper()
	parts, pending, err := readHistoryDays(context.Background(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) > 0 {
		t.Fatalf("partitions left detaching: %v", pending)
	}
	return parts
}

// TestMigrationPartitionsExistingHistory: a PostgreSQL store with history
// from before the day partitions (migrations up to 0010) keeps every
// record and every answer: its table becomes the partition
// history_before_days up to the next UTC midnight, new records go to day
// partitions with ids after the old ones, and retention drops the old
// table whole once every plan has let go of it. A fresh store has no such
// partition.
func TestMigrationPartitionsExistingHistory(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	migrateUpTo(t, db, postgresDialect, 10)
	// History as the previous writer left it, over three days, the
	// newest an hour ago.
	now := time.Now().UTC().Truncate(time.Microsecond)
	ref := &foldRef{}
	for i := range 300 {
		acc := []string{foldAccA, foldAccB}[i%2]
		client := fmt.Sprintf("dev-%d", i%4)
		at := now.Add(-time.Hour - time.Duration(299-i)*15*time.Minute)
		topic := acc + "/" + client + "/state/" + strconv.Itoa(i%3)
		var id int64
		err := db.QueryRow(`INSERT INTO history (`+historyColumns+`) VALUES ($1, $2, $3, 'state', 1, 1, false, $4, '', 0, NULL, '', $5) RETURNING id`,
			acc, client, topic, fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), at.UnixMicro()).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		noErr(t, exec(db, `INSERT INTO history_latest VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us`,
			acc, client, topic, id, at.UnixMicro()))
		ref.recs = append(ref.recs, fleetmq.Record{ID: id, AccountID: acc, ClientID: client, Topic: topic, Received: at})
	}
	noErr(t, db.Close())

	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	parts := daysOf(t, s)
	tomorrow := dayStart(now.UnixMicro()) + dayMicros
	if len(parts) != 1 || parts[0].name != "history_before_days" || parts[0].hi != tomorrow {
		t.Fatalf("after the migration: partitions %+v; want history_before_days up to the next midnight (%d)", parts, tomorrow)
	}
	checkFoldAnswers(t, s, ref, ref.recs[0].Received.Add(-time.Second), "migrated")

	// New records: a day partition after tomorrow's midnight, ids after
	// the old ones.
	later := time.UnixMicro(tomorrow).UTC().Add(time.Hour)
	var recs []*fleetmq.Record
	for i := range 10 {
		acc := []string{foldAccA, foldAccB}[i%2]
		client := fmt.Sprintf("dev-%d", i%4)
		at := later.Add(time.Duration(i) * time.Second)
		recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/state/new", Class: "state",
			QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at})
	}
	noErr(t, s.AppendHistory(ctx, recs))
	for _, r := range recs {
		if r.ID <= ref.recs[len(ref.recs)-1].ID {
			t.Fatalf("new record id %d is not after the old ones (up to %d)", r.ID, ref.recs[len(ref.recs)-1].ID)
		}
		ref.recs = append(ref.recs, fleetmq.Record{ID: r.ID, AccountID: r.AccountID, ClientID: r.ClientID, Topic: r.Topic, Received: r.Received})
	}
	if parts := daysOf(t, s); len(parts) != 2 || parts[1].name != dayTable(tomorrow) {
		t.Fatalf("after new records: partitions %+v; want history_before_days and %s", parts, dayTable(tomorrow))
	}
	checkFoldAnswers(t, s, ref, ref.recs[0].Received.Add(-time.Second), "with new records")

	// Retention up to the old table's end drops it whole.
	n, err := s.DropHistoryDays(ctx, time.UnixMicro(tomorrow), nil)
	if err != nil || n != 1 {
		t.Fatalf("DropHistoryDays: %d, %v; want history_before_days dropped", n, err)
	}
	ref.recs = ref.recs[300:]
	checkFoldAnswers(t, s, ref, later.Add(-time.Second), "old table dropped")
	for _, acc := range []string{foldAccA, foldAccB} {
		for c := range 4 {
			rs, err := s.LatestHistory(ctx, acc, fmt.Sprintf("dev-%d", c))
			noErr(t, err)
			for _, r := range rs {
				if !strings.HasSuffix(r.Topic, "/state/new") {
					t.Errorf("latest of %s/dev-%d holds %s, a record of the dropped table", acc, c, r.Topic)
				}
			}
		}
	}

	fresh, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if parts := daysOf(t, fresh); len(parts) != 0 {
		t.Errorf("a fresh store has partitions %+v; want none until its first records", parts)
	}
}

// TestHistoryDaysTwoProcesses: two stores on one database (two fleetmq
// processes) storing records of the same new days at once both succeed,
// and each day is created once.
func TestHistoryDaysTwoProcesses(t *testing.T) {
	ctx := context.Background()
	stores := openPostgres(t, 2)
	base := time.Date(2026, 11, 27, 23, 59, 59, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, 2*20)
	for i, s := range stores {
		wg.Go(func() {
			for b := range 20 {
				acc := []string{foldAccA, foldAccB}[i]
				// Each batch spans a midnight: day b and day b+1.
				at := base.Add(time.Duration(b) * 24 * time.Hour)
				errs <- s.AppendHistory(ctx, []*fleetmq.Record{dayRecord(acc, at), dayRecord(acc, at.Add(2*time.Second))})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		noErr(t, err)
	}
	parts := daysOf(t, stores[0])
	if len(parts) != 21 {
		t.Fatalf("%d partitions; want 21 (the days of 20 batches spanning midnights)", len(parts))
	}
	for i, p := range parts {
		want := dayStart(base.UnixMicro()) + int64(i)*dayMicros
		if p.lo != want || p.hi != want+dayMicros || p.name != dayTable(want) {
			t.Errorf("partition %d: %+v; want %s from %d to %d", i, p, dayTable(want), want, want+dayMicros)
		}
	}
	for _, acc := range []string{foldAccA, foldAccB} {
		if got := len(queryPositions(t, stores[1], fleetmq.HistoryQuery{AccountID: acc, ClientID: "c"}, 0)); got != 40 {
			t.Errorf("account %s: %d records; want 40", acc, got)
		}
	}
}

// TestLateRecordOfADayAnotherProcessDropped: a process whose list of days
// still holds a day another process dropped stores a late record of that
// day all the same (the day is made again).
func TestLateRecordOfADayAnotherProcessDropped(t *testing.T) {
	ctx := context.Background()
	stores := openPostgres(t, 2)
	old := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	r := func(at time.Time) []*fleetmq.Record { return []*fleetmq.Record{dayRecord(foldAccA, at)} }
	noErr(t, stores[0].AppendHistory(ctx, r(old)))
	n, err := stores[1].DropHistoryDays(ctx, old.Add(24*time.Hour), nil)
	if err != nil || n != 1 {
		t.Fatalf("drop by the other process: %d, %v", n, err)
	}
	if err := stores[0].AppendHistory(ctx, r(old.Add(time.Second))); err != nil {
		t.Fatalf("a late record after the other process dropped its day: %v", err)
	}
	if got := queryPositions(t, stores[1], fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "c"}, 0); len(got) != 1 || !got[0].Received.Equal(old.Add(time.Second)) {
		t.Fatalf("history holds %v; want the late record", got)
	}
}

// TestDropFinishesAnInterruptedDetach: a drop whose DETACH CONCURRENTLY
// timed out while it waited for a reader leaves the day detaching; the
// next drop finishes it, and the store keeps storing meanwhile.
func TestDropFinishesAnInterruptedDetach(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	old := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	r := func(at time.Time, payload string) *fleetmq.Record {
		rec := dayRecord(foldAccA, at)
		rec.Payload = []byte(payload)
		return rec
	}
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{r(old, "old"), r(old.Add(48*time.Hour), "kept")}))

	// A reader whose snapshot may see the old day: DETACH CONCURRENTLY
	// waits for it, and is cancelled while it waits.
	reader, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	noErr(t, reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM history`).Scan(&n))
	detachTimeout = "300ms"
	defer func() { detachTimeout = "30s" }()
	if _, err = s.DropHistoryDays(ctx, old.Add(24*time.Hour), nil); err == nil {
		t.Fatal("the drop did not wait for the reader")
	}
	_, pending, err := readHistoryDays(ctx, s.db)
	noErr(t, err)
	if len(pending) != 1 || pending[0].name != dayTable(dayStart(old.UnixMicro())) {
		t.Fatalf("after the interrupted drop: detaching %v; want the old day", pending)
	}
	noErr(t, reader.Rollback())

	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{r(old.Add(49*time.Hour), "meanwhile")}))
	dropped, err := s.DropHistoryDays(ctx, old.Add(24*time.Hour), nil)
	if err != nil || dropped != 1 {
		t.Errorf("the second drop: %d days, %v; want the interrupted one's day finished and counted", dropped, err)
	}
	if parts := daysOf(t, s); len(parts) != 1 || parts[0].lo != dayStart(old.Add(48*time.Hour).UnixMicro()) {
		t.Fatalf("partitions %+v; want only the kept day", parts)
	}
	var got []string
	rows, err := s.db.QueryContext(ctx, `SELECT convert_from(payload, 'UTF8') FROM history ORDER BY received_us`)
	noErr(t, err)
	for rows.Next() {
		var p string
		noErr(t, rows.Scan(&p))
		got = append(got, p)
	}
	noErr(t, rows.Err())
	if strings.Join(got, ",") != "kept,meanwhile" {
		t.Errorf("history holds %v; want kept, meanwhile", got)
	}
	if _, err := s.db.ExecContext(ctx, `SELECT 1 FROM `+dayTable(dayStart(old.UnixMicro()))); err == nil {
		t.Error("the old day's table is still there")
	}
}

// TestDropKeepsDaysAccountsKeep: a day holding a record of an account
// whose retention still covers part of the day is not dropped; once it
// expires, the day is. A day detached while a kept record went in is
// attached back rather than dropped.
func TestDropKeepsDaysAccountsKeep(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	r := dayRecord
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{r(foldAccA, day.Add(time.Hour)), r(foldAccB, day.Add(2*time.Hour))}))
	end := day.Add(24 * time.Hour)
	keepsA := map[string]time.Time{foldAccA: day.Add(12 * time.Hour), foldAccB: end}
	n, err := s.DropHistoryDays(ctx, end, keepsA)
	if err != nil || n != 0 || len(daysOf(t, s)) != 1 {
		t.Fatalf("A keeps part of the day: dropped %d, %v, %d days left; want the day kept", n, err, len(daysOf(t, s)))
	}

	// Detached (as by a drop) while A's record is in it: attached back.
	p := daysOf(t, s)[0]
	conn, err := s.db.Conn(ctx)
	noErr(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `ALTER TABLE history DETACH PARTITION `+p.name)
	noErr(t, err)
	dropped, err := dropDetached(ctx, conn, p, keepsA, false)
	if err != nil || dropped {
		t.Fatalf("dropDetached of a day A keeps: dropped %v, %v", dropped, err)
	}
	if got := len(queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "c"}, 0)); got != 1 || len(daysOf(t, s)) != 1 {
		t.Fatalf("after attaching back: A has %d records, %d days; want 1 and 1", got, len(daysOf(t, s)))
	}

	n, err = s.DropHistoryDays(ctx, end, map[string]time.Time{foldAccA: end, foldAccB: end})
	if err != nil || n != 1 || len(daysOf(t, s)) != 0 {
		t.Fatalf("every account's records expired: dropped %d, %v, %d days left; want the day dropped", n, err, len(daysOf(t, s)))
	}
	for _, acc := range []string{foldAccA, foldAccB} {
		if got := len(queryPositions(t, s, fleetmq.HistoryQuery{AccountID: acc, ClientID: "c"}, 0)); got != 0 {
			t.Errorf("account %s: %d records after the drop", acc, got)
		}
	}
}

// TestReorderKeepsAnswers: days that ended are rewritten in the client
// index's order, once each, with every answer unchanged; today's day is
// left in arrival order. A reorder that cannot swap its copy in (a query
// holds history) opens the day again, and the day keeps taking records.
func TestReorderKeepsAnswers(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	t0 := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	ref := &foldRef{}
	var recs []*fleetmq.Record
	for i := range 600 { // three days, clients interleaved in arrival order
		acc := []string{foldAccA, foldAccB}[i%2]
		client := fmt.Sprintf("dev-%d", i%5)
		at := t0.Add(time.Duration(i) * 6 * time.Minute)
		topic := acc + "/" + client + "/state/" + strconv.Itoa(i%3)
		recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: client, Topic: topic, Class: "state", QoS: 1, PublishedQoS: 1,
			Payload: fmt.Appendf(nil, "payload-%s-%d", client, at.UnixMicro()), Received: at})
	}
	noErr(t, s.AppendHistory(ctx, recs))
	for _, r := range recs {
		ref.recs = append(ref.recs, fleetmq.Record{ID: r.ID, AccountID: r.AccountID, ClientID: r.ClientID, Topic: r.Topic, Received: r.Received})
	}
	today := t0.Add(48 * time.Hour)
	n, err := s.ReorderHistoryDays(ctx, today)
	if err != nil || n != 2 {
		t.Fatalf("ReorderHistoryDays: %d, %v; want the 2 days that ended", n, err)
	}
	var names []string
	for _, p := range daysOf(t, s) {
		names = append(names, p.name)
	}
	if strings.Join(names, " ") != "history_c20261001 history_c20261002 history_d20261003" {
		t.Fatalf("partitions %v; want the two ended days reordered, today's not", names)
	}
	checkFoldAnswers(t, s, ref, t0.Add(-time.Second), "reordered")
	// The rows of a reordered day lie in the client index's order.
	rows, err := s.db.QueryContext(ctx, `SELECT account_id, client_id, received_us FROM history_c20261001 ORDER BY ctid`)
	noErr(t, err)
	var prev, key string
	for rows.Next() {
		var acc, client string
		var at int64
		noErr(t, rows.Scan(&acc, &client, &at))
		if key = fmt.Sprintf("%s %s %020d", acc, client, at); key < prev {
			t.Fatalf("row %q lies after %q", key, prev)
		}
		prev = key
	}
	noErr(t, rows.Err())
	if n, err := s.ReorderHistoryDays(ctx, today); err != nil || n != 0 {
		t.Errorf("a second reorder: %d, %v; want nothing to do", n, err)
	}

	// A reader holds history: the swap never gets its lock.
	reorderSwapPause = 10 * time.Millisecond
	defer func() { reorderSwapPause = time.Second }()
	reader, err := s.db.BeginTx(ctx, nil)
	noErr(t, err)
	_, err = reader.ExecContext(ctx, `LOCK TABLE history IN ACCESS SHARE MODE`)
	noErr(t, err)
	n, err = s.ReorderHistoryDays(ctx, today.Add(24*time.Hour))
	noErr(t, reader.Rollback())
	if err != nil || n != 0 {
		t.Fatalf("a reorder whose swap cannot lock history: %d, %v; want none done, no error", n, err)
	}
	late := today.Add(time.Hour)
	r := &fleetmq.Record{AccountID: foldAccA, ClientID: "dev-0", Topic: foldAccA + "/dev-0/state/x", Class: "state", QoS: 1, PublishedQoS: 1,
		Payload: fmt.Appendf(nil, "payload-dev-0-%d", late.UnixMicro()), Received: late}
	if err := s.AppendHistory(ctx, []*fleetmq.Record{r}); err != nil {
		t.Fatalf("a record of the day whose reorder gave up: %v", err)
	}
	ref.recs = append(ref.recs, fleetmq.Record{ID: r.ID, AccountID: r.AccountID, ClientID: r.ClientID, Topic: r.Topic, Received: r.Received})
	if names := daysOf(t, s); names[2].name != "history_d20261003" {
		t.Errorf("after the given-up reorder: %+v", names)
	}
	var copies int
	noErr(t, s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_class WHERE relname = 'history_c20261003'`).Scan(&copies))
	if copies != 0 {
		t.Error("the given-up reorder left its copy")
	}
	checkFoldAnswers(t, s, ref, t0.Add(-time.Second), "after a given-up reorder")
	if n, err := s.ReorderHistoryDays(ctx, today.Add(24*time.Hour)); err != nil || n != 1 {
		t.Errorf("the next reorder: %d, %v; want today's day done", n, err)
	}
	checkFoldAnswers(t, s, ref, t0.Add(-time.Second), "all reordered")
}

// TestDaysSurviveOperatorsAndInterruptions: an index an operator added to
// history does not stop new days (the day gets it too); a day an operator
// began detaching, and a day's table left detached by an interrupted drop,
// are attached back with their records rather than lost.
func TestDaysSurviveOperatorsAndInterruptions(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	r := func(acc string, at time.Time) []*fleetmq.Record { return []*fleetmq.Record{dayRecord(acc, at)} }
	count := func(acc string) int {
		return len(queryPositions(t, s, fleetmq.HistoryQuery{AccountID: acc, ClientID: "c"}, 0))
	}
	noErr(t, exec(s.db, `CREATE INDEX fleet_ops_topic ON history (topic)`))
	noErr(t, exec(s.db, `CREATE UNIQUE INDEX "Ops Unique" ON history (received_us, id)`))
	now := time.Now().UTC().Truncate(time.Microsecond)
	recent := now.Add(-48 * time.Hour)
	noErr(t, s.AppendHistory(ctx, r(foldAccA, recent)))
	var indexes int
	noErr(t, s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_indexes WHERE tablename = $1`, dayTable(dayStart(recent.UnixMicro()))).Scan(&indexes))
	if indexes != 6 {
		t.Errorf("the day has %d indexes; want history's 4 and the operator's 2", indexes)
	}

	// An operator's DETACH CONCURRENTLY of the recent day, timed out by a
	// reader: the next drop attaches it back (it is not old enough to go,
	// whoever's its records are).
	reader, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	noErr(t, err)
	var n int
	noErr(t, reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM history`).Scan(&n))
	op, err := s.db.Conn(ctx)
	noErr(t, err)
	_, err = op.ExecContext(ctx, `SET statement_timeout = '300ms'`)
	noErr(t, err)
	if _, err := op.ExecContext(ctx, `ALTER TABLE history DETACH PARTITION `+dayTable(dayStart(recent.UnixMicro()))+` CONCURRENTLY`); err == nil {
		t.Fatal("the operator's detach did not wait for the reader")
	}
	noErr(t, op.Close())
	noErr(t, reader.Rollback())
	if dropped, err := s.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), nil); err != nil || dropped != 0 || count(foldAccA) != 1 {
		t.Fatalf("after a drop with the recent day detaching: dropped %d, %v, A has %d records; want 0 and 1", dropped, err, count(foldAccA))
	}

	// A day's table left detached: a late record of the day brings it
	// back with its records.
	old := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	noErr(t, s.AppendHistory(ctx, r(foldAccB, old)))
	noErr(t, exec(s.db, `ALTER TABLE history DETACH PARTITION `+dayTable(dayStart(old.UnixMicro()))))
	s.days.set(nil)
	noErr(t, s.AppendHistory(ctx, r(foldAccB, old.Add(time.Second))))
	if got := count(foldAccB); got != 2 {
		t.Errorf("after a late record of a day left detached: B has %d records; want 2", got)
	}
	// Left detached with no record coming: the next drop attaches it back
	// (B keeps it) rather than leaving it out of history.
	noErr(t, exec(s.db, `ALTER TABLE history DETACH PARTITION `+dayTable(dayStart(old.UnixMicro()))))
	keep := map[string]time.Time{foldAccB: old.Add(-time.Hour)}
	if _, err := s.DropHistoryDays(ctx, now.Add(-7*24*time.Hour), keep); err != nil || count(foldAccB) != 2 {
		t.Fatalf("after a drop with a day left detached: %v, B has %d records; want 2", err, count(foldAccB))
	}
}

// TestLatestLocksOnlyItsDays: a client's latest records are read from the
// days that hold them, and only those days' tables and indexes are
// locked, also once the statement has run often enough for PostgreSQL to
// consider a generic plan: with 30 days kept, a read that locked every
// day would hold 150 locks and more.
func TestLatestLocksOnlyItsDays(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	first := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	for d := range 30 {
		noErr(t, s.PrepareHistoryDays(ctx, first.Add(time.Duration(d)*24*time.Hour)))
	}
	var recs []*fleetmq.Record
	for i, at := range []time.Time{first.Add(3 * 24 * time.Hour), first.Add(20 * 24 * time.Hour)} {
		for _, acc := range []string{foldAccA, foldAccB} {
			recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: "c", Topic: fmt.Sprintf("%s/c/state/%d", acc, i), Class: "state",
				QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "payload-c-%d", at.UnixMicro()), Received: at})
		}
	}
	noErr(t, s.AppendHistory(ctx, recs))
	tx, err := s.reads.BeginTx(ctx, nil)
	noErr(t, err)
	defer tx.Rollback()
	for range 8 {
		got, err := s.latestHistory(ctx, tx, foldAccA, "c")
		noErr(t, err)
		if len(got) != 2 || got[0].AccountID != foldAccA || got[1].AccountID != foldAccA || got[0].Topic >= got[1].Topic {
			t.Fatalf("latest of A/c: %+v; want A's two topics in order", got)
		}
	}
	var locked int
	noErr(t, tx.QueryRowContext(ctx, `SELECT COUNT(DISTINCT relation) FROM pg_locks
		WHERE pid = pg_backend_pid() AND locktype = 'relation' AND relation::regclass::text ~ '^history_d[0-9]{8}'`).Scan(&locked))
	if locked == 0 || locked > 2*6 {
		t.Errorf("the reads locked %d relations of history's days; want those of the 2 days holding the records (at most 12)", locked)
	}
}

// TestReorderClosesTheDayWhileItCopies: a record of the day stored while
// the reorder copies it is refused for a while (the writer retries it),
// never written to the table being replaced; once the copy is in place it
// goes in, and the replaced table is gone. A reorder that ends short of
// its swap (here its context) opens the day again and drops its copy.
func TestReorderClosesTheDayWhileItCopies(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	day := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{dayRecord(foldAccA, day)}))
	late := dayRecord(foldAccA, day.Add(time.Minute))
	var during error
	afterReorderCopy = func(string) { during = s.AppendHistory(ctx, []*fleetmq.Record{late}) }
	defer func() { afterReorderCopy = nil }()
	if n, err := s.ReorderHistoryDays(ctx, day.Add(24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("ReorderHistoryDays: %d, %v", n, err)
	}
	if during == nil || !s.TransientError(during) {
		t.Fatalf("a record of the day during its copy: %v; want a refusal to retry", during)
	}
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{late}))
	if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "c"}, 0); len(got) != 2 {
		t.Fatalf("after the reorder: %d records; want the day's and the late one", len(got))
	}
	var old bool
	noErr(t, s.db.QueryRowContext(ctx, `SELECT to_regclass('history_d20261001') IS NOT NULL`).Scan(&old))
	if old {
		t.Error("the replaced table is still there")
	}

	// Cut short: the context ends after the copy.
	next := day.Add(24 * time.Hour)
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{dayRecord(foldAccA, next)}))
	short, cancel := context.WithCancel(ctx)
	afterReorderCopy = func(string) { cancel() }
	if _, err := s.ReorderHistoryDays(short, next.Add(24*time.Hour)); err == nil {
		t.Fatal("a reorder whose context ended reported no error")
	}
	afterReorderCopy = nil
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{dayRecord(foldAccA, next.Add(time.Minute))}))
	var copyLeft bool
	noErr(t, s.db.QueryRowContext(ctx, `SELECT to_regclass('history_c20261002') IS NOT NULL`).Scan(&copyLeft))
	if copyLeft {
		t.Error("the cut-short reorder left its copy")
	}
}

// TestDropRemovesACopyNeverSwappedIn: a reorder's copy left behind (its
// process died before the swap) is dropped by the next drop; the day it
// copied stays, with its records.
func TestDropRemovesACopyNeverSwappedIn(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	day := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{dayRecord(foldAccA, day)}))
	noErr(t, exec(s.db, `CREATE TABLE history_c20261001 (LIKE history INCLUDING DEFAULTS)`))
	noErr(t, exec(s.db, `INSERT INTO history_c20261001 SELECT * FROM history_d20261001`))
	if _, err := s.DropHistoryDays(ctx, day.Add(-24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	var left bool
	noErr(t, s.db.QueryRowContext(ctx, `SELECT to_regclass('history_c20261001') IS NOT NULL`).Scan(&left))
	if parts := daysOf(t, s); left || len(parts) != 1 || parts[0].name != "history_d20261001" {
		t.Fatalf("copy left %v, partitions %+v; want the copy gone and the day kept", left, parts)
	}
	if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "c"}, 0); len(got) != 1 {
		t.Fatalf("A has %d records; want 1", len(got))
	}
}

// TestWriterLeavesADayADropHolds: while a process drops or reorders days,
// the writer does not attach back a table of a day that it finds
// detached (the drop may have just detached it to drop it): the record
// waits (a refusal to retry), and goes in, with the table's records, once
// the drop is over.
func TestWriterLeavesADayADropHolds(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	day := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{dayRecord(foldAccA, day)}))
	noErr(t, exec(s.db, `ALTER TABLE history DETACH PARTITION history_d20261001`))
	s.days.set(nil)
	upkeep, err := s.db.Conn(ctx)
	noErr(t, err)
	defer upkeep.Close()
	_, err = upkeep.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, historyDropLock)
	noErr(t, err)
	late := []*fleetmq.Record{dayRecord(foldAccA, day.Add(time.Minute))}
	if err := s.AppendHistory(ctx, late); err == nil || !s.TransientError(err) {
		t.Fatalf("a record of a detached day while a drop holds the days: %v; want a refusal to retry", err)
	}
	if parts := daysOf(t, s); len(parts) != 0 {
		t.Fatalf("the writer attached %+v while the drop held the days", parts)
	}
	_, err = upkeep.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, historyDropLock)
	noErr(t, err)
	noErr(t, s.AppendHistory(ctx, late))
	if got := queryPositions(t, s, fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "c"}, 0); len(got) != 2 {
		t.Fatalf("after the drop: A has %d records; want the day's and the late one", len(got))
	}
}

// TestDayLeftClosedIsOpened: a day a reorder left closed (its process died
// between closing the day and swapping the copy in) takes records again
// once any process's retention upkeep runs.
func TestDayLeftClosedIsOpened(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t, 1)[0]
	day := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	noErr(t, s.AppendHistory(ctx, []*fleetmq.Record{dayRecord(foldAccA, day)}))
	noErr(t, exec(s.db, `CREATE TRIGGER history_day_closed BEFORE INSERT OR UPDATE OR DELETE ON history_d20261001
		FOR EACH ROW EXECUTE FUNCTION history_day_closed()`))
	late := []*fleetmq.Record{dayRecord(foldAccA, day.Add(time.Second))}
	if err := s.AppendHistory(ctx, late); err == nil || !s.TransientError(err) {
		t.Fatalf("a record of the closed day: %v; want a refusal to retry", err)
	}
	if _, err := s.DropHistoryDays(ctx, day.Add(-24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	noErr(t, s.AppendHistory(ctx, late))
}
