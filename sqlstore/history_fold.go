package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq"
)

// FoldRows is how many unfolded history rows a SQLite store lets gather
// before its history commits start folding them into the client indexes
// of their days (history_dYYYYMMDD_client) and history_latest. A commit
// appends its rows where the day's table and its time-ordered indexes end; a fold rewrites each page of the
// client-ordered tables once for all the rows it gains there, where every
// commit used to rewrite a page per client of its batch. Queries by client
// and latest values read the unfolded rows too, by their ids: a few
// thousand at most. A store reads it when it opens.
var FoldRows = 2048

// A commit that folds takes the oldest unfolded rows, at most foldMaxRows
// of them and no more than foldMaxClients distinct clients, or twice as
// many as the commit has records if that is more (so folds keep up with
// commits of many devices' records): a fold costs about a page per client
// (35 µs each on this machine's SQLite), so that of a fleet, where nearly
// every row is another device's, adds a few milliseconds to its commit,
// not the 150 ms of 4,096 devices' rows at once, while a few busy
// clients' rows fold thousands at a time.
const (
	foldMaxRows    = 4096
	foldMaxClients = 128
)

// unfoldedRows is the condition on history rows (unqualified columns) that
// keeps those not yet folded: the ids after the fold's mark, a range SQLite
// scans from there (NOT INDEXED on a day's table, so that it never prefers
// an index's order to that), a few thousand rows at most.
const unfoldedRows = `id > (SELECT value FROM meta WHERE key = 'history_folded')`

// foldTail is what a SQLite store knows of its unfolded rows: their ids
// and a hash of each one's client, to choose how far the next fold goes.
// The store's history commits keep it. It is only a guide: a fold reads
// the rows from the table, between the mark in meta and the id chosen, so
// a list that is off (rows retention deleted) costs a fold's size, never
// a record.
type foldTail struct {
	mu   sync.Mutex
	seed maphash.Seed
	rows []tailRow
	// through is the id the last fold of this process went up to.
	through int64
}

type tailRow struct {
	id     int64
	client uint64 // hash of account and client
	day    int64  // the start of its UTC day, in received_us units
}

func (t *foldTail) clientHash(account, client string) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(account)
	h.WriteByte(0)
	h.WriteString(client)
	return h.Sum64()
}

func (t *foldTail) row(r *fleetmq.Record) tailRow {
	return tailRow{id: r.ID, client: t.clientHash(r.AccountID, r.ClientID), day: dayStart(r.Received.UnixMicro())}
}

// add lists a committed batch's rows.
func (t *foldTail) add(recs []*fleetmq.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		t.rows = append(t.rows, t.row(r))
	}
}

func (t *foldTail) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

// next is the last id of the next fold, over the listed rows followed by
// those of a batch about to commit (their ids set): the oldest, up to
// foldMaxRows rows or maxClients distinct clients (0 when there is none);
// and the days of the rows it takes.
func (t *foldTail) next(batch []*fleetmq.Record, maxClients int) (int64, []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[uint64]struct{}, maxClients)
	var (
		last int64
		days []int64
	)
	n := 0
	take := func(r tailRow) bool {
		if n == foldMaxRows {
			return false
		}
		if _, ok := seen[r.client]; !ok {
			if len(seen) == maxClients {
				return false
			}
			seen[r.client] = struct{}{}
		}
		last, n = max(last, r.id), n+1
		if !slices.Contains(days, r.day) {
			days = append(days, r.day)
		}
		return true
	}
	for _, r := range t.rows {
		if !take(r) {
			return last, days
		}
	}
	for _, r := range batch {
		if !take(t.row(r)) {
			return last, days
		}
	}
	return last, days
}

// folded drops the rows up to id from the list.
func (t *foldTail) folded(through int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = slices.DeleteFunc(t.rows, func(r tailRow) bool { return r.id <= through })
	t.through = max(t.through, through)
}

// foldedThrough is the id the last fold of this process went up to.
func (t *foldTail) foldedThrough() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.through
}

// load lists the unfolded rows of the given tables (when the store opens).
func (t *foldTail) load(ctx context.Context, db *sql.DB, parts []dayPartition) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seed = maphash.MakeSeed()
	for _, p := range parts {
		if p.clustered {
			continue // nothing unfolded: see upsertLatestSQLite and reorderSQLiteDay
		}
		if err := t.loadTable(ctx, db, p.name); err != nil {
			return err
		}
	}
	slices.SortFunc(t.rows, func(a, b tailRow) int { return cmp.Compare(a.id, b.id) })
	return nil
}

func (t *foldTail) loadTable(ctx context.Context, db *sql.DB, table string) error {
	rows, err := db.QueryContext(ctx, `SELECT id, account_id, client_id, received_us FROM `+table+` NOT INDEXED WHERE `+unfoldedRows+` ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r fleetmq.Record
		var received int64
		if err := rows.Scan(&r.ID, &r.AccountID, &r.ClientID, &received); err != nil {
			return err
		}
		r.Received = time.UnixMicro(received)
		t.rows = append(t.rows, t.row(&r))
	}
	return rows.Err()
}

// foldParts are the tables a fold reads: those that hold the given days
// (the fold list's), and every table this process has given ids after its
// last fold's (written by a commit, whether or not it was reported), so
// that rows the list missed (a commit reported as failed that went in)
// are folded all the same. A table that another process dropped since is
// passed over by the fold.
func (s *Store) foldParts(days []int64) []dayPartition {
	written := s.appendStmts.writtenAfter(s.tail.foldedThrough())
	var parts []dayPartition
	for _, p := range s.days.list() {
		if p.clustered {
			continue
		}
		if slices.Contains(written, p.name) || slices.ContainsFunc(days, func(d int64) bool { return p.lo <= d && d < p.hi }) {
			parts = append(parts, p)
		}
	}
	return parts
}

// FoldHistory folds every unfolded history row of a SQLite store into the
// client indexes and history_latest, in one transaction, and returns how
// many it folded. History commits fold in bounded steps by themselves;
// queries give the same answers before and after. On PostgreSQL, whose
// indexes are kept by each commit, it does nothing.
func (s *Store) FoldHistory(ctx context.Context) (n int64, err error) {
	defer wrap(&err, "fold history")
	if s.dialect != sqliteDialect {
		return 0, nil
	}
	var through int64
	err = s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		n, through, err = foldIn(ctx, tx, math.MaxInt64, s.days.list())
		return err
	})
	if err != nil {
		return 0, err
	}
	s.tail.folded(through)
	return n, nil
}

// foldIn folds the unfolded rows with ids up to through (MaxInt64: all)
// of the given tables in a write transaction, reading them from the
// tables (the store's list only chose through and the tables), and
// returns how many it folded and the id it folded up to. A row whose
// entries are already there (a fold whose success was not reported) is
// passed over, so a fold never fails on it.
func foldIn(ctx context.Context, tx *sql.Tx, through int64, parts []dayPartition) (n, folded int64, err error) {
	var mark int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'history_folded'`).Scan(&mark); err != nil {
		return 0, 0, err
	}
	if through == math.MaxInt64 {
		if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'history_last_id'`).Scan(&through); err != nil {
			return 0, 0, err
		}
	}
	if through <= mark {
		return 0, through, nil
	}
	for _, p := range parts {
		if p.clustered {
			continue // nothing unfolded: see upsertLatestSQLite
		}
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO `+clientTable(p.name)+` (account_id, client_id, received_us, id)
			SELECT account_id, client_id, received_us, id FROM `+p.name+` NOT INDEXED WHERE id > ? AND id <= ? ORDER BY 1, 2, 3, 4`, mark, through)
		if noSuchTable(err) {
			continue // dropped by another process (or reordered): nothing of it to fold
		}
		if err != nil {
			return 0, 0, err
		}
		rows, err := res.RowsAffected()
		if err != nil {
			return 0, 0, err
		}
		n += rows
		// The newest row of each topic (the later row of two received in
		// the same microsecond), replacing the stored one unless that is
		// newer, as a commit of these rows would have.
		if _, err := tx.ExecContext(ctx, `INSERT INTO history_latest (account_id, client_id, topic, record_id, received_us)
			SELECT account_id, client_id, topic, id, received_us FROM (
				SELECT account_id, client_id, topic, id, received_us, ROW_NUMBER() OVER (
					PARTITION BY account_id, client_id, topic ORDER BY received_us DESC, id DESC) AS newest
				FROM `+p.name+` NOT INDEXED WHERE id > ? AND id <= ?)
			WHERE newest = 1 ORDER BY account_id, client_id, topic
			ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us
			WHERE excluded.received_us >= history_latest.received_us`, mark, through); err != nil {
			return 0, 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'history_folded'`, through); err != nil {
		return 0, 0, err
	}
	return n, through, nil
}
