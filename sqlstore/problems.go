package sqlstore

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

// AddProblems implements fleetmq.ProblemStore: one transaction of upserts
// that add the repeats, then the trim of every client and account touched
// to the bounds (most recent rows kept, none older than
// fleetmq.ProblemsKeptFor before the newest problem of the batch).
func (s *Store) AddProblems(ctx context.Context, ps []fleetmq.ClientProblem) (err error) {
	defer wrap(&err, "add problems")
	if len(ps) == 0 {
		return nil
	}
	type client struct{ account, client string }
	clients := map[client]bool{}
	accounts := map[string]bool{}
	var newest time.Time
	return s.tx(ctx, func(tx *sql.Tx) error {
		for _, p := range ps {
			_, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO client_problems
				(account_id, client_id, kind, topic, reason, qos, code, detail, count, first_at, last_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (account_id, client_id, kind, topic, reason) DO UPDATE SET
					count = client_problems.count + excluded.count,
					qos = excluded.qos, code = excluded.code, detail = excluded.detail,
					first_at = CASE WHEN excluded.first_at < client_problems.first_at THEN excluded.first_at ELSE client_problems.first_at END,
					last_at = CASE WHEN excluded.last_at > client_problems.last_at THEN excluded.last_at ELSE client_problems.last_at END`),
				p.AccountID, p.ClientID, p.Kind, p.Topic, p.Reason, p.QoS, p.Code, p.Detail, p.Count,
				p.First.UnixMicro(), p.Last.UnixMicro())
			if err != nil {
				return err
			}
			clients[client{p.AccountID, p.ClientID}] = true
			accounts[p.AccountID] = true
			if p.Last.After(newest) {
				newest = p.Last
			}
		}
		for c := range clients {
			if _, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM client_problems WHERE account_id = ? AND client_id = ? AND last_at <
				(SELECT last_at FROM client_problems WHERE account_id = ? AND client_id = ? ORDER BY last_at DESC LIMIT 1 OFFSET ?)`),
				c.account, c.client, c.account, c.client, fleetmq.MaxProblemsPerClient-1); err != nil {
				return err
			}
		}
		oldest := newest.Add(-fleetmq.ProblemsKeptFor).UnixMicro()
		for a := range accounts {
			if _, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM client_problems WHERE account_id = ? AND (last_at < ? OR last_at <
				(SELECT last_at FROM client_problems WHERE account_id = ? ORDER BY last_at DESC LIMIT 1 OFFSET ?))`),
				a, oldest, a, fleetmq.MaxProblemsPerAccount-1); err != nil {
				return err
			}
		}
		return nil
	})
}

// Problems implements fleetmq.ProblemStore.
func (s *Store) Problems(ctx context.Context, accountID, clientID string, since time.Time, limit int) (_ []fleetmq.ClientProblem, err error) {
	defer wrap(&err, "problems")
	q := `SELECT client_id, kind, topic, reason, qos, code, detail, count, first_at, last_at
		FROM client_problems WHERE account_id = ? AND last_at >= ?`
	args := []any{accountID, since.UnixMicro()}
	if strings.ContainsRune(clientID, 0) {
		return nil, nil // no MQTT client id holds NUL, and PostgreSQL text cannot
	}
	if clientID != "" {
		q += ` AND client_id = ?`
		args = append(args, clientID)
	}
	q += ` ORDER BY last_at DESC, client_id, kind, topic, reason LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []fleetmq.ClientProblem
	for rows.Next() {
		p := fleetmq.ClientProblem{AccountID: accountID}
		var first, last int64
		if err := rows.Scan(&p.ClientID, &p.Kind, &p.Topic, &p.Reason, &p.QoS, &p.Code, &p.Detail, &p.Count, &first, &last); err != nil {
			return nil, err
		}
		p.First, p.Last = time.UnixMicro(first).UTC(), time.UnixMicro(last).UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}
