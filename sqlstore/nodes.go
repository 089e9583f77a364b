package sqlstore

import (
	"context"
	"time"

	"github.com/fleetmq/fleetmq"
)

// PutNode implements fleetmq.NodeStore.
func (s *Store) PutNode(ctx context.Context, n *fleetmq.Node) (err error) {
	defer wrap(&err, "put node")
	_, err = s.exec(ctx, `INSERT INTO nodes (id, host, pid, started, heartbeat, applied)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET heartbeat = excluded.heartbeat, applied = excluded.applied`,
		n.ID, n.Host, n.PID, n.Started.UnixMicro(), n.Heartbeat.UnixMicro(), n.Applied)
	return err
}

// DeleteNode implements fleetmq.NodeStore.
func (s *Store) DeleteNode(ctx context.Context, id string) (err error) {
	defer wrap(&err, "delete node")
	_, err = s.exec(ctx, `DELETE FROM nodes WHERE id = ?`, id)
	return err
}

// Nodes implements fleetmq.NodeStore.
func (s *Store) Nodes(ctx context.Context) (_ []*fleetmq.Node, err error) {
	defer wrap(&err, "nodes")
	rows, err := s.db.QueryContext(ctx, `SELECT id, host, pid, started, heartbeat, applied FROM nodes ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*fleetmq.Node
	for rows.Next() {
		var n fleetmq.Node
		var started, beat int64
		if err := rows.Scan(&n.ID, &n.Host, &n.PID, &started, &beat, &n.Applied); err != nil {
			return nil, err
		}
		n.Started, n.Heartbeat = time.UnixMicro(started).UTC(), time.UnixMicro(beat).UTC()
		out = append(out, &n)
	}
	return out, rows.Err()
}
