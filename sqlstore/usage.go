package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/fleetmq/fleetmq"
)

// AddUsage implements fleetmq.UsageStore: one transaction of upserts that
// add the increments.
func (s *Store) AddUsage(ctx context.Context, daily []fleetmq.DailyUsage, clients []fleetmq.ClientUsage) (err error) {
	defer wrap(&err, "add usage")
	return s.tx(ctx, func(tx *sql.Tx) error { return s.addUsage(ctx, tx, daily, clients) })
}

// usageFlushesKept is how long AddUsageOnce remembers the ids it applied.
const usageFlushesKept = 7 * 24 * time.Hour

// AddUsageOnce is AddUsage at most once per id: when the id was applied
// before (a write whose success was not reported, sent again), it does
// nothing and returns nil. Ids are remembered for a week.
func (s *Store) AddUsageOnce(ctx context.Context, id string, daily []fleetmq.DailyUsage, clients []fleetmq.ClientUsage) (err error) {
	defer wrap(&err, "add usage")
	now := time.Now()
	return s.tx(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO usage_flushes (id, at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`), id, now.UnixMicro())
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil || n == 0 {
			return err // applied before
		}
		if _, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM usage_flushes WHERE at < ?`), now.Add(-usageFlushesKept).UnixMicro()); err != nil {
			return err
		}
		return s.addUsage(ctx, tx, daily, clients)
	})
}

// addUsage adds usage increments in a transaction.
func (s *Store) addUsage(ctx context.Context, tx *sql.Tx, daily []fleetmq.DailyUsage, clients []fleetmq.ClientUsage) error {
	for _, d := range daily {
		var demoted int64 // the earliest is kept
		if !d.DemotedSince.IsZero() {
			demoted = d.DemotedSince.UnixMicro()
		}
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO usage_daily (account_id, day, messages0, messages1, messages2, bytes0, bytes1, bytes2, pool_used, demotions, refused, demoted_since)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (account_id, day) DO UPDATE SET
				messages0 = usage_daily.messages0 + excluded.messages0, messages1 = usage_daily.messages1 + excluded.messages1,
				messages2 = usage_daily.messages2 + excluded.messages2, bytes0 = usage_daily.bytes0 + excluded.bytes0,
				bytes1 = usage_daily.bytes1 + excluded.bytes1, bytes2 = usage_daily.bytes2 + excluded.bytes2,
				pool_used = usage_daily.pool_used + excluded.pool_used, demotions = usage_daily.demotions + excluded.demotions,
				refused = usage_daily.refused + excluded.refused,
				demoted_since = CASE WHEN usage_daily.demoted_since = 0 OR excluded.demoted_since <> 0 AND excluded.demoted_since < usage_daily.demoted_since
					THEN excluded.demoted_since ELSE usage_daily.demoted_since END`),
			d.AccountID, d.Day, d.Messages[0], d.Messages[1], d.Messages[2], d.Bytes[0], d.Bytes[1], d.Bytes[2], d.PoolUsed, d.Demotions, d.Refused, demoted)
		if err != nil {
			return err
		}
		for reason, n := range d.Drops {
			if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO usage_drops (account_id, day, reason, count) VALUES (?, ?, ?, ?)
				ON CONFLICT (account_id, day, reason) DO UPDATE SET count = usage_drops.count + excluded.count`), d.AccountID, d.Day, reason, n); err != nil {
				return err
			}
		}
	}
	for _, c := range clients {
		_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO usage_client (account_id, client_id, day, messages0, messages1, messages2) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (account_id, client_id, day) DO UPDATE SET messages0 = usage_client.messages0 + excluded.messages0,
				messages1 = usage_client.messages1 + excluded.messages1, messages2 = usage_client.messages2 + excluded.messages2`),
			c.AccountID, c.ClientID, c.Day, c.Messages[0], c.Messages[1], c.Messages[2])
		if err != nil {
			return err
		}
	}
	return nil
}

// Usage implements fleetmq.UsageStore.
func (s *Store) Usage(ctx context.Context, accountID, from, to string) (_ []fleetmq.DailyUsage, err error) {
	defer wrap(&err, "usage")
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT day, messages0, messages1, messages2, bytes0, bytes1, bytes2, pool_used, demotions, refused, demoted_since
		FROM usage_daily WHERE account_id = ? AND day >= ? AND day <= ? ORDER BY day`), accountID, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []fleetmq.DailyUsage
	idx := map[string]int{}
	for rows.Next() {
		d := fleetmq.DailyUsage{AccountID: accountID}
		var demoted int64
		if err := rows.Scan(&d.Day, &d.Messages[0], &d.Messages[1], &d.Messages[2], &d.Bytes[0], &d.Bytes[1], &d.Bytes[2], &d.PoolUsed, &d.Demotions, &d.Refused, &demoted); err != nil {
			return nil, err
		}
		if demoted != 0 {
			d.DemotedSince = time.UnixMicro(demoted).UTC()
		}
		idx[d.Day] = len(out)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	dr, err := s.db.QueryContext(ctx, s.rebind(`SELECT day, reason, count FROM usage_drops WHERE account_id = ? AND day >= ? AND day <= ?`), accountID, from, to)
	if err != nil {
		return nil, err
	}
	defer dr.Close()
	for dr.Next() {
		var day, reason string
		var n int64
		if err := dr.Scan(&day, &reason, &n); err != nil {
			return nil, err
		}
		i, ok := idx[day]
		if !ok { // drops on a day without messages
			idx[day] = len(out)
			i = len(out)
			out = append(out, fleetmq.DailyUsage{AccountID: accountID, Day: day})
		}
		if out[i].Drops == nil {
			out[i].Drops = map[string]int64{}
		}
		out[i].Drops[reason] += n
	}
	return out, dr.Err()
}

// ClientUsage implements fleetmq.UsageStore. The sums are cast back to
// BIGINT: PostgreSQL sums BIGINT columns as NUMERIC.
func (s *Store) ClientUsage(ctx context.Context, accountID, from, to string) (_ []fleetmq.ClientUsage, err error) {
	defer wrap(&err, "client usage")
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT client_id, CAST(SUM(messages0) AS BIGINT), CAST(SUM(messages1) AS BIGINT), CAST(SUM(messages2) AS BIGINT) FROM usage_client
		WHERE account_id = ? AND day >= ? AND day <= ? GROUP BY client_id ORDER BY client_id`), accountID, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []fleetmq.ClientUsage
	for rows.Next() {
		c := fleetmq.ClientUsage{AccountID: accountID, Day: from + ".." + to}
		if err := rows.Scan(&c.ClientID, &c.Messages[0], &c.Messages[1], &c.Messages[2]); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
