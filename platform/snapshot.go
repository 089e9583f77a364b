package platform

import (
	"time"

	"github.com/fleetmq/fleetmq"
)

// Snapshot is the control-plane state the policy decides with: accounts,
// their plans, add-ons and MQTT clients, credentials by username, and the
// vendor layouts. It is immutable once built; the policy swaps in a new one
// when the store changes.
type Snapshot struct {
	Version  int64
	Accounts map[string]*Account    // by account id
	Creds    map[string]*Credential // by username
	Layouts  fleetmq.LayoutIndex    // by wire root (first topic level)
}

// Account is an account as the broker needs it.
type Account struct {
	ID        string
	Suspended bool
	// Plan limits; HasPlan is false without a base plan (no publishing
	// clients can be registered then, but the account still exists).
	HasPlan             bool
	PlanName            string
	MaxPublisherClients int
	QoS2DailyPool       int64
	// Publish rates (fleetmq.Plan's; 0: unlimited): per connection, and
	// for all the account's connections together.
	PublishRate, AccountPublishRate           int
	PublishBytesRate, AccountPublishBytesRate int64
	QoS2AddOn                                 bool
	Clients                                   map[string]*Client // by client id
	// Record is the account as stored when the snapshot was read (nil in
	// snapshots not read from a store). Shared: never modify it.
	Record *fleetmq.Account
}

// The retained state an account may keep, per publisher client its plan
// allows.
const (
	RetainedPerClient      = 100
	RetainedBytesPerClient = 1 << 20
)

// MaxRetained is how much retained state the account may keep:
// max_publisher_clients x RetainedPerClient messages and x
// RetainedBytesPerClient payload bytes.
func (a *Account) MaxRetained() (count int, bytes int64) {
	return a.MaxPublisherClients * RetainedPerClient, int64(a.MaxPublisherClients) * RetainedBytesPerClient
}

// MaxQueued is the plan's catch-up bound (fleetmq.Plan.MaxQueued).
func (a *Account) MaxQueued() int {
	p := fleetmq.Plan{MaxPublisherClients: a.MaxPublisherClients}
	return p.MaxQueued()
}

// Client is a registered MQTT client (publisher device).
type Client struct {
	ClientID      string
	Label         string
	MaxPublishQoS byte
}

// Credential is a publisher (fleet) credential or a subscriber password.
type Credential struct {
	ID         string
	AccountID  string
	Kind       string
	Username   string
	SecretHash string    // hex SHA-256 of the secret
	Filters    []string  // subscriber: granted filters (default {account_id}/#)
	ExpiresAt  time.Time // zero: never
}

// Expired reports whether the credential has expired at now.
func (c *Credential) Expired(now time.Time) bool {
	return !c.ExpiresAt.IsZero() && !now.Before(c.ExpiresAt)
}

// nextExpiry is when the first of the snapshot's credentials not expired
// at now expires (zero: none will). Until then, with the same snapshot,
// every session it allowed at now is still allowed.
func (s *Snapshot) nextExpiry(now time.Time) time.Time {
	var next time.Time
	if s == nil {
		return next
	}
	for _, c := range s.Creds {
		if !c.ExpiresAt.IsZero() && c.ExpiresAt.After(now) && (next.IsZero() || c.ExpiresAt.Before(next)) {
			next = c.ExpiresAt
		}
	}
	return next
}
