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
// ingest pool: INSERT INTO history by row count (powers of two up to
// maxAppendRows), and keepIDsAfterMark.
type appendStmts struct {
	insert  map[int]*sql.Stmt
	keepIDs *sql.Stmt
}

// prepareAppend prepares the history writer's statements on the ingest
// pool, before the first transaction holds its only connection. A
// statement prepared on a connection the pool has since replaced is
// prepared again by the transaction that uses it (sql.Tx.StmtContext).
func (s *Store) prepareAppend(ctx context.Context) error {
	st := &appendStmts{insert: map[int]*sql.Stmt{}}
	s.appendStmts = st // closed with the store, however far this goes
	var err error
	for n := 1; n <= maxAppendRows; n *= 2 {
		if st.insert[n], err = s.ingest.PrepareContext(ctx, insertSQL(n)); err != nil {
			return err
		}
	}
	if st.keepIDs, err = s.ingest.PrepareContext(ctx, keepIDsAfterMark); err != nil {
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
	for _, s := range st.insert {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	if st.keepIDs != nil {
		errs = append(errs, st.keepIDs.Close())
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
	var through int64 // the id folded up to, 0 when nothing was
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
		if _, err := tx.ExecContext(ctx, `SAVEPOINT fold`); err != nil {
			return err
		}
		var err error
		if _, through, err = foldIn(ctx, tx, s.tail.next(recs, max(foldMaxClients, 2*len(recs)))); err != nil {
			through = 0
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO fold`); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `RELEASE fold`)
		return err
	})
	if err != nil {
		return err
	}
	s.tail.add(recs)
	if through > 0 {
		s.tail.folded(through)
	}
	return nil
}

// insertSQL is a multi-row INSERT of n history rows.
func insertSQL(n int) string {
	return "INSERT INTO history (" + historyColumns + ") VALUES " + valueRows(n, historyColumnCount)
}

// valueRows is n rows of cols placeholders: "(?, ?), (?, ?)".
func valueRows(n, cols int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}
