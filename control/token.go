package control

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleetmq/fleetmq"
)

// NewRESTToken is the input of CreateRESTToken.
type NewRESTToken struct {
	Label         string // optional; at most fleetmq.MaxRESTTokenLabel printable characters
	ExpiresInDays *int   // nil: never expires; else 1..MaxExpiryDays
}

// CreateRESTToken creates a REST API token and returns it with its value,
// which is shown once: only its SHA-256 is stored. Errors: not_found for
// an unknown account, validation_failed naming "label" or
// "expires_in_days", base_plan_required without a base plan, conflict when
// the account is suspended (checked by the store in the creating write, so
// no caller gets past it) or already has fleetmq.MaxActiveRESTTokens
// active tokens.
func (s *Service) CreateRESTToken(ctx context.Context, accountID string, in NewRESTToken) (*fleetmq.RESTToken, string, error) {
	_, plan, err := s.account(ctx, accountID)
	if err != nil {
		return nil, "", err
	}
	f := map[string]string{}
	label := strings.TrimSpace(in.Label)
	checkText(f, "label", label, 0, fleetmq.MaxRESTTokenLabel)
	if d := in.ExpiresInDays; d != nil && (*d < 1 || *d > MaxExpiryDays) {
		f["expires_in_days"] = fmt.Sprintf("must be between 1 and %d (leave it out for a token that never expires)", MaxExpiryDays)
	}
	if len(f) > 0 {
		return nil, "", fleetmq.Invalid(f)
	}
	if plan == nil {
		return nil, "", fleetmq.BasePlanRequired("creating REST API tokens")
	}
	value := fleetmq.NewRESTTokenValue()
	// The store keeps microseconds: the token returned is the one stored.
	now := s.now()
	t := &fleetmq.RESTToken{ID: newUUID(), AccountID: accountID, Label: label, Prefix: fleetmq.RESTTokenDisplayPrefix(value),
		Hash: fleetmq.HashSecret(value), CreatedAt: now}
	if in.ExpiresInDays != nil {
		t.ExpiresAt = now.AddDate(0, 0, *in.ExpiresInDays)
	}
	if err := s.Store.CreateRESTToken(ctx, t); err != nil {
		return nil, "", err
	}
	s.restTokensChanged()
	return t, value, nil
}

// RESTTokens lists an account's REST API tokens, newest first, revoked and
// expired ones included (not_found for an unknown account).
func (s *Service) RESTTokens(ctx context.Context, accountID string) ([]*fleetmq.RESTToken, error) {
	if _, err := s.Store.Account(ctx, accountID); err != nil {
		return nil, err
	}
	return s.Store.RESTTokens(ctx, accountID)
}

// RevokeRESTToken revokes a REST API token of the account (not_found for
// an unknown id or another account's; revoking twice is fine).
func (s *Service) RevokeRESTToken(ctx context.Context, accountID, id string) error {
	if err := s.Store.RevokeRESTToken(ctx, accountID, id, s.now()); err != nil {
		return err
	}
	s.restTokensChanged()
	return nil
}

func (s *Service) restTokensChanged() {
	if s.OnRESTTokenChange != nil {
		s.OnRESTTokenChange()
	}
}
