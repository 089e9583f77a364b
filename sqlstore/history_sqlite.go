package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"

	"github.com/fleetmq/fleetmq"
)

// maxAppendRows is the most rows one statement of the SQLite history writer
// carries. A batch is written in statements of 64, 32, ... 1 rows (its
// size's binary digits), each prepared once when the store opens: SQLite
// compiles a statement in tens of microseconds, as long as the commit of a
// small batch takes to run.
const maxAppendRows = 64

// appendStmts are the SQLite history writer's prepared statements on the
// ingest pool: by row count (powers of two up to maxAppendRows), the
// INSERTs into history, history_client and history_latest (upserts);
// keepIDsAfterMark and unfoldedCheck.
type appendStmts struct {
	insert, client, latest map[int]*sql.Stmt
	keepIDs, unfolded      *sql.Stmt
}

// prepareAppend prepares the history writer's statements on the ingest
// pool, before the first transaction holds its only connection. A
// statement prepared on a connection the pool has since replaced is
// prepared again by the transaction that uses it (sql.Tx.StmtContext).
func (s *Store) prepareAppend(ctx context.Context) error {
	st := &appendStmts{insert: map[int]*sql.Stmt{}, client: map[int]*sql.Stmt{}, latest: map[int]*sql.Stmt{}}
	s.appendStmts = st // closed with the store, however far this goes
	prepare := func(query string) (*sql.Stmt, error) { return s.ingest.PrepareContext(ctx, query) }
	var err error
	for n := 1; n <= maxAppendRows; n *= 2 {
		if st.insert[n], err = prepare(insertSQL(n)); err != nil {
			return err
		}
		if st.client[n], err = prepare(`INSERT INTO history_client (account_id, client_id, received_us, id) VALUES ` + valueRows(n, 4)); err != nil {
			return err
		}
		if st.latest[n], err = prepare(latestSQL(n)); err != nil {
			return err
		}
	}
	if st.keepIDs, err = prepare(keepIDsAfterMark); err != nil {
		return err
	}
	if st.unfolded, err = prepare(unfoldedCheck); err != nil {
		return err
	}
	return nil
}

// close closes the prepared statements.
func (st *appendStmts) close() error {
	if st == nil {
		return nil
	}
	var errs []error
	for _, m := range []map[int]*sql.Stmt{st.insert, st.client, st.latest} {
		for _, s := range m {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
	}
	for _, s := range []*sql.Stmt{st.keepIDs, st.unfolded} {
		if s != nil {
			errs = append(errs, s.Close())
		}
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
// INSERTs. The rows join the unfolded ones (after the fold's mark);
// once FoldRows have gathered, the transaction also folds the oldest of
// them into the client index and history_latest, a bounded step, so the
// step shares the commit's sync.
func (s *Store) appendHistorySQLite(ctx context.Context, recs []*fleetmq.Record) error {
	fold := s.tail.len()+len(recs) >= s.foldRows
	var through int64
	err := s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
		if _, err := tx.StmtContext(ctx, s.appendStmts.keepIDs).ExecContext(ctx); err != nil {
			return err
		}
		args := make([]any, 0, maxAppendRows*historyColumnCount)
		for start := 0; start < len(recs); {
			chunk := recs[start : start+statementRows(len(recs)-start)]
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
				args = append(args, r.AccountID, r.ClientID, r.Topic, r.Class, r.QoS, r.PublishedQoS, r.Retain,
					payload, r.ContentType, r.PayloadFormat, props, r.StationControllerDeviceID, r.Received.UnixMicro())
			}
			res, err := tx.StmtContext(ctx, s.appendStmts.insert[len(chunk)]).ExecContext(ctx, args...)
			if err != nil {
				return err
			}
			// SQLite gives each new row of a rowid table the largest rowid
			// plus one, row by row, and the transaction holds the write lock:
			// the chunk's ids are consecutive and end at the last insert id.
			last, err := res.LastInsertId()
			if err != nil {
				return err
			}
			for i, r := range chunk {
				r.ID = last - int64(len(chunk)-1-i)
			}
		}
		if !fold {
			return nil
		}
		// The fold is upkeep: if it fails, the batch is committed without
		// it (its records are acknowledged) and a later commit folds.
		rows := s.tail.next(recs)
		if _, err := tx.ExecContext(ctx, `SAVEPOINT fold`); err != nil {
			return err
		}
		if err := s.foldListed(ctx, tx, rows); err != nil {
			fold = false
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO fold`); err != nil {
				return err
			}
		} else if len(rows) > 0 {
			through = rows[len(rows)-1].id
		}
		_, err := tx.ExecContext(ctx, `RELEASE fold`)
		return err
	})
	if err != nil {
		return err
	}
	s.tail.add(recs)
	if fold {
		s.tail.folded(through)
	}
	return nil
}

// insertSQL is a multi-row INSERT of n history rows.
func insertSQL(n int) string {
	return "INSERT INTO history (" + historyColumns + ") VALUES " + valueRows(n, historyColumnCount)
}

// latestSQL is a multi-row upsert of n history_latest rows (of distinct
// topics): a row replaces the stored one unless that one is newer.
func latestSQL(n int) string {
	return `INSERT INTO history_latest (account_id, client_id, topic, record_id, received_us) VALUES ` + valueRows(n, 5) + `
		ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us
		WHERE excluded.received_us >= history_latest.received_us`
}

// valueRows is n rows of cols placeholders: "(?, ?), (?, ?)".
func valueRows(n, cols int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}
