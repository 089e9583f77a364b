package sqlstore

import (
	"context"
	"database/sql"
	"hash/maphash"
	"math"
	"slices"
	"sync"

	"github.com/fleetmq/fleetmq"
)

// FoldRows is how many unfolded history rows a SQLite store lets gather
// before its history commits start folding them into the client index
// (history_client) and history_latest. A commit appends its rows where the
// table and its time-ordered indexes end; a fold rewrites each page of the
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
// scans from there (NOT INDEXED on history, so that it never prefers an
// index's order to that), a few thousand rows at most.
const unfoldedRows = `id > (SELECT value FROM meta WHERE key = 'history_folded')`

// foldTail is what a SQLite store knows of its unfolded rows: their ids
// and a hash of each one's client, to choose how far the next fold goes.
// The store's history commits keep it. It is only a guide: a fold reads
// the rows from the table, between the mark in meta and the id chosen, so
// a list that is off (rows retention deleted, their ids reused) costs a
// fold's size, never a record.
type foldTail struct {
	mu   sync.Mutex
	seed maphash.Seed
	rows []tailRow
}

type tailRow struct {
	id     int64
	client uint64 // hash of account and client
}

func (t *foldTail) clientHash(account, client string) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(account)
	h.WriteByte(0)
	h.WriteString(client)
	return h.Sum64()
}

func (t *foldTail) row(id int64, account, client string) tailRow {
	return tailRow{id: id, client: t.clientHash(account, client)}
}

// add lists a committed batch's rows.
func (t *foldTail) add(recs []*fleetmq.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		t.rows = append(t.rows, t.row(r.ID, r.AccountID, r.ClientID))
	}
}

func (t *foldTail) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

// next is the last id of the next fold, over the listed rows followed by
// those of a batch about to commit (their ids set): the oldest, up to
// foldMaxRows rows or maxClients distinct clients (0 when there is none).
func (t *foldTail) next(batch []*fleetmq.Record, maxClients int) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[uint64]struct{}, maxClients)
	var last int64
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
		return true
	}
	for _, r := range t.rows {
		if !take(r) {
			return last
		}
	}
	for _, r := range batch {
		if !take(t.row(r.ID, r.AccountID, r.ClientID)) {
			return last
		}
	}
	return last
}

// folded drops the rows up to id from the list (wherever they are: ids
// SQLite reused after retention deleted the newest rows are listed after
// the deleted rows' entries).
func (t *foldTail) folded(through int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = slices.DeleteFunc(t.rows, func(r tailRow) bool { return r.id <= through })
}

// load lists the unfolded rows from the database (when the store opens).
func (t *foldTail) load(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT id, account_id, client_id FROM history NOT INDEXED WHERE `+unfoldedRows+` ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seed = maphash.MakeSeed()
	for rows.Next() {
		var id int64
		var account, client string
		if err := rows.Scan(&id, &account, &client); err != nil {
			return err
		}
		t.rows = append(t.rows, t.row(id, account, client))
	}
	return rows.Err()
}

// FoldHistory folds every unfolded history row of a SQLite store into the
// client index and history_latest, in one transaction, and returns how
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
		n, through, err = foldIn(ctx, tx, math.MaxInt64)
		return err
	})
	if err != nil {
		return 0, err
	}
	s.tail.folded(through)
	return n, nil
}

// foldIn folds the unfolded rows with ids up to through (MaxInt64: all)
// in a write transaction, reading them from the table (the store's list
// only chose through), and returns how many it folded and the id it folded
// up to. A row whose entries are already there (a fold whose success was
// not reported) is passed over, so a fold never fails on it.
func foldIn(ctx context.Context, tx *sql.Tx, through int64) (n, folded int64, err error) {
	var mark int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'history_folded'`).Scan(&mark); err != nil {
		return 0, 0, err
	}
	if through == math.MaxInt64 {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), ?) FROM history`, mark).Scan(&through); err != nil {
			return 0, 0, err
		}
	}
	if through <= mark {
		return 0, through, nil
	}
	res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO history_client (account_id, client_id, received_us, id)
		SELECT account_id, client_id, received_us, id FROM history NOT INDEXED WHERE id > ? AND id <= ? ORDER BY 1, 2, 3, 4`, mark, through)
	if err != nil {
		return 0, 0, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, 0, err
	}
	// The newest row of each topic (the later row of two received in the
	// same microsecond), replacing the stored one unless that is newer, as
	// a commit of these rows would have.
	if _, err := tx.ExecContext(ctx, `INSERT INTO history_latest (account_id, client_id, topic, record_id, received_us)
		SELECT account_id, client_id, topic, id, received_us FROM (
			SELECT account_id, client_id, topic, id, received_us, ROW_NUMBER() OVER (
				PARTITION BY account_id, client_id, topic ORDER BY received_us DESC, id DESC) AS newest
			FROM history NOT INDEXED WHERE id > ? AND id <= ?)
		WHERE newest = 1 ORDER BY account_id, client_id, topic
		ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us
		WHERE excluded.received_us >= history_latest.received_us`, mark, through); err != nil {
		return 0, 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'history_folded'`, through); err != nil {
		return 0, 0, err
	}
	return n, through, nil
}

// keepIDsAfterMark lowers the fold's mark to the largest id when the rows
// above that were deleted (retention deleting an idle store's newest
// rows): SQLite gives a new row the largest id plus one, which would
// otherwise be at or under the mark, and never folded. Every row under
// the lowered mark is still folded. The first statement of every history
// commit on SQLite.
const keepIDsAfterMark = `UPDATE meta SET value = (SELECT COALESCE(MAX(id), 0) FROM history)
	WHERE key = 'history_folded' AND value > (SELECT COALESCE(MAX(id), 0) FROM history)`
