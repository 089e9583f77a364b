package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

var _ fleetmq.HistoryStore = (*Store)(nil)

// historyColumns are the columns of a history row, in insert order.
const historyColumns = `account_id, client_id, topic, class, qos, published_qos, retain, payload, content_type, payload_format, user_properties, station_controller_device_id, received_us`

const historyColumnCount = 13

// AppendHistory implements fleetmq.HistoryStore: one transaction of
// multi-row INSERTs. On PostgreSQL the latest-per-topic table is updated
// with the newest record of each topic in the batch; on SQLite the rows are
// folded into it, and into the client index, later (FoldHistory).
func (s *Store) AppendHistory(ctx context.Context, recs []*fleetmq.Record) (err error) {
	defer wrap(&err, "append history")
	if len(recs) == 0 {
		return nil
	}
	if s.dialect == postgresDialect {
		return s.appendHistoryPostgres(ctx, recs)
	}
	return s.appendHistorySQLite(ctx, recs)
}

// newestPerTopic returns the newest record of each (account, client,
// topic) of a batch, in first-seen order.
func newestPerTopic(recs []*fleetmq.Record) []*fleetmq.Record {
	type key struct{ account, client, topic string }
	index := make(map[key]int, 8)
	var out []*fleetmq.Record
	for _, r := range recs {
		k := key{r.AccountID, r.ClientID, r.Topic}
		if i, ok := index[k]; ok {
			if !r.Received.Before(out[i].Received) {
				out[i] = r
			}
			continue
		}
		index[k] = len(out)
		out = append(out, r)
	}
	return out
}

// latestPostgres is LatestHistory's query on PostgreSQL, given the
// received_us and ids of the client's latest entries ($2, $3). With the
// times known when the statement is planned (the reads pool plans every
// statement with its values), PostgreSQL reads and locks only the days
// that hold them; a join from history_latest would lock every day's table
// and its indexes.
const latestPostgres = `SELECT id, account_id, client_id, topic, class, qos, published_qos, retain,
	payload, content_type, payload_format, user_properties, station_controller_device_id, received_us
	FROM history WHERE account_id = $1 AND received_us = ANY($2::bigint[])
		AND (received_us, id) IN (SELECT * FROM unnest($2::bigint[], $3::bigint[]))
	ORDER BY topic`

// LatestHistory implements fleetmq.HistoryStore.
func (s *Store) LatestHistory(ctx context.Context, accountID, clientID string) (_ []*fleetmq.Record, err error) {
	defer wrap(&err, "latest history")
	return s.latestHistory(ctx, s.reads, accountID, clientID)
}

// latestHistory is LatestHistory on q (a pool, or a transaction in tests).
func (s *Store) latestHistory(ctx context.Context, q queryer, accountID, clientID string) ([]*fleetmq.Record, error) {
	if s.dialect == sqliteDialect {
		var recs []*fleetmq.Record
		err := s.onFreshDays(ctx, func() (err error) {
			recs, err = s.latestSQLite(ctx, q, accountID, clientID)
			return err
		})
		return recs, err
	}
	if !storableText(accountID) || !storableText(clientID) {
		return nil, nil // a value PostgreSQL cannot hold: no record has it
	}
	at, ids, err := latestEntries(ctx, q, `SELECT received_us, record_id FROM history_latest WHERE account_id = $1 AND client_id = $2`, accountID, clientID)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return scanLatest(ctx, q, nil, latestPostgres, accountID, at, ids)
}

// latestEntries reads the times and ids of a client's latest records.
func latestEntries(ctx context.Context, q queryer, query string, args ...any) (at, ids []int64, err error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var t, id int64
		if err := rows.Scan(&t, &id); err != nil {
			return nil, nil, err
		}
		at, ids = append(at, t), append(ids, id)
	}
	return at, ids, rows.Err()
}

// latestSQLite is LatestHistory on SQLite: the stored newest record of
// each topic, or a newer one among the unfolded rows of any day (as the
// fold will choose it), then each from its day's table.
func (s *Store) latestSQLite(ctx context.Context, q queryer, accountID, clientID string) ([]*fleetmq.Record, error) {
	if err := s.freshDays(ctx); err != nil {
		return nil, err
	}
	tables := s.days.list()
	// The candidates: the stored latest entries, and the client's
	// unfolded rows of each day in arrival order (a day in client order
	// has none), by the ids the store lists (every row after the fold's
	// mark when the list is not current: stale, or another process gave
	// ids since), in statements of at most
	// 400 terms (SQLite allows 500), newest per topic kept (a row folded
	// since it was listed is a candidate twice, to the same effect).
	type entry struct{ at, id int64 }
	newest := map[string]entry{}
	listed, err := s.tail.current(ctx, q)
	if err != nil {
		return nil, err
	}
	var arms []string
	for _, t := range tables {
		if t.clustered {
			continue
		}
		rows := unfoldedRows
		if listed {
			rows = s.tail.unfoldedCond("id", accountID, clientID, t.name)
		}
		if rows != "" {
			arms = append(arms, `SELECT id, topic, received_us FROM `+t.name+` NOT INDEXED WHERE `+rows+` AND account_id = ?1 AND client_id = ?2`)
		}
	}
	for first := true; first || len(arms) > 0; first = false {
		n := min(len(arms), 400)
		query := `SELECT topic, received_us, id FROM (`
		if first {
			query += `SELECT record_id AS id, topic, received_us FROM history_latest WHERE account_id = ?1 AND client_id = ?2`
			if n > 0 {
				query += ` UNION ALL `
			}
		}
		query += strings.Join(arms[:n], " UNION ALL ") + `)`
		arms = arms[n:]
		rows, err := q.QueryContext(ctx, query, accountID, clientID)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var topic string
			var e entry
			if err := rows.Scan(&topic, &e.at, &e.id); err != nil {
				rows.Close()
				return nil, err
			}
			if old, ok := newest[topic]; !ok || e.at > old.at || e.at == old.at && e.id > old.id {
				newest[topic] = e
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var at, ids []int64
	for _, e := range newest {
		at, ids = append(at, e.at), append(ids, e.id)
	}
	var out []*fleetmq.Record
	for _, t := range tables {
		// By id; in a day in client order, by its key.
		var in []any
		for i, us := range at {
			if t.lo <= us && us < t.hi {
				if t.clustered {
					in = append(in, us)
				}
				in = append(in, ids[i])
			}
		}
		if len(in) == 0 {
			continue
		}
		where := `account_id = ? AND id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(in)), ", ") + `)`
		args := []any{accountID}
		if t.clustered {
			where = `account_id = ? AND client_id = ? AND (received_us, id) IN (VALUES ` + valueRows(len(in)/2, 2) + `)`
			args = append(args, clientID)
		}
		out, err = scanLatest(ctx, q, out, `SELECT id, account_id, client_id, topic, class, qos, published_qos, retain,
			payload, content_type, payload_format, user_properties, station_controller_device_id, received_us
			FROM `+t.name+` WHERE `+where, append(args, in...)...)
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b *fleetmq.Record) int { return strings.Compare(a.Topic, b.Topic) })
	return out, nil
}

// scanLatest appends the records a query of whole history rows returns.
func scanLatest(ctx context.Context, q queryer, out []*fleetmq.Record, query string, args ...any) ([]*fleetmq.Record, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		r := new(fleetmq.Record)
		var props sql.NullString
		var received int64
		if err := rows.Scan(&r.ID, &r.AccountID, &r.ClientID, &r.Topic, &r.Class, &r.QoS, &r.PublishedQoS, &r.Retain,
			&r.Payload, &r.ContentType, &r.PayloadFormat, &props, &r.StationControllerDeviceID, &received); err != nil {
			return nil, err
		}
		r.Received = time.UnixMicro(received).UTC()
		if props.Valid {
			if err := json.Unmarshal([]byte(props.String), &r.UserProperties); err != nil {
				return nil, fmt.Errorf("history record %d: user properties: %w", r.ID, err)
			}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteHistory implements fleetmq.HistoryStore: the account's oldest
// records, up to limit of them, received before before (on SQLite from
// the oldest days on), with the latest-per-topic entries that point to
// them, in one transaction.
//
// A batch deletes a prefix of the account's records in (received_us, id)
// order, and only the latest entries within that prefix: an entry goes
// with the record it names, never before it (the topic would have no
// latest value while its records are still there, until the last batch
// or, for a pass cut short, the next pass). The entries of a topic whose
// newest record lies further on stay, as they must. A batch that finds
// fewer than limit records, the account's last, deletes every entry
// before before, so an entry whose record is gone some other way goes
// too.
func (s *Store) DeleteHistory(ctx context.Context, accountID string, before time.Time, limit int) (_ int64, err error) {
	defer wrap(&err, "delete history")
	if limit <= 0 {
		limit = 1000
	}
	var n int64
	err = s.tx(ctx, func(tx *sql.Tx) error {
		n = 0
		// The last deleted record in (received_us, id) order.
		var lastUs, lastID int64
		deleted := func(rows *sql.Rows) error {
			defer rows.Close()
			for rows.Next() {
				var us, id int64
				if err := rows.Scan(&us, &id); err != nil {
					return err
				}
				if n == 0 || us > lastUs || us == lastUs && id > lastID {
					lastUs, lastID = us, id
				}
				n++
			}
			return rows.Err()
		}
		if s.dialect == postgresDialect {
			// Partitions have no index on id alone: each row is found by
			// its account, time and id (and its time picks its day).
			rows, err := tx.QueryContext(ctx, `DELETE FROM history h USING (
				SELECT received_us, id FROM history WHERE account_id = $1 AND received_us < $2 ORDER BY received_us, id LIMIT $3) d
				WHERE h.account_id = $1 AND h.received_us = d.received_us AND h.id = d.id
				RETURNING h.received_us, h.id`, accountID, before.UnixMicro(), limit)
			if err != nil {
				return err
			}
			if err := deleted(rows); err != nil {
				return err
			}
		} else {
			if err := s.freshDays(ctx); err != nil {
				return err
			}
			to := before.UnixMicro()
			// The days by time: the rows deleted are the account's first
			// in (received_us, id) order.
			for _, t := range s.days.overlapping(nil, &to, false) {
				// By id; in a day in client order, by pos, from its index
				// table.
				key, from := "id", t.name+` INDEXED BY `+dayIndex(t.name, "account_time")
				if t.clustered {
					key, from = "pos", dayIndex(t.name, "account_time")
				}
				rows, err := tx.QueryContext(ctx, `DELETE FROM `+t.name+` WHERE `+key+` IN (
					SELECT `+key+` FROM `+from+`
					WHERE account_id = ?1 AND received_us < ?2 ORDER BY received_us, id LIMIT ?3)
					RETURNING received_us, id`, accountID, to, int64(limit)-n)
				if noSuchTable(err) {
					continue // a day another process dropped
				}
				if err != nil {
					return err
				}
				if err := deleted(rows); err != nil {
					return err
				}
				if n == int64(limit) {
					break
				}
			}
		}
		if n < int64(limit) {
			// The account's last batch: no record before before is left.
			_, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM history_latest WHERE account_id = ? AND received_us < ?`),
				accountID, before.UnixMicro())
			return err
		}
		_, err := tx.ExecContext(ctx, s.rebind(`DELETE FROM history_latest WHERE account_id = ?
			AND (received_us < ? OR received_us = ? AND record_id <= ?)`), accountID, lastUs, lastUs, lastID)
		return err
	})
	return n, err
}
