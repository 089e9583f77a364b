package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fleetmq/fleetmq"
)

// CreateRESTToken implements fleetmq.ControlStore. The account's state,
// the active count and the insert run in one control-plane write, and
// writes take turns (see write), so concurrent creations cannot pass
// MaxActiveRESTTokens together, nor one slip in beside a suspension.
func (s *Store) CreateRESTToken(ctx context.Context, t *fleetmq.RESTToken) (err error) {
	defer wrap(&err, "create REST token")
	return s.write(ctx, func(tx *sql.Tx) error {
		var suspended bool
		err := tx.QueryRowContext(ctx, s.rebind(`SELECT suspended FROM accounts WHERE id = ?`), t.AccountID).Scan(&suspended)
		if errors.Is(err, sql.ErrNoRows) {
			return fleetmq.NotFound("account", t.AccountID)
		}
		if err != nil {
			return err
		}
		if suspended {
			return fleetmq.Conflictf("account %s is suspended: it cannot create REST API tokens until the operator resumes it", t.AccountID)
		}
		var n int
		if err := tx.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM rest_tokens
			WHERE account_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`), t.AccountID, t.CreatedAt.UnixMicro()).Scan(&n); err != nil {
			return err
		}
		if n >= fleetmq.MaxActiveRESTTokens {
			return fleetmq.Conflictf("an account can have %d active REST API tokens and %d are active: revoke one first", fleetmq.MaxActiveRESTTokens, n)
		}
		_, err = tx.ExecContext(ctx, s.rebind(`INSERT INTO rest_tokens (id, account_id, label, prefix, hash, created_at, expires_at, revoked_at, last_used_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			t.ID, t.AccountID, t.Label, t.Prefix, t.Hash, t.CreatedAt.UnixMicro(), us(t.ExpiresAt), us(t.RevokedAt), us(t.LastUsedAt))
		if isUnique(err) {
			return fleetmq.Conflictf("a REST API token with id %q or the same value exists", t.ID)
		}
		return err
	})
}

const restTokenCols = `id, account_id, label, prefix, hash, created_at, expires_at, revoked_at, last_used_at`

func (s *Store) queryRESTTokens(ctx context.Context, q string, args ...any) ([]*fleetmq.RESTToken, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*fleetmq.RESTToken
	for rows.Next() {
		var t fleetmq.RESTToken
		var created int64
		var expires, revoked, used sql.NullInt64
		if err := rows.Scan(&t.ID, &t.AccountID, &t.Label, &t.Prefix, &t.Hash, &created, &expires, &revoked, &used); err != nil {
			return nil, err
		}
		t.CreatedAt = time.UnixMicro(created).UTC()
		t.ExpiresAt, t.RevokedAt, t.LastUsedAt = fromUS(expires), fromUS(revoked), fromUS(used)
		out = append(out, &t)
	}
	return out, rows.Err()
}

// RESTTokens implements fleetmq.ControlStore.
func (s *Store) RESTTokens(ctx context.Context, accountID string) (_ []*fleetmq.RESTToken, err error) {
	defer wrap(&err, "REST tokens")
	return s.queryRESTTokens(ctx, `SELECT `+restTokenCols+` FROM rest_tokens WHERE account_id = ? ORDER BY created_at DESC, id DESC`, accountID)
}

// AllRESTTokens implements fleetmq.ControlStore.
func (s *Store) AllRESTTokens(ctx context.Context) (_ []*fleetmq.RESTToken, err error) {
	defer wrap(&err, "all REST tokens")
	return s.queryRESTTokens(ctx, `SELECT `+restTokenCols+` FROM rest_tokens`)
}

// RevokeRESTToken implements fleetmq.ControlStore.
func (s *Store) RevokeRESTToken(ctx context.Context, accountID, id string, at time.Time) (err error) {
	defer wrap(&err, "revoke REST token")
	return s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, s.rebind(`UPDATE rest_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE account_id = ? AND id = ?`),
			at.UnixMicro(), accountID, id))("REST API token", id)
	})
}

// TouchRESTTokens implements fleetmq.ControlStore: one transaction,
// outside the control-plane version. Rows are updated in id order, so two
// processes flushing at once on PostgreSQL lock them in the same order.
func (s *Store) TouchRESTTokens(ctx context.Context, lastUsed map[string]time.Time) (err error) {
	defer wrap(&err, "touch REST tokens")
	if len(lastUsed) == 0 {
		return nil
	}
	ids := make([]string, 0, len(lastUsed))
	for id := range lastUsed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return s.tx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, s.rebind(`UPDATE rest_tokens SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)`))
		if err != nil {
			return err
		}
		defer st.Close()
		for _, id := range ids {
			at := lastUsed[id].UnixMicro()
			if _, err := st.ExecContext(ctx, at, id, at); err != nil {
				return fmt.Errorf("touch REST token %s: %w", id, err)
			}
		}
		return nil
	})
}

// restWindowsKept is how far back (from the window being added to) the
// hourly request counts are kept.
const restWindowsKept = 2 * time.Hour

// AddRESTRequests implements fleetmq.ControlStore: one transaction of
// upserts (in token id order, see TouchRESTTokens), outside the
// control-plane version.
func (s *Store) AddRESTRequests(ctx context.Context, window time.Time, counts map[string]int64) (err error) {
	defer wrap(&err, "add REST requests")
	ids := make([]string, 0, len(counts))
	for id, n := range counts {
		if n != 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	sort.Strings(ids)
	w := window.UnixMicro()
	return s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM rest_requests WHERE window_start < ?`), window.Add(-restWindowsKept).UnixMicro()); err != nil {
			return fmt.Errorf("delete old request windows: %w", err)
		}
		st, err := tx.PrepareContext(ctx, s.rebind(`INSERT INTO rest_requests (window_start, token_id, count) VALUES (?, ?, ?)
			ON CONFLICT (window_start, token_id) DO UPDATE SET count = rest_requests.count + excluded.count`))
		if err != nil {
			return err
		}
		defer st.Close()
		for _, id := range ids {
			if _, err := st.ExecContext(ctx, w, id, counts[id]); err != nil {
				return fmt.Errorf("add REST requests of %s: %w", id, err)
			}
		}
		return nil
	})
}

// ReserveRESTRequests adds up to n to the token's count in the window, at
// most a sixteenth of what the limit leaves (at least one), never past
// limit, and returns how many it added and the count after
// (restauth.Reserver). One transaction holds the count's row from its
// read to its update, so reservations of several processes at once never
// pass the limit.
func (s *Store) ReserveRESTRequests(ctx context.Context, window time.Time, tokenID string, n, limit int64) (granted, count int64, err error) {
	defer wrap(&err, "reserve REST requests")
	w := window.UnixMicro()
	err = s.tx(ctx, func(tx *sql.Tx) error {
		// The no-op update holds the row (inserted at 0 when new).
		if err := tx.QueryRowContext(ctx, s.rebind(`INSERT INTO rest_requests (window_start, token_id, count) VALUES (?, ?, 0)
			ON CONFLICT (window_start, token_id) DO UPDATE SET count = rest_requests.count RETURNING count`), w, tokenID).Scan(&count); err != nil {
			return err
		}
		granted = min(n, max((limit-count)/16, 1), max(limit-count, 0))
		if granted <= 0 {
			granted = 0
			return nil
		}
		count += granted
		_, err := tx.ExecContext(ctx, s.rebind(`UPDATE rest_requests SET count = ? WHERE window_start = ? AND token_id = ?`), count, w, tokenID)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return granted, count, nil
}

// RESTRequests implements fleetmq.ControlStore.
func (s *Store) RESTRequests(ctx context.Context, window time.Time) (_ map[string]int64, err error) {
	defer wrap(&err, "REST requests")
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT token_id, count FROM rest_requests WHERE window_start = ?`), window.UnixMicro())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}
