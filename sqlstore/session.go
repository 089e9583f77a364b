package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fleetmq/fleetmq"
)

var _ fleetmq.PortalStore = (*Store)(nil)

// Portal sessions and owner passwords are not control-plane state (the
// broker never reads them): they are written in plain transactions that
// leave the control version alone.

// CreatePortalSession implements fleetmq.PortalStore.
func (s *Store) CreatePortalSession(ctx context.Context, ps *fleetmq.PortalSession) (err error) {
	defer wrap(&err, "create portal session")
	return s.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM accounts WHERE id = ?`), ps.AccountID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fleetmq.NotFound("account", ps.AccountID)
		}
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO portal_sessions (id_hash, account_id, created_at, last_seen_at) VALUES (?, ?, ?, ?)`),
			ps.IDHash, ps.AccountID, ps.CreatedAt.UnixMicro(), ps.LastSeenAt.UnixMicro())
		if isUnique(err) {
			return fleetmq.Conflictf("a portal session with that id exists")
		}
		return err
	})
}

// PortalSession implements fleetmq.PortalStore.
func (s *Store) PortalSession(ctx context.Context, idHash string) (_ *fleetmq.PortalSession, err error) {
	defer wrap(&err, "portal session")
	ps := &fleetmq.PortalSession{IDHash: idHash}
	var created, seen int64
	err = s.db.QueryRowContext(ctx, s.rebind(`SELECT account_id, created_at, last_seen_at FROM portal_sessions WHERE id_hash = ?`), idHash).
		Scan(&ps.AccountID, &created, &seen)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fleetmq.NotFound("portal session", "")
	}
	if err != nil {
		return nil, err
	}
	ps.CreatedAt, ps.LastSeenAt = time.UnixMicro(created).UTC(), time.UnixMicro(seen).UTC()
	return ps, nil
}

// TouchPortalSession implements fleetmq.PortalStore.
func (s *Store) TouchPortalSession(ctx context.Context, idHash string, at time.Time) (err error) {
	defer wrap(&err, "touch portal session")
	_, err = s.exec(ctx, `UPDATE portal_sessions SET last_seen_at = ? WHERE id_hash = ? AND last_seen_at < ?`,
		at.UnixMicro(), idHash, at.UnixMicro())
	return err
}

// DeletePortalSession implements fleetmq.PortalStore.
func (s *Store) DeletePortalSession(ctx context.Context, idHash string) (err error) {
	defer wrap(&err, "delete portal session")
	_, err = s.exec(ctx, `DELETE FROM portal_sessions WHERE id_hash = ?`, idHash)
	return err
}

// DeletePortalSessions implements fleetmq.PortalStore.
func (s *Store) DeletePortalSessions(ctx context.Context, accountID, keepIDHash string) (_ int64, err error) {
	defer wrap(&err, "delete portal sessions")
	r, err := s.exec(ctx, `DELETE FROM portal_sessions WHERE account_id = ? AND id_hash <> ?`, accountID, keepIDHash)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// DeleteStalePortalSessions implements fleetmq.PortalStore.
func (s *Store) DeleteStalePortalSessions(ctx context.Context, lastSeenBefore, createdBefore time.Time) (_ int64, err error) {
	defer wrap(&err, "delete stale portal sessions")
	r, err := s.exec(ctx, `DELETE FROM portal_sessions WHERE last_seen_at < ? OR created_at < ?`,
		lastSeenBefore.UnixMicro(), createdBefore.UnixMicro())
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// SetOwnerPasswordHash implements fleetmq.PortalStore.
func (s *Store) SetOwnerPasswordHash(ctx context.Context, accountID, hash string) (signedOut int64, err error) {
	defer wrap(&err, "set owner password hash")
	err = s.tx(ctx, func(tx *sql.Tx) error {
		if err := mustAffect(tx.ExecContext(ctx, s.rebind(`UPDATE accounts SET owner_password_hash = ? WHERE id = ?`), hash, accountID))("account", accountID); err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM portal_sessions WHERE account_id = ?`), accountID)
		if err != nil {
			return err
		}
		signedOut, err = r.RowsAffected()
		return err
	})
	return signedOut, err
}
