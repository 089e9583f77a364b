package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// Credential is an MQTT credential of the account, without its secret.
type Credential struct {
	ID        string     `json:"id"`
	Username  string     `json:"username" doc:"The MQTT username."`
	Label     string     `json:"label"`
	Filters   []string   `json:"filters,omitempty" doc:"Subscriber passwords: the topic filters it may subscribe to."`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty" doc:"Absent: never expires."`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Active    bool       `json:"active" doc:"Usable now: neither revoked nor expired."`
}

// NewCredentialResult is a created credential with its password, which is
// shown this once.
type NewCredentialResult struct {
	Credential
	Password string `json:"password" doc:"Shown once: store it in a secret manager now; it cannot be displayed again."`
}

func credentialOf(c *fleetmq.Credential, now time.Time) Credential {
	return Credential{ID: c.ID, Username: c.Username, Label: c.Label, Filters: c.Filters, CreatedAt: c.CreatedAt.UTC(),
		ExpiresAt: timePtr(c.ExpiresAt), RevokedAt: timePtr(c.RevokedAt), Active: c.Active(now)}
}

type credentialList struct {
	Body struct {
		Credentials []Credential `json:"credentials"`
	}
}

type createSubscriberPasswordInput struct {
	Body struct {
		Label         string   `json:"label,omitempty" maxLength:"200" example:"dashboard"`
		ExpiresInDays int      `json:"expires_in_days,omitempty" minimum:"0" maximum:"3650" doc:"Days until it expires; 0 or absent: never."`
		Filters       []string `json:"filters,omitempty" maxItems:"32" doc:"Topic filters within the account ('+' and '#' allowed); default {account_id}/#." example:"[\"2c9654d9-9c8e-437b-a391-699d4fb8c874/+/state/#\"]"`
	}
}

type createPublisherCredentialInput struct {
	Body struct {
		Label         string `json:"label,omitempty" maxLength:"200" example:"fleet 2026"`
		ExpiresInDays int    `json:"expires_in_days,omitempty" minimum:"0" maximum:"3650" doc:"Days until it expires; 0 or absent: never."`
	}
}

type credentialIDPath struct {
	ID string `path:"id" maxLength:"100"`
}

type newCredentialOutput struct {
	Body NewCredentialResult
}

func (a *API) registerCredentials() {
	for _, kind := range []struct {
		kind, path, what, id string
		desc                 string
	}{
		{fleetmq.KindSubscriber, "/subscriber-mqtt-passwords", "subscriber MQTT password", "SubscriberMQTTPassword",
			"A read-only MQTT credential: it may subscribe within its filters (default the whole account) and never publish. " +
				"Any client id may connect with it."},
		{fleetmq.KindPublisher, "/publisher-credentials", "fleet publisher credential", "PublisherCredential",
			"A fleet publisher credential: devices connect with it and their own registered client id, and publish under " +
				"{account_id}/{client_id}/. Several devices may share one."},
	} {
		kind := kind
		huma.Register(a.huma, op("list"+kind.id+"s", http.MethodGet, kind.path, "List "+kind.what+"s",
			kind.desc+" Newest first; secrets are never returned.", fleetmq.AddOnMgmtREST, http.StatusOK),
			func(ctx context.Context, _ *struct{}) (*credentialList, error) {
				cs, err := a.deps.Store.Credentials(ctx, caller(ctx).account.ID, kind.kind)
				if err != nil {
					return nil, a.fail(ctx, err, "")
				}
				now := a.deps.Now()
				out := &credentialList{}
				out.Body.Credentials = make([]Credential, 0, len(cs))
				for _, c := range cs {
					out.Body.Credentials = append(out.Body.Credentials, credentialOf(c, now))
				}
				return out, nil
			})
		huma.Register(a.huma, op("revoke"+kind.id, http.MethodDelete, kind.path+"/{id}", "Revoke a "+kind.what,
			"Revokes it at once: connected clients using it are disconnected and it can no longer connect.",
			fleetmq.AddOnMgmtREST, http.StatusNoContent, http.StatusNotFound),
			func(ctx context.Context, in *credentialIDPath) (*struct{}, error) {
				acc := caller(ctx).account.ID
				// Only a credential of this kind: a subscriber password id
				// on the publisher route is not found, and the other way.
				cs, err := a.deps.Store.Credentials(ctx, acc, kind.kind)
				if err != nil {
					return nil, a.fail(ctx, err, "")
				}
				found := false
				for _, c := range cs {
					found = found || c.ID == in.ID
				}
				if !found {
					return nil, problemOf(fleetmq.NotFound(kind.what, in.ID), "")
				}
				if err := a.deps.Service.RevokeCredential(ctx, acc, in.ID); err != nil {
					return nil, a.fail(ctx, err, "")
				}
				a.changed(ctx)
				return nil, nil
			})
	}
	huma.Register(a.huma, op("createSubscriberMQTTPassword", http.MethodPost, "/subscriber-mqtt-passwords", "Create a subscriber MQTT password",
		"Creates a read-only MQTT credential and returns its username and password, once.",
		fleetmq.AddOnMgmtREST, http.StatusCreated, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *createSubscriberPasswordInput) (*newCredentialOutput, error) {
			return a.createCredential(ctx, control.NewCredential{Kind: fleetmq.KindSubscriber, Label: in.Body.Label,
				ExpiresInDays: in.Body.ExpiresInDays, Filters: in.Body.Filters})
		})
	huma.Register(a.huma, op("createPublisherCredential", http.MethodPost, "/publisher-credentials", "Create a fleet publisher credential",
		"Creates a fleet publisher credential and returns its username and password, once.",
		fleetmq.AddOnMgmtREST, http.StatusCreated, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *createPublisherCredentialInput) (*newCredentialOutput, error) {
			return a.createCredential(ctx, control.NewCredential{Kind: fleetmq.KindPublisher, Label: in.Body.Label,
				ExpiresInDays: in.Body.ExpiresInDays})
		})
}

func (a *API) createCredential(ctx context.Context, in control.NewCredential) (*newCredentialOutput, error) {
	c, pw, err := a.deps.Service.CreateCredential(ctx, caller(ctx).account.ID, in)
	if err != nil {
		return nil, a.fail(ctx, err, "body")
	}
	a.changed(ctx)
	return &newCredentialOutput{Body: NewCredentialResult{Credential: credentialOf(c, a.deps.Now()), Password: pw}}, nil
}
