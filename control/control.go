// Package control is the control-plane service: the operations the
// operator CLI, the REST API and the portal perform on accounts, plans,
// add-ons, MQTT clients, credentials, REST API tokens and vendor layouts,
// with their validation and rules (plan limits, the QoS 2 add-on, secrets
// shown once and stored hashed). It sits between those interfaces and the
// store.
package control

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// Store is what the service needs from storage.
type Store interface {
	fleetmq.ControlStore
	fleetmq.UsageStore
	fleetmq.ProblemStore
	fleetmq.NodeStore
	fleetmq.PortalStore
}

// Service performs control-plane operations.
type Service struct {
	Store Store
	Now   func() time.Time

	// OnRESTTokenChange, when set, is called after a REST API token is
	// created or revoked (the REST authenticator refreshes its index, so a
	// revocation takes effect at once in this process; others follow the
	// control-plane version).
	OnRESTTokenChange func()
}

// New returns a service on store with the real clock.
func New(store Store) *Service { return &Service{Store: store, Now: time.Now} }

// now is the service's clock at the store's precision (microseconds), so a
// time returned by a create is the time a later read returns.
func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// NewAccount is the input of CreateAccount.
type NewAccount struct {
	Name       string
	OwnerEmail string
	Plan       string // optional base plan
}

// CreateAccount creates an account and returns it with the owner's first
// portal password (shown once; only its argon2id hash is kept).
func (s *Service) CreateAccount(ctx context.Context, in NewAccount) (*fleetmq.Account, string, error) {
	f := map[string]string{}
	in.Name = strings.TrimSpace(in.Name)
	email := strings.ToLower(strings.TrimSpace(in.OwnerEmail))
	checkText(f, "name", in.Name, 1, 200)
	if a, err := mail.ParseAddress(email); err != nil || a.Address != email {
		f["owner_email"] = "must be an e-mail address"
	}
	if len(f) > 0 {
		return nil, "", fleetmq.Invalid(f)
	}
	if in.Plan != "" {
		if _, err := s.Store.Plan(ctx, in.Plan); err != nil {
			return nil, "", err
		}
	}
	password := fleetmq.NewSecret(20)
	hash, err := HashPassword(password)
	if err != nil {
		return nil, "", err
	}
	a := &fleetmq.Account{ID: newUUID(), Name: in.Name, OwnerEmail: email, Plan: in.Plan, CreatedAt: s.now()}
	if err := s.Store.CreateAccount(ctx, a, hash); err != nil {
		return nil, "", err
	}
	a, err = s.Store.Account(ctx, a.ID)
	return a, password, err
}

// SetSuspended suspends an account, or lifts its suspension. A suspended
// account's sessions are disconnected when the broker applies the change,
// and its devices' new connections are refused.
func (s *Service) SetSuspended(ctx context.Context, accountID string, suspended bool) error {
	return s.Store.SetSuspended(ctx, accountID, suspended)
}

// SetPlan sets an account's base plan ("" removes it).
func (s *Service) SetPlan(ctx context.Context, accountID, plan string) error {
	return s.Store.SetPlan(ctx, accountID, plan, s.now())
}

// PlanRates are the publish rates given for a plan (fleetmq.Plan's
// MaxPublishRate, MaxPublishBytesRate, MaxAccountPublishRate and
// MaxAccountPublishBytesRate); nil ones were not given.
type PlanRates struct {
	Publish, AccountPublish           *int
	PublishBytes, AccountPublishBytes *int64
}

// PutPlan adds a plan to the catalog or changes one. The publish rates
// come from rates: one not given keeps the plan's stored value, or for a
// new plan is the default starter plan's (a tenant is never unlimited by
// omission; 0 says unlimited). p is updated to what was stored.
func (s *Service) PutPlan(ctx context.Context, p *fleetmq.Plan, rates PlanRates) error {
	cur, err := s.Store.Plan(ctx, p.Name)
	switch {
	case fleetmq.CodeOf(err) == fleetmq.CodeNotFound:
		cur = &fleetmq.DefaultPlans[0]
	case err != nil:
		return err
	}
	p.MaxPublishRate, p.MaxPublishBytesRate = cur.MaxPublishRate, cur.MaxPublishBytesRate
	p.MaxAccountPublishRate, p.MaxAccountPublishBytesRate = cur.MaxAccountPublishRate, cur.MaxAccountPublishBytesRate
	if rates.Publish != nil {
		p.MaxPublishRate = *rates.Publish
	}
	if rates.PublishBytes != nil {
		p.MaxPublishBytesRate = *rates.PublishBytes
	}
	if rates.AccountPublish != nil {
		p.MaxAccountPublishRate = *rates.AccountPublish
	}
	if rates.AccountPublishBytes != nil {
		p.MaxAccountPublishBytesRate = *rates.AccountPublishBytes
	}
	if err := p.Validate(); err != nil {
		return err
	}
	return s.Store.PutPlan(ctx, *p)
}

// SetAddOn switches an add-on on or off.
func (s *Service) SetAddOn(ctx context.Context, accountID string, x fleetmq.AddOn, on bool) error {
	if _, ok := fleetmq.ParseAddOn(string(x)); !ok {
		return fleetmq.Invalid(map[string]string{"addon": fmt.Sprintf("unknown add-on %q", x)})
	}
	return s.Store.SetAddOn(ctx, accountID, x, on, s.now())
}

// account loads an account and its plan (nil without one).
func (s *Service) account(ctx context.Context, id string) (*fleetmq.Account, *fleetmq.Plan, error) {
	a, err := s.Store.Account(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if a.Plan == "" {
		return a, nil, nil
	}
	p, err := s.Store.Plan(ctx, a.Plan)
	return a, p, err
}

// ClientInput is the input of CreateClient and UpdateClient; nil fields
// keep their value (CreateClient: label "" and max_publish_qos 1).
type ClientInput struct {
	ClientID      string
	Label         *string
	MaxPublishQoS *int
}

func checkClientFields(a *fleetmq.Account, in ClientInput, f map[string]string) error {
	if in.Label != nil {
		checkText(f, "label", strings.TrimSpace(*in.Label), 0, fleetmq.MaxLabel)
	}
	if q := in.MaxPublishQoS; q != nil {
		if *q < 0 || *q > 2 {
			f["max_publish_qos"] = "must be 0, 1 or 2"
		} else if *q == 2 && !a.HasAddOn(fleetmq.AddOnQoS2) {
			if len(f) == 0 {
				return &fleetmq.Error{Code: fleetmq.CodeAddOnRequired, AddOn: string(fleetmq.AddOnQoS2),
					Message: "max_publish_qos 2 needs the " + fleetmq.AddOnQoS2.Title() + " add-on"}
			}
			f["max_publish_qos"] = "2 needs the " + fleetmq.AddOnQoS2.Title() + " add-on"
		}
	}
	if len(f) > 0 {
		return fleetmq.Invalid(f)
	}
	return nil
}

// CreateClient registers an MQTT client within the plan's
// max_publisher_clients.
func (s *Service) CreateClient(ctx context.Context, accountID string, in ClientInput) (*fleetmq.MQTTClient, error) {
	a, plan, err := s.account(ctx, accountID)
	if err != nil {
		return nil, err
	}
	f := map[string]string{}
	if !fleetmq.ValidClientID(in.ClientID) {
		f["client_id"] = "must be 1-128 letters, digits or . _ : @ -, starting with a letter or digit"
	}
	if err := checkClientFields(a, in, f); err != nil {
		return nil, err
	}
	if plan == nil {
		return nil, fleetmq.BasePlanRequired("registering MQTT clients")
	}
	c := &fleetmq.MQTTClient{AccountID: accountID, ClientID: in.ClientID, MaxPublishQoS: 1, CreatedAt: s.now()}
	if in.Label != nil {
		c.Label = strings.TrimSpace(*in.Label)
	}
	if in.MaxPublishQoS != nil {
		c.MaxPublishQoS = *in.MaxPublishQoS
	}
	if err := s.Store.CreateClient(ctx, c, plan.MaxPublisherClients); err != nil {
		return nil, err
	}
	return c, nil
}

// UpdateClient changes a client's label and/or max_publish_qos.
func (s *Service) UpdateClient(ctx context.Context, accountID string, in ClientInput) (*fleetmq.MQTTClient, error) {
	a, _, err := s.account(ctx, accountID)
	if err != nil {
		return nil, err
	}
	c, err := s.Store.Client(ctx, accountID, in.ClientID)
	if err != nil {
		return nil, err
	}
	if err := checkClientFields(a, in, map[string]string{}); err != nil {
		return nil, err
	}
	if in.Label != nil {
		c.Label = strings.TrimSpace(*in.Label)
	}
	if in.MaxPublishQoS != nil {
		c.MaxPublishQoS = *in.MaxPublishQoS
	}
	return c, s.Store.UpdateClient(ctx, c)
}

// DeleteClient removes a client; its live sessions are disconnected when
// the broker reloads.
func (s *Service) DeleteClient(ctx context.Context, accountID, clientID string) error {
	return s.Store.DeleteClient(ctx, accountID, clientID)
}

// NewCredential is the input of CreateCredential.
type NewCredential struct {
	Kind          string // fleetmq.KindPublisher or fleetmq.KindSubscriber
	Label         string
	ExpiresInDays int      // 0: never
	Filters       []string // subscriber: within the account; default {account_id}/#
}

// MaxExpiryDays bounds "expires in (days)".
const MaxExpiryDays = 3650

// CreateCredential creates a publisher credential or a subscriber MQTT
// password and returns it with the password (shown once).
func (s *Service) CreateCredential(ctx context.Context, accountID string, in NewCredential) (*fleetmq.Credential, string, error) {
	a, _, err := s.account(ctx, accountID)
	if err != nil {
		return nil, "", err
	}
	f := map[string]string{}
	prefix := ""
	switch in.Kind {
	case fleetmq.KindPublisher:
		prefix = "pub-"
		if len(in.Filters) > 0 {
			f["filters"] = "only subscriber passwords have topic filters"
		}
	case fleetmq.KindSubscriber:
		prefix = "sub-"
		if len(in.Filters) == 0 {
			in.Filters = []string{a.ID + "/#"}
		}
		for _, flt := range in.Filters {
			// Filters are stored one per line: a line break would split one
			// into two, the second unchecked (e.g. another account's "B/#").
			if err := topic.ValidateFilter(flt); err != nil || strings.ContainsAny(flt, "\r\n") || strings.HasPrefix(flt, "$") || !topic.Covers(a.ID+"/#", flt) {
				f["filters"] = fmt.Sprintf("%q: must be a topic filter under %s/", flt, a.ID)
				break
			}
		}
	default:
		f["kind"] = "must be publisher or subscriber"
	}
	checkText(f, "label", strings.TrimSpace(in.Label), 0, fleetmq.MaxLabel)
	if in.ExpiresInDays < 0 || in.ExpiresInDays > MaxExpiryDays {
		f["expires_in_days"] = fmt.Sprintf("must be between 0 (never) and %d", MaxExpiryDays)
	}
	if len(f) > 0 {
		return nil, "", fleetmq.Invalid(f)
	}
	secret := fleetmq.NewSecret(32)
	now := s.now()
	c := &fleetmq.Credential{ID: newUUID(), AccountID: accountID, Kind: in.Kind, Username: prefix + strings.ToLower(fleetmq.NewSecret(16)),
		Label: strings.TrimSpace(in.Label), SecretHash: fleetmq.HashSecret(secret), Filters: in.Filters, CreatedAt: now}
	if in.ExpiresInDays > 0 {
		c.ExpiresAt = now.AddDate(0, 0, in.ExpiresInDays)
	}
	if err := s.Store.CreateCredential(ctx, c); err != nil {
		return nil, "", err
	}
	return c, secret, nil
}

// RevokeCredential revokes a credential of the account; its live sessions
// are disconnected when the broker reloads.
func (s *Service) RevokeCredential(ctx context.Context, accountID, id string) error {
	return s.Store.RevokeCredential(ctx, accountID, id, s.now())
}

// PutLayout registers (or replaces, by name) a vendor layout after
// checking its rules.
func (s *Service) PutLayout(ctx context.Context, l *fleetmq.Layout) error {
	f := map[string]string{}
	if !fleetmq.ValidName(l.Name) {
		f["name"] = fleetmq.NameRule
	}
	if _, err := fleetmq.CompileLayout(l); err != nil {
		f["rules"] = err.Error()
	}
	for _, r := range l.Rules {
		// Rules are stored one per line: a line break would split a rule
		// into ones never checked, which then fail every snapshot load.
		if strings.ContainsAny(r, "\r\n") {
			f["rules"] = fmt.Sprintf("rule %q: must be one line", r)
		}
	}
	if len(f) > 0 {
		return fleetmq.Invalid(f)
	}
	if l.ID == "" {
		l.ID = newUUID()
	}
	l.CreatedAt = s.now()
	return s.Store.PutLayout(ctx, l)
}

// DeleteLayout removes a vendor layout: publishes on its wire root are
// refused from then on.
func (s *Service) DeleteLayout(ctx context.Context, name string) error {
	return s.Store.DeleteLayout(ctx, name)
}

// DryRun is the result of matching a wire topic against the layouts.
type DryRun struct {
	Layout   string // "" when nothing matched
	ClientID string
	Subpath  string
	Fanout   bool
	Reason   string // why nothing matched
}

// DryRunLayout shows what the broker would do with a publish on wire
// outside the publisher's own topics: it looks the topic up in the stored
// layouts the way the broker does in the layouts it has loaded
// (fleetmq.LayoutIndex.Match).
func (s *Service) DryRunLayout(ctx context.Context, wire string) (*DryRun, error) {
	if err := topic.ValidateName(wire); err != nil {
		return nil, fleetmq.Invalid(map[string]string{"topic": err.Error()})
	}
	ls, err := s.Store.Layouts(ctx)
	if err != nil {
		return nil, err
	}
	ix, err := fleetmq.CompileLayouts(ls)
	if err != nil {
		return nil, err
	}
	l, c, sp, rootKnown := ix.Match(wire)
	switch {
	case l != nil:
		return &DryRun{Layout: l.Name, ClientID: c, Subpath: sp, Fanout: l.Fanout}, nil
	case !rootKnown:
		root, _, _ := strings.Cut(wire, "/")
		return &DryRun{Reason: fmt.Sprintf("no layout is registered for wire root %q: the publish is refused", root)}, nil
	}
	return &DryRun{Reason: "the wire root is registered but no rule matches: the publish is refused"}, nil
}

// newUUID returns a random (version 4) UUID, lowercase 8-4-4-4-12.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
