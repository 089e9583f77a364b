package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

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
// table.

var _ fleetmq.HistoryDays = (*Store)(nil)

// dayMicros is a UTC day in received_us units.
const dayMicros = int64(24 * time.Hour / time.Microsecond)

// Advisory lock keys: creating days (per transaction) and dropping them
// (per session, tried: one process drops at a time, the others skip).
const (
	historyDaysLock    = migrationLock + 1
	historyDropLock    = migrationLock + 2
	historyDaysTimeout = "10s" // lock_timeout of the DDL
)

// dayPartition is one partition of history: received_us in [lo, hi).
// MINVALUE is math.MinInt64 and MAXVALUE math.MaxInt64.
type dayPartition struct {
	name   string
	lo, hi int64
}

// historyDays is the partitions as this process last read them, so that
// the writer asks the database only for a day it has not seen.
type historyDays struct {
	mu    sync.Mutex
	parts []dayPartition // by lo
}

// covers reports whether a known partition holds the time us.
func (d *historyDays) covers(us int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.parts {
		if p.lo <= us && us < p.hi {
			return true
		}
	}
	return false
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

// dayTable is the name of the partition of the day starting at lo.
func dayTable(lo int64) string {
	return "history_d" + time.UnixMicro(lo).UTC().Format("20060102")
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
			return nil, nil, fmt.Errorf("history partition %s: unexpected bound %q", name, bound)
		}
		p := dayPartition{name: name, lo: math.MinInt64, hi: math.MaxInt64}
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
	var missing []int64
	last := int64(math.MinInt64)
	for _, r := range recs {
		day := dayStart(r.Received.UnixMicro())
		if day == last || slices.Contains(missing, day) {
			continue
		}
		last = day
		if !s.days.covers(r.Received.UnixMicro()) {
			missing = append(missing, day)
		}
	}
	if len(missing) == 0 {
		return nil
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
		indexes, err := historyIndexes(ctx, tx)
		if err != nil {
			return err
		}
		for _, lo := range days {
			if covered(parts, lo) {
				continue
			}
			hi := lo + dayMicros // every bound is a UTC midnight
			name := dayTable(lo)
			if _, err := tx.ExecContext(ctx, `CREATE TABLE `+name+` (LIKE history INCLUDING DEFAULTS)`); err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			for _, ix := range indexes {
				if _, err := tx.ExecContext(ctx, ix.on(name)); err != nil {
					return fmt.Errorf("index %s: %w", name, err)
				}
			}
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE history ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`, name, lo, hi)); err != nil {
				return fmt.Errorf("attach %s: %w", name, err)
			}
			parts = append(parts, dayPartition{name: name, lo: lo, hi: hi})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("history days: %w", err)
	}
	parts, _, err := readHistoryDays(ctx, s.db)
	if err != nil {
		return fmt.Errorf("history days: %w", err)
	}
	s.days.set(parts)
	return nil
}

// historyIndex is one of history's partitioned indexes, to be made on a
// day's table before it is attached (ATTACH PARTITION then adopts it
// rather than building its own): the day's index is named after the day
// and the index, history_d20261127_client_time for history_client_time,
// as history_before_days' are.
type historyIndex struct {
	name string // without "history_"
	def  string // after USING
}

// on is the CREATE INDEX statement of the index on the table.
func (ix historyIndex) on(table string) string {
	return "CREATE INDEX " + table + "_" + ix.name + " ON " + table + " USING " + ix.def
}

// indexDef parses pg_indexes.indexdef of an index on history.
var indexDef = regexp.MustCompile(`^CREATE INDEX history_(\w+) ON ONLY (?:\w+\.)?history USING (.+)$`)

// historyIndexes reads history's partitioned indexes.
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
		out = append(out, historyIndex{name: m[1], def: m[2]})
	}
	return out, rows.Err()
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

// PrepareHistoryDays implements fleetmq.HistoryDays: on PostgreSQL it
// creates the partitions of now's UTC day and the next (SQLite keeps no
// days: it does nothing).
func (s *Store) PrepareHistoryDays(ctx context.Context, now time.Time) error {
	if s.dialect != postgresDialect {
		return nil
	}
	today := dayStart(now.UnixMicro())
	var missing []int64
	for _, lo := range []int64{today, today + dayMicros} {
		if !s.days.covers(lo) {
			missing = append(missing, lo)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return s.createHistoryDays(ctx, missing)
}

// DropHistoryDays implements fleetmq.HistoryDays. On PostgreSQL, a day
// that ends at or before before is dropped when none of the accounts that
// keep part of it (expired before its end) has a record in it: it is
// detached, checked again (a record may have gone in while the detach
// waited), then dropped with the latest-per-topic entries that pointed
// into it, or attached back. Only one process drops at a time: another
// that tries meanwhile drops nothing (the next pass will). On SQLite it
// does nothing.
func (s *Store) DropHistoryDays(ctx context.Context, before time.Time, expired map[string]time.Time) (_ int, err error) {
	defer wrap(&err, "drop history days")
	if s.dialect != postgresDialect {
		return 0, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var locked bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, historyDropLock).Scan(&locked); err != nil {
		return 0, err
	}
	if !locked {
		return 0, nil
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, historyDropLock)

	parts, pending, err := readHistoryDays(ctx, conn)
	if err != nil {
		return 0, err
	}
	dropped := 0
	// A detach that an earlier pass began and did not finish (its process
	// stopped, or its context ended) is finished first, and judged as a
	// day not yet detached.
	for _, p := range pending {
		if _, err := conn.ExecContext(ctx, `ALTER TABLE history DETACH PARTITION `+p.name+` FINALIZE`); err != nil {
			return dropped, fmt.Errorf("finish detaching %s: %w", p.name, err)
		}
		ok, err := dropDetached(ctx, conn, p, expired)
		if err != nil {
			return dropped, err
		}
		if ok {
			dropped++
		}
	}
	end := before.UnixMicro()
	for _, p := range parts {
		if p.hi > end {
			break // by lo, and partitions do not overlap: the rest end later
		}
		if kept, err := keptIn(ctx, conn, p, expired); err != nil || kept {
			if err != nil {
				return dropped, err
			}
			continue
		}
		if _, err := conn.ExecContext(ctx, `ALTER TABLE history DETACH PARTITION `+p.name+` CONCURRENTLY`); err != nil {
			return dropped, fmt.Errorf("detach %s: %w", p.name, err)
		}
		ok, err := dropDetached(ctx, conn, p, expired)
		if err != nil {
			return dropped, err
		}
		if ok {
			dropped++
		}
	}
	if parts, _, err = readHistoryDays(ctx, conn); err != nil {
		return dropped, err
	}
	s.days.set(parts)
	return dropped, nil
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
// its record's), unless it holds a record an account keeps: then it
// attaches it back and reports false.
func dropDetached(ctx context.Context, conn *sql.Conn, p dayPartition, expired map[string]time.Time) (bool, error) {
	kept, err := keptIn(ctx, conn, p, expired)
	if err != nil {
		return false, err
	}
	if kept {
		_, err := conn.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE history ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, p.name, bound(p.lo), bound(p.hi)))
		return false, err
	}
	if _, err := conn.ExecContext(ctx, `DELETE FROM history_latest WHERE received_us >= $1 AND received_us < $2`, p.lo, p.hi); err != nil {
		return false, err
	}
	_, err = conn.ExecContext(ctx, `DROP TABLE `+p.name)
	return err == nil, err
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
