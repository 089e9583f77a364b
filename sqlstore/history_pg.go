package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fleetmq/fleetmq"
)

// appendHistoryPostgres writes a batch in one transaction on PostgreSQL:
// the day partitions it needs created first (ensureHistoryDays), ids
// reserved from history's sequence (in the batch's order), the rows
// by COPY, and the latest-per-topic table by one statement over arrays.
func (s *Store) appendHistoryPostgres(ctx context.Context, recs []*fleetmq.Record) error {
	if err := s.ensureHistoryDays(ctx, recs); err != nil {
		return err
	}
	err := s.copyHistoryPostgres(ctx, recs)
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23514" {
		// No partition for a record: a day this process knew was dropped
		// since (by another process, or while this batch was under way).
		// Read the days again and try once more.
		s.days.set(nil)
		if err = s.ensureHistoryDays(ctx, recs); err == nil {
			err = s.copyHistoryPostgres(ctx, recs)
		}
	}
	return err
}

// copyHistoryPostgres is appendHistoryPostgres's transaction.
func (s *Store) copyHistoryPostgres(ctx context.Context, recs []*fleetmq.Record) error {
	conn, err := s.ingest.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		tx, err := pc.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		rows, err := tx.Query(ctx, `SELECT nextval('history_ids') FROM generate_series(1, $1) ORDER BY 1`, len(recs))
		if err != nil {
			return err
		}
		i := 0
		for rows.Next() {
			if i < len(recs) {
				if err := rows.Scan(&recs[i].ID); err != nil {
					rows.Close()
					return err
				}
			}
			i++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if i != len(recs) {
			return fmt.Errorf("history: reserved %d ids for %d records", i, len(recs))
		}
		cols := []string{"id", "account_id", "client_id", "topic", "class", "qos", "published_qos", "retain", "payload",
			"content_type", "payload_format", "user_properties", "station_controller_device_id", "received_us"}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"history"}, cols, pgx.CopyFromSlice(len(recs), func(i int) ([]any, error) {
			r := recs[i]
			var props any
			if len(r.UserProperties) > 0 {
				b, err := json.Marshal(r.UserProperties)
				if err != nil {
					return nil, err
				}
				props = string(b)
			}
			payload := r.Payload
			if payload == nil {
				payload = []byte{}
			}
			return []any{r.ID, r.AccountID, r.ClientID, r.Topic, r.Class, int16(r.QoS), int16(r.PublishedQoS), r.Retain, payload,
				r.ContentType, int16(r.PayloadFormat), props, r.StationControllerDeviceID, r.Received.UnixMicro()}, nil
		}))
		if err != nil {
			return err
		}
		latest := newestPerTopic(recs)
		n := len(latest)
		acc, cli, top := make([]string, n), make([]string, n), make([]string, n)
		ids, at := make([]int64, n), make([]int64, n)
		for i, r := range latest {
			acc[i], cli[i], top[i], ids[i], at[i] = r.AccountID, r.ClientID, r.Topic, r.ID, r.Received.UnixMicro()
		}
		_, err = tx.Exec(ctx, `INSERT INTO history_latest (account_id, client_id, topic, record_id, received_us)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[])
			ON CONFLICT (account_id, client_id, topic) DO UPDATE SET record_id = excluded.record_id, received_us = excluded.received_us
			WHERE excluded.received_us >= history_latest.received_us`, acc, cli, top, ids, at)
		if err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}
