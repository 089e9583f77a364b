package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq"
)

// maxAppendRows is the most rows one statement of the SQLite history writer
// carries. A batch is written in statements of 64, 32, ... 1 rows (its
// size's binary digits), each prepared once per day's table: SQLite
// compiles a statement in tens of microseconds, as long as the commit of a
// small batch takes to run.
const maxAppendRows = 64

// nextIDs takes n ids from the counter of history ids and returns the
// last: the batch's rows get the n ids up to it.
const nextIDs = `UPDATE meta SET value = value + ? WHERE key = 'history_last_id' RETURNING value`

// appendStmts are the SQLite history writer's prepared statements on the
// ingest pool: nextIDs, and INSERT INTO each day's table by row count
// (powers of two up to maxAppendRows), prepared when a batch first has
// rows of the day. A statement prepared on a connection the pool has since
// replaced is prepared again by the transaction that uses it
// (sql.Tx.StmtContext).
type appendStmts struct {
	mu     sync.Mutex
	ids    *sql.Stmt
	insert map[string]map[int]*sql.Stmt // by table, then row count
}

// prepareAppend prepares the history writer's first statement on the
// ingest pool, before the first transaction holds its only connection.
func (s *Store) prepareAppend(ctx context.Context) error {
	st := &appendStmts{insert: map[string]map[int]*sql.Stmt{}}
	s.appendStmts = st // closed with the store, however far this goes
	var err error
	st.ids, err = s.ingest.PrepareContext(ctx, nextIDs)
	return err
}

// forTable returns the INSERT statements of a table, preparing them on db
// the first time (outside any transaction of db's).
func (st *appendStmts) forTable(ctx context.Context, db *sql.DB, table string) (map[int]*sql.Stmt, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if m, ok := st.insert[table]; ok {
		return m, nil
	}
	m := make(map[int]*sql.Stmt)
	for n := 1; n <= maxAppendRows; n *= 2 {
		stmt, err := db.PrepareContext(ctx, insertSQL(table, n))
		if err != nil {
			for _, s := range m {
				s.Close()
			}
			return nil, err
		}
		m[n] = stmt
	}
	st.insert[table] = m
	return m, nil
}

// forget closes the statements of the tables that are not among parts.
func (st *appendStmts) forget(parts []dayPartition) {
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for table, m := range st.insert {
		if slices.ContainsFunc(parts, func(p dayPartition) bool { return p.name == table }) {
			continue
		}
		for _, s := range m {
			s.Close()
		}
		delete(st.insert, table)
	}
}

// close closes the prepared statements.
func (st *appendStmts) close() error {
	if st == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var errs []error
	for _, m := range st.insert {
		for _, s := range m {
			errs = append(errs, s.Close())
		}
	}
	if st.ids != nil {
		errs = append(errs, st.ids.Close())
	}
	return errors.Join(errs...)
}

// statementRows is the row count of the next statement for a batch with n
// rows left: the largest power of two not above n or maxAppendRows.
func statementRows(n int) int {
	r := maxAppendRows
	for r > n {
		r /= 2
	}
	return r
}

// appendHistorySQLite writes a batch in one transaction by multi-row
// INSERTs into the tables of its records' days. A day another process
// dropped since this one read the days (a late record of it) is made
// again, and the batch written once more.
func (s *Store) appendHistorySQLite(ctx context.Context, recs []*fleetmq.Record) error {
	return s.onFreshDays(ctx, func() error { return s.appendSQLite(ctx, recs) })
}

// dayRows is the rows of a batch that go into one table, and its INSERTs.
type dayRows struct {
	part   dayPartition
	recs   []*fleetmq.Record
	insert map[int]*sql.Stmt
}

// batchDays groups a batch's records by the partition that holds their
// time (a batch spans one day, two around midnight), creating the days
// that none does and preparing their INSERTs.
func (s *Store) batchDays(ctx context.Context, recs []*fleetmq.Record, created bool) ([]*dayRows, error) {
	var groups []*dayRows
	var missing []int64
	for _, r := range recs {
		us := r.Received.UnixMicro()
		i := slices.IndexFunc(groups, func(g *dayRows) bool { return g.part.lo <= us && us < g.part.hi })
		if i < 0 {
			p, ok := s.days.partition(us)
			if !ok {
				if day := dayStart(us); !slices.Contains(missing, day) {
					missing = append(missing, day)
				}
				continue
			}
			i = len(groups)
			groups = append(groups, &dayRows{part: p})
		}
		groups[i].recs = append(groups[i].recs, r)
	}
	if len(missing) > 0 {
		if created {
			return nil, fmt.Errorf("history days: no table holds the day of %v after it was made", time.UnixMicro(missing[0]).UTC())
		}
		if err := s.createSQLiteDays(ctx, missing); err != nil {
			return nil, err
		}
		return s.batchDays(ctx, recs, true) // every day is known now
	}
	for _, g := range groups {
		var err error
		if g.insert, err = s.appendStmts.forTable(ctx, s.ingest, g.part.name); err != nil {
			return nil, err
		}
	}
	return groups, nil
}

// appendSQLite is appendHistorySQLite's one try. The rows join the
// unfolded ones (listed in s.tail); once enough have gathered (foldTail.due),
// the transaction also folds the clients of the oldest of them into their
// days' client indexes and history_latest, a bounded step, so the step
// shares the commit's sync.
func (s *Store) appendSQLite(ctx context.Context, recs []*fleetmq.Record) error {
	groups, err := s.batchDays(ctx, recs, false)
	if err != nil {
		return err
	}
	// The day's table of each record to list ("": a day in client order).
	tables := make([]string, len(recs))
	for i, r := range recs {
		us := r.Received.UnixMicro()
		for _, g := range groups {
			if g.part.lo <= us && us < g.part.hi && !g.part.clustered {
				tables[i] = g.part.name
			}
		}
	}
	fold := s.tail.due(len(recs), s.foldRows)
	var (
		step    *foldStep // the fold made, nil when none was
		foldErr error
	)
	err = s.txOnThen(ctx, s.ingest, func(tx *sql.Tx) error {
		// The statements run without ctx's cancellation: the driver runs
		// a cancellable statement on a goroutine of its own, a hand-off
		// each way per statement. BEGIN IMMEDIATE has taken the write
		// lock, so none of them waits for another writer, and ctx's end
		// still rolls the transaction back before the next statement
		// (database/sql watches it).
		ctx := context.WithoutCancel(ctx)
		var last int64
		if err := tx.StmtContext(ctx, s.appendStmts.ids).QueryRowContext(ctx, len(recs)).Scan(&last); err != nil {
			return err
		}
		for i, r := range recs {
			r.ID = last - int64(len(recs)-1-i)
		}
		if !s.tail.follows(recs[0].ID) {
			// The list may miss rows (a commit reported as failed may have
			// gone in, or another process gave ids since): it is read
			// again from the tables, here, where no other commit runs.
			parts, err := readSQLiteDays(ctx, tx)
			if err != nil {
				return err
			}
			if err := s.tail.load(ctx, tx, parts, recs[0].ID-1); err != nil {
				return err
			}
		}
		args := make([]any, 0, maxAppendRows*(historyColumnCount+1))
		for _, g := range groups {
			for start := 0; start < len(g.recs); {
				chunk := g.recs[start : start+statementRows(len(g.recs)-start)]
				start += len(chunk)
				args = args[:0]
				for _, r := range chunk {
					var props any
					if len(r.UserProperties) > 0 {
						b, err := json.Marshal(r.UserProperties)
						if err != nil {
							return err
						}
						props = string(b)
					}
					payload := r.Payload
					if payload == nil {
						payload = []byte{}
					}
					args = append(args, r.ID, r.AccountID, r.ClientID, r.Topic, r.Class, r.QoS, r.PublishedQoS, r.Retain,
						payload, r.ContentType, r.PayloadFormat, props, r.StationControllerDeviceID, r.Received.UnixMicro())
				}
				if _, err := tx.StmtContext(ctx, g.insert[len(chunk)]).ExecContext(ctx, args...); err != nil {
					return err
				}
			}
			if g.part.clustered {
				// A late record of a day in client order: it is in its
				// client index already, and never folded, so its latest
				// values are kept here.
				if err := upsertLatestSQLite(ctx, tx, newestPerTopic(g.recs)); err != nil {
					return err
				}
			}
		}
		// Listed before the fold, which may take them with their clients'
		// older rows (a commit that fails leaves the list stale, and the
		// next one reads it again).
		s.tail.add(recs, tables, last)
		if !fold {
			return nil
		}
		// The fold is upkeep: if it fails, the batch is committed without
		// it (its records are acknowledged) and a later commit folds.
		if _, err := tx.ExecContext(ctx, `SAVEPOINT fold`); err != nil {
			return err
		}
		st := s.tail.next(max(foldMaxClients, 2*len(recs)), foldMaxRows)
		if st != nil {
			live, err := s.liveDays(ctx, tx)
			if err != nil {
				return err
			}
			if foldErr = foldStepIn(ctx, tx, st, live); foldErr != nil {
				if _, err := tx.ExecContext(ctx, `ROLLBACK TO fold`); err != nil {
					return err
				}
			} else {
				step = st
			}
		}
		_, err := tx.ExecContext(ctx, `RELEASE fold`)
		return err
	}, func(err error) {
		// Before another commit of this process may begin: it must find
		// the list stale if this one failed (it listed rows that are not
		// there, or rows went in without being reported).
		switch {
		case err != nil:
			s.tail.markStale()
		case step != nil:
			s.tail.done(step)
		}
	})
	if err != nil {
		return err
	}
	switch {
	case noSuchTable(foldErr):
		// A day was dropped or reordered (its table renamed) since this
		// process read the days: they are read again.
		s.rereadSQLiteDays(ctx)
	case foldErr != nil:
		s.tail.failed(foldErr)
	}
	return nil
}

// liveDays returns whether a table is a day's table in arrival order as
// the transaction sees the schema: from the days this process read when
// the schema is the same (one PRAGMA), else read again on tx (another
// process made, dropped or reordered a day since).
func (s *Store) liveDays(ctx context.Context, tx *sql.Tx) (func(table string) bool, error) {
	var version int64
	if err := tx.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&version); err != nil {
		return nil, err
	}
	s.days.mu.Lock()
	same := version == s.days.version
	s.days.mu.Unlock()
	if same {
		return s.days.live, nil
	}
	parts, err := readSQLiteDays(ctx, tx)
	if err != nil {
		return nil, err
	}
	return func(table string) bool { return arrivalTable(parts, table) }, nil
}

// upsertLatestSQLite makes records the latest of their topics, unless a
// stored one is newer.
func upsertLatestSQLite(ctx context.Context, tx *sql.Tx, recs []*fleetmq.Record) error {
	args := make([]any, 0, 5*len(recs))
	for _, r := range recs {
		args = append(args, r.AccountID, r.ClientID, r.Topic, r.ID, r.Received.UnixMicro())
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO history_latest (account_id, client_id, topic, record_id, received_us) VALUES `+valueRows(len(recs), 5)+`
		ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us
		WHERE excluded.received_us >= history_latest.received_us`, args...)
	return err
}

// insertSQL is a multi-row INSERT of n history rows, with their ids,
// into a day's table.
func insertSQL(table string, n int) string {
	return "INSERT INTO " + table + " (id, " + historyColumns + ") VALUES " + valueRows(n, historyColumnCount+1)
}

// valueRows is n rows of cols placeholders: "(?, ?), (?, ?)".
func valueRows(n, cols int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}
