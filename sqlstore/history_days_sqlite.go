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
	"strings"
	"time"
)

// History days (SQLite): history is one table per UTC day,
// history_dYYYYMMDD, of the rows whose received_us falls in that day, with
// the indexes of migration 0002 and 0008 named after it
// (history_dYYYYMMDD_account_time, ...) and its client index as a table,
// history_dYYYYMMDD_client, which commits fold the day's rows into (see
// history_fold.go). Retention drops a day's two tables whole, a few
// hundred milliseconds for a million records, where deleting its rows
// took a minute.
//
// The table history, from before the days (migration 0011), is the
// partition of every time before the UTC midnight after its newest record
// (meta history_days_from); its client index is history_client. An empty
// one covers no time and the next drop removes it.
//
// Queries read the days that overlap their time window one after the
// other, in their order (SQLite has no partitioned tables). The history
// writer creates each day it needs, in a short transaction of its own
// before its commit; retention passes create today's and tomorrow's ahead.
// Ids come from the counter history_last_id in meta, unique and increasing
// across days. One process writes a data directory's history (serve holds
// the directory's lock), so its fold list (foldTail) knows every unfolded
// row's day.

// legacyHistory is the table of history from before the days.
const legacyHistory = "history"

// sqliteDayTable matches the day tables' names.
var sqliteDayTable = regexp.MustCompile(`^history_d(\d{8})$`)

// clientTable is the folded client index of a day's table.
func clientTable(table string) string { return table + "_client" }

// dayIndex is the name of one of a day's indexes, given by what follows
// "history_" in the index's name in planHistory (client_time, ...).
func dayIndex(table, index string) string {
	return table + "_" + strings.TrimPrefix(index, "history_")
}

// sqliteDayDDL creates the tables of a day (IF NOT EXISTS: a retention
// pass of another process may have made them first). The columns are
// those of history (migrations 0002 and 0008).
func sqliteDayDDL(table string) string {
	return strings.NewReplacer("T_", table).Replace(`
CREATE TABLE IF NOT EXISTS T_ (
	id              INTEGER PRIMARY KEY,
	account_id      TEXT NOT NULL,
	client_id       TEXT NOT NULL,
	topic           TEXT NOT NULL,
	class           TEXT NOT NULL,
	qos             INTEGER NOT NULL,
	published_qos   INTEGER NOT NULL,
	retain          INTEGER NOT NULL,
	payload         BLOB NOT NULL,
	content_type    TEXT NOT NULL DEFAULT '',
	payload_format  INTEGER NOT NULL DEFAULT 0,
	user_properties TEXT,
	station_controller_device_id TEXT NOT NULL DEFAULT '',
	received_us     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS T__account_time ON T_ (account_id, received_us);
CREATE INDEX IF NOT EXISTS T__class_time ON T_ (account_id, class, received_us);
CREATE INDEX IF NOT EXISTS T__device_time ON T_ (account_id, station_controller_device_id, received_us)
	WHERE station_controller_device_id <> '';
CREATE TABLE IF NOT EXISTS T__client (
	account_id  TEXT NOT NULL,
	client_id   TEXT NOT NULL,
	received_us INTEGER NOT NULL,
	id          INTEGER NOT NULL,
	PRIMARY KEY (account_id, client_id, received_us, id)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS T__client_delete AFTER DELETE ON T_ BEGIN
	DELETE FROM T__client
		WHERE account_id = old.account_id AND client_id = old.client_id AND received_us = old.received_us AND id = old.id;
END;`)
}

// readSQLiteDays returns history's tables, by lo: the days, and history
// from before them unless it covers no time.
func readSQLiteDays(ctx context.Context, q rowQueryer) ([]dayPartition, error) {
	rows, err := q.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND (name = ? OR name GLOB 'history_d[0-9]*')`, legacyHistory)
	if err != nil {
		return nil, err
	}
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return nil, err
		}
		names = append(names, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var parts []dayPartition
	for _, name := range names {
		if name == legacyHistory {
			var hi int64
			if err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'history_days_from'`).Scan(&hi); err != nil {
				return nil, fmt.Errorf("history days: %w", err)
			}
			if hi != math.MinInt64 {
				parts = append(parts, dayPartition{name: name, lo: math.MinInt64, hi: hi, managed: true})
			}
			continue
		}
		m := sqliteDayTable.FindStringSubmatch(name)
		if m == nil {
			continue // history_d2026..._client and the like
		}
		day, err := time.Parse("20060102", m[1])
		if err != nil {
			continue
		}
		lo := day.UnixMicro()
		parts = append(parts, dayPartition{name: name, lo: lo, hi: lo + dayMicros, managed: true})
	}
	slices.SortFunc(parts, func(a, b dayPartition) int { return cmp.Compare(a.lo, b.lo) })
	return parts, nil
}

// rowQueryer is a queryer that also reads one row.
type rowQueryer interface {
	queryer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// partition is the known partition that holds the time us.
func (d *historyDays) partition(us int64) (dayPartition, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.parts {
		if p.lo <= us && us < p.hi {
			return p, true
		}
	}
	return dayPartition{}, false
}

// has reports whether a known partition is the table name.
func (d *historyDays) has(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.ContainsFunc(d.parts, func(p dayPartition) bool { return p.name == name })
}

// list returns the known partitions, by lo.
func (d *historyDays) list() []dayPartition {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.parts)
}

// overlapping returns the known partitions that overlap [from, to) (nil:
// open), by lo, or from the last when descending.
func (d *historyDays) overlapping(from, to *int64, descending bool) []dayPartition {
	var out []dayPartition
	for _, p := range d.list() {
		if (from == nil || p.hi > *from) && (to == nil || p.lo < *to) {
			out = append(out, p)
		}
	}
	if descending {
		slices.Reverse(out)
	}
	return out
}

// rereadSQLiteDays sets the days this process knows from the database,
// and closes the writer's statements of tables that are gone.
func (s *Store) rereadSQLiteDays(ctx context.Context) error {
	// The schema's version first: a change after it is seen by the next
	// freshDays.
	var version int64
	if err := s.db.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&version); err != nil {
		return err
	}
	parts, err := readSQLiteDays(ctx, s.db)
	if err != nil {
		return err
	}
	s.days.set(parts)
	s.days.mu.Lock()
	s.days.version = version
	s.days.mu.Unlock()
	s.appendStmts.forget(parts)
	return nil
}

// freshDays rereads the days on SQLite when the schema changed since they
// were read (SQLite counts its schema's changes): a day another process
// made or dropped. A read of history calls it first; it costs one PRAGMA.
func (s *Store) freshDays(ctx context.Context) error {
	if s.dialect != sqliteDialect {
		return nil
	}
	var version int64
	if err := s.reads.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&version); err != nil {
		return err
	}
	s.days.mu.Lock()
	same := version == s.days.version
	s.days.mu.Unlock()
	if same {
		return nil
	}
	return s.rereadSQLiteDays(ctx)
}

// createSQLiteDays creates the tables of the days starting at the given
// times that no known partition covers, in one transaction, then rereads
// the days.
func (s *Store) createSQLiteDays(ctx context.Context, days []int64) error {
	err := s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		for _, lo := range days {
			if _, err := tx.ExecContext(ctx, sqliteDayDDL(dayTable(lo))); err != nil {
				return fmt.Errorf("create %s: %w", dayTable(lo), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("history days: %w", err)
	}
	return s.rereadSQLiteDays(ctx)
}

// noSuchTable reports whether err is SQLite's for a table that is not
// there: a day another process dropped after this one read the days.
func noSuchTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table: history_")
}

// dropSQLiteDays is DropHistoryDays on SQLite: each day that ends at or
// before before and holds no record of an account that keeps part of it
// is dropped with the latest-per-topic entries that point into it, in one
// transaction of its own. The table history from before the days is
// dropped the same way, and at once when it covers no time.
func (s *Store) dropSQLiteDays(ctx context.Context, before time.Time, expired map[string]time.Time) (int, error) {
	parts, err := readSQLiteDays(ctx, s.db)
	if err != nil {
		return 0, err
	}
	end := before.UnixMicro()
	var legacy bool
	if err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)`, legacyHistory).Scan(&legacy); err != nil {
		return 0, err
	}
	var errs []error
	if legacy && !slices.ContainsFunc(parts, func(p dayPartition) bool { return p.name == legacyHistory }) {
		// history covers no time: it was empty when the days began
		// (migration 0011), and nothing has been written to it since.
		errs = append(errs, s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DROP TABLE history_client; DROP TABLE `+legacyHistory)
			return err
		}))
	}
	dropped := 0
	for _, p := range parts {
		if p.hi > end {
			break
		}
		err := s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
			if kept, err := keptInSQLite(ctx, tx, p, expired); err != nil || kept {
				return errors.Join(err, errKept)
			}
			if p.hi > p.lo {
				if _, err := tx.ExecContext(ctx, `DELETE FROM history_latest WHERE received_us >= ? AND received_us < ?`, p.lo, p.hi); err != nil {
					return err
				}
			}
			for _, q := range []string{`DROP TABLE ` + clientTable(p.name), `DROP TABLE ` + p.name} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("drop %s: %w", p.name, err)
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, errKept):
		case err != nil:
			errs = append(errs, err)
		default:
			dropped++
		}
	}
	return dropped, errors.Join(append(errs, s.rereadSQLiteDays(ctx))...)
}

// errKept: a day holds a record an account keeps.
var errKept = errors.New("kept")

// keptInSQLite reports whether the day p holds a record of an account
// that keeps part of it.
func keptInSQLite(ctx context.Context, q rowQueryer, p dayPartition, expired map[string]time.Time) (bool, error) {
	for id, at := range expired {
		if at.UnixMicro() >= p.hi {
			continue
		}
		var kept bool
		if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+p.name+` INDEXED BY `+dayIndex(p.name, "account_time")+` WHERE account_id = ?)`, id).Scan(&kept); err != nil || kept {
			return kept, err
		}
	}
	return false, nil
}

// CountHistory returns how many records of an account history holds.
func (s *Store) CountHistory(ctx context.Context, accountID string) (n int64, err error) {
	defer wrap(&err, "count history")
	if s.dialect == postgresDialect {
		err = s.reads.QueryRowContext(ctx, `SELECT COUNT(*) FROM history WHERE account_id = $1`, accountID).Scan(&n)
		return n, err
	}
	if err := s.freshDays(ctx); err != nil {
		return 0, err
	}
	for _, p := range s.days.list() {
		var c int64
		if err := s.reads.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+p.name+` WHERE account_id = ?`, accountID).Scan(&c); err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// HistoryTable returns the table that holds the records received at at,
// for tools and tests that reach into the database: on SQLite the day's
// table (created if it is not there yet), on PostgreSQL history, which
// routes each row to its day itself.
func (s *Store) HistoryTable(ctx context.Context, at time.Time) (string, error) {
	if s.dialect == postgresDialect {
		return "history", nil
	}
	us := at.UnixMicro()
	if err := s.ensureDays(ctx, dayStart(us)); err != nil {
		return "", err
	}
	p, ok := s.days.partition(us)
	if !ok {
		return "", fmt.Errorf("history table of %v: no day holds it", at)
	}
	return p.name, nil
}
