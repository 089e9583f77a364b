package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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
// history_fold.go). Retention drops a day's tables whole, a few hundred
// milliseconds for a million records, where deleting its rows took a
// minute. An hour after a day ends it is rewritten in client order as
// history_cYYYYMMDD (reorderSQLiteDays); its old tables are set aside as
// history_oYYYYMMDD… and emptied a piece at a time (retireDays).
//
// The table history, from before the days (migration 0011), is the
// partition of every time before the UTC midnight after its newest record
// (meta history_days_from); its client index is history_client. An empty
// one covers no time and the next drop removes it.
//
// Queries read the days that overlap their time window one after the
// other, in their order (SQLite has no partitioned tables); a read first
// checks SQLite's schema version, and reads the days again when another
// process made, dropped or reordered one. The history writer creates each
// day it needs, in a short transaction of its own before its commit;
// retention passes create today's and tomorrow's ahead. Ids come from the
// counter history_last_id in meta, unique and increasing across days.
// serve writes a data directory's history (it holds the directory's
// lock); the store lists the unfolded rows in memory (foldTail), and its
// folds read the rows the list names from their days' tables. Another
// process that writes history (none of the CLI's commands does) is noticed
// by the id counter, and the list read again.

// legacyHistory is the table of history from before the days.
const legacyHistory = "history"

// sqliteDayTable matches the day tables' names: in arrival order (d) or
// reordered by client (c).
var sqliteDayTable = regexp.MustCompile(`^history_([dc])(\d{8})$`)

// clientTable is the folded client index of a day's table.
func clientTable(table string) string { return table + "_client" }

// dayIndex is the name of one of a day's indexes, given by what follows
// "history_" in the index's name in planHistory (client_time, ...).
func dayIndex(table, index string) string {
	return table + "_" + strings.TrimPrefix(index, "history_")
}

// sqliteDayDDL creates the tables of a day (createSQLiteDays reads the
// days again in its transaction first, so none of them is there: an index
// whose name is taken, by the old tables of a day reordered that are not
// yet retired, is an error, not an index left out). The columns are those
// of history (migrations 0002 and 0008).
func sqliteDayDDL(table string) string {
	return strings.NewReplacer("T_", table).Replace(`
CREATE TABLE T_ (
	id              INTEGER PRIMARY KEY,` + historyColumnDefs + `
);
CREATE INDEX T__account_time ON T_ (account_id, received_us);
CREATE INDEX T__class_time ON T_ (account_id, class, received_us);
CREATE INDEX T__device_time ON T_ (account_id, station_controller_device_id, received_us)
	WHERE station_controller_device_id <> '';
CREATE TABLE T__client (
	account_id  TEXT NOT NULL,
	client_id   TEXT NOT NULL,
	received_us INTEGER NOT NULL,
	id          INTEGER NOT NULL,
	PRIMARY KEY (account_id, client_id, received_us, id)
) WITHOUT ROWID;
CREATE TRIGGER T__client_delete AFTER DELETE ON T_ BEGIN
	DELETE FROM T__client
		WHERE account_id = old.account_id AND client_id = old.client_id AND received_us = old.received_us AND id = old.id;
	UPDATE meta SET value = value + 1 WHERE key = 'history_deleted_T_';
END;
INSERT OR IGNORE INTO meta (key, value) VALUES ('history_deleted_T_', 0);`)
}

// historyColumnDefs are the columns of history after id (migrations 0002
// and 0008).
const historyColumnDefs = `
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
	received_us     INTEGER NOT NULL`

// A day rewritten in the client index's order, history_cYYYYMMDD, is a
// table whose rows are numbered (pos, its rowid) in the order of its
// client index, (account, client, time, id), so a client's records lie
// together and its index's entries were each written after the one
// before. Its other indexes are tables of their own
// (history_cYYYYMMDD_account_time, _class_time, _device_time: the index's
// columns, id, and the row's pos), written in their order while the day
// is copied, as SQLite writes an index it sorts; indexes of the table
// itself would take each copied row's entries in random places, a page
// written per entry. Reading the rows they list costs a rowid lookup each,
// as on a day in arrival order. Triggers keep them for the day's late
// records and deletes.

// clusteredIndexes are the index tables of a day in client order: the
// suffix of their names, their key columns before (time, id), and the
// condition of a partial index.
var clusteredIndexes = []struct{ suffix, cols, where string }{
	{"account_time", "account_id", ""},
	{"class_time", "account_id, class", ""},
	{"device_time", "account_id, station_controller_device_id", "station_controller_device_id <> ''"},
}

// sqliteClusteredDDL creates the tables of a day in client order: the
// rows as table, with its client index, and the index tables, under the
// names they keep once table is renamed final.
func sqliteClusteredDDL(table, final string) string {
	ddl := `CREATE TABLE ` + table + ` (
	pos             INTEGER PRIMARY KEY,
	id              INTEGER NOT NULL,` + historyColumnDefs + `
);
CREATE UNIQUE INDEX ` + dayIndex(final, "client_time") + ` ON ` + table + ` (account_id, client_id, received_us, id);`
	for _, ix := range clusteredIndexes {
		ddl += `
CREATE TABLE ` + dayIndex(final, ix.suffix) + ` (` + ix.cols + `, received_us, id, pos,
	PRIMARY KEY (` + ix.cols + `, received_us, id)) WITHOUT ROWID;`
	}
	return ddl
}

// clusteredTriggers keep the index tables of a day in client order for
// the rows inserted into table and deleted from it after its copy; final
// is the name the index tables are made for.
func clusteredTriggers(table, final string) string {
	ins := `CREATE TRIGGER ` + final + `_index AFTER INSERT ON ` + table + ` BEGIN`
	del := `CREATE TRIGGER ` + final + `_unindex AFTER DELETE ON ` + table + ` BEGIN`
	for _, ix := range clusteredIndexes {
		cols := strings.Split(ix.cols, ", ")
		var news, match []string
		for _, c := range append(cols, "received_us", "id") {
			news = append(news, "new."+c)
			match = append(match, c+" = old."+c)
		}
		where := ""
		if ix.where != "" {
			where = " WHERE new." + ix.where
		}
		ins += `
	INSERT INTO ` + dayIndex(final, ix.suffix) + ` SELECT ` + strings.Join(news, ", ") + `, new.pos` + where + `;`
		del += `
	DELETE FROM ` + dayIndex(final, ix.suffix) + ` WHERE ` + strings.Join(match, " AND ") + `;`
	}
	return ins + "\nEND;\n" + del + "\nEND;"
}

// clusteredDrops are the statements that drop a day in client order.
func clusteredDrops(table string) []string {
	out := []string{`DROP TABLE IF EXISTS ` + table}
	for _, ix := range clusteredIndexes {
		out = append(out, `DROP TABLE IF EXISTS `+dayIndex(table, ix.suffix))
	}
	return out
}

// readSQLiteDays returns history's tables, by lo: the days, and history
// from before them unless it covers no time.
func readSQLiteDays(ctx context.Context, q rowQueryer) ([]dayPartition, error) {
	names, err := queryNames(ctx, q, `SELECT name FROM sqlite_master WHERE type = 'table' AND (name = ? OR name GLOB 'history_[dc][0-9]*')`, legacyHistory)
	if err != nil {
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
		day, err := time.Parse("20060102", m[2])
		if err != nil {
			continue
		}
		lo := day.UnixMicro()
		parts = append(parts, dayPartition{name: name, lo: lo, hi: lo + dayMicros, managed: true, clustered: m[1] == "c"})
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

// live reports whether table is a known day's table in arrival order.
func (d *historyDays) live(table string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return arrivalTable(d.parts, table)
}

// arrivalTable reports whether table is among parts, a day in arrival
// order (one whose rows fold).
func arrivalTable(parts []dayPartition, table string) bool {
	return slices.ContainsFunc(parts, func(p dayPartition) bool { return p.name == table && !p.clustered })
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
	// One at a time: a reread that read the days before another made one
	// must not put its list back after the other's.
	s.days.reread.Lock()
	defer s.days.reread.Unlock()
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
	s.days.mu.Lock()
	s.days.parts, s.days.version = parts, version
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
		// Read again: another process may have made a day, or reordered
		// it, since this one read them.
		parts, err := readSQLiteDays(ctx, tx)
		if err != nil {
			return err
		}
		for _, lo := range days {
			if covered(parts, lo) {
				continue
			}
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
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "no such table: history") || strings.Contains(msg, "no such table: main.history")
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
			var rows bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+legacyHistory+`)`).Scan(&rows); err != nil || rows {
				// A process of the schema before the days wrote to it.
				return err
			}
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
			drops := []string{`DROP TABLE ` + clientTable(p.name), `DROP TABLE ` + p.name}
			switch {
			case p.clustered:
				drops = clusteredDrops(p.name)
			case p.name != legacyHistory:
				// A reorder's copy left by a process that died.
				drops = append(drops, clusteredDrops(dayName("c", p.lo))[1:]...)
				drops = append(drops, `DROP TABLE IF EXISTS `+dayName("r", p.lo))
			}
			drops = append(drops, `DELETE FROM meta WHERE key = 'history_deleted_`+p.name+`'`)
			for _, q := range drops {
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
		from := p.name + ` INDEXED BY ` + dayIndex(p.name, "account_time")
		if p.clustered {
			from = p.name + ` INDEXED BY ` + dayIndex(p.name, "client_time")
		}
		var kept bool
		if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+from+` WHERE account_id = ?)`, id).Scan(&kept); err != nil || kept {
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
	err = s.onFreshDays(ctx, func() error {
		n = 0
		for _, p := range s.days.list() {
			var c int64
			if err := s.reads.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+p.name+` WHERE account_id = ?`, accountID).Scan(&c); err != nil {
				return err
			}
			n += c
		}
		return nil
	})
	return n, err
}

// onFreshDays runs f, and once more after reading the days again if it
// met a day's table that is not there (another process dropped or
// reordered the day since this one read the days).
func (s *Store) onFreshDays(ctx context.Context, f func() error) error {
	err := f()
	if !noSuchTable(err) {
		return err
	}
	if err := s.rereadSQLiteDays(ctx); err != nil {
		return err
	}
	return f()
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

// reorderChunk is how many records one transaction of a SQLite reorder
// copies (a variable for tests): the history writer waits for at most one
// such transaction, tens to hundreds of milliseconds (yieldWrites).
var reorderChunk = 2000

// reorderLease is how long a SQLite reorder keeps other processes from
// reordering (meta history_reorder holds when its lease ends, Unix
// seconds); a process that dies while it reorders holds it that long.
const reorderLease = time.Hour

// reorderSQLiteDays is ReorderHistoryDays on SQLite: each day in arrival
// order that ended before before is rewritten in the client index's order
// as history_cYYYYMMDD (see sqliteClusteredDDL). For each day:
//
//  1. every unfolded row is folded, and the id counter read: the day's
//     client index then lists every row of the day up to that id;
//  2. the rows are copied in that index's order into history_rYYYYMMDD,
//     and the entries of the other indexes, each in its order, into their
//     tables, in transactions of reorderChunk rows, while the day keeps
//     taking late records and queries read it;
//  3. one transaction checks that no row of the day was deleted meanwhile
//     (its delete trigger counts them in meta history_deleted_<day>): a
//     row that another process's retention deleted would come back, so the
//     copy is then set aside and the next pass starts over. Otherwise it
//     folds again (the records stored meanwhile get their latest values),
//     adds the rows stored since step 1 (ids after the counter), sets the
//     day's tables aside as history_oYYYYMMDD and renames the copy;
//  4. the tables set aside are emptied and dropped a piece at a time
//     (retireDays).
//
// One process reorders at a time: it holds a lease in meta, renewed by
// each of its transactions and checked by the swap, so that a pass that
// outlasts the lease stops rather than meet another's. It returns how many
// days it reordered.
func (s *Store) reorderSQLiteDays(ctx context.Context, before time.Time) (int, error) {
	token, err := s.takeReorderLease(ctx)
	if err != nil || token == 0 {
		return 0, err
	}
	defer s.execUpkeep(ctx, fmt.Sprintf(`UPDATE meta SET value = 0 WHERE key = 'history_reorder'
		AND (SELECT value FROM meta WHERE key = 'history_reorder_owner') = %d`, token))
	if err := s.freshDays(ctx); err != nil {
		return 0, err
	}
	done := 0
	var errs []error // a day that fails does not keep the others from going
	for _, p := range s.days.list() {
		if p.hi > before.UnixMicro() {
			break
		}
		if p.clustered || p.name == legacyHistory {
			continue
		}
		err := s.reorderSQLiteDay(ctx, p, token)
		if rerr := s.rereadSQLiteDays(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			if errors.Is(err, errLeaseLost) {
				return done, errors.Join(errs...)
			}
			continue
		}
		done++
	}
	return done, errors.Join(append(errs, s.retireDays(ctx, token))...)
}

// errLeaseLost: the reorder's lease ended and another process may hold it.
var errLeaseLost = errors.New("the reorder's lease ended")

// takeReorderLease takes the lease of reorders if it is free, and returns
// the token that owns it (0: another process holds it).
func (s *Store) takeReorderLease(ctx context.Context) (token int64, err error) {
	err = s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		now := time.Now().Unix()
		res, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'history_reorder' AND value < ?`, now+int64(reorderLease/time.Second), now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		token = rand.Int64N(math.MaxInt64-1) + 1
		_, err = tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('history_reorder_owner', ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`, token)
		return err
	})
	if err != nil {
		return 0, err
	}
	return token, nil
}

// holdReorderLease renews the lease of token in a transaction, or returns
// errLeaseLost if it is not token's any more.
func holdReorderLease(ctx context.Context, tx *sql.Tx, token int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'history_reorder'
		AND (SELECT value FROM meta WHERE key = 'history_reorder_owner') = ?`, time.Now().Add(reorderLease).Unix(), token)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(err, errLeaseLost)
	}
	return nil
}

// execUpkeep runs statements in a write transaction that ctx's end does
// not stop: the clean-up of an upkeep that was cut short.
func (s *Store) execUpkeep(ctx context.Context, stmts ...string) error {
	ctx = context.WithoutCancel(ctx)
	return s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// errReordered: the day is in client order already, or an earlier pass
// left tables of it, which this pass retires.
var errReordered = errors.New("the day is in client order already, or an earlier pass left tables of it: they are retired now, and the next pass reorders it")

// errReorderRace: rows of a day were deleted while it was copied.
var errReorderRace = errors.New("rows were deleted from the day while it was copied; the next pass copies it again")

// reorderSQLiteDay rewrites one day (reorderSQLiteDays' steps); on any
// failure the copy is set aside, to be retired, and the day left as it
// was.
func (s *Store) reorderSQLiteDay(ctx context.Context, p dayPartition, token int64) (err error) {
	final, work, old := dayName("c", p.lo), dayName("r", p.lo), dayName("o", p.lo)
	counter := `history_deleted_` + p.name
	defer func() {
		if err != nil && !errors.Is(err, errReordered) {
			err = errors.Join(err, s.setCopyAside(ctx, p, token))
		}
	}()
	var (
		mark, deleted int64
		leftover      bool
	)
	err = s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		if err := holdReorderLease(ctx, tx, token); err != nil {
			return err
		}
		// What an earlier pass left of the day (a process that died or
		// lost its lease: under this lease no other works on it) is set
		// aside, and retired at the end of this pass; the next pass
		// reorders the day.
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = ? OR name = ? OR name GLOB ?)`,
			final, work, old+"*").Scan(&leftover); err != nil || leftover {
			return errors.Join(err, setAside(ctx, tx, p))
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO meta (key, value) VALUES (?, 0)`, counter); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, counter).Scan(&deleted); err != nil {
			return err
		}
		var err error
		if _, mark, err = foldAll(ctx, tx); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqliteClusteredDDL(work, final))
		return err
	})
	if err != nil {
		return err
	}
	if leftover {
		return errReordered
	}
	s.tail.folded(mark)
	h := func(cols string) string { return strings.ReplaceAll(", "+cols, ", ", ", h.")[2:] }
	copyCols := "id, " + historyColumns
	// The rows, in the client index's order.
	err = s.copyInOrder(ctx, token, work, copyCols, `SELECT `+h(copyCols)+` FROM `+clientTable(p.name)+` c CROSS JOIN `+p.name+` h ON h.id = c.id`,
		[]string{"c.account_id", "c.client_id", "c.received_us", "c.id"}, "account_id, client_id, received_us, id")
	if err != nil {
		return err
	}
	// Each index's entries, in its order (the day's rows are in time
	// order, so its index is read with the rows nearly in turn), with
	// the copied row's pos.
	for _, ix := range clusteredIndexes {
		key := ix.cols + ", received_us, id"
		where := ""
		if ix.where != "" {
			where = " WHERE h." + ix.where
		}
		var order []string
		for _, c := range strings.Split(key, ", ") {
			order = append(order, "h."+c)
		}
		err := s.copyInOrder(ctx, token, dayIndex(final, ix.suffix), key+", pos",
			`SELECT `+h(key)+`, w.pos FROM `+p.name+` h INDEXED BY `+dayIndex(p.name, ix.suffix)+` CROSS JOIN `+work+` w INDEXED BY `+dayIndex(final, "client_time")+
				` ON w.account_id = h.account_id AND w.client_id = h.client_id AND w.received_us = h.received_us AND w.id = h.id`+where, order, key)
		if err != nil {
			return err
		}
	}
	if afterReorderCopy != nil {
		afterReorderCopy(p.name)
	}
	var through int64
	err = s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		if err := holdReorderLease(ctx, tx, token); err != nil {
			return err
		}
		var now int64
		if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, counter).Scan(&now); err != nil {
			return err
		}
		if now != deleted {
			return errReorderRace
		}
		// The records stored since step 1 get their latest values (the day
		// in client order has nothing unfolded), then their rows, and
		// their index entries by the triggers (made first, on the copy:
		// renaming it keeps them). The day's tables are set aside, to be
		// emptied a piece at a time (retireDays): dropping a table of
		// millions of rows would hold the write lock for seconds.
		var err error
		if _, through, err = foldAll(ctx, tx); err != nil {
			return err
		}
		for _, q := range []string{clusteredTriggers(work, final),
			`INSERT OR IGNORE INTO ` + work + ` (` + copyCols + `) SELECT ` + copyCols + ` FROM ` + p.name + ` NOT INDEXED WHERE id > ` + fmt.Sprint(mark) +
				` ORDER BY account_id, client_id, received_us, id`,
			`DROP TRIGGER ` + p.name + `_client_delete`, `DELETE FROM meta WHERE key = '` + counter + `'`,
			`ALTER TABLE ` + p.name + ` RENAME TO ` + old, `ALTER TABLE ` + clientTable(p.name) + ` RENAME TO ` + clientTable(old),
			`ALTER TABLE ` + work + ` RENAME TO ` + final} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		s.tail.folded(through)
	}
	return err
}

// setCopyAside renames what a reorder that gave up made of a day (its copy
// and the index tables) as tables set aside, for retireDays to empty a
// piece at a time: dropping them at once would hold the write lock about
// as long as dropping the day. The copy's client index is dropped first:
// its name is the one a later reorder gives its own. Nothing is touched if
// the day is in client order (the tables are the day's) or if the lease
// is not token's.
func (s *Store) setCopyAside(ctx context.Context, p dayPartition, token int64) error {
	ctx = context.WithoutCancel(ctx)
	return s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		if err := holdReorderLease(ctx, tx, token); err != nil {
			return err
		}
		return setAside(ctx, tx, p)
	})
}

// setAside is setCopyAside in a transaction.
func setAside(ctx context.Context, tx *sql.Tx, p dayPartition) error {
	final, work, old := dayName("c", p.lo), dayName("r", p.lo), dayName("o", p.lo)
	var done bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = ?)`, final).Scan(&done); err != nil || done {
		return err
	}
	names, err := queryNames(ctx, tx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?)`,
		work, dayIndex(final, "account_time"), dayIndex(final, "class_time"), dayIndex(final, "device_time"))
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DROP INDEX IF EXISTS `+dayIndex(final, "client_time")); err != nil {
		return err
	}
	for _, name := range names {
		// history_rX → history_oX_copy, history_cX_account_time →
		// history_oX_account_time...
		to := old + "_copy"
		if name != work {
			to = old + strings.TrimPrefix(name, final)
		}
		if _, err := tx.ExecContext(ctx, `ALTER TABLE `+name+` RENAME TO `+to); err != nil {
			return err
		}
	}
	return nil
}

// retireChunk is how many rows a transaction of retireDays deletes.
var retireChunk = 5000

// yieldWrites pauses as long as a transaction of upkeep took (at most a
// second), so that the history writer, which takes its turn between them,
// has at least half of the write lock's time however slow the upkeep's
// transactions are (a chunk reads a day's rows in another order, from
// disk, in up to half a second): the writer falls behind a steady 20,000
// records/s for seconds otherwise.
func yieldWrites(ctx context.Context, took time.Duration) {
	t := time.NewTimer(min(took, time.Second))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// retireDays empties and drops the tables set aside (history_oYYYYMMDD…:
// a reordered day's old tables, a copy given up), retireChunk rows a
// transaction by their key, so that the history writer waits for at most
// one of them. Tables a process left when it died are retired by the next
// pass. It runs under the reorder lease of token.
func (s *Store) retireDays(ctx context.Context, token int64) error {
	names, err := queryNames(ctx, s.db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'history_o[0-9]*'`)
	if err != nil {
		return err
	}
	for _, name := range names {
		key, err := queryNames(ctx, s.db, `SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk`, name)
		if err != nil {
			return err
		}
		if len(key) == 0 {
			key = []string{"rowid"}
		}
		cols := strings.Join(key, ", ")
		for {
			var n int64
			start := time.Now()
			err := s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
				if err := holdReorderLease(ctx, tx, token); err != nil {
					return err
				}
				res, err := tx.ExecContext(ctx, `DELETE FROM `+name+` WHERE (`+cols+`) IN (SELECT `+cols+` FROM `+name+` LIMIT ?)`, retireChunk)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return fmt.Errorf("retire %s: %w", name, err)
			}
			s.AfterCommit(ctx)
			if n < int64(retireChunk) {
				break
			}
			yieldWrites(ctx, time.Since(start))
		}
		if err := s.execUpkeep(ctx, `DROP TABLE `+name); err != nil {
			return fmt.Errorf("retire %s: %w", name, err)
		}
	}
	return nil
}

// copyInOrder copies the rows of query (a SELECT without WHERE, ORDER BY
// or LIMIT, but maybe an INDEXED BY and a WHERE of its own, given in
// query) into table's columns cols, in the order of the expressions
// order, which are table's key (keyCols in table), reorderChunk rows a
// transaction, each continuing after the last row of the one before.
func (s *Store) copyInOrder(ctx context.Context, token int64, table, cols, query string, order []string, keyCols string) error {
	last := make([]any, len(order))
	ptrs := make([]any, len(order))
	for i := range last {
		ptrs[i] = &last[i]
	}
	orderBy := strings.Join(order, ", ")
	var desc []string
	for _, c := range strings.Split(keyCols, ", ") {
		desc = append(desc, c+" DESC")
	}
	for copied := false; ; copied = true {
		q, args := query, []any(nil)
		if copied {
			op := " WHERE "
			if strings.Contains(query, " WHERE ") {
				op = " AND "
			}
			q += op + "(" + orderBy + ") > (" + strings.TrimSuffix(strings.Repeat("?, ", len(order)), ", ") + ")"
			args = textAsText(last)
		}
		var n int64
		start := time.Now()
		err := s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
			if err := holdReorderLease(ctx, tx, token); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (`+cols+`) `+q+` ORDER BY `+orderBy+` LIMIT `+fmt.Sprint(reorderChunk), args...)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			return tx.QueryRowContext(ctx, `SELECT `+keyCols+` FROM `+table+` ORDER BY `+strings.Join(desc, ", ")+` LIMIT 1`).Scan(ptrs...)
		})
		if err != nil {
			return err
		}
		s.AfterCommit(ctx) // so that the WAL starts over between copies
		if n < int64(reorderChunk) {
			return nil
		}
		yieldWrites(ctx, time.Since(start))
	}
}

// textAsText returns values read from SQLite as arguments of the same
// type: text read as bytes is passed as a string (a BLOB sorts after
// every text).
func textAsText(vals []any) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		if b, ok := v.([]byte); ok {
			v = string(b)
		}
		out[i] = v
	}
	return out
}
