package sqlstore

import (
	"context"
	"database/sql"

	"github.com/fleetmq/fleetmq"
)

// PutRetained stores a batch of a cluster's retained messages and clears
// (rows without a message: tombstones), the latest created of a topic
// winning.
func (s *Store) PutRetained(ctx context.Context, rows []fleetmq.RetainedRow) error {
	if len(rows) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		put, err := tx.PrepareContext(ctx, s.rebind(`INSERT INTO retained_messages (topic, created, expiry, message) VALUES (?, ?, ?, ?)
			ON CONFLICT (topic) DO UPDATE SET created = excluded.created, expiry = excluded.expiry, message = excluded.message
			WHERE retained_messages.created <= excluded.created`))
		if err != nil {
			return err
		}
		defer put.Close()
		for _, r := range rows {
			msg := r.Message
			if msg == nil {
				msg = []byte{}
			}
			if _, err := put.ExecContext(ctx, r.Topic, r.Created, r.Expiry, msg); err != nil {
				return err
			}
		}
		return nil
	})
}

// LoadRetained reads every retained message not expired at now.
func (s *Store) LoadRetained(ctx context.Context, now int64, fn func(fleetmq.RetainedRow) error) error {
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT topic, created, expiry, message FROM retained_messages WHERE expiry = 0 OR expiry > ?`), now)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r fleetmq.RetainedRow
		if err := rows.Scan(&r.Topic, &r.Created, &r.Expiry, &r.Message); err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// SweepRetained removes what expired at now, the messages created before
// created and the clears created before clears.
func (s *Store) SweepRetained(ctx context.Context, now, created, clears int64) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM retained_messages
			WHERE (expiry <> 0 AND expiry <= ?) OR created < ? OR (length(message) = 0 AND created < ?)`), now, created, clears)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
