package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetmq/fleetmq"
)

// History days (PostgreSQL): history is partitioned by range of
// received_us, one table per UTC day, history_dYYYYMMDD (migration 0011;
// the table that migration found is the partition history_before_days).
//
// A day's table is created detached and then attached: ATTACH PARTITION
// takes a lock on history that readers and writers do not wait for, where
// CREATE TABLE ... PARTITION OF would make every query wait behind the
// longest export. Retention passes create today's and tomorrow's tables
// ahead; the history writer creates any other day a batch needs (a record
// of a day before the oldest kept, or a clock far ahead), under an
// advisory lock so that processes sharing the database create each once.
//
// Dropping a day detaches it CONCURRENTLY (no lock that queries wait for;
// it waits for the queries that may read it) and then drops the detached
// table. An hour after a day ends it is rewritten in the client index's
// order (ReorderHistoryDays). Drops and reorders run under one session
// lock (upkeepConn), one process at a time.

var _ fleetmq.HistoryDays = (*Store)(nil)

// dayMicros is a UTC day in received_us units.
const dayMicros = int64(24 * time.Hour / time.Microsecond)

// Advisory lock keys: creating days (per transaction) and their upkeep,
// drops and reorders (per session, tried: one process at a time, the
// others skip).
const (
	historyDaysLock    = migrationLock + 1
	historyDropLock    = migrationLock + 2
	historyDaysTimeout = "10s" // lock_timeout of the DDL
)

// dayPartition is one partition of history: received_us in [lo, hi).
// MINVALUE is math.MinInt64 and MAXVALUE math.MaxInt64. Only partitions
// fleetmq makes (managedTable) are dropped or reordered; another, made by
// hand, only covers its range.
type dayPartition struct {
	name    string
	lo, hi  int64
	managed bool
	// SQLite: a day rewritten in the client index's order
	// (history_cYYYYMMDD), which is its own client index.
	clustered bool
}

// managedTable matches the names of the tables fleetmq makes for history:
// days, reordered days, and the table migration 0011 found. Their names
// need no quoting in SQL.
var managedTable = regexp.MustCompile(`^history_(d\d{8}|c\d{8}|before_days)$`)

// historyDays is the partitions as this process last read them, so that
// the writer asks the database only for a day it has not seen.
type historyDays struct {
	mu    sync.Mutex
	parts []dayPartition // by lo
	// SQLite: the schema's version when parts were read (freshDays), and
	// the lock that rereads take turns on.
	version int64
	reread  sync.Mutex
}

// covers reports whether a known partition holds the time us.
func (d *historyDays) covers(us int64) bool {
	_, ok := d.partition(us)
	return ok
}

func (d *historyDays) set(parts []dayPartition) {
	d.mu.Lock()
	d.parts = parts
	d.mu.Unlock()
}

// dayStart is the start of the UTC day of us.
func dayStart(us int64) int64 {
	q := us / dayMicros
	if us < 0 && us%dayMicros != 0 {
		q--
	}
	return q * dayMicros
}

// dayTable is the name of the partition of the day starting at lo, in
// arrival order: history_dYYYYMMDD.
func dayTable(lo int64) string { return dayName("d", lo) }

// dayName is the name of the day starting at lo, of a kind: "d" in
// arrival order, "c" reordered by client.
func dayName(kind string, lo int64) string {
	return "history_" + kind + time.UnixMicro(lo).UTC().Format("20060102")
}

// partitionBound parses pg_get_expr of a range partition's bound over
// one column, e.g. FOR VALUES FROM (MINVALUE) TO ('1764288000000000').
var partitionBound = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'?(-?\d+)'?)\) TO \((MAXVALUE|'?(-?\d+)'?)\)$`)

// queryer is what readHistoryDays needs of a pool, a connection or a
// transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readHistoryDays returns history's attached partitions, by lo, and those
// left detaching by a DETACH CONCURRENTLY that did not finish.
func readHistoryDays(ctx context.Context, q queryer) (parts, pending []dayPartition, err error) {
	rows, err := q.QueryContext(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'history'::regclass`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name, bound string
			detaching   bool
		)
		if err := rows.Scan(&name, &bound, &detaching); err != nil {
			return nil, nil, err
		}
		m := partitionBound.FindStringSubmatch(bound)
		if m == nil {
			continue // a DEFAULT partition, made by hand: it covers no day
		}
		p := dayPartition{name: name, lo: math.MinInt64, hi: math.MaxInt64, managed: managedTable.MatchString(name)}
		if m[1] != "MINVALUE" {
			if p.lo, err = strconv.ParseInt(m[2], 10, 64); err != nil {
				return nil, nil, fmt.Errorf("history partition %s: bound %q: %w", name, bound, err)
			}
		}
		if m[3] != "MAXVALUE" {
			if p.hi, err = strconv.ParseInt(m[4], 10, 64); err != nil {
				return nil, nil, fmt.Errorf("history partition %s: bound %q: %w", name, bound, err)
			}
		}
		if detaching {
			pending = append(pending, p)
			continue
		}
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(a, b dayPartition) int { return cmp.Compare(a.lo, b.lo) })
	return parts, pending, rows.Err()
}

// ensureHistoryDays makes sure a partition holds each record's time,
// creating the days that none does. It reads nothing from the database
// while every record falls in a day this process knows.
func (s *Store) ensureHistoryDays(ctx context.Context, recs []*fleetmq.Record) error {
	var buf [2]int64 // a batch spans one day, two around midnight
	days := buf[:0]
	for _, r := range recs {
		if day := dayStart(r.Received.UnixMicro()); !slices.Contains(days, day) {
			days = append(days, day)
		}
	}
	return s.ensureDays(ctx, days...)
}

// ensureDays creates the days starting at the given times that no
// partition this process knows covers (every bound is a UTC midnight, so
// a day's start is covered when the day is).
func (s *Store) ensureDays(ctx context.Context, days ...int64) error {
	var missing []int64
	for _, lo := range days {
		if !s.days.covers(lo) {
			missing = append(missing, lo)
		}
	}
	switch {
	case len(missing) == 0:
		return nil
	case s.dialect == sqliteDialect:
		return s.createSQLiteDays(ctx, missing)
	}
	return s.createHistoryDays(ctx, missing)
}

// createHistoryDays creates and attaches the partitions of the days
// starting at the given times that no partition covers yet, in one
// transaction under historyDaysLock, and then rereads the partitions.
func (s *Store) createHistoryDays(ctx context.Context, days []int64) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '`+historyDaysTimeout+`'`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, historyDaysLock); err != nil {
			return err
		}
		parts, _, err := readHistoryDays(ctx, tx)
		if err != nil {
			return err
		}
		// An index that cannot be read is left to ATTACH PARTITION, which
		// builds it on the day's empty table: a new day never waits on it.
		indexes, _ := historyIndexes(ctx, tx)
		for _, lo := range days {
			if covered(parts, lo) {
				continue
			}
			hi := lo + dayMicros // every bound is a UTC midnight
			name := dayTable(lo)
			// A table of the day left detached (a drop interrupted between
			// its detach and its DROP) is attached back with its records,
			// but only while no process drops or reorders days: the table
			// may be one a drop in progress has just detached.
			var left bool
			if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&left); err != nil {
				return err
			}
			if left {
				var free bool
				if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock($1)`, historyDropLock).Scan(&free); err != nil {
					return err
				}
				if !free {
					return errDayBusy
				}
			} else {
				if _, err := tx.ExecContext(ctx, `CREATE TABLE `+name+` (LIKE history INCLUDING DEFAULTS)`); err != nil {
					return fmt.Errorf("create %s: %w", name, err)
				}
				for _, ix := range indexes {
					if _, err := tx.ExecContext(ctx, ix.on(name)); err != nil {
						return fmt.Errorf("index %s: %w", name, err)
					}
				}
			}
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE history ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`, name, lo, hi)); err != nil {
				return fmt.Errorf("attach %s: %w", name, err)
			}
			parts = append(parts, dayPartition{name: name, lo: lo, hi: hi, managed: true})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("history days: %w", err)
	}
	if err := s.rereadDays(ctx, s.db); err != nil {
		return fmt.Errorf("history days: %w", err)
	}
	return nil
}

// errDayBusy: a record's day is the table a drop or a reorder is working
// on; the writer tries again shortly (Store.TransientError).
var errDayBusy = errors.New("history day busy: a drop or reorder of it is in progress; try again")

// historyIndex is one of history's partitioned indexes, to be made on a
// day's table before it is attached (ATTACH PARTITION then adopts it
// rather than building its own): the day's index is named after the day
// and the index, history_d20261127_client_time for history_client_time,
// as history_before_days' are.
type historyIndex struct {
	unique string // "UNIQUE " or ""
	name   string // without "history_"
	def    string // after USING
}

// on is the CREATE INDEX statement of the index on the table.
func (ix historyIndex) on(table string) string {
	return "CREATE " + ix.unique + "INDEX " + table + "_" + ix.name + " ON " + table + " USING " + ix.def
}

// indexDef parses pg_indexes.indexdef of an index on history: its name
// (quoted or not) and what follows USING.
var indexDef = regexp.MustCompile(`^CREATE (UNIQUE )?INDEX (.+?) ON ONLY (?:.+?\.)?history USING (.+)$`)

// plainIndexName is an index name that a day's index name can be made of.
var plainIndexName = regexp.MustCompile(`^(?:history_)?(\w+)$`)

// historyIndexes reads history's partitioned indexes. An index whose name
// needs quoting (an operator's) is named after its place in the list; one
// whose definition does not parse is an error, since a reorder's swap
// would otherwise build it while it holds history.
func historyIndexes(ctx context.Context, q queryer) ([]historyIndex, error) {
	rows, err := q.QueryContext(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'history' ORDER BY indexname`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []historyIndex
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			return nil, err
		}
		m := indexDef.FindStringSubmatch(def)
		if m == nil {
			return nil, fmt.Errorf("history index: unexpected definition %q", def)
		}
		name := fmt.Sprintf("ix%d", len(out)+1)
		if n := plainIndexName.FindStringSubmatch(m[2]); n != nil {
			name = n[1]
		}
		out = append(out, historyIndex{unique: m[1], name: name, def: m[3]})
	}
	return out, rows.Err()
}

// queryNames returns the one text column of a query's rows.
func queryNames(ctx context.Context, q queryer, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, rows.Err()
}

// covered reports whether one of parts holds the time us.
func covered(parts []dayPartition, us int64) bool {
	for _, p := range parts {
		if p.lo <= us && us < p.hi {
			return true
		}
	}
	return false
}

// PrepareHistoryDays implements fleetmq.HistoryDays: it creates the
// partitions of now's UTC day and the next.
func (s *Store) PrepareHistoryDays(ctx context.Context, now time.Time) error {
	today := dayStart(now.UnixMicro())
	return s.ensureDays(ctx, today, today+dayMicros)
}

// upkeepConn returns a connection holding historyDropLock, the session
// lock under which one process at a time drops and reorders days, and the
// function that releases both; nil if another process holds the lock.
// It first opens again any day a reorder left closed.
func (s *Store) upkeepConn(ctx context.Context) (*sql.Conn, func(), error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	var locked bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, historyDropLock).Scan(&locked); err != nil || !locked {
		conn.Close()
		return nil, nil, err
	}
	release := func() {
		conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, historyDropLock)
		conn.Close()
	}
	// A day left closed by a reorder that stopped midway (its process
	// died: no reorder runs while this lock is free) is opened again, so
	// its late records and row deletes do not wait for the next reorder.
	rows, err := conn.QueryContext(ctx, `SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		WHERE t.tgname = 'history_day_closed' AND t.tgenabled <> 'D'`)
	if err != nil {
		release()
		return nil, nil, err
	}
	var closed []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			release()
			return nil, nil, err
		}
		closed = append(closed, name)
	}
	rows.Close()
	for _, name := range closed {
		if !managedTable.MatchString(name) {
			continue
		}
		if _, err := conn.ExecContext(ctx, `ALTER TABLE `+name+` DISABLE TRIGGER history_day_closed`); err != nil {
			release()
			return nil, nil, fmt.Errorf("open %s again: %w", name, err)
		}
	}
	return conn, release, nil
}

// DropHistoryDays implements fleetmq.HistoryDays. A day that ends at or
// before before is dropped when none of the accounts that keep part of it
// (expired before its end) has a record in it, with the latest-per-topic
// entries that pointed into it. On PostgreSQL it is detached, checked
// again (a record may have gone in while the detach waited), then
// dropped, or attached back; only one process drops at a time: another
// that tries meanwhile drops nothing (the next pass will). On SQLite each
// day is checked and dropped in a transaction of its own
// (dropSQLiteDays).
func (s *Store) DropHistoryDays(ctx context.Context, before time.Time, expired map[string]time.Time) (_ int, err error) {
	defer wrap(&err, "drop history days")
	if s.dialect != postgresDialect {
		return s.dropSQLiteDays(ctx, before, expired)
	}
	conn, release, err := s.upkeepConn(ctx)
	if conn == nil || err != nil {
		return 0, err
	}
	defer release()

	if err := attachLeftovers(ctx, conn); err != nil {
		return 0, err
	}
	parts, pending, err := readHistoryDays(ctx, conn)
	if err != nil {
		return 0, err
	}
	var defaultPart string
	if err := conn.QueryRowContext(ctx, `SELECT COALESCE(MAX(c.relname), '') FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'history'::regclass AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'`).Scan(&defaultPart); err != nil {
		return 0, err
	}
	if defaultPart != "" {
		return 0, fmt.Errorf("history has a DEFAULT partition, %s: PostgreSQL cannot detach a day without blocking every query while one exists; drop it (or attach it with a range) to let retention drop days", defaultPart)
	}
	end := before.UnixMicro()
	dropped := 0
	// A detach that did not finish (a pass's that timed out, or an
	// operator's) is finished, and the day judged as any other: one that
	// ends after before is attached back whatever it holds.
	for _, p := range pending {
		if !p.managed {
			continue
		}
		if err := withStatementTimeout(ctx, conn, `ALTER TABLE history DETACH PARTITION `+p.name+` FINALIZE`); err != nil {
			return dropped, fmt.Errorf("finish detaching %s: %w", p.name, err)
		}
		ok, err := dropDetached(ctx, conn, p, expired, p.hi > end)
		if err != nil {
			return dropped, err
		}
		if ok {
			dropped++
		}
	}
	for _, p := range parts {
		if p.hi > end {
			break // by lo, and partitions do not overlap: the rest end later
		}
		if !p.managed {
			continue
		}
		if kept, err := keptIn(ctx, conn, p, expired); err != nil || kept {
			if err != nil {
				return dropped, err
			}
			continue
		}
		if err := withStatementTimeout(ctx, conn, `ALTER TABLE history DETACH PARTITION `+p.name+` CONCURRENTLY`); err != nil {
			return dropped, fmt.Errorf("detach %s: %w", p.name, err)
		}
		ok, err := dropDetached(ctx, conn, p, expired, false)
		if err != nil {
			return dropped, err
		}
		if ok {
			dropped++
		}
	}
	return dropped, s.rereadDays(ctx, conn)
}

// rereadDays sets the days this process knows from the database.
func (s *Store) rereadDays(ctx context.Context, q queryer) error {
	parts, _, err := readHistoryDays(ctx, q)
	if err == nil {
		s.days.set(parts)
	}
	return err
}

// detachTimeout bounds a DETACH ... CONCURRENTLY or FINALIZE, which wait
// for every transaction that may read the day (a variable for tests). One
// that times out leaves the day detaching, and the next drop finishes it.
var detachTimeout = "30s"

// withStatementTimeout runs a detach, waiting at most detachTimeout. The
// timeout is the server's (statement_timeout), so the connection and its
// advisory lock stay.
func withStatementTimeout(ctx context.Context, conn *sql.Conn, q string) error {
	if _, err := conn.ExecContext(ctx, `SET statement_timeout = '`+detachTimeout+`'`); err != nil {
		return err
	}
	_, err := conn.ExecContext(ctx, q)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `RESET statement_timeout`); err == nil {
		err = rerr
	}
	return err
}

// leftoverTable matches the tables of days and reordered days; one that is
// not a partition of history was left by an interrupted drop or reorder.
var leftoverTable = regexp.MustCompile(`^history_[dc](\d{8})$`)

// attachLeftovers attaches back the tables of days left detached (a drop
// interrupted between its detach and its DROP TABLE) whose day no
// partition covers, with their records, for the drop to judge again; one
// whose day a partition covers (a reorder's copy that was never swapped
// in, or a day that was being dropped and was made again since) is
// dropped.
func attachLeftovers(ctx context.Context, conn *sql.Conn) error {
	parts, _, err := readHistoryDays(ctx, conn)
	if err != nil {
		return err
	}
	names, err := queryNames(ctx, conn, `SELECT c.relname FROM pg_class c
		WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace AND c.relname ~ '^history_[dc][0-9]{8}$'
			AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)`)
	if err != nil {
		return err
	}
	for _, name := range names {
		m := leftoverTable.FindStringSubmatch(name)
		day, err := time.Parse("20060102", m[1])
		if err != nil {
			continue
		}
		lo := day.UnixMicro()
		q := fmt.Sprintf(`ALTER TABLE history ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`, name, lo, lo+dayMicros)
		if covered(parts, lo) {
			q = `DROP TABLE ` + name
		} else {
			parts = append(parts, dayPartition{name: name, lo: lo, hi: lo + dayMicros, managed: true})
		}
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("left table %s: %w", name, err)
		}
	}
	return nil
}

// keptIn reports whether the table of the day p holds a record of an
// account that keeps part of the day.
func keptIn(ctx context.Context, conn *sql.Conn, p dayPartition, expired map[string]time.Time) (bool, error) {
	var keepers []string
	for id, at := range expired {
		if at.UnixMicro() < p.hi {
			keepers = append(keepers, id)
		}
	}
	if len(keepers) == 0 {
		return false, nil
	}
	var kept bool
	err := conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+p.name+` WHERE account_id = ANY($1))`, keepers).Scan(&kept)
	return kept, err
}

// dropDetached drops the detached table of the day p, and the
// latest-per-topic entries that point into it (an entry's received_us is
// its record's), unless keep or it holds a record an account keeps: then
// it attaches it back and reports false.
func dropDetached(ctx context.Context, conn *sql.Conn, p dayPartition, expired map[string]time.Time, keep bool) (bool, error) {
	kept := keep
	if !kept {
		var err error
		if kept, err = keptIn(ctx, conn, p, expired); err != nil {
			return false, err
		}
	}
	if kept {
		_, err := conn.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE history ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, p.name, bound(p.lo), bound(p.hi)))
		return false, err
	}
	// One transaction: a drop cut short between the two would leave the
	// day's records without their latest entries, and the next pass
	// attaches a table left detached back (attachLeftovers). The entries
	// that go are those of the day that name no record of history: a
	// record of the day stored late, into a day made again since the
	// detach, keeps its own.
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM history_latest l WHERE l.received_us >= $1 AND l.received_us < $2
		AND NOT EXISTS (SELECT 1 FROM history h WHERE h.received_us >= $1 AND h.received_us < $2
			AND h.account_id = l.account_id AND h.received_us = l.received_us AND h.id = l.record_id)`, p.lo, p.hi); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `DROP TABLE `+p.name); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// bound is a partition bound's SQL: MINVALUE, MAXVALUE or the number.
func bound(us int64) string {
	switch us {
	case math.MinInt64:
		return "MINVALUE"
	case math.MaxInt64:
		return "MAXVALUE"
	}
	return strconv.FormatInt(us, 10)
}

// ReorderHistoryDays implements fleetmq.HistoryDays. On PostgreSQL it
// rewrites each day that ended before before and is still in arrival
// order (history_dYYYYMMDD) in the order of the client index (account,
// client, time), as history_cYYYYMMDD, so that one client's records of a
// day lie on few pages instead of one page each: the newest page of a
// client and its exports read a fraction of the pages. For each day:
//
//  1. a trigger closes the day's table to changes (it waits for the
//     transactions writing it; a record of the day arriving later is
//     refused and retried by the writer until step 3);
//  2. the copy is written in that order, with its indexes and a CHECK of
//     the day's bound (so that attaching it reads nothing);
//  3. one short transaction swaps the copy in for the day: it waits at
//     most reorderLockTimeout for the queries on history, and while it
//     holds its lock, history's queries and commits wait for it (a few
//     milliseconds). After reorderSwapTries tries without the lock, the
//     day is opened again and the copy dropped; the next call starts over.
//
// It returns how many days it reordered. Only one process reorders at a
// time. On SQLite see reorderSQLiteDays.
func (s *Store) ReorderHistoryDays(ctx context.Context, before time.Time) (_ int, err error) {
	defer wrap(&err, "reorder history days")
	if s.dialect != postgresDialect {
		return s.reorderSQLiteDays(ctx, before)
	}
	conn, release, err := s.upkeepConn(ctx)
	if conn == nil || err != nil {
		return 0, err
	}
	defer release()
	parts, _, err := readHistoryDays(ctx, conn)
	if err != nil {
		return 0, err
	}
	indexes, err := historyIndexes(ctx, conn)
	if err != nil {
		return 0, err
	}
	done := 0
	var firstErr error // a day that fails does not keep the others from going
	for _, p := range parts {
		if p.hi > before.UnixMicro() {
			break
		}
		if !p.managed || p.name != dayTable(p.lo) {
			continue // reordered already, history_before_days, or not fleetmq's
		}
		swapped, err := reorderDay(ctx, conn, p, indexes)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", p.name, err)
		}
		if swapped {
			done++
		}
	}
	if err := s.rereadDays(ctx, conn); firstErr == nil {
		firstErr = err
	}
	return done, firstErr
}

// reorderLockTimeout bounds how long a reorder's swap waits for history's
// queries, and so how long the queries and commits queued behind it wait.
const reorderLockTimeout = "200ms"

// reorderDay is ReorderHistoryDays for one day; it reports whether the
// swap took place.
func reorderDay(ctx context.Context, conn *sql.Conn, p dayPartition, indexes []historyIndex) (swapped bool, err error) {
	copyName := dayName("c", p.lo)
	// Every step takes locks that queries do not wait for (the trigger's
	// is one that only writers of the day conflict with), each waiting at
	// most historyDaysTimeout.
	if _, err := conn.ExecContext(ctx, `SET lock_timeout = '`+historyDaysTimeout+`'`); err != nil {
		return false, err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `RESET lock_timeout`)
	// Whatever ends a reorder short of its swap (an error, a context that
	// ended, no lock in time), the day is opened again (DISABLE, which
	// queries do not wait for, where DROP TRIGGER would make them) and the
	// copy dropped: the day may change from then on, so a later call
	// copies it afresh. Should this fail too, the next upkeep opens it
	// (upkeepConn).
	defer func() {
		if swapped {
			return
		}
		bg := context.WithoutCancel(ctx)
		for _, q := range []string{`ALTER TABLE ` + p.name + ` DISABLE TRIGGER history_day_closed`, `DROP TABLE IF EXISTS ` + copyName} {
			if _, cerr := conn.ExecContext(bg, q); cerr != nil {
				err = errors.Join(err, fmt.Errorf("open %s again: %w", p.name, cerr))
			}
		}
	}()
	steps := []string{
		`CREATE OR REPLACE TRIGGER history_day_closed BEFORE INSERT OR UPDATE OR DELETE ON ` + p.name + ` FOR EACH ROW EXECUTE FUNCTION history_day_closed()`,
		`ALTER TABLE ` + p.name + ` ENABLE TRIGGER history_day_closed`,
		`DROP TABLE IF EXISTS ` + copyName, // an interrupted reorder's
		`CREATE TABLE ` + copyName + ` (LIKE history INCLUDING DEFAULTS)`,
		fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s_bound CHECK (received_us >= %d AND received_us < %d)`, copyName, copyName, p.lo, p.hi),
		`INSERT INTO ` + copyName + ` SELECT * FROM ` + p.name + ` ORDER BY account_id, client_id, received_us, id`,
	}
	for _, ix := range indexes {
		steps = append(steps, ix.on(copyName))
	}
	steps = append(steps, `ANALYZE `+copyName)
	for _, q := range steps {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return false, fmt.Errorf("%.60s: %w", q, err)
		}
	}
	if afterReorderCopy != nil {
		afterReorderCopy(p.name)
	}
	for try := range reorderSwapTries {
		if try > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(reorderSwapPause):
			}
		}
		if err := ctx.Err(); err != nil {
			// Before BeginTx: a transaction begun with an ended context
			// may be left open on the connection, and the clean-up's
			// statements would be rolled back with it.
			return false, err
		}
		if swapped, err = swapDay(ctx, conn, p, copyName); err != nil || swapped {
			return swapped, err
		}
	}
	return false, nil
}

// afterReorderCopy, when set (by tests), runs between a reorder's copy and
// its swap.
var afterReorderCopy func(day string)

// reorderSwapTries is how many times a reorder tries to swap its copy in,
// reorderSwapPause apart (a variable for tests).
const reorderSwapTries = 5

var reorderSwapPause = time.Second

// swapDay puts the reordered copy in place of the day p, in one
// transaction; it reports false if it could not get the lock in time.
func swapDay(ctx context.Context, conn *sql.Conn, p dayPartition, copyName string) (bool, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	swap := []string{
		`SET LOCAL lock_timeout = '` + reorderLockTimeout + `'`,
		`ALTER TABLE history DETACH PARTITION ` + p.name,
		fmt.Sprintf(`ALTER TABLE history ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, copyName, bound(p.lo), bound(p.hi)),
		`ALTER TABLE ` + copyName + ` DROP CONSTRAINT ` + copyName + `_bound`,
		`DROP TABLE ` + p.name,
	}
	for _, q := range swap {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "55P03" {
				return false, nil // lock_not_available
			}
			return false, fmt.Errorf("%.60s: %w", q, err)
		}
	}
	return true, tx.Commit()
}
