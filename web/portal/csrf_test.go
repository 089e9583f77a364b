package portal_test

import (
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/web/portal"
)

// state is what an account's POSTs could change.
type state struct {
	Clients  []fleetmq.MQTTClient
	Tokens   []fleetmq.RESTToken
	Creds    []fleetmq.Credential
	AddOns   map[fleetmq.AddOn]bool
	Password string
	Sessions bool // the browser's session still exists
}

func (e *env) state(t testing.TB, o *owner, b *browser) state {
	t.Helper()
	var s state
	cs, err := e.Store.Clients(e.ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		s.Clients = append(s.Clients, *c)
	}
	ts, err := e.Store.RESTTokens(e.ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		s.Tokens = append(s.Tokens, *tk)
	}
	for _, kind := range []string{fleetmq.KindPublisher, fleetmq.KindSubscriber} {
		cr, err := e.Store.Credentials(e.ctx, o.ID, kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cr {
			s.Creds = append(s.Creds, *c)
		}
	}
	acc, err := e.Store.Account(e.ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.AddOns = acc.AddOns
	_, s.Password, err = e.Store.OwnerPasswordHash(e.ctx, o.Email)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Store.PortalSession(e.ctx, fleetmq.HashSecret(b.sessionCookie(t)))
	s.Sessions = err == nil
	return s
}

// TestEveryPOSTNeedsCSRFAndSameOrigin: every form of a signed-in owner is
// refused (403, nothing changes) without the session's CSRF token, with a
// wrong one (another session's included), or from another origin; the
// same requests succeed with the token from the portal's own origin.
func TestEveryPOSTNeedsCSRFAndSameOrigin(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter", fleetmq.AddOnQoS2)
	ctx := e.ctx
	if _, err := e.Service.CreateClient(ctx, a.ID, control.ClientInput{ClientID: "dev1"}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := e.Service.CreateRESTToken(ctx, a.ID, control.NewRESTToken{Label: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	cred, _, err := e.Service.CreateCredential(ctx, a.ID, control.NewCredential{Kind: fleetmq.KindSubscriber})
	if err != nil {
		t.Fatal(err)
	}
	newPW := "another long passphrase"
	cases := []struct {
		pattern, path string
		form          url.Values
	}{
		{"POST /clients", "/clients", url.Values{"client_id": {"dev2"}, "label": {"x"}, "max_qos": {"1"}}},
		{"POST /clients/{id}/edit", "/clients/dev1/edit", url.Values{"label": {"renamed"}, "max_qos": {"0"}}},
		{"POST /credentials", "/credentials", url.Values{"kind": {"publisher"}, "label": {"fleet"}}},
		{"POST /credentials/{id}/revoke", "/credentials/" + cred.ID + "/revoke", nil},
		{"POST /subscriptions/{addon}", "/subscriptions/qos2", url.Values{"on": {"0"}}},
		{"POST /settings/tokens", "/settings/tokens", url.Values{"label": {"new"}}},
		{"POST /settings/tokens/{id}/revoke", "/settings/tokens/" + tok.ID + "/revoke", nil},
		{"POST /clients/{id}/delete", "/clients/dev1/delete", nil},
		{"POST /settings/password", "/settings/password", url.Values{"current_password": {a.Password}, "new_password": {newPW}, "confirm_password": {newPW}}},
		{"POST /signout", "/signout", nil},
	}
	var covered, want []string
	for _, c := range cases {
		covered = append(covered, c.pattern)
	}
	for _, p := range portal.RoutePatterns() {
		if strings.HasPrefix(p, "POST ") {
			want = append(want, p)
		}
	}
	sort.Strings(covered)
	sort.Strings(want)
	if !reflect.DeepEqual(covered, want) {
		t.Fatalf("the test covers POST routes %v; the portal has %v", covered, want)
	}

	b := e.browser(t)
	b.signIn(t, a)
	good := b.csrf
	// Another session of the same owner has another token.
	other := e.browser(t)
	other.signIn(t, a)
	if other.csrf == good || good == "" {
		t.Fatalf("two sessions share the CSRF token %q", good)
	}
	before := e.state(t, a, b)
	with := func(f url.Values, csrf string) url.Values {
		g := url.Values{}
		for k, v := range f {
			g[k] = v
		}
		if csrf != "-" {
			g.Set("csrf", csrf)
		}
		return g
	}
	for _, c := range cases {
		for _, bad := range []struct {
			name    string
			form    url.Values
			headers []string
		}{
			{"no token", with(c.form, "-"), nil},
			{"empty token", with(c.form, ""), nil},
			{"wrong token", with(c.form, good[:len(good)-2]+"xx"), nil},
			{"another session's token", with(c.form, other.csrf), nil},
			{"foreign Origin", with(c.form, good), []string{"Origin", "https://evil.example"}},
			{"null Origin", with(c.form, good), []string{"Origin", "null"}},
			{"foreign Referer", with(c.form, good), []string{"Origin", "", "Referer", "https://evil.example/page"}},
			{"cross-site fetch", with(c.form, good), []string{"Sec-Fetch-Site", "cross-site"}},
		} {
			p := b.do(t, http.MethodPost, c.path, bad.form, bad.headers...)
			if p.Status != http.StatusForbidden {
				t.Fatalf("%s with %s: %s\nwant 403", c.path, bad.name, p)
			}
			p.has(t, "Request refused")
		}
	}
	if after := e.state(t, a, b); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused POSTs changed the account:\nbefore %+v\nafter  %+v", before, after)
	}

	// The same forms with the token from the portal's origin work.
	for _, c := range cases {
		p := b.do(t, http.MethodPost, c.path, with(c.form, b.csrf), "Referer", e.base+"/settings")
		if p.Status != http.StatusSeeOther && p.Status != http.StatusCreated {
			t.Fatalf("%s with the right token: %s\nwant 303 or 201", c.path, p)
		}
		if p.cookie(portal.SessionCookie) != nil && c.pattern == "POST /settings/password" {
			b.get(t, "/overview") // the new session's token
		}
	}
	after := e.state(t, a, b)
	if len(after.Clients) != 1 || after.Clients[0].ClientID != "dev2" || after.AddOns[fleetmq.AddOnQoS2] ||
		len(after.Tokens) != 2 || after.Password == before.Password || after.Sessions {
		t.Fatalf("after the accepted POSTs: %+v", after)
	}
}

// TestSignInNeedsItsFormToken: the sign-in form carries a token that must
// match the browser's sign-in cookie, and must come from this origin.
func TestSignInNeedsItsFormToken(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	form := url.Values{"email": {a.Email}, "password": {a.Password}}
	b := e.browser(t)
	// No sign-in cookie (a forged form from elsewhere).
	b.do(t, http.MethodPost, "/signin", url.Values{"email": form["email"], "password": form["password"], "csrf": {"x"}}).
		want(t, http.StatusForbidden).has(t, "cookies")
	b.get(t, "/signin")
	for _, bad := range []struct {
		csrf    string
		headers []string
	}{
		{"", nil},
		{"forged-token-forged-token-forged-token-abcd", nil},
		{b.csrf, []string{"Origin", "https://evil.example"}},
	} {
		f := url.Values{"email": form["email"], "password": form["password"], "csrf": {bad.csrf}}
		p := b.do(t, http.MethodPost, "/signin", f, bad.headers...).want(t, http.StatusForbidden)
		if p.cookie(portal.SessionCookie) != nil {
			t.Fatal("a refused sign-in set a session cookie")
		}
	}
	b.post(t, "/signin", form).redirects(t, "/overview")
}
