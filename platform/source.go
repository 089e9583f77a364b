package platform

import (
	"context"

	"github.com/fleetmq/fleetmq"
)

// StoreSource builds snapshots from a control store (implements Source).
type StoreSource struct {
	Store fleetmq.ControlStore
}

// Version implements Source.
func (s StoreSource) Version(ctx context.Context) (int64, error) { return s.Store.Version(ctx) }

// Load implements Source. The version is read first, so a change that
// lands during Load moves the version again and is picked up next poll.
func (s StoreSource) Load(ctx context.Context) (*Snapshot, error) {
	v, err := s.Store.Version(ctx)
	if err != nil {
		return nil, err
	}
	plans, err := s.Store.Plans(ctx)
	if err != nil {
		return nil, err
	}
	byPlan := map[string]fleetmq.Plan{}
	for _, p := range plans {
		byPlan[p.Name] = p
	}
	accounts, err := s.Store.Accounts(ctx)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Version: v, Accounts: map[string]*Account{}, Creds: map[string]*Credential{}}
	for _, a := range accounts {
		acc := &Account{ID: a.ID, Suspended: a.Suspended, QoS2AddOn: a.HasAddOn(fleetmq.AddOnQoS2), Clients: map[string]*Client{}, Record: a}
		if p, ok := byPlan[a.Plan]; ok {
			acc.HasPlan, acc.PlanName = true, p.Name
			acc.MaxPublisherClients, acc.QoS2DailyPool = p.MaxPublisherClients, p.QoS2DailyPool
			acc.PublishRate, acc.PublishBytesRate = p.MaxPublishRate, p.MaxPublishBytesRate
			acc.AccountPublishRate, acc.AccountPublishBytesRate = p.MaxAccountPublishRate, p.MaxAccountPublishBytesRate
		}
		snap.Accounts[a.ID] = acc
	}
	clients, err := s.Store.AllClients(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range clients {
		if acc := snap.Accounts[c.AccountID]; acc != nil {
			acc.Clients[c.ClientID] = &Client{ClientID: c.ClientID, Label: c.Label, MaxPublishQoS: byte(c.MaxPublishQoS)}
		}
	}
	creds, err := s.Store.ActiveCredentials(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range creds {
		snap.Creds[c.Username] = &Credential{ID: c.ID, AccountID: c.AccountID, Kind: c.Kind, Username: c.Username,
			SecretHash: c.SecretHash, Filters: c.Filters, ExpiresAt: c.ExpiresAt}
	}
	layouts, err := s.Store.Layouts(ctx)
	if err != nil {
		return nil, err
	}
	if snap.Layouts, err = fleetmq.CompileLayouts(layouts); err != nil {
		return nil, err
	}
	return snap, nil
}
