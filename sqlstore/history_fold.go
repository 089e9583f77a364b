package sqlstore

import (
	"cmp"
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
// of them and no more than foldMaxClients distinct clients: a fold costs
// about a page per client (35 µs each on this machine's SQLite), so that
// of a fleet, where nearly every row is another device's, adds a few
// milliseconds to its commit, not the 150 ms of 4,096 devices' rows at
// once, while a few busy clients' rows fold thousands at a time.
const (
	foldMaxRows    = 2048
	foldMaxClients = 128
)

// unfoldedRows is the condition on history rows (unqualified columns) that
// keeps those not yet folded: the ids after the fold's mark, a range SQLite
// scans from there (NOT INDEXED on history, so that it never prefers an
// index's order to that), a few thousand rows at most.
const unfoldedRows = `id > (SELECT value FROM meta WHERE key = 'history_folded')`

// foldTail is what a SQLite store knows of its unfolded rows, oldest
// first: the columns a fold writes and a hash of each row's client, to
// choose how many rows the next fold takes. The store's history commits
// keep it; the fold's mark in meta is the truth, and a fold whose rows do
// not match the list (retention deleted some, say) reads them from the
// table instead.
type foldTail struct {
	mu   sync.Mutex
	seed maphash.Seed
	rows []tailRow
}

type tailRow struct {
	id, received        int64
	client              uint64 // hash of account and client
	account, cli, topic string
}

func (t *foldTail) clientHash(account, client string) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(account)
	h.WriteByte(0)
	h.WriteString(client)
	return h.Sum64()
}

func (t *foldTail) row(id, received int64, account, client, topic string) tailRow {
	return tailRow{id: id, received: received, client: t.clientHash(account, client), account: account, cli: client, topic: topic}
}

// add lists a committed batch's rows.
func (t *foldTail) add(recs []*fleetmq.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		t.rows = append(t.rows, t.row(r.ID, r.Received.UnixMicro(), r.AccountID, r.ClientID, r.Topic))
	}
}

func (t *foldTail) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

// next is the rows of the next fold, from the listed rows followed by
// those of a batch about to commit (their ids set): the oldest, up to
// foldMaxRows or foldMaxClients distinct clients.
func (t *foldTail) next(batch []*fleetmq.Record) []tailRow {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[uint64]struct{}, foldMaxClients)
	var out []tailRow
	take := func(r tailRow) bool {
		if len(out) == foldMaxRows {
			return false
		}
		if _, ok := seen[r.client]; !ok {
			if len(seen) == foldMaxClients {
				return false
			}
			seen[r.client] = struct{}{}
		}
		out = append(out, r)
		return true
	}
	for _, r := range t.rows {
		if !take(r) {
			return out
		}
	}
	for _, r := range batch {
		if !take(t.row(r.ID, r.Received.UnixMicro(), r.AccountID, r.ClientID, r.Topic)) {
			return out
		}
	}
	return out
}

// folded drops the rows up to id from the list.
func (t *foldTail) folded(through int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	for i < len(t.rows) && t.rows[i].id <= through {
		i++
	}
	t.rows = append(t.rows[:0], t.rows[i:]...)
}

// load lists the unfolded rows from the database (when the store opens).
func (t *foldTail) load(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT id, received_us, account_id, client_id, topic FROM history NOT INDEXED WHERE `+unfoldedRows+` ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seed = maphash.MakeSeed()
	for rows.Next() {
		var id, received int64
		var account, client, topic string
		if err := rows.Scan(&id, &received, &account, &client, &topic); err != nil {
			return err
		}
		t.rows = append(t.rows, t.row(id, received, account, client, topic))
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
	err = s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		n, err = foldFromTable(ctx, tx, math.MaxInt64)
		return err
	})
	if err != nil {
		return 0, err
	}
	s.tail.folded(math.MaxInt64)
	return n, nil
}

// foldListed folds the unfolded rows listed, the oldest ones, in a write
// transaction of the history writer, by its prepared statements: the
// rows' entries into history_client in the index's order, and the newest
// row of each of their topics into history_latest. When the table's
// unfolded rows up to the last of them are not those listed, it reads
// them from the table instead (foldFromTable).
func (s *Store) foldListed(ctx context.Context, tx *sql.Tx, rows []tailRow) error {
	if len(rows) == 0 {
		return nil
	}
	through := rows[len(rows)-1].id
	var mark, count int64
	var sum float64
	if err := tx.StmtContext(ctx, s.appendStmts.unfolded).QueryRowContext(ctx, through).Scan(&mark, &count, &sum); err != nil {
		return err
	}
	// Rows the list still holds under the mark were folded by a commit
	// whose success was not reported.
	rows = slices.DeleteFunc(slices.Clone(rows), func(r tailRow) bool { return r.id <= mark })
	if len(rows) == 0 {
		return nil
	}
	var listed float64
	for _, r := range rows {
		listed += float64(r.id)
	}
	if int64(len(rows)) != count || listed != sum {
		_, err := foldFromTable(ctx, tx, through)
		return err
	}
	slices.SortFunc(rows, func(a, b tailRow) int {
		return cmp.Or(cmp.Compare(a.account, b.account), cmp.Compare(a.cli, b.cli), cmp.Compare(a.received, b.received), cmp.Compare(a.id, b.id))
	})
	args := make([]any, 0, maxAppendRows*5)
	for start := 0; start < len(rows); {
		chunk := rows[start : start+statementRows(len(rows)-start)]
		start += len(chunk)
		args = args[:0]
		for _, r := range chunk {
			args = append(args, r.account, r.cli, r.received, r.id)
		}
		if _, err := tx.StmtContext(ctx, s.appendStmts.client[len(chunk)]).ExecContext(ctx, args...); err != nil {
			return err
		}
	}
	// The newest row of each topic: the last of its rows in this order but
	// for the topic, so one pass keeps the newest per topic (the later of
	// two rows received in the same microsecond).
	newest := map[[3]string]tailRow{}
	var order [][3]string
	for _, r := range rows {
		k := [3]string{r.account, r.cli, r.topic}
		if _, ok := newest[k]; !ok {
			order = append(order, k)
		}
		newest[k] = r
	}
	for start := 0; start < len(order); {
		chunk := order[start : start+statementRows(len(order)-start)]
		start += len(chunk)
		args = args[:0]
		for _, k := range chunk {
			r := newest[k]
			args = append(args, r.account, r.cli, r.topic, r.id, r.received)
		}
		if _, err := tx.StmtContext(ctx, s.appendStmts.latest[len(chunk)]).ExecContext(ctx, args...); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'history_folded'`, through)
	return err
}

// foldFromTable folds the unfolded rows with ids up to through in a write
// transaction, reading them from the table, and returns how many it
// folded.
func foldFromTable(ctx context.Context, tx *sql.Tx, through int64) (n int64, err error) {
	var mark int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'history_folded'`).Scan(&mark); err != nil {
		return 0, err
	}
	if through == math.MaxInt64 {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), ?) FROM history`, mark).Scan(&through); err != nil {
			return 0, err
		}
	}
	if through <= mark {
		return 0, nil
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO history_client (account_id, client_id, received_us, id)
		SELECT account_id, client_id, received_us, id FROM history NOT INDEXED WHERE id > ? AND id <= ? ORDER BY 1, 2, 3, 4`, mark, through)
	if err != nil {
		return 0, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO history_latest (account_id, client_id, topic, record_id, received_us)
		SELECT account_id, client_id, topic, id, received_us FROM (
			SELECT account_id, client_id, topic, id, received_us, ROW_NUMBER() OVER (
				PARTITION BY account_id, client_id, topic ORDER BY received_us DESC, id DESC) AS newest
			FROM history NOT INDEXED WHERE id > ? AND id <= ?)
		WHERE newest = 1 ORDER BY account_id, client_id, topic
		ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us
		WHERE excluded.received_us >= history_latest.received_us`, mark, through); err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'history_folded'`, through)
	return n, err
}

// unfoldedCheck is the fold's mark, and the count and sum of the ids of
// the unfolded rows up to an id: what foldListed compares with its list.
const unfoldedCheck = `SELECT m.value, COUNT(h.id), TOTAL(h.id) FROM meta m LEFT JOIN history h NOT INDEXED ON h.id > m.value AND h.id <= ?
	WHERE m.key = 'history_folded'`

// keepIDsAfterMark lowers the fold's mark to the largest id when the rows
// above that were deleted (retention deleting an idle store's newest
// rows): SQLite gives a new row the largest id plus one, which would
// otherwise be at or under the mark, and never folded. Every row under
// the lowered mark is still folded. The first statement of every history
// commit on SQLite.
const keepIDsAfterMark = `UPDATE meta SET value = (SELECT COALESCE(MAX(id), 0) FROM history)
	WHERE key = 'history_folded' AND value > (SELECT COALESCE(MAX(id), 0) FROM history)`
