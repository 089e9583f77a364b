package fleetmq

import (
	"context"
	"time"
)

// ControlStore keeps the control plane: accounts, plans, subscriptions,
// clients, credentials and layouts. Every write moves Version, which the
// broker polls to reload its snapshot. Account-scoped methods take the
// account id and never touch another account's rows.
type ControlStore interface {
	// Version is a counter that changes with every control-plane write.
	Version(ctx context.Context) (int64, error)

	CreateAccount(ctx context.Context, a *Account, ownerPasswordHash string) error
	Account(ctx context.Context, id string) (*Account, error)
	Accounts(ctx context.Context) ([]*Account, error)
	SetSuspended(ctx context.Context, id string, suspended bool) error
	// OwnerPasswordHash returns the account of an owner e-mail and its
	// password hash (for portal sign-in).
	OwnerPasswordHash(ctx context.Context, email string) (accountID, hash string, err error)

	Plans(ctx context.Context) ([]Plan, error)
	Plan(ctx context.Context, name string) (*Plan, error)
	PutPlan(ctx context.Context, p Plan) error

	// SetPlan sets the base plan ("" for none) and records the change.
	SetPlan(ctx context.Context, accountID, plan string, at time.Time) error
	// SetAddOn switches an add-on and records the change.
	SetAddOn(ctx context.Context, accountID string, x AddOn, on bool, at time.Time) error
	SubscriptionChanges(ctx context.Context, accountID string) ([]SubscriptionChange, error)

	// CreateClient registers a client unless the account already has max
	// clients (conflict) or the client id is taken in the account.
	CreateClient(ctx context.Context, c *MQTTClient, max int) error
	Client(ctx context.Context, accountID, clientID string) (*MQTTClient, error)
	Clients(ctx context.Context, accountID string) ([]*MQTTClient, error)
	UpdateClient(ctx context.Context, c *MQTTClient) error
	DeleteClient(ctx context.Context, accountID, clientID string) error

	CreateCredential(ctx context.Context, c *Credential) error
	Credentials(ctx context.Context, accountID, kind string) ([]*Credential, error)
	RevokeCredential(ctx context.Context, accountID, id string, at time.Time) error

	PutLayout(ctx context.Context, l *Layout) error
	Layouts(ctx context.Context) ([]*Layout, error)
	DeleteLayout(ctx context.Context, name string) error

	// ActiveCredentials returns every credential that is not revoked (the
	// broker checks expiry itself), across accounts: the broker's view.
	ActiveCredentials(ctx context.Context) ([]*Credential, error)
	// AllClients returns every registered client, across accounts.
	AllClients(ctx context.Context) ([]*MQTTClient, error)
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
