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
// ingest pool, by row count (powers of two up to maxAppendRows).
type appendStmts struct {
	insert map[int]*sql.Stmt // INSERT INTO history
	latest map[int]*sql.Stmt // upsert INTO history_latest
}

// prepareAppend prepares the history writer's statements on the ingest
// pool, before the first transaction holds its only connection. A
// statement prepared on a connection the pool has since replaced is
// prepared again by the transaction that uses it (sql.Tx.StmtContext).
func (s *Store) prepareAppend(ctx context.Context) error {
	st := &appendStmts{insert: map[int]*sql.Stmt{}, latest: map[int]*sql.Stmt{}}
	for n := 1; n <= maxAppendRows; n *= 2 {
		ins, err := s.ingest.PrepareContext(ctx, insertSQL(n))
		if err != nil {
			return err
		}
		st.insert[n] = ins
		up, err := s.ingest.PrepareContext(ctx, latestSQL(n))
		if err != nil {
			return err
		}
		st.latest[n] = up
	}
	s.appendStmts = st
	return nil
}

// close closes the prepared statements.
func (st *appendStmts) close() error {
	if st == nil {
		return nil
	}
	var errs []error
	for _, m := range []map[int]*sql.Stmt{st.insert, st.latest} {
		for _, s := range m {
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

// appendHistorySQLite writes a batch in one transaction: the rows by
// multi-row INSERTs, then the newest record of each topic into
// history_latest by multi-row upserts.
func (s *Store) appendHistorySQLite(ctx context.Context, recs []*fleetmq.Record) error {
	return s.txOn(ctx, s.ingest, func(tx *sql.Tx) error {
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
		newest := newestPerTopic(recs)
		for start := 0; start < len(newest); {
			chunk := newest[start : start+statementRows(len(newest)-start)]
			start += len(chunk)
			args = args[:0]
			for _, r := range chunk {
				args = append(args, r.AccountID, r.ClientID, r.Topic, r.ID, r.Received.UnixMicro())
			}
			if _, err := tx.StmtContext(ctx, s.appendStmts.latest[len(chunk)]).ExecContext(ctx, args...); err != nil {
				return err
			}
		}
		return nil
	})
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
