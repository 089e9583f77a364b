package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// The daily QoS 2 pools shared by the nodes of a cluster
// (platform.QoS2Pools): one row per account and UTC day, taken from in
// one transaction that holds the row (PostgreSQL: SELECT … FOR UPDATE;
// SQLite writes one transaction at a time), so the takes of every node
// never sum above the pool.

// QoS2Pools returns the store's shared daily QoS 2 pools.
func (s *Store) QoS2Pools() *QoS2Pools { return &QoS2Pools{s: s} }

// QoS2Pools is a store's platform.QoS2Pools.
type QoS2Pools struct{ s *Store }

// poolTimeout bounds one take: the message that waits for it goes out at
// QoS 1 instead when the database is slower.
const poolTimeout = 2 * time.Second

// Take takes up to n units of the account's pool of day, of size, and
// returns how many it took.
func (p *QoS2Pools) Take(account, day string, n, size int64) (int64, error) {
	s := p.s
	if n <= 0 || size <= 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), poolTimeout)
	defer cancel()
	var took int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		took = 0
		res, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO qos2_pools (account_id, day, used) VALUES (?, ?, 0) ON CONFLICT (account_id, day) DO NOTHING`), account, day)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			// The account's first take of a day: its pools of days gone
			// by are of no more use.
			if _, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM qos2_pools WHERE account_id = ? AND day < ?`), account, pastDays(day)); err != nil {
				return err
			}
		}
		q := `SELECT used FROM qos2_pools WHERE account_id = ? AND day = ?`
		if s.dialect == postgresDialect {
			q += ` FOR UPDATE`
		}
		var used int64
		if err := tx.QueryRowContext(ctx, s.rebind(q), account, day).Scan(&used); err != nil {
			return err
		}
		took = max(min(n, size-used), 0)
		if took == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, s.rebind(`UPDATE qos2_pools SET used = used + ? WHERE account_id = ? AND day = ?`), took, account, day)
		return err
	})
	if err != nil {
		return 0, err
	}
	return took, nil
}

// Used reports the units taken of the account's pool of day.
func (p *QoS2Pools) Used(account, day string) (int64, error) {
	s := p.s
	ctx, cancel := context.WithTimeout(context.Background(), poolTimeout)
	defer cancel()
	var used int64
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT used FROM qos2_pools WHERE account_id = ? AND day = ?`), account, day).Scan(&used)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return used, err
}

// pastDays is the day two days before day (YYYY-MM-DD): pools before it
// are deleted (day itself when it does not parse).
func pastDays(day string) string {
	d, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return day
	}
	return d.AddDate(0, 0, -2).Format(time.DateOnly)
}
