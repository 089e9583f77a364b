package fleetmq

import (
	"context"
	"time"
)

// A Node is one running "fleetmq serve" process as it reports itself in the
// store: which control-plane version it has put in force, and when it last
// said so. Operator commands read the nodes to wait until a change they
// stored is in force everywhere before they return.
type Node struct {
	ID      string // a cluster node's name, else random, new at every start
	Host    string
	PID     int
	Started time.Time
	// Heartbeat is when the node last wrote its row; a node whose
	// heartbeat is older than NodeStaleAfter is taken for gone (killed
	// without its clean shutdown, which deletes the row).
	Heartbeat time.Time
	// Applied is the control-plane version (ControlStore.Version) in force
	// on the node: every change up to it is enforced there (sessions no
	// longer allowed were disconnected, revoked REST tokens refused).
	Applied int64
}

// How often a running node writes its heartbeat (it also writes at once
// when it applies a new control-plane version), and when a silent one is
// taken for gone.
const (
	NodeHeartbeat  = 5 * time.Second
	NodeStaleAfter = 3 * NodeHeartbeat
)

// Live reports whether the node has written its heartbeat recently at now.
func (n *Node) Live(now time.Time) bool { return now.Sub(n.Heartbeat) < NodeStaleAfter }

// NodeStore keeps the running nodes. Its writes do not move the
// control-plane version.
type NodeStore interface {
	// PutNode creates or updates the node's row.
	PutNode(ctx context.Context, n *Node) error
	// DeleteNode removes the node's row (unknown ids are not an error).
	DeleteNode(ctx context.Context, id string) error
	// Nodes returns every node row, live or not, by ID.
	Nodes(ctx context.Context) ([]*Node, error)
}
