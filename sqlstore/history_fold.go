package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/fleetmq/fleetmq"
)

// FoldRows is the fewest unfolded history rows a SQLite store lets gather
// before its history commits start folding them into the client indexes
// of their days (history_dYYYYMMDD_client) and history_latest. A commit
// appends its rows where the day's table and its time-ordered indexes end;
// a fold rewrites each page of the client-ordered tables once for all the
// rows it gains there, where every commit used to rewrite a page per
// client of its batch. So that a fleet's folds find several rows of each
// device, the rows gather until there are foldSpread of them per client
// listed, or foldMaxTail times FoldRows in all: a fleet of 15,000 devices
// folds about 8 rows per page. Queries by client and latest values read
// the unfolded rows by their ids, which the store keeps in memory. A
// store reads it when it opens.
var FoldRows = 2048

const (
	// foldSpread is how many unfolded rows per listed client a store
	// gathers before it folds, beyond FoldRows.
	foldSpread = 8
	// foldMaxTail is where folds start whatever the number of clients,
	// in FoldRows (a fleet of more than 16,384 devices folds fewer rows
	// per page).
	foldMaxTail = 64
)

// A commit that folds takes the clients of the oldest unfolded rows, each
// with all its listed rows, at most foldMaxRows rows and no more than
// foldMaxClients clients, or twice as many as the commit has records if
// that is more (so folds keep up with commits of many devices' records):
// a fold costs about a page per client (35 µs each on this machine's
// SQLite), so that of a fleet adds a few milliseconds to its commit, not
// the 150 ms of 4,096 devices' rows at once, while a few busy clients'
// rows fold thousands at a time.
const (
	foldMaxRows    = 4096
	foldMaxClients = 128
)

// unfoldedRows is the condition on history rows (unqualified columns) that
// keeps those after the fold's mark: every row up to the mark is folded;
// after it, rows are folded client by client, so some are (queries by
// client skip those their client index has). SQLite scans the range from
// the mark (NOT INDEXED on a day's table, so that it never prefers an
// index's order to that).
const unfoldedRows = `id > (SELECT value FROM meta WHERE key = 'history_folded')`

// foldTail is what a SQLite store knows of its unfolded rows, listed as
// its commits add them: their ids, tables and clients, in id order and by
// client. Folds choose their rows from it, and queries by client read the
// client's unfolded rows by the ids it lists. The list holds every
// unfolded row with an id up to given, the history id counter's value it
// follows. A commit lists its rows before it commits; one that fails
// leaves the list stale (before another commit of this process may
// begin), and the next one, or one whose ids do not follow given (another
// process gave ids since), reads the list again from the tables, in its
// transaction, before it lists its own rows.
type foldTail struct {
	mu sync.Mutex
	// rows are the listed rows in id order, rows[i] at position base+i;
	// those before head are folded (trimmed now and then).
	rows       []tailRow
	base, head int
	clients    map[tailKey]*tailClient
	unfolded   int
	// stale: the list may miss committed rows, or list rows that are not
	// (read it again before use).
	stale bool
	// given is the id counter's value the list follows: every unfolded
	// row with an id up to it is listed.
	given int64
	// failures counts the folds that failed, lastErr the last one's error.
	failures uint64
	lastErr  error
}

// FoldStats is how a SQLite store's history folds go (FoldStats).
type FoldStats struct {
	// Unfolded is the number of records appended and not yet folded into
	// their day's client index: listed in memory (~70 bytes each), read
	// by id by the queries of their clients. While folds succeed it
	// stays near the larger of FoldRows and foldSpread per client written
	// to lately, at most about foldMaxTail times FoldRows (131,072).
	// After a failed commit, until the next reads the list again, it
	// may count rows that commit did not store.
	Unfolded int
	// Failures counts the folds that failed (each commit went in without
	// its fold; a later commit folds), LastError is the last one's error.
	Failures  uint64
	LastError error
}

// FoldStats says how the history folds of a SQLite store go (zero on
// PostgreSQL, whose days need no folds). A fold that keeps failing leaves
// the records it would have folded in memory, and the queries of their
// clients slower, until it succeeds.
func (s *Store) FoldStats() FoldStats {
	t := &s.tail
	t.mu.Lock()
	defer t.mu.Unlock()
	return FoldStats{Unfolded: t.unfolded, Failures: t.failures, LastError: t.lastErr}
}

// failed counts a failed fold.
func (t *foldTail) failed(err error) {
	t.mu.Lock()
	t.failures++
	t.lastErr = err
	t.mu.Unlock()
}

// tailRow is a listed row; c is nil once it is folded.
type tailRow struct {
	id int64
	c  *tailClient
}

// tailClient is a client's unfolded rows, by id, with their positions in
// foldTail.rows.
type tailClient struct {
	key  tailKey
	rows []tailRef
}

type tailRef struct {
	id    int64
	table string // the day's table
	pos   int
}

// tailKey names a client in foldTail.clients (a struct of the two, not a
// string made of them: nothing is allocated per record to look it up).
type tailKey struct{ account, client string }

// add lists a batch's rows, in id order, each in the day's table tables
// gives for it ("": a day in client order, whose rows are in its client
// index already), and notes the counter's value after them.
func (t *foldTail) add(recs []*fleetmq.Record, tables []string, given int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.given = max(t.given, given)
	if t.clients == nil {
		t.clients = map[tailKey]*tailClient{}
	}
	for i, r := range recs {
		if tables[i] == "" {
			continue
		}
		key := tailKey{r.AccountID, r.ClientID}
		c := t.clients[key]
		if c == nil {
			c = &tailClient{key: key}
			t.clients[key] = c
		}
		c.rows = append(c.rows, tailRef{id: r.ID, table: tables[i], pos: t.base + len(t.rows)})
		t.rows = append(t.rows, tailRow{id: r.ID, c: c})
		t.unfolded++
	}
}

// len is the number of listed unfolded rows.
func (t *foldTail) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unfolded
}

// due reports whether a commit of batch more rows folds: once foldRows
// rows are unfolded, and foldSpread per client (or foldMaxTail times
// foldRows) with the batch's.
func (t *foldTail) due(batch, foldRows int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.unfolded + batch
	return n >= foldRows && (n >= foldSpread*len(t.clients) || n >= foldMaxTail*foldRows)
}

// foldStep is the rows one fold takes: their ids by table, and the mark
// it sets (the id before the oldest listed row it leaves unfolded).
type foldStep struct {
	ids  map[string][]int64 // by table
	pos  []int              // their positions in the list
	mark int64
}

// next chooses the next fold: the clients of the oldest listed rows, each
// with its oldest listed rows, up to maxRows rows and maxClients clients.
// It returns nil when nothing is listed.
func (t *foldTail) next(maxClients, maxRows int) *foldStep {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.unfolded == 0 {
		return nil
	}
	st := &foldStep{ids: map[string][]int64{}}
	taken := map[*tailClient]int{}
	rows := 0
	for i := t.head; i < len(t.rows) && len(taken) < maxClients && rows < maxRows; i++ {
		c := t.rows[i].c
		if c == nil {
			continue
		}
		if _, ok := taken[c]; ok {
			continue
		}
		n := min(len(c.rows), maxRows-rows)
		taken[c] = n
		rows += n
		for _, r := range c.rows[:n] {
			st.ids[r.table] = append(st.ids[r.table], r.id)
			st.pos = append(st.pos, r.pos)
		}
	}
	// The mark: up to the oldest listed row not taken, or the counter's
	// value when it takes them all (every unfolded row up to it is
	// listed).
	st.mark = t.given
	for i := t.head; i < len(t.rows); i++ {
		r := t.rows[i]
		if r.c == nil {
			continue
		}
		if taken[r.c] > 0 {
			taken[r.c]--
			continue
		}
		st.mark = r.id - 1
		break
	}
	return st
}

// done unlists the rows of a fold that committed.
func (t *foldTail) done(st *foldStep) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pos := range st.pos {
		t.unlist(pos)
	}
	t.trim()
}

// unlist marks the row at position pos folded (if it is still listed).
func (t *foldTail) unlist(pos int) {
	i := pos - t.base
	if i < 0 || i >= len(t.rows) || t.rows[i].c == nil {
		return
	}
	c := t.rows[i].c
	t.rows[i].c = nil
	t.unfolded--
	if len(c.rows) > 0 && c.rows[0].pos == pos {
		c.rows = c.rows[1:] // the oldest, as folds take them
	} else {
		c.rows = slices.DeleteFunc(c.rows, func(r tailRef) bool { return r.pos == pos })
	}
	if len(c.rows) == 0 {
		delete(t.clients, c.key)
	}
}

// trim drops the folded rows at the start of the list, copying the rest
// down once they are half of it (into a smaller array when the list has
// shrunk to a quarter of its array, after a burst).
func (t *foldTail) trim() {
	for t.head < len(t.rows) && t.rows[t.head].c == nil {
		t.head++
	}
	if t.head <= len(t.rows)/2 {
		return
	}
	t.base += t.head
	rest := t.rows[t.head:]
	if n := len(rest); cap(t.rows) > 4096 && n < cap(t.rows)/4 {
		t.rows = append(make([]tailRow, 0, 2*n), rest...)
	} else {
		t.rows = append(t.rows[:0], rest...)
	}
	t.head = 0
}

// folded unlists the rows up to id through (every row of them folded by
// a fold of all, as a day's reorder makes).
func (t *foldTail) folded(through int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := t.head; i < len(t.rows) && t.rows[i].id <= through; i++ {
		t.unlist(t.base + i)
	}
	t.trim()
}

// unfoldedIDs returns the ids of a client's listed rows of a day's table,
// in id order.
func (t *foldTail) unfoldedIDs(account, client, table string) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.clients[tailKey{account, client}]
	if c == nil {
		return nil
	}
	var ids []int64
	for _, r := range c.rows {
		if r.table == table {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// maxListedIDs bounds the ids a query names in SQL; a client with more
// unfolded rows in a day has them read by the range of their ids.
const maxListedIDs = 1000

// unfoldedCond is the condition on col (a day's table's id) that picks a
// client's unfolded rows of the table, by the ids listed; "" when none is
// listed. The rows of a commit that ended after the list was
// read may be missing: a query that runs beside a commit sees it or not.
// It may also pick rows folded since (queries by client pass over those
// their client index has).
func (t *foldTail) unfoldedCond(col, account, client, table string) string {
	ids := t.unfoldedIDs(account, client, table)
	switch {
	case len(ids) == 0:
		return ""
	case len(ids) > maxListedIDs:
		return fmt.Sprintf("%s BETWEEN %d AND %d", col, ids[0], ids[len(ids)-1])
	}
	return idsCond(col, ids)
}

// idsCond is the condition on col that keeps exactly the given ids: the
// ranges of consecutive ids when there are a few (a busy client's rows,
// or a few clients' that take every id of a stretch, are read as ranges
// of the table), else the list of them.
func idsCond(col string, ids []int64) string {
	if len(ids) == 0 {
		return "0" // keeps none
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var runs []string
	for i := 0; i < len(ids) && len(runs) <= maxIDRuns; {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if i == j {
			runs = append(runs, fmt.Sprintf("%s = %d", col, ids[i]))
		} else {
			runs = append(runs, fmt.Sprintf("%s BETWEEN %d AND %d", col, ids[i], ids[j]))
		}
		i = j + 1
	}
	if len(runs) <= maxIDRuns {
		return "(" + strings.Join(runs, " OR ") + ")"
	}
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	return col + " IN (" + strings.Join(list, ", ") + ")"
}

// maxIDRuns bounds the ranges idsCond names.
const maxIDRuns = 8

// markStale notes that the list may miss committed rows.
func (t *foldTail) markStale() {
	t.mu.Lock()
	t.stale = true
	t.mu.Unlock()
}

// follows reports whether the list holds every unfolded row up to the id
// before first (a batch's first id): it is not stale, and no other
// process gave ids since it was read.
func (t *foldTail) follows(first int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.stale && t.given == first-1
}

// current reports whether the list has every committed row: it is not
// stale and no other process gave ids since it was read. (A query that
// finds it is not reads every row after the fold's mark.)
func (t *foldTail) current(ctx context.Context, q queryer) (bool, error) {
	last, err := lastID(ctx, q)
	if err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.stale && last <= t.given, nil
}

// load lists the unfolded rows of the given tables: those after the
// fold's mark that are not in their client index, read on q (the store's
// pool when it opens, a commit's transaction when the list may miss
// rows), given being the id counter's value they were read at.
func (t *foldTail) load(ctx context.Context, q queryer, parts []dayPartition, given int64) error {
	var rows []listedRow
	for _, p := range parts {
		if p.clustered {
			continue // nothing unfolded: see upsertLatestSQLite and reorderSQLiteDay
		}
		var err error
		if rows, err = unfoldedOf(ctx, q, p.name, rows); err != nil {
			return err
		}
	}
	// In id order across the days (a late record's day comes before its
	// neighbours' in time, after them in ids).
	slices.SortFunc(rows, func(a, b listedRow) int { return cmp.Compare(a.r.ID, b.r.ID) })
	recs, tables := make([]*fleetmq.Record, len(rows)), make([]string, len(rows))
	for i := range rows {
		recs[i], tables[i] = &rows[i].r, rows[i].table
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Positions go on from the old list's, so that a fold chosen from it
	// unlists nothing of the new one.
	fresh := foldTail{base: t.base + len(t.rows)}
	fresh.add(recs, tables, given)
	t.rows, t.base, t.head, t.clients, t.unfolded, t.stale, t.given = fresh.rows, fresh.base, 0, fresh.clients, fresh.unfolded, false, given
	return nil
}

// lastID reads the history id counter.
func lastID(ctx context.Context, q queryer) (int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT value FROM meta WHERE key = 'history_last_id'`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var last int64
	if rows.Next() {
		if err := rows.Scan(&last); err != nil {
			return 0, err
		}
	}
	return last, rows.Err()
}

// listedRow is an unfolded row read from a day's table.
type listedRow struct {
	table string
	r     fleetmq.Record
}

// unfoldedOf appends the unfolded rows of a day's table to rows.
func unfoldedOf(ctx context.Context, q queryer, table string, rows []listedRow) ([]listedRow, error) {
	res, err := q.QueryContext(ctx, `SELECT id, account_id, client_id FROM `+table+` h NOT INDEXED WHERE `+unfoldedRows+
		` AND NOT EXISTS (SELECT 1 FROM `+clientTable(table)+` c WHERE c.account_id = h.account_id AND c.client_id = h.client_id
			AND c.received_us = h.received_us AND c.id = h.id) ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	for res.Next() {
		row := listedRow{table: table}
		if err := res.Scan(&row.r.ID, &row.r.AccountID, &row.r.ClientID); err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, res.Err()
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
		n, through, err = foldAll(ctx, tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	s.tail.folded(through)
	return n, nil
}

// foldAll folds every unfolded row of every day, as the database lists
// them (not this process's list: another may have made a day since), in
// a write transaction, reading them from the tables after the fold's
// mark, and returns how many it folded and the id it folded up to (the
// id counter's value, the new mark). A row whose entries are already
// there (folded since the mark) is passed over.
func foldAll(ctx context.Context, tx *sql.Tx) (n, through int64, err error) {
	parts, err := readSQLiteDays(ctx, tx)
	if err != nil {
		return 0, 0, err
	}
	var mark int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'history_folded'`).Scan(&mark); err != nil {
		return 0, 0, err
	}
	if through, err = lastID(ctx, tx); err != nil || through <= mark {
		return 0, max(through, mark), err
	}
	for _, p := range parts {
		if p.clustered {
			continue // nothing unfolded: see upsertLatestSQLite
		}
		rows, err := foldRows(ctx, tx, p.name, `id > ? AND id <= ?`, mark, through)
		if err != nil {
			return 0, 0, err
		}
		n += rows
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'history_folded'`, through); err != nil {
		return 0, 0, err
	}
	return n, through, nil
}

// foldStepIn folds a step's rows (foldTail.next) in a write transaction
// and moves the fold's mark to the step's (never back). The rows of a
// table that live (the days as the transaction sees them) does not name
// are passed over: its day was dropped (they are gone) or reordered (the
// reorder folded them).
func foldStepIn(ctx context.Context, tx *sql.Tx, st *foldStep, live func(table string) bool) error {
	for table, ids := range st.ids {
		if !live(table) {
			continue
		}
		if _, err := foldRows(ctx, tx, table, idsCond("id", ids)); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, `UPDATE meta SET value = MAX(value, ?) WHERE key = 'history_folded'`, st.mark)
	return err
}

// foldRows folds the rows of a day's table that cond (on its unqualified
// columns) keeps into its client index and history_latest, and returns
// how many entries the client index gained. A row whose entries are
// there already is passed over.
func foldRows(ctx context.Context, tx *sql.Tx, table, cond string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO `+clientTable(table)+` (account_id, client_id, received_us, id)
		SELECT account_id, client_id, received_us, id FROM `+table+` NOT INDEXED WHERE `+cond+` ORDER BY 1, 2, 3, 4`, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	// The newest row of each topic (the later row of two received in the
	// same microsecond), replacing the stored one unless that is newer, as
	// a commit of these rows would have.
	_, err = tx.ExecContext(ctx, `INSERT INTO history_latest (account_id, client_id, topic, record_id, received_us)
		SELECT account_id, client_id, topic, id, received_us FROM (
			SELECT account_id, client_id, topic, id, received_us, ROW_NUMBER() OVER (
				PARTITION BY account_id, client_id, topic ORDER BY received_us DESC, id DESC) AS newest
			FROM `+table+` NOT INDEXED WHERE `+cond+`)
		WHERE newest = 1 ORDER BY account_id, client_id, topic
		ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us
		WHERE excluded.received_us >= history_latest.received_us`, args...)
	return n, err
}
