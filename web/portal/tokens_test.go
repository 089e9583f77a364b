package portal_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

var tokenValueRE = regexp.MustCompile(`svc_mqtt_rest_[0-9A-Za-z]{36}`)

// TestRESTTokens: a created token is shown once (and works on the REST
// API), then only its prefix; the table says how many are active of 10;
// the 11th is refused with the reason and the form is disabled; revoking
// goes through a confirmation and frees a place.
func TestRESTTokens(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter", fleetmq.AddOnMgmtREST)
	b := e.browser(t)
	b.signIn(t, a)
	b.get(t, "/settings/tokens").want(t, http.StatusOK).
		has(t, `data-testid="tokens-empty"`, `data-testid="tokens-active">0 of 10 active<`, `id="create-token-form"`, `id="token-label"`, `id="token-expires"`, "Expires in (days)").
		hasNot(t, `<fieldset disabled`)

	p := b.post(t, "/settings/tokens", url.Values{"label": {"nightly export"}, "expires_in_days": {"30"}}).want(t, http.StatusCreated)
	value := p.text(t, "token-value")
	if !fleetmq.CheckRESTTokenFormat(value) {
		t.Fatalf("shown token %q is not a token value", value)
	}
	p.has(t, "cannot be displayed again", `id="token-value-copy"`, `data-copy="token-value"`)
	if cc := p.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("the page with the token value has Cache-Control %q, want no-store", cc)
	}
	ts, err := e.Store.RESTTokens(e.ctx, a.ID)
	if err != nil || len(ts) != 1 {
		t.Fatalf("tokens: %v, %v", ts, err)
	}
	tok := ts[0]
	if tok.Label != "nightly export" || tok.Hash != fleetmq.HashSecret(value) || !tok.ExpiresAt.Equal(t0.AddDate(0, 0, 30)) {
		t.Fatalf("stored token %+v", tok)
	}
	// It works on the REST API at once.
	req, _ := http.NewRequest(http.MethodGet, e.base+"/api/v1/subscriber/publishers", nil)
	req.Header.Set("Authorization", "Bearer "+value)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the new token on the REST API: %d", resp.StatusCode)
	}

	// Afterwards only the prefix, anywhere.
	for _, path := range []string{"/settings/tokens", "/settings", "/overview", "/settings/tokens/" + tok.ID + "/revoke"} {
		p := b.get(t, path).want(t, http.StatusOK).hasNot(t, value, value[len(tok.Prefix):])
		if tokenValueRE.MatchString(p.Body) {
			t.Fatalf("%s shows a token value", path)
		}
	}
	list := b.get(t, "/settings/tokens").has(t, tok.Prefix+"…", "nightly export", `data-testid="tokens-active">1 of 10 active<`)
	if list.count(`data-testid="token-row"`) != 1 {
		t.Fatalf("%s\nwant one token row", list)
	}

	// Validation.
	b.post(t, "/settings/tokens", url.Values{"expires_in_days": {"0"}}).want(t, http.StatusUnprocessableEntity).has(t, "Must be between 1 and 3650")
	b.post(t, "/settings/tokens", url.Values{"expires_in_days": {"soon"}}).want(t, http.StatusUnprocessableEntity).has(t, "Enter a whole number of days")
	b.post(t, "/settings/tokens", url.Values{"label": {strings.Repeat("x", 101)}}).want(t, http.StatusUnprocessableEntity).has(t, "at most 100")

	// Up to 10 active; the 11th is refused with the reason.
	for i := 2; i <= 10; i++ {
		b.post(t, "/settings/tokens", url.Values{"label": {"t" + itoa(i)}}).want(t, http.StatusCreated)
	}
	full := b.get(t, "/settings/tokens").has(t, `data-testid="tokens-active">10 of 10 active<`, `data-testid="tokens-limit-reason"`, "Revoke one you no longer use", "<fieldset disabled")
	if full.count(`data-testid="token-row"`) != 10 {
		t.Fatal("want 10 token rows")
	}
	b.post(t, "/settings/tokens", url.Values{"label": {"eleventh"}}).want(t, http.StatusConflict).
		has(t, "10 active REST API tokens").hasNot(t, `id="token-value"`)
	if ts, _ := e.Store.RESTTokens(e.ctx, a.ID); len(ts) != 10 {
		t.Fatalf("%d tokens stored after the refused 11th", len(ts))
	}

	// Revoke: a confirmation page (no script), then the POST.
	b.get(t, "/settings/tokens/"+tok.ID+"/revoke").want(t, http.StatusOK).
		has(t, "Revoke this REST API token?", tok.Prefix, `action="/settings/tokens/`+tok.ID+`/revoke"`, `id="confirm-submit"`)
	b.post(t, "/settings/tokens/"+tok.ID+"/revoke", nil).redirects(t, "/settings/tokens")
	after := b.get(t, "/settings/tokens").has(t, "was revoked", `data-testid="tokens-active">9 of 10 active<`).hasNot(t, "<fieldset disabled")
	if !strings.Contains(after.Body, `data-token-id="`+tok.ID+`"`) || !regexp.MustCompile(`data-token-id="`+tok.ID+`"(?s:.)*?Revoked`).MatchString(after.Body) {
		t.Fatalf("%s\nthe revoked token should stay listed as Revoked", after)
	}
	// The REST API refuses it now.
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the revoked token on the REST API: %d, want 401", resp.StatusCode)
	}
	b.post(t, "/settings/tokens", url.Values{"label": {"rotated"}, "expires_in_days": {"1"}}).want(t, http.StatusCreated)
	b.get(t, "/settings/tokens").has(t, `data-testid="tokens-active">10 of 10 active<`)

	// An expired token is shown as such and does not count.
	e.clock.Add(25 * time.Hour)
	b.signIn(t, a)
	b.get(t, "/settings/tokens").has(t, `data-testid="tokens-active">9 of 10 active<`, "Expired").hasNot(t, "<fieldset disabled")
}

// TestRESTTokensNeedABasePlan: without a base plan the form is disabled
// and says why, and a forced POST is refused with the reason.
func TestRESTTokensNeedABasePlan(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "")
	b := e.browser(t)
	b.signIn(t, a)
	b.get(t, "/settings/tokens").has(t, "<fieldset disabled", `data-testid="tokens-limit-reason"`, "needs a base plan")
	b.post(t, "/settings/tokens", url.Values{"label": {"x"}}).want(t, http.StatusConflict).has(t, "needs a base plan")
	b.get(t, "/clients").has(t, "<fieldset disabled", "Registering MQTT clients needs a base plan")
	b.get(t, "/subscriptions").has(t, `data-testid="no-plan"`)
}
