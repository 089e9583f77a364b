package fleetmq

import (
	"context"
	"time"
)

// A ClientProblem is something that went wrong for one MQTT client of an
// account, as its owner needs to see it: a refused CONNECT, PUBLISH,
// SUBSCRIBE filter or will, a connection the server ended, or a message
// that did not reach the client. Repeats of one problem (same client,
// kind, topic and reason) are one ClientProblem with a count and the times
// of the first and the last.
type ClientProblem struct {
	AccountID string
	ClientID  string
	Kind      string // one of the Problem kinds
	// Topic is the topic of a refused PUBLISH, will or dropped message, or
	// the filter of a refused SUBSCRIBE; "" for connects and disconnects.
	Topic string
	QoS   int
	// Code is the MQTT reason code the client was given (0 for drops).
	Code int
	// Reason is the short stable name: the reason code's in snake case
	// ("topic_name_invalid") for refusals, the close reason
	// ("keepalive_timeout") for disconnects, the drop reason
	// ("queue_full") for drops.
	Reason string
	// Detail says why in words, e.g. `topic class "data/" is not one of
	// state, event, telemetry, sample`. The latest repeat's.
	Detail      string
	Count       int64
	First, Last time.Time
}

// The kinds of ClientProblem.
const (
	ProblemConnectRefused   = "connect_refused"
	ProblemPublishRefused   = "publish_refused"
	ProblemSubscribeRefused = "subscribe_refused"
	ProblemWillRefused      = "will_refused"
	ProblemDisconnected     = "disconnected" // by the server
	ProblemDropped          = "dropped"
)

// Bounds of the stored problems: each client keeps its most recent
// MaxProblemsPerClient, each account its most recent
// MaxProblemsPerAccount, none older than ProblemsKeptFor.
const (
	MaxProblemsPerClient  = 50
	MaxProblemsPerAccount = 1000
	ProblemsKeptFor       = 7 * 24 * time.Hour
)

// ProblemStore keeps the recent problems of each client.
type ProblemStore interface {
	// AddProblems adds aggregated problems: one already stored (same
	// account, client, kind, topic and reason) has its count added to and
	// takes the new one's last time, QoS, code and detail. Then the
	// accounts touched are trimmed to the bounds above.
	AddProblems(ctx context.Context, ps []ClientProblem) error
	// Problems returns an account's problems last seen at or after since,
	// most recent first, at most limit; clientID "" for every client.
	Problems(ctx context.Context, accountID, clientID string, since time.Time, limit int) ([]ClientProblem, error)
}
