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
// new claim's epoch and the claim it replaced (oldNode "" when none).
func (s *Store) ClaimSession(key, node string) (epoch int64, oldNode string, oldEpoch int64, err error) {
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
		next := `nextval('session_epochs')`
		if s.dialect != postgresDialect {
			if err := tx.QueryRowContext(ctx, `UPDATE session_epochs SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&epoch); err != nil {
				return err
			}
			next = "?"
		}
		args := []any{node, []byte(key)}
		if s.dialect != postgresDialect {
			args = []any{node, epoch, []byte(key)}
		}
		return tx.QueryRowContext(ctx, s.rebind(`UPDATE session_owners SET node = ?, epoch = `+next+` WHERE key = ? RETURNING epoch`), args...).Scan(&epoch)
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
