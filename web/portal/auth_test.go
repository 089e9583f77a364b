package portal_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/web/portal"
)

// TestSignIn: the right password signs in with a server-side session and
// a cookie that is HttpOnly and SameSite=Lax (Secure with the option);
// a wrong password and an unknown address get the same answer; pages
// need a session and come back after sign-in.
func TestSignIn(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	e.account(t, "Bolt", "starter")
	b := e.browser(t)

	// A page without a session goes to the sign-in page and back.
	b.get(t, "/clients?x=1").redirects(t, "/signin?next="+url.QueryEscape("/clients?x=1"))
	b.get(t, "/").redirects(t, "/signin")
	sp := b.get(t, "/signin").want(t, http.StatusOK).has(t, `id="signin-form"`, `id="email"`, `id="password"`, `id="signin-submit"`)
	if c := sp.cookie(portal.SigninCookie); c == nil || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
		t.Fatalf("sign-in form cookie %+v: want HttpOnly, SameSite=Lax", c)
	}

	// Wrong password, unknown address, malformed address: one message.
	var bodies []string
	for _, f := range []url.Values{
		{"email": {a.Email}, "password": {"wrong password"}},
		{"email": {"nobody@example.com"}, "password": {a.Password}},
		{"email": {"not an address"}, "password": {a.Password}},
	} {
		p := b.post(t, "/signin", f).want(t, http.StatusUnauthorized).has(t, "Wrong e-mail address or password.")
		if p.cookie(portal.SessionCookie) != nil {
			t.Fatalf("a failed sign-in set a session cookie: %s", p)
		}
		bodies = append(bodies, strings.ReplaceAll(p.Body, f.Get("email"), "EMAIL"))
	}
	if bodies[0] != bodies[1] {
		t.Fatalf("a wrong password and an unknown address answer differently:\n%s\n---\n%s", bodies[0], bodies[1])
	}

	// The right password, with a next page.
	b.get(t, "/signin?next=/clients")
	p := b.post(t, "/signin", url.Values{"email": {strings.ToUpper(a.Email)}, "password": {a.Password}, "next": {"/clients"}}).redirects(t, "/clients")
	c := p.cookie(portal.SessionCookie)
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Secure || c.Path != "/" || c.MaxAge != 0 || len(c.Value) < 40 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Lax, not Secure on plain HTTP, Path=/, a browser session, a long random id", c)
	}
	// The store keeps the id's hash, never the id.
	ps, err := e.Store.PortalSession(e.ctx, fleetmq.HashSecret(c.Value))
	if err != nil || ps.AccountID != a.ID || !ps.CreatedAt.Equal(t0) {
		t.Fatalf("stored session %+v, %v: want account %s created at %s", ps, err, a.ID, t0)
	}
	if _, err := e.Store.PortalSession(e.ctx, c.Value); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Fatalf("the session is findable by its raw id (%v): only its hash may be stored", err)
	}
	b.get(t, "/clients").want(t, http.StatusOK).has(t, `data-testid="account-name">Acme<`)
	if cc := p.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("sign-in response Cache-Control %q, want no-store", cc)
	}

	// A next page elsewhere is ignored.
	b2 := e.browser(t)
	b2.get(t, "/signin")
	b2.post(t, "/signin", url.Values{"email": {a.Email}, "password": {a.Password}, "next": {"//evil.example/x"}}).redirects(t, "/overview")
	// Signed in, the sign-in page and / go to the portal.
	b2.get(t, "/signin").redirects(t, "/overview")
	b2.get(t, "/").redirects(t, "/overview")

	// No spelling of an off-site target leaves the site, signed in (GET) or
	// signing in (POST): browsers drop tabs and line breaks from a URL and
	// read a backslash as a slash.
	for _, next := range []string{"//evil.example/x", "/\tevil.example", "/\t/evil.example", "/\n/evil.example", "/\r//evil.example",
		"/\\evil.example", "\\/evil.example", "/ /evil.example", "https://evil.example/", "/\u3000/evil.example", "/\x7f/evil.example",
		"javascript:alert(1)", "evil.example"} {
		b2.get(t, "/signin?next="+url.QueryEscape(next)).redirects(t, "/overview")
		b3 := e.browser(t)
		b3.get(t, "/signin")
		b3.post(t, "/signin", url.Values{"email": {a.Email}, "password": {a.Password}, "next": {next}}).redirects(t, "/overview")
	}
	b2.get(t, "/signin?next="+url.QueryEscape("/clients?sort=name")).redirects(t, "/clients?sort=name")
}

// TestSecureCookies: with the option, every cookie is Secure.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.Config) { c.PortalSecureCookies = true })
	a := e.account(t, "Acme", "starter")
	b := e.browser(t)
	sp := b.get(t, "/signin")
	if c := sp.cookie(portal.SigninCookie); c == nil || !c.Secure {
		t.Fatalf("sign-in cookie %+v: want Secure", c)
	}
	tok := sp.cookie(portal.SigninCookie).Value
	// The jar does not send Secure cookies over http: send it by hand.
	p := b.do(t, http.MethodPost, "/signin", url.Values{"email": {a.Email}, "password": {a.Password}, "csrf": {tok}},
		"Cookie", portal.SigninCookie+"="+tok).redirects(t, "/overview")
	if c := p.cookie(portal.SessionCookie); c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
		t.Fatalf("session cookie %+v: want Secure, HttpOnly, SameSite=Lax", c)
	}
}

// TestSignInThrottle: five failures of one address from one IP address
// within 15 minutes block it (429 with Retry-After and when to retry),
// even with the right password, until the window passes; other addresses
// are not blocked.
func TestSignInThrottle(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	o := e.account(t, "Bolt", "starter")
	b := e.browser(t)
	b.get(t, "/signin")
	for i := 0; i < 5; i++ {
		b.post(t, "/signin", url.Values{"email": {a.Email}, "password": {"guess " + itoa(i)}}).want(t, http.StatusUnauthorized)
		e.clock.Add(time.Minute)
	}
	p := b.post(t, "/signin", url.Values{"email": {a.Email}, "password": {a.Password}}).want(t, http.StatusTooManyRequests)
	p.has(t, "Too many failed sign-in attempts.", "Try again after", "2030-03-10 12:35 UTC")
	if ra, err := strconv.Atoi(p.Header.Get("Retry-After")); err != nil || ra < 9*60 || ra > 10*60+1 {
		t.Fatalf("Retry-After %q: want about 10 minutes (the first failure at 12:20 leaves the window at 12:35; now 12:25)", p.Header.Get("Retry-After"))
	}
	if p.cookie(portal.SessionCookie) != nil {
		t.Fatal("a throttled sign-in set a session cookie")
	}
	// Another address from the same IP address is not blocked.
	b2 := e.browser(t)
	b2.signIn(t, o)
	// After the window, the right password works again.
	e.clock.Add(10 * time.Minute)
	b.post(t, "/signin", url.Values{"email": {a.Email}, "password": {a.Password}}).redirects(t, "/overview")
}

// TestSignOut: signing out deletes the session on the server, so the old
// cookie no longer works.
func TestSignOut(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	b := e.browser(t)
	b.signIn(t, a)
	id := b.sessionCookie(t)
	p := b.post(t, "/signout", nil).redirects(t, "/signin")
	if c := p.cookie(portal.SessionCookie); c == nil || c.MaxAge >= 0 {
		t.Fatalf("sign-out cookie %+v: want it deleted", c)
	}
	if _, err := e.Store.PortalSession(e.ctx, fleetmq.HashSecret(id)); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Fatalf("session after sign-out: %v, want not found", err)
	}
	b.get(t, "/signin").has(t, "You have signed out.")
	// Replaying the old cookie does not sign in.
	replay := e.browser(t)
	replay.do(t, http.MethodGet, "/overview", nil, "Cookie", portal.SessionCookie+"="+id).redirects(t, "/signin")
}

// TestSuspendedAccountCannotUseThePortal: while the operator has an
// account suspended its owner cannot act in the portal: a browser signed
// in before is signed out at its next request (a form it sends does
// nothing) and told why, and the right password does not sign in; the
// other account is untouched, and once resumed the owner signs in again.
func TestSuspendedAccountCannotUseThePortal(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	o := e.account(t, "Bolt", "starter")
	b, bolt := e.browser(t), e.browser(t)
	b.signIn(t, a)
	bolt.signIn(t, o)
	b.get(t, "/settings/tokens").want(t, http.StatusOK) // the form's CSRF token
	if err := e.Service.SetSuspended(e.ctx, a.ID, true); err != nil {
		t.Fatal(err)
	}
	const msg = "This account is suspended"

	b.post(t, "/settings/tokens", url.Values{"label": {"ci"}}).redirects(t, "/signin")
	if ts, err := e.Service.RESTTokens(e.ctx, a.ID); err != nil || len(ts) != 0 {
		t.Fatalf("a suspended account's tokens: %d, %v; want none created", len(ts), err)
	}
	b.get(t, "/signin").want(t, http.StatusOK).has(t, msg)
	b.get(t, "/overview").redirects(t, "/signin")

	fresh := e.browser(t)
	fresh.get(t, "/signin")
	p := fresh.post(t, "/signin", url.Values{"email": {a.Email}, "password": {a.Password}}).want(t, http.StatusForbidden).has(t, msg)
	if p.cookie(portal.SessionCookie) != nil {
		t.Fatalf("a suspended account's sign-in set a session cookie: %s", p)
	}
	// A wrong password still says only that.
	fresh.post(t, "/signin", url.Values{"email": {a.Email}, "password": {"wrong password"}}).want(t, http.StatusUnauthorized).hasNot(t, msg)

	bolt.get(t, "/overview").want(t, http.StatusOK)
	bolt.post(t, "/settings/tokens", url.Values{"label": {"ci"}}).want(t, http.StatusCreated)

	if err := e.Service.SetSuspended(e.ctx, a.ID, false); err != nil {
		t.Fatal(err)
	}
	fresh.signIn(t, a)
	fresh.get(t, "/settings/tokens").want(t, http.StatusOK)
	fresh.post(t, "/settings/tokens", url.Values{"label": {"ci"}}).want(t, http.StatusCreated)
}

// TestSessionExpiry: a session ends after 12 idle hours (and at most the
// minute its last-seen time may go unwritten), and 7 days after sign-in
// however much it is used.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	b := e.browser(t)
	b.signIn(t, a)
	e.clock.Add(11 * time.Hour)
	b.get(t, "/overview").want(t, http.StatusOK)
	e.clock.Add(11 * time.Hour) // 11 h idle since the last request
	b.get(t, "/overview").want(t, http.StatusOK)
	e.clock.Add(12 * time.Hour) // 12 h idle: ended within the minute a request may go unwritten
	b.get(t, "/overview").want(t, http.StatusOK)
	e.clock.Add(12*time.Hour + time.Minute)
	b.get(t, "/overview").redirects(t, "/signin")

	b.signIn(t, a)
	for i := 0; i < 15; i++ { // used every 11 hours: 165 hours
		e.clock.Add(11 * time.Hour)
		b.get(t, "/overview").want(t, http.StatusOK)
	}
	e.clock.Add(11 * time.Hour) // 176 h > 7 days
	b.get(t, "/overview").redirects(t, "/signin")
	if _, err := e.Store.PortalSession(e.ctx, fleetmq.HashSecret(b.sessionCookie(t))); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Fatalf("an expired session is still stored: %v", err)
	}
}

// TestSessionIdleCountsFromTheLastRequest: the 12 idle hours count from
// the last request, also one made less than a minute after the one
// before (whose last-seen time the store does not write again): one
// second short of 12 idle hours the session still works, and a sign-in
// by another account meanwhile (which sweeps stale sessions) leaves it.
func TestSessionIdleCountsFromTheLastRequest(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	o := e.account(t, "Bolt", "starter")
	b, bolt := e.browser(t), e.browser(t)
	b.signIn(t, a)
	e.clock.Add(50 * time.Second)
	b.get(t, "/overview").want(t, http.StatusOK) // the last request
	e.clock.Add(12*time.Hour - time.Second)
	bolt.signIn(t, o)
	b.get(t, "/overview").want(t, http.StatusOK)

	e.clock.Add(12*time.Hour + time.Minute) // unused for 12 hours and the minute a request may go unwritten
	b.get(t, "/overview").redirects(t, "/signin")
}

// TestChangePassword: the current password is checked, the new one must
// be long enough and confirmed; a change signs out every other session,
// keeps this one, and only the new password signs in after it.
func TestChangePassword(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	o := e.account(t, "Bolt", "starter")
	b, other, bolt := e.browser(t), e.browser(t), e.browser(t)
	b.signIn(t, a)
	other.signIn(t, a)
	bolt.signIn(t, o)
	b.get(t, "/settings").has(t, `id="password-form"`, `id="current-password"`, `id="new-password"`, `id="confirm-password"`)

	newPW := "a much longer passphrase"
	for _, c := range []struct {
		form url.Values
		msg  string
	}{
		{url.Values{"current_password": {"wrong"}, "new_password": {newPW}, "confirm_password": {newPW}}, "This is not your current password."},
		{url.Values{"current_password": {a.Password}, "new_password": {"short"}, "confirm_password": {"short"}}, "Use at least 10 characters."},
		{url.Values{"current_password": {a.Password}, "new_password": {newPW}, "confirm_password": {newPW + "x"}}, "The two new passwords differ."},
	} {
		b.post(t, "/settings/password", c.form).want(t, http.StatusUnprocessableEntity).has(t, c.msg)
	}
	old := b.sessionCookie(t)
	b.post(t, "/settings/password", url.Values{"current_password": {a.Password}, "new_password": {newPW}, "confirm_password": {newPW}}).
		redirects(t, "/settings")
	if b.sessionCookie(t) == old {
		t.Fatal("the session id did not change with the password")
	}
	b.get(t, "/settings").want(t, http.StatusOK).has(t, "Your password was changed.")
	other.get(t, "/overview").redirects(t, "/signin")
	bolt.get(t, "/overview").want(t, http.StatusOK) // another account's sessions stay

	fresh := e.browser(t)
	fresh.get(t, "/signin")
	fresh.post(t, "/signin", url.Values{"email": {a.Email}, "password": {a.Password}}).want(t, http.StatusUnauthorized)
	a.Password = newPW
	fresh.signIn(t, a)
}

// TestPasswordChangeKeepsTheSessionMaximum: the session a password change
// gives the browser (a new id) still ends 7 days after the sign-in, not 7
// days after the change; the change signs out the owner's other sessions.
func TestPasswordChangeKeepsTheSessionMaximum(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	o := e.account(t, "Bolt", "starter")
	b, other, bolt := e.browser(t), e.browser(t), e.browser(t)
	b.signIn(t, a)
	other.signIn(t, a)
	bolt.signIn(t, o)
	for i := 0; i < 12; i++ { // used every 11 hours: 132 hours after sign-in
		e.clock.Add(11 * time.Hour)
		b.get(t, "/settings").want(t, http.StatusOK)
		bolt.get(t, "/overview").want(t, http.StatusOK)
	}
	newPW := "a much longer passphrase"
	b.post(t, "/settings/password", url.Values{"current_password": {a.Password}, "new_password": {newPW}, "confirm_password": {newPW}}).
		redirects(t, "/settings")
	other.get(t, "/overview").redirects(t, "/signin")
	for i := 0; i < 3; i++ { // 165 hours after sign-in
		e.clock.Add(11 * time.Hour)
		b.get(t, "/overview").want(t, http.StatusOK)
	}
	e.clock.Add(4 * time.Hour) // 169 h > 7 days after sign-in, 37 h after the change
	b.get(t, "/overview").redirects(t, "/signin")
	bolt.get(t, "/overview").redirects(t, "/signin") // signed in at the same time
}

// TestSignInThrottleConcurrent: wrong passwords sent all at once are
// counted before the slow password check, so no more of them are checked
// than the bound allows, however many arrive together; the rest are
// answered 429 without a check.
func TestSignInThrottleConcurrent(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	const n = 24
	bs := make([]*browser, n)
	for i := range bs {
		bs[i] = e.browser(t)
		bs[i].get(t, "/signin")
	}
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- b.post(t, "/signin", url.Values{"email": {a.Email}, "password": {"guess " + itoa(i)}}).Status
		}()
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusUnauthorized] != 5 || count[http.StatusTooManyRequests] != n-5 {
		t.Fatalf("%d wrong passwords at once: %v; want 5 checked (401) and %d refused unchecked (429)", n, count, n-5)
	}
}
