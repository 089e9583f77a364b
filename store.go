package fleetmq

import (
	"context"
	"time"
)

// ControlStore keeps the control plane: accounts, plans, subscriptions,
// clients, credentials, REST API tokens and layouts, one interface per
// entity (a reader and its writes), so that code which only reads can say
// so. Every write moves Version, which the broker polls to reload its
// snapshot, except the REST token bookkeeping (last use, request counts)
// noted below. Account-scoped methods take the account id and never touch
// another account's rows.
type ControlStore interface {
	ControlReader
	AccountStore
	PlanStore
	ClientStore
	CredentialStore
	LayoutStore
	RESTTokenStore
}

// ControlReader reads the whole control plane: what the broker's snapshot
// is built from.
type ControlReader interface {
	// Version is a counter that changes with every control-plane write.
	Version(ctx context.Context) (int64, error)
	AccountReader
	PlanReader
	ClientReader
	CredentialReader
	LayoutReader
	// AllRESTTokens returns every token of every account, revoked and
	// expired ones included (the REST authenticator's index).
	AllRESTTokens(ctx context.Context) ([]*RESTToken, error)
}

// AccountReader reads accounts and their plan history.
type AccountReader interface {
	Account(ctx context.Context, id string) (*Account, error)
	Accounts(ctx context.Context) ([]*Account, error)
	// OwnerPasswordHash returns the account of an owner e-mail and its
	// password hash (for portal sign-in).
	OwnerPasswordHash(ctx context.Context, email string) (accountID, hash string, err error)
	SubscriptionChanges(ctx context.Context, accountID string) ([]SubscriptionChange, error)
}

// AccountStore keeps accounts: their state, base plan and add-ons.
type AccountStore interface {
	AccountReader
	CreateAccount(ctx context.Context, a *Account, ownerPasswordHash string) error
	SetSuspended(ctx context.Context, id string, suspended bool) error
	// SetPlan sets the base plan ("" for none) and records the change.
	SetPlan(ctx context.Context, accountID, plan string, at time.Time) error
	// SetAddOn switches an add-on and records the change.
	SetAddOn(ctx context.Context, accountID string, x AddOn, on bool, at time.Time) error
}

// PlanReader reads the plan catalog.
type PlanReader interface {
	Plans(ctx context.Context) ([]Plan, error)
	Plan(ctx context.Context, name string) (*Plan, error)
}

// PlanStore keeps the plan catalog.
type PlanStore interface {
	PlanReader
	PutPlan(ctx context.Context, p Plan) error
}

// ClientReader reads registered MQTT clients.
type ClientReader interface {
	Client(ctx context.Context, accountID, clientID string) (*MQTTClient, error)
	Clients(ctx context.Context, accountID string) ([]*MQTTClient, error)
	// AllClients returns every registered client, across accounts.
	AllClients(ctx context.Context) ([]*MQTTClient, error)
}

// ClientStore keeps registered MQTT clients.
type ClientStore interface {
	ClientReader
	// CreateClient registers a client unless the account already has max
	// clients (conflict) or the client id is taken in the account.
	CreateClient(ctx context.Context, c *MQTTClient, max int) error
	UpdateClient(ctx context.Context, c *MQTTClient) error
	DeleteClient(ctx context.Context, accountID, clientID string) error
}

// CredentialReader reads MQTT credentials.
type CredentialReader interface {
	Credentials(ctx context.Context, accountID, kind string) ([]*Credential, error)
	// ActiveCredentials returns every credential that is not revoked (the
	// broker checks expiry itself), across accounts: the broker's view.
	ActiveCredentials(ctx context.Context) ([]*Credential, error)
}

// CredentialStore keeps MQTT credentials.
type CredentialStore interface {
	CredentialReader
	CreateCredential(ctx context.Context, c *Credential) error
	RevokeCredential(ctx context.Context, accountID, id string, at time.Time) error
}

// LayoutReader reads vendor wire layouts.
type LayoutReader interface {
	Layouts(ctx context.Context) ([]*Layout, error)
}

// LayoutStore keeps vendor wire layouts.
type LayoutStore interface {
	LayoutReader
	PutLayout(ctx context.Context, l *Layout) error
	DeleteLayout(ctx context.Context, name string) error
}

// RESTTokenStore keeps REST API tokens and their bookkeeping.
type RESTTokenStore interface {
	// CreateRESTToken stores a new REST API token. It returns a not_found
	// error when the account does not exist, and a conflict error when the
	// account is suspended, already has MaxActiveRESTTokens tokens active
	// at t.CreatedAt (the checks and the insert are one atomic write) or
	// the hash or id is taken.
	CreateRESTToken(ctx context.Context, t *RESTToken) error
	// RESTTokens returns an account's tokens, newest first, revoked and
	// expired ones included.
	RESTTokens(ctx context.Context, accountID string) ([]*RESTToken, error)
	// AllRESTTokens returns every token of every account, revoked and
	// expired ones included (the REST authenticator's index).
	AllRESTTokens(ctx context.Context) ([]*RESTToken, error)
	// RevokeRESTToken revokes a token of the account at at. It returns a
	// not_found error for an unknown id or another account's; revoking a
	// revoked token succeeds and keeps the first revocation time.
	RevokeRESTToken(ctx context.Context, accountID, id string, at time.Time) error
	// TouchRESTTokens records last-used times by token id in one batch. A
	// time never moves a token's last use backwards; unknown ids are
	// ignored. It is bookkeeping, not a control-plane change: Version does
	// not move.
	TouchRESTTokens(ctx context.Context, lastUsed map[string]time.Time) error
	// AddRESTRequests adds per-token request counts to the hourly rate-limit
	// window that starts at window (an upsert), and deletes windows that
	// started more than two hours before it. Version does not move.
	AddRESTRequests(ctx context.Context, window time.Time, counts map[string]int64) error
	// RESTRequests returns the per-token request counts of the window that
	// starts at window (no entry: no request counted).
	RESTRequests(ctx context.Context, window time.Time) (map[string]int64, error)
}

// UsageStore keeps metered usage.
type UsageStore interface {
	// AddUsage adds increments (from the broker's meter) atomically.
	AddUsage(ctx context.Context, daily []DailyUsage, clients []ClientUsage) error
	// Usage returns an account's days from..to (inclusive, YYYY-MM-DD).
	Usage(ctx context.Context, accountID, from, to string) ([]DailyUsage, error)
	// ClientUsage returns an account's per-client QoS mix, summed over
	// days from..to.
	ClientUsage(ctx context.Context, accountID, from, to string) ([]ClientUsage, error)
}

// RetainedRow is a retained message as a cluster keeps it in the store:
// its topic, when it was created and expires (Unix microseconds, 0: never)
// and the message's encoding (broker.AppendMessage); an empty Message is
// a clear of the topic at Created (a tombstone: an older message arriving
// after it does not bring the topic back).
type RetainedRow struct {
	Topic           string
	Created, Expiry int64
	Message         []byte
}

// RetainedStore keeps a cluster's retained messages, so that a node
// starting reads what the others retained.
type RetainedStore interface {
	// PutRetained stores each row in one transaction: a topic keeps the
	// row with the latest Created, message or clear.
	PutRetained(ctx context.Context, rows []RetainedRow) error
	// LoadRetained calls fn with every stored row (clears included) not
	// expired at now.
	LoadRetained(ctx context.Context, now int64, fn func(RetainedRow) error) error
	// SweepRetained removes the rows expired at now, the messages created
	// before created (0: none by age) and the clears created before
	// clears, and says how many.
	SweepRetained(ctx context.Context, now, created, clears int64) (int64, error)
}
