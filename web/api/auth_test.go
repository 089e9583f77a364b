package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// unauthorized fails unless r is a 401 problem with the code and a Bearer
// WWW-Authenticate challenge with error="invalid_token" (RFC 6750 section
// 3.1: also for an expired or revoked token), and carries no rate-limit
// headers (no token was charged).
func unauthorized(t *testing.T, r *response, code string) *problem {
	t.Helper()
	p := challenged(t, r, code)
	if c := r.Header.Get("WWW-Authenticate"); !strings.Contains(c, `error="invalid_token"`) {
		t.Fatalf("%s: WWW-Authenticate %q, want error=\"invalid_token\"", r, c)
	}
	return p
}

// challenged fails unless r is a 401 problem with the code, a Bearer
// challenge and no rate-limit headers.
func challenged(t *testing.T, r *response, code string) *problem {
	t.Helper()
	p := r.problem(t, http.StatusUnauthorized, code)
	if c := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(c, "Bearer ") || !strings.Contains(c, `realm="fleetmq"`) {
		t.Fatalf("%s: WWW-Authenticate %q, want a Bearer challenge", r, c)
	}
	if h := r.Header.Get("X-RateLimit-Used"); h != "" {
		t.Fatalf("%s: an unauthenticated response counts a request (X-RateLimit-Used %s)", r, h)
	}
	return p
}

// breakChecksum returns a token value with its last checksum character
// changed: the right length and alphabet, a wrong checksum.
func breakChecksum(v string) string {
	last := v[len(v)-1]
	c := byte('A')
	if last == 'A' {
		c = 'B'
	}
	return v[:len(v)-1] + string(c)
}

// TestTokens: what the API answers for every kind of Authorization
// header: a valid token works (the scheme is case-insensitive); a missing
// header is 401 invalid_token with a bare Bearer challenge; another
// scheme, a malformed value, a value with a broken checksum, an unknown
// well-formed value and MQTT usernames and passwords are 401
// invalid_token with error="invalid_token" in the challenge. A REST
// token is no MQTT password either.
func TestTokens(t *testing.T) {
	t.Parallel()
	e := start(t)
	tn := e.tenant(t, "A", "starter", allAddOns)
	unknown := fleetmq.NewRESTTokenValue()
	if !fleetmq.CheckRESTTokenFormat(unknown) || !fleetmq.CheckRESTTokenFormat(tn.Token) || fleetmq.CheckRESTTokenFormat(breakChecksum(tn.Token)) {
		t.Fatal("the test's token values are not what they should be")
	}

	for _, h := range []string{"Bearer " + tn.Token, "bearer " + tn.Token, "BEARER  " + tn.Token, " Bearer\t" + tn.Token + " "} {
		e.req(t, "", http.MethodGet, "/usage", nil, "Authorization", h).ok(t, http.StatusOK, nil)
	}

	// No credentials at all: a challenge without an error code (RFC 6750
	// section 3.1).
	for _, h := range []string{"", "   "} {
		r := e.req(t, "", http.MethodGet, "/usage", nil, "Authorization", h)
		challenged(t, r, fleetmq.CodeInvalidToken)
		if c := r.Header.Get("WWW-Authenticate"); strings.Contains(c, "error=") {
			t.Errorf("%s: no credentials, but WWW-Authenticate %q has an error code", r, c)
		}
	}

	for _, c := range []struct {
		name, header string
	}{
		{"basic scheme", "Basic " + tn.Token},
		{"token without scheme", tn.Token},
		{"scheme only", "Bearer"},
		{"scheme and blanks", "Bearer    "},
		{"two values", "Bearer " + tn.Token + " " + tn.Token},
		{"not a token", "Bearer hello"},
		{"prefix only", "Bearer " + fleetmq.RESTTokenPrefix},
		{"truncated", "Bearer " + tn.Token[:len(tn.Token)-1]},
		{"one character more", "Bearer " + tn.Token + "A"},
		{"broken checksum", "Bearer " + breakChecksum(tn.Token)},
		{"lower-cased", "Bearer " + strings.ToLower(tn.Token)},
		{"other prefix", "Bearer svc_mqtt_xxxx_" + tn.Token[len(fleetmq.RESTTokenPrefix):]},
		{"non-ASCII", "Bearer " + tn.Token[:len(tn.Token)-2] + "é"},
		{"unknown well-formed", "Bearer " + unknown},
		{"publisher username", "Bearer " + tn.PubUser},
		{"publisher password", "Bearer " + tn.PubPass},
		{"subscriber password", "Bearer " + tn.SubPass},
		{"basic with MQTT credentials", "Basic " + tn.SubUser + ":" + tn.SubPass},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.req(t, "", http.MethodGet, "/usage", nil, "Authorization", c.header)
			p := unauthorized(t, r, fleetmq.CodeInvalidToken)
			if p.Detail == "" {
				t.Fatalf("%s: no detail", r)
			}
			// The same answer on every route, with or without a body.
			r = e.req(t, "", http.MethodPost, "/publishers", map[string]any{"client_id": "x"}, "Authorization", c.header)
			unauthorized(t, r, fleetmq.CodeInvalidToken)
		})
	}
	// Unknown and wrong-checksum values are told apart only in the detail.
	pu := e.req(t, "", http.MethodGet, "/usage", nil, "Authorization", "Bearer "+unknown).asProblem(t)
	pc := e.req(t, "", http.MethodGet, "/usage", nil, "Authorization", "Bearer "+breakChecksum(tn.Token)).asProblem(t)
	if pu.Detail == pc.Detail {
		t.Fatalf("unknown and malformed tokens have the same detail %q", pu.Detail)
	}

	// A REST token is no MQTT credential either.
	e.synced(t)
	e.refused(t, "dev1", tn.PubUser, tn.Token)
	e.refused(t, "dash", tn.SubUser, tn.Token)
	e.refused(t, "dash", "rest", tn.Token)

	// None of the refusals above touched the failed calls' resources.
	if cs, err := e.Store.Clients(e.ctx, tn.ID); err != nil || len(cs) != 0 {
		t.Fatalf("clients after refused calls: %v %v", cs, err)
	}
}

// TestTokenRevocation: a revoked token is refused with token_revoked on
// the very next request, on every route, while another token of the same
// account keeps working; revoking one account's token with another
// account's id is not_found and changes nothing.
func TestTokenRevocation(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	B := e.tenant(t, "B", "starter", allAddOns)
	second, _ := e.token(t, A.ID, "second")

	e.get(t, A.Token, "/publishers").ok(t, http.StatusOK, nil)
	if err := e.Service.RevokeRESTToken(e.ctx, B.ID, A.TokenID); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Fatalf("revoke A's token as B: %v, want not_found", err)
	}
	e.get(t, A.Token, "/publishers").ok(t, http.StatusOK, nil)

	if err := e.Service.RevokeRESTToken(e.ctx, A.ID, A.TokenID); err != nil {
		t.Fatal(err)
	}
	for _, rt := range routes {
		path, body, _ := rt.call(t, e, A)
		unauthorized(t, e.req(t, A.Token, rt.Method, path, body), fleetmq.CodeTokenRevoked)
	}
	e.get(t, second, "/publishers").ok(t, http.StatusOK, nil)
	e.get(t, B.Token, "/publishers").ok(t, http.StatusOK, nil)

	// Still revoked after a restart (the index is rebuilt from the store).
	e.restart(t)
	unauthorized(t, e.get(t, A.Token, "/usage"), fleetmq.CodeTokenRevoked)
	e.get(t, second, "/usage").ok(t, http.StatusOK, nil)
}

// TestTokenRevokedOnAnotherNodeRefusedWithinASecond: a token revoked
// through another process on the same store (another node of a cluster,
// whose portal the owner used) is refused here within a second, at this
// node's next control-plane version check (every platform.VersionPoll),
// with no call of this process's own refresh; the other account's token
// keeps working.
func TestTokenRevokedOnAnotherNodeRefusedWithinASecond(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload) // the version is polled every 100 ms, as in production
	A := e.tenant(t, "A", "starter", allAddOns)
	B := e.tenant(t, "B", "starter", allAddOns)
	e.get(t, A.Token, "/usage").ok(t, http.StatusOK, nil)
	// The store alone, as the other node writes it.
	if err := e.Store.RevokeRESTToken(e.ctx, A.ID, A.TokenID, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	var last *response
	testkit.Eventually(t, time.Second, "the token revoked elsewhere to be refused", func() bool {
		last = e.get(t, A.Token, "/usage")
		return last.Status != http.StatusOK
	})
	unauthorized(t, last, fleetmq.CodeTokenRevoked)
	e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil)
}

// TestTokenExpiry: a token created with expires_in_days 1 works until the
// clock reaches creation + 1 day, then is refused with token_expired;
// a token without expiry keeps working.
func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	e := start(t)
	tn := e.tenant(t, "A", "starter", allAddOns)
	one := 1
	tok, v, err := e.Service.CreateRESTToken(e.ctx, tn.ID, control.NewRESTToken{Label: "day", ExpiresInDays: &one})
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(24 * time.Hour); !tok.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v", tok.ExpiresAt, want)
	}
	e.get(t, v, "/usage").ok(t, http.StatusOK, nil)
	e.clock.Set(t0.Add(24*time.Hour - time.Second))
	e.get(t, v, "/usage").ok(t, http.StatusOK, nil)
	e.clock.Set(t0.Add(24 * time.Hour))
	unauthorized(t, e.get(t, v, "/usage"), fleetmq.CodeTokenExpired)
	e.clock.Set(t0.Add(90 * 24 * time.Hour))
	unauthorized(t, e.get(t, v, "/publishers"), fleetmq.CodeTokenExpired)
	e.get(t, tn.Token, "/usage").ok(t, http.StatusOK, nil)
}

// TestTokenAccountSuspended: when the operator suspends an account, its
// tokens stop working within the reload interval.
func TestTokenAccountSuspended(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	B := e.tenant(t, "B", "starter", allAddOns)
	e.get(t, A.Token, "/usage").ok(t, http.StatusOK, nil)
	if err := e.Store.SetSuspended(e.ctx, A.ID, true); err != nil {
		t.Fatal(err)
	}
	var last *response
	eventually(t, "a suspended account's token to be refused", func() bool {
		last = e.get(t, A.Token, "/usage")
		return last.Status != http.StatusOK
	})
	unauthorized(t, last, fleetmq.CodeInvalidToken)
	e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil)
}

// TestTokenLimits (service level: tokens are created in the portal, the
// REST API has no route for it): at most 10 active tokens per account,
// the 11th is a conflict; revoked and expired ones free a place; an
// account without a base plan gets base_plan_required; another account's
// count is its own.
func TestTokenLimits(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", nil) // holds one token
	B := e.tenant(t, "B", "starter", nil)
	ids := []string{A.TokenID}
	one := 1
	for i := 1; i < fleetmq.MaxActiveRESTTokens; i++ {
		in := control.NewRESTToken{Label: "t"}
		if i == 1 {
			in.ExpiresInDays = &one
		}
		tok, _, err := e.Service.CreateRESTToken(e.ctx, A.ID, in)
		if err != nil {
			t.Fatalf("token %d: %v", i+1, err)
		}
		ids = append(ids, tok.ID)
	}
	if _, _, err := e.Service.CreateRESTToken(e.ctx, A.ID, control.NewRESTToken{}); fleetmq.CodeOf(err) != fleetmq.CodeConflict {
		t.Fatalf("11th token: %v, want conflict", err)
	}
	if _, _, err := e.Service.CreateRESTToken(e.ctx, B.ID, control.NewRESTToken{}); err != nil {
		t.Fatalf("B's second token: %v", err)
	}
	// A revoked token frees a place.
	if err := e.Service.RevokeRESTToken(e.ctx, A.ID, ids[5]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Service.CreateRESTToken(e.ctx, A.ID, control.NewRESTToken{}); err != nil {
		t.Fatalf("after a revocation: %v", err)
	}
	if _, _, err := e.Service.CreateRESTToken(e.ctx, A.ID, control.NewRESTToken{}); fleetmq.CodeOf(err) != fleetmq.CodeConflict {
		t.Fatalf("11th token again: %v, want conflict", err)
	}
	// So does an expired one.
	e.clock.Add(24 * time.Hour)
	if _, _, err := e.Service.CreateRESTToken(e.ctx, A.ID, control.NewRESTToken{}); err != nil {
		t.Fatalf("after an expiry: %v", err)
	}

	acc, _, err := e.Service.CreateAccount(e.ctx, control.NewAccount{Name: "NoPlan", OwnerEmail: "np@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Service.CreateRESTToken(e.ctx, acc.ID, control.NewRESTToken{}); fleetmq.CodeOf(err) != fleetmq.CodeBasePlanRequired {
		t.Fatalf("token without a base plan: %v, want base_plan_required", err)
	}
}
