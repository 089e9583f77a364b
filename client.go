package fleetmq

import (
	"regexp"
	"time"
)

// MQTTClient is a registered publisher device of an account.
type MQTTClient struct {
	AccountID     string
	ClientID      string
	Label         string
	MaxPublishQoS int // 0, 1 or 2; default 1
	CreatedAt     time.Time
}

// HistoryTopicPrefix is where the client's messages are stored.
func (c *MQTTClient) HistoryTopicPrefix() string { return c.AccountID + "/" + c.ClientID }

// clientIDRE allows what fits in a topic level: no wildcards, no '/', no
// '$' at the start, printable.
var clientIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// ValidClientID reports whether id can be registered: 1-128 characters of
// letters, digits and . _ : @ -, starting with a letter or digit (it
// becomes a topic level, so no '/', '+', '#').
func ValidClientID(id string) bool { return clientIDRE.MatchString(id) }

// MaxLabel is the longest label of a client, credential or token.
const MaxLabel = 200

// Credential kinds.
const (
	KindPublisher  = "publisher"  // fleet credential: publishes with a registered client id
	KindSubscriber = "subscriber" // read-only subscriber MQTT password
)

// Credential is a publisher (fleet) credential or a subscriber MQTT
// password. The secret itself is never stored.
type Credential struct {
	ID         string
	AccountID  string
	Kind       string
	Username   string
	Label      string
	SecretHash string   // hex SHA-256 of the generated secret
	Filters    []string // subscriber: topic filters within the account
	CreatedAt  time.Time
	ExpiresAt  time.Time // zero: never
	RevokedAt  time.Time // zero: active
}

// Active reports whether the credential can be used at now.
func (c *Credential) Active(now time.Time) bool {
	return c.RevokedAt.IsZero() && (c.ExpiresAt.IsZero() || now.Before(c.ExpiresAt))
}

// DailyUsage is metered usage of one account on one UTC day (or an
// increment of it).
type DailyUsage struct {
	AccountID string
	Day       string   // YYYY-MM-DD, UTC
	Messages  [3]int64 // by effective QoS
	Bytes     [3]int64
	PoolUsed  int64 // QoS 2 pool units used
	Demotions int64 // QoS 2 publishes demoted to 1 because the pool was used up
	Refused   int64 // publishes refused
	Drops     map[string]int64
	// DemotedSince is when the day's QoS 2 pool ran out (its last unit
	// taken, or its plan lowered below what was used); zero when it did
	// not. Increments keep the earliest.
	DemotedSince time.Time
}

// ClientUsage is the observed QoS mix of one client on one UTC day.
type ClientUsage struct {
	AccountID, ClientID, Day string
	Messages                 [3]int64
}
