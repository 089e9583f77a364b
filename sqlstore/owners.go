package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// The claims of a cluster's MQTT sessions (broker.SessionOwners keeps
// them here; the notice to the node that lost one goes through NATS, see
// cluster.Owners). A claim is one transaction that holds the key's row
// (PostgreSQL: an upsert that locks it; SQLite writes one transaction at
// a time): it reads the claim it replaces and writes the new one with the
// next epoch.

// ownersTimeout bounds one claim, release or lookup: a CONNECT waits for
// its claim.
const ownersTimeout = 5 * time.Second

// Keys are stored as bytes: a session key holds NUL, which PostgreSQL's
// text does not take.

// ClaimSession makes node the owner of the session key and returns the
// new claim's epoch and the claim it replaced (oldNode "" when none). A
// fresh claim (a clean start) discards the session's saved state.
func (s *Store) ClaimSession(key, node string, fresh bool) (epoch int64, oldNode string, oldEpoch int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), ownersTimeout)
	defer cancel()
	err = s.tx(ctx, func(tx *sql.Tx) error {
		// One statement reads the claim there is (none: '', 0) and holds
		// the key's row to the end of the transaction: the no-op update
		// locks it on PostgreSQL, even when a release deleted it a moment
		// before (then this inserts it).
		if err := tx.QueryRowContext(ctx, s.rebind(`INSERT INTO session_owners (key, node, epoch) VALUES (?, '', 0)
			ON CONFLICT (key) DO UPDATE SET node = session_owners.node RETURNING node, epoch`), []byte(key)).Scan(&oldNode, &oldEpoch); err != nil {
			return err
		}
		// A fresh claim discards the state; so does the first claim of a
		// key (a new row): a node still holding an older claim of it
		// cannot save into it.
		fresh := fresh || oldNode == ""
		if s.dialect == postgresDialect {
			return tx.QueryRowContext(ctx, `UPDATE session_owners SET node = $1, epoch = e.v,
				state = CASE WHEN $2 THEN NULL ELSE state END, state_epoch = CASE WHEN $2 THEN e.v ELSE state_epoch END
				FROM (SELECT nextval('session_epochs') AS v) e WHERE key = $3 RETURNING session_owners.epoch`,
				node, fresh, []byte(key)).Scan(&epoch)
		}
		if err := tx.QueryRowContext(ctx, `UPDATE session_epochs SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&epoch); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `UPDATE session_owners SET node = ?1, epoch = ?2,
			state = CASE WHEN ?3 THEN NULL ELSE state END, state_epoch = CASE WHEN ?3 THEN ?2 ELSE state_epoch END
			WHERE key = ?4 RETURNING epoch`, node, epoch, fresh, []byte(key)).Scan(&epoch)
	})
	return epoch, oldNode, oldEpoch, err
}

// ReleaseSession ends the claim (key, epoch) if it still holds the key.
func (s *Store) ReleaseSession(key string, epoch int64) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ownersTimeout)
	defer cancel()
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM session_owners WHERE key = ? AND epoch = ? AND node <> ''`), []byte(key), epoch)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// SessionOwner returns the claim holding key, node "" when none.
func (s *Store) SessionOwner(key string) (node string, epoch int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), ownersTimeout)
	defer cancel()
	err = s.db.QueryRowContext(ctx, s.rebind(`SELECT node, epoch FROM session_owners WHERE key = ? AND node <> ''`), []byte(key)).Scan(&node, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return node, epoch, err
}

// SaveSessionState stores the state of the session key that node saved
// under its claim epoch, unless a later claim took or discarded the
// state.
func (s *Store) SaveSessionState(key, node string, epoch int64, state []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), ownersTimeout)
	defer cancel()
	_, err := s.db.ExecContext(ctx, s.rebind(`UPDATE session_owners SET state = ?, state_epoch = ?, state_node = ? WHERE key = ? AND state_epoch <= ?`),
		state, epoch, node, []byte(key), epoch)
	return err
}

// SessionRound records that node found every session state it holds
// saved, or unchanged since, at at.
func (s *Store) SessionRound(node string, at time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), ownersTimeout)
	defer cancel()
	_, err := s.db.ExecContext(ctx, s.rebind(`INSERT INTO session_rounds (node, saved_at) VALUES (?, ?)
		ON CONFLICT (node) DO UPDATE SET saved_at = excluded.saved_at`), node, at.UnixMicro())
	return err
}

// TakeSessionState returns the state saved for the session key by claim
// epoch or an earlier one, and makes it epoch's (ok false when there is
// none, or a later claim took it). through is the last round of the node
// that saved it (zero when none).
func (s *Store) TakeSessionState(key string, epoch int64) (state []byte, through time.Time, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), ownersTimeout)
	defer cancel()
	var saver string
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var at int64
		// The no-op update holds the row to the end (as in ClaimSession).
		err := tx.QueryRowContext(ctx, s.rebind(`UPDATE session_owners SET state_epoch = state_epoch WHERE key = ? RETURNING state, state_epoch, state_node`),
			[]byte(key)).Scan(&state, &at, &saver)
		if errors.Is(err, sql.ErrNoRows) || err == nil && at > epoch {
			state = nil
			return nil
		}
		if err != nil {
			return err
		}
		// The state is the taker's now; its saver's rounds no longer say
		// anything of it (the taker may die before it saves).
		_, err = tx.ExecContext(ctx, s.rebind(`UPDATE session_owners SET state_epoch = ?, state_node = '' WHERE key = ?`), epoch, []byte(key))
		return err
	})
	if err != nil || state == nil {
		return nil, time.Time{}, false, err
	}
	if saver == "" { // taken before, and not saved since
		return state, time.Time{}, true, nil
	}
	var micros int64
	switch err := s.db.QueryRowContext(ctx, s.rebind(`SELECT saved_at FROM session_rounds WHERE node = ?`), saver).Scan(&micros); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, time.Time{}, false, err
	default:
		through = time.UnixMicro(micros).UTC()
	}
	return state, through, true, nil
}

// SessionsPerNode counts the MQTT sessions each node of a cluster holds.
func (s *Store) SessionsPerNode(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT node, COUNT(*) FROM session_owners WHERE node <> '' GROUP BY node`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var node string
		var n int64
		if err := rows.Scan(&node, &n); err != nil {
			return nil, err
		}
		out[node] = n
	}
	return out, rows.Err()
}
