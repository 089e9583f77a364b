package fleetmq

import (
	"context"
	"time"
)

// Record is one message of stored history: an accepted publish after
// topic_prefix stripping and vendor-layout normalization.
type Record struct {
	ID        int64  // assigned by the store, increasing in insert order
	AccountID string // from the credential, never from the topic
	ClientID  string
	Topic     string // platform path {account_id}/{client_id}/<subpath>, no topic_prefix
	Class     string // state, event, telemetry or sample
	// QoS is the effective QoS (what metering counts); PublishedQoS the QoS
	// of the inbound PUBLISH.
	QoS          byte
	PublishedQoS byte
	Retain       bool
	Payload      []byte
	// MQTT 5 properties of the message (zero for 3.1.1).
	ContentType    string
	PayloadFormat  byte // 1: UTF-8 text, 0: unspecified bytes
	UserProperties []UserProperty
	// StationControllerDeviceID is the payload's station_controller_device_id
	// field (docs/design.md), "" when absent.
	StationControllerDeviceID string
	Received                  time.Time // broker receive time, microsecond precision, UTC
}

// UserProperty is an MQTT 5 user property.
type UserProperty struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Position is a record's place in history order: its receive time, then
// its id. Cursors encode a Position.
type Position struct {
	Received time.Time
	ID       int64
}

// Position returns the record's place in history order.
func (r *Record) Position() Position { return Position{Received: r.Received, ID: r.ID} }

// HistoryQuery selects records of one account. Zero fields do not filter.
// Package history builds queries from user input (MQTT topic filters,
// cursors, time ranges) and validates them.
type HistoryQuery struct {
	AccountID string // required
	ClientID  string
	// TopicRegex is a Go (RE2) regular expression over the platform topic
	// (history.FilterRegex builds an anchored one from an MQTT filter). The
	// store evaluates it in Go, with package regexp, on the rows the query's
	// index yields, on SQLite and PostgreSQL alike; neither database
	// evaluates it. The database only gets its literal prefix
	// (TopicRegexPrefix), so that rows outside it come without their payload.
	TopicRegex                string
	Class                     string
	StationControllerDeviceID string
	From, To                  time.Time // From inclusive, To exclusive
	// Ascending orders oldest first; the default is newest first.
	Ascending bool
	// After continues from a position: only records strictly after it in
	// the query's order.
	After *Position
	// Limit bounds the records returned; 0 means all (exports).
	Limit int
	// ScanBudget bounds the rows one QueryHistory call examines: the rows
	// its index yields before the filters that run after the index (topic
	// expression, and class, client or device when another index serves
	// the query). 0 means no bound. Package history sets it on pages and
	// export batches (history.ScanBudget).
	ScanBudget int
}

// ScanBudgetSpent is what QueryHistory returns when it has examined
// HistoryQuery.ScanBudget rows before reaching its Limit or the end of the
// query: fn has seen every match up to Last, the position of the last row
// examined, and the query goes on with After set to Last.
type ScanBudgetSpent struct {
	Last Position
}

func (e *ScanBudgetSpent) Error() string {
	return "history: scan budget spent at " + e.Last.Received.Format(time.RFC3339Nano)
}

// HistoryStore keeps stored history. Every method is scoped by account.
type HistoryStore interface {
	// AppendHistory stores records in one transaction and sets their IDs;
	// they are durable when it returns nil.
	AppendHistory(ctx context.Context, recs []*Record) error
	// QueryHistory calls fn for each matching record in the query's order,
	// streaming: it never holds the result in memory. fn must not keep the
	// record after it returns. An error from fn stops the query and is
	// returned. With a ScanBudget, it returns a *ScanBudgetSpent when the
	// budget ran out first.
	QueryHistory(ctx context.Context, q *HistoryQuery, fn func(*Record) error) error
	// LatestHistory returns the newest record of each topic of a client
	// (for live views), ordered by topic.
	LatestHistory(ctx context.Context, accountID, clientID string) ([]*Record, error)
	// DeleteHistory deletes at most limit of an account's records received
	// before the given time, oldest first, and returns how many it deleted.
	// Retention calls it in small batches so that ingest never waits long.
	DeleteHistory(ctx context.Context, accountID string, before time.Time, limit int) (int64, error)
}

// HistoryDays is implemented by a history store that keeps its records in
// one partition per UTC day (sqlstore, on both engines). Retention then drops
// a day whole once no account that still keeps it has records in it,
// which costs about the same whatever the day holds, and deletes rows only
// of the days it cannot drop.
type HistoryDays interface {
	// PrepareHistoryDays creates the partitions of the UTC day of now and
	// of the next, so that records never wait for one.
	PrepareHistoryDays(ctx context.Context, now time.Time) error
	// DropHistoryDays drops, with every record in them, the partitions
	// whose days end at or before before and hold no record of an account
	// that keeps part of the day: expired maps each account to the time
	// before which its records have expired (records of accounts not in
	// it expire at before). It returns how many it dropped.
	DropHistoryDays(ctx context.Context, before time.Time, expired map[string]time.Time) (int, error)
	// ReorderHistoryDays rewrites the days that ended before before in
	// the order of the client index (once each), so that a client's
	// records of a day lie together, and returns how many it rewrote.
	ReorderHistoryDays(ctx context.Context, before time.Time) (int, error)
}
