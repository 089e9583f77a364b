package control_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

func TestCreateRESTTokenRules(t *testing.T) {
	f := newFixture(t)
	f.twoAccounts(t, "")
	changes := 0
	f.svc.OnRESTTokenChange = func() { changes++ }

	// No base plan: no tokens (and no hook call).
	_, v, err := f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{Label: "ci"})
	domainErr(t, "token without a base plan", err, fleetmq.CodeBasePlanRequired)
	if v != "" {
		t.Fatal("a refused token came with a value")
	}
	_, _, err = f.svc.CreateRESTToken(f.ctx, "00000000-0000-4000-8000-000000000000", control.NewRESTToken{})
	domainErr(t, "token of a missing account", err, fleetmq.CodeNotFound)
	must(t, f.svc.SetPlan(f.ctx, accA, "starter"))
	must(t, f.svc.SetPlan(f.ctx, accB, "starter"))

	// Field validation, each field named.
	bad := []struct {
		in     control.NewRESTToken
		fields []string
	}{
		{control.NewRESTToken{Label: strings.Repeat("l", 101)}, []string{"label"}},
		{control.NewRESTToken{Label: strings.Repeat("é", 101)}, []string{"label"}},
		{control.NewRESTToken{Label: "two\nlines"}, []string{"label"}},
		{control.NewRESTToken{Label: "tab\there"}, []string{"label"}},
		{control.NewRESTToken{Label: "nul\x00"}, []string{"label"}},
		{control.NewRESTToken{Label: "bad \xff utf-8"}, []string{"label"}},
		{control.NewRESTToken{Label: "bidi \u202e override"}, []string{"label"}},
		{control.NewRESTToken{ExpiresInDays: ptr(0)}, []string{"expires_in_days"}},
		{control.NewRESTToken{ExpiresInDays: ptr(-1)}, []string{"expires_in_days"}},
		{control.NewRESTToken{ExpiresInDays: ptr(3651)}, []string{"expires_in_days"}},
		{control.NewRESTToken{Label: "a\rb", ExpiresInDays: ptr(0)}, []string{"label", "expires_in_days"}},
	}
	for _, tt := range bad {
		_, _, err := f.svc.CreateRESTToken(f.ctx, accA, tt.in)
		invalid(t, "CreateRESTToken "+tt.in.Label, err, tt.fields...)
	}
	if changes != 0 {
		t.Fatalf("the hook ran %d times for refused creations", changes)
	}

	// A good one: the value is shown once, only its hash is stored.
	tok, value, err := f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{Label: "  CI pipeline – eu ✓  "})
	must(t, err)
	if !fleetmq.CheckRESTTokenFormat(value) || !strings.HasPrefix(value, fleetmq.RESTTokenPrefix) {
		t.Fatalf("value %q is not a REST token", value)
	}
	want := &fleetmq.RESTToken{ID: tok.ID, AccountID: accA, Label: "CI pipeline – eu ✓", Prefix: value[:18], Hash: fleetmq.HashSecret(value), CreatedAt: t0}
	if !reflect.DeepEqual(tok, want) {
		t.Fatalf("created %+v, want %+v", tok, want)
	}
	if changes != 1 {
		t.Fatalf("the hook ran %d times after one creation", changes)
	}
	stored, err := f.store.RESTTokens(f.ctx, accA)
	must(t, err)
	if len(stored) != 1 || !reflect.DeepEqual(stored[0], tok) {
		t.Fatalf("stored %+v, want %+v", stored, tok)
	}
	if s := stored[0]; strings.Contains(s.Hash+s.Label+s.Prefix+s.ID, value[18:]) {
		t.Fatal("the value's secret part is stored")
	}
	// Labels: exactly 100 characters (not bytes) is fine; empty is fine.
	_, _, err = f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{Label: strings.Repeat("é", 100)})
	must(t, err)
	_, _, err = f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{})
	must(t, err)

	// Expiry in days from the service's clock; nil never expires.
	now := t0.Add(48*time.Hour + 1234*time.Nanosecond)
	f.clock.Set(now)
	for _, d := range []int{1, 30, 3650} {
		tok, _, err := f.svc.CreateRESTToken(f.ctx, accB, control.NewRESTToken{ExpiresInDays: ptr(d)})
		must(t, err)
		created := now.Truncate(time.Microsecond) // as stored
		if want := created.AddDate(0, 0, d); !tok.ExpiresAt.Equal(want) || !tok.CreatedAt.Equal(created) {
			t.Fatalf("%d days: created %v expires %v, want %v and %v", d, tok.CreatedAt, tok.ExpiresAt, created, want)
		}
		if !tok.Active(tok.ExpiresAt.Add(-time.Microsecond)) || !tok.Expired(tok.ExpiresAt) {
			t.Fatalf("%d days: want active until just before %v and expired at it", d, tok.ExpiresAt)
		}
	}
	values := map[string]bool{}
	for range 3 {
		_, v, err := f.svc.CreateRESTToken(f.ctx, accB, control.NewRESTToken{})
		must(t, err)
		values[v] = true
	}
	if len(values) != 3 {
		t.Fatal("the same value was issued twice")
	}
}

func TestRESTTokenLimitAndRevocation(t *testing.T) {
	f := newFixture(t)
	f.twoAccounts(t, "starter")
	changes := 0
	f.svc.OnRESTTokenChange = func() { changes++ }

	var aIDs []string
	for i := range fleetmq.MaxActiveRESTTokens {
		f.clock.Set(t0.Add(time.Duration(i) * time.Minute))
		tok, _, err := f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{Label: "a"})
		must(t, err)
		aIDs = append(aIDs, tok.ID)
	}
	_, _, err := f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{})
	domainErr(t, "11th active token", err, fleetmq.CodeConflict)
	if changes != fleetmq.MaxActiveRESTTokens {
		t.Fatalf("hook ran %d times, want %d (not for the refused 11th)", changes, fleetmq.MaxActiveRESTTokens)
	}
	bTok, _, err := f.svc.CreateRESTToken(f.ctx, accB, control.NewRESTToken{ExpiresInDays: ptr(1)})
	must(t, err)

	// Lists: newest first, each account its own.
	list, err := f.svc.RESTTokens(f.ctx, accA)
	must(t, err)
	if len(list) != fleetmq.MaxActiveRESTTokens || list[0].ID != aIDs[len(aIDs)-1] || list[len(list)-1].ID != aIDs[0] {
		t.Fatalf("RESTTokens(A) = %v, want A's %d, newest first", ids(list), len(aIDs))
	}
	list, err = f.svc.RESTTokens(f.ctx, accB)
	must(t, err)
	if len(list) != 1 || list[0].ID != bTok.ID {
		t.Fatalf("RESTTokens(B) = %v, want B's one", ids(list))
	}
	_, err = f.svc.RESTTokens(f.ctx, "00000000-0000-4000-8000-000000000000")
	domainErr(t, "tokens of a missing account", err, fleetmq.CodeNotFound)

	// A cannot revoke B's token: not_found, and B's token is untouched.
	before := changes
	domainErr(t, "A revoking B's token", f.svc.RevokeRESTToken(f.ctx, accA, bTok.ID), fleetmq.CodeNotFound)
	domainErr(t, "A revoking an unknown id", f.svc.RevokeRESTToken(f.ctx, accA, "00000000-0000-4000-8000-000000000000"), fleetmq.CodeNotFound)
	if changes != before {
		t.Fatal("the hook ran for refused revocations")
	}
	list, err = f.svc.RESTTokens(f.ctx, accB)
	must(t, err)
	if list[0].Revoked() {
		t.Fatal("A revoked B's token")
	}

	// Revoking frees a slot; twice is fine and keeps the first time.
	f.clock.Set(t0.Add(time.Hour))
	must(t, f.svc.RevokeRESTToken(f.ctx, accA, aIDs[3]))
	f.clock.Set(t0.Add(2 * time.Hour))
	must(t, f.svc.RevokeRESTToken(f.ctx, accA, aIDs[3]))
	if changes != before+2 {
		t.Fatalf("hook ran %d times for 2 revocations", changes-before)
	}
	list, err = f.svc.RESTTokens(f.ctx, accA)
	must(t, err)
	for _, tok := range list {
		if tok.ID == aIDs[3] && !tok.RevokedAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("revoked at %v, want the first revocation %v", tok.RevokedAt, t0.Add(time.Hour))
		}
	}
	_, _, err = f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{ExpiresInDays: ptr(1)})
	must(t, err)
	_, _, err = f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{})
	domainErr(t, "11th active token after one revoke and one create", err, fleetmq.CodeConflict)

	// Expired tokens do not count: a day later the one-day token has
	// expired and its slot is free.
	f.clock.Set(t0.Add(2*time.Hour + 24*time.Hour))
	_, _, err = f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{})
	must(t, err)
	_, _, err = f.svc.CreateRESTToken(f.ctx, accA, control.NewRESTToken{})
	domainErr(t, "11th active token after the expiry", err, fleetmq.CodeConflict)

	// Removing the plan blocks new tokens (existing ones stay listed).
	must(t, f.svc.SetPlan(f.ctx, accB, ""))
	_, _, err = f.svc.CreateRESTToken(f.ctx, accB, control.NewRESTToken{})
	domainErr(t, "token after the plan was removed", err, fleetmq.CodeBasePlanRequired)
}

func ids(ts []*fleetmq.RESTToken) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}
