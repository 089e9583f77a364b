package fleetmq

import (
	"regexp"
	"strings"
	"time"
)

// Account is a tenant.
type Account struct {
	ID         string // UUID, lowercase 8-4-4-4-12
	Name       string
	OwnerEmail string
	Suspended  bool
	CreatedAt  time.Time

	Plan   string         // base plan name; "" when none
	AddOns map[AddOn]bool // active add-ons
}

// HasAddOn reports whether the add-on is active.
func (a *Account) HasAddOn(x AddOn) bool { return a.AddOns[x] }

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// ValidAccountID reports whether id is a lowercase 8-4-4-4-12 UUID.
func ValidAccountID(id string) bool { return uuidRE.MatchString(id) }

// Plan is a base plan of the operator's catalog.
type Plan struct {
	Name                 string
	MaxPublisherClients  int
	QoS2DailyPool        int64
	HistoryRetentionDays int

	// Publish rates, applied as back-pressure (the broker stops reading
	// the connection that is over them). Bytes are a PUBLISH's topic and
	// payload. 0 means unlimited.
	MaxPublishRate             int   // PUBLISH packets per second, per connected client
	MaxPublishBytesRate        int64 // bytes per second, per connected client
	MaxAccountPublishRate      int   // PUBLISH packets per second, all the account's clients together
	MaxAccountPublishBytesRate int64 // bytes per second, all the account's clients together
}

// DefaultPlans is the catalog a new data directory starts with.
var DefaultPlans = []Plan{
	{Name: "starter", MaxPublisherClients: 10, QoS2DailyPool: 10_000, HistoryRetentionDays: 7,
		MaxPublishRate: 100, MaxPublishBytesRate: 256 << 10, MaxAccountPublishRate: 1_000, MaxAccountPublishBytesRate: 2 << 20},
	{Name: "growth", MaxPublisherClients: 100, QoS2DailyPool: 100_000, HistoryRetentionDays: 30,
		MaxPublishRate: 200, MaxPublishBytesRate: 512 << 10, MaxAccountPublishRate: 5_000, MaxAccountPublishBytesRate: 16 << 20},
	{Name: "scale", MaxPublisherClients: 1000, QoS2DailyPool: 1_000_000, HistoryRetentionDays: 90,
		MaxPublishRate: 500, MaxPublishBytesRate: 1 << 20, MaxAccountPublishRate: 20_000, MaxAccountPublishBytesRate: 64 << 20},
}

// Bounds of the plan's publish rates (when not 0, unlimited).
const (
	MaxPublishRateLimit      = 10_000_000 // messages per second
	MinPublishBytesRate      = 1 << 10    // a lower rate would hold a large message for hours
	MaxPublishBytesRateLimit = 1 << 40    // bytes per second
)

// MaxQueued is the plan's catch-up bound: the retained messages one
// SUBSCRIBE delivers, and the messages a session queues behind its
// inflight window, at most: three per publisher client the plan allows.
// An account without a plan (the zero Plan) has the bound of one client.
func (p *Plan) MaxQueued() int { return max(p.MaxPublisherClients, 1) * 3 }

// Validate checks a plan's fields.
func (p *Plan) Validate() error {
	f := map[string]string{}
	if !ValidName(p.Name) {
		f["name"] = NameRule
	}
	if p.MaxPublisherClients < 1 || p.MaxPublisherClients > 1_000_000 {
		f["max_publisher_clients"] = "must be between 1 and 1000000"
	}
	if p.QoS2DailyPool < 0 {
		f["qos2_daily_pool"] = "must not be negative"
	}
	if p.HistoryRetentionDays < 1 || p.HistoryRetentionDays > 3650 {
		f["history_retention_days"] = "must be between 1 and 3650"
	}
	for field, r := range map[string]int{"max_publish_rate": p.MaxPublishRate, "max_account_publish_rate": p.MaxAccountPublishRate} {
		if r < 0 || r > MaxPublishRateLimit {
			f[field] = "must be 0 (unlimited) or between 1 and 10000000 messages per second"
		}
	}
	for field, r := range map[string]int64{"max_publish_bytes_rate": p.MaxPublishBytesRate, "max_account_publish_bytes_rate": p.MaxAccountPublishBytesRate} {
		if r != 0 && (r < MinPublishBytesRate || r > MaxPublishBytesRateLimit) {
			f[field] = "must be 0 (unlimited) or between 1024 and 1099511627776 bytes per second"
		}
	}
	if len(f) > 0 {
		return Invalid(f)
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,39}$`)

// NameRule says what ValidName accepts, as a validation message.
const NameRule = "must be 1-40 lowercase letters, digits, '-' or '_'"

// ValidName reports whether n can name a catalog entry (a plan or a vendor
// layout): 1-40 lowercase letters, digits, '-' or '_', starting with a
// letter or digit.
func ValidName(n string) bool { return nameRE.MatchString(n) }

// AddOn is a paid add-on of an account's subscription.
type AddOn string

// The add-ons (spec: "Endpoints").
const (
	AddOnHistoryDownload AddOn = "history_download" // Programmatic History Download
	AddOnLiveREST        AddOn = "live_rest_api"    // Live REST API
	AddOnMgmtREST        AddOn = "mgmt_rest_api"    // Mgmt REST API
	AddOnQoS2            AddOn = "qos2"             // Guaranteed delivery (QoS 2)
)

// AddOns lists every add-on in display order.
var AddOns = []AddOn{AddOnHistoryDownload, AddOnLiveREST, AddOnMgmtREST, AddOnQoS2}

// Title is the add-on's name as the spec and the portal show it.
func (x AddOn) Title() string {
	switch x {
	case AddOnHistoryDownload:
		return "Programmatic History Download"
	case AddOnLiveREST:
		return "Live REST API"
	case AddOnMgmtREST:
		return "Mgmt REST API"
	case AddOnQoS2:
		return "Guaranteed delivery (QoS 2)"
	}
	return string(x)
}

// ParseAddOn accepts an add-on's id, case-insensitively.
func ParseAddOn(s string) (AddOn, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, x := range AddOns {
		if string(x) == s {
			return x, true
		}
	}
	return "", false
}

// SubscriptionChange records one change of an account's plan or add-ons.
type SubscriptionChange struct {
	At    time.Time
	Kind  string // "plan", "addon_on", "addon_off"
	Value string // plan name or add-on id ("" plan: no plan)
}
