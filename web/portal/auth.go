package portal

import (
	"context"
	"crypto/subtle"
	"net/http"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// Password rules of the owner's portal password (the control service's).
const (
	MinPasswordLen = control.MinPasswordLen // characters
	MaxPasswordLen = control.MaxPasswordLen // bytes
)

// signinData is the sign-in page.
type signinData struct {
	Token      string // the sign-in form's CSRF token (also in SigninCookie)
	Next       string
	Email      string
	Error      string
	RetryAfter time.Time // set when throttled
}

// safeNext returns s when it is a path on this site to go to after
// signing in, else "". Only printable ASCII without spaces or backslashes
// is taken: browsers drop tabs and line breaks from a URL and read "\" as
// "/", so "/\t/evil.example" or "/\\evil.example" would leave the site.
func safeNext(s string) string {
	if len(s) > 2048 || !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//") {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return ""
		}
	}
	if u, err := url.Parse(s); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return ""
	}
	return s
}

// signinToken returns the sign-in CSRF token of the browser, setting a new
// one when it has none.
func (p *Portal) signinToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(SigninCookie); err == nil && len(c.Value) == tokenLen {
		return c.Value
	}
	t := fleetmq.NewSecret(tokenLen)
	p.setCookie(w, r, SigninCookie, t, int((24 * time.Hour).Seconds()))
	return t
}

func (p *Portal) signinPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	next := safeNext(r.URL.Query().Get("next"))
	if _, err := p.session(r); err == nil {
		http.Redirect(w, r, orDefault(next, "/overview"), http.StatusSeeOther)
		return
	}
	// A sign-in needs this page's token first: make the dummy hash now,
	// so that the first unknown address costs no more than a known one.
	p.prepareDummy()
	v := &view{Title: "Sign in", Flash: p.takeFlash(w, r), Data: signinData{Token: p.signinToken(w, r), Next: next}}
	p.write(w, r, http.StatusOK, "signin", v)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// signin checks an owner's e-mail address and password. Failures are
// throttled per e-mail address and IP address and all say the same thing;
// an unknown address costs the same argon2id check as a known one. The
// owner of a suspended account is not signed in (403, saying so).
func (p *Portal) signin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !p.sameOrigin(r) {
		p.forbidden(w, r, "This form was sent from another site. Open the sign-in page and try again.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		p.errorPage(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return
	}
	ck, err := r.Cookie(SigninCookie)
	if err != nil || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostForm.Get(CSRFField))) != 1 {
		p.forbidden(w, r, "The sign-in form has expired, or cookies are blocked for this site. Open the sign-in page again; "+
			"the portal needs cookies to keep you signed in.")
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostForm.Get("email")))
	password := r.PostForm.Get("password")
	data := signinData{Token: ck.Value, Next: safeNext(r.PostForm.Get("next")), Email: email}
	now := p.deps.Now()
	pair, addr := signinKeys(email, clientIP(r))
	until, admitted := p.throttle.attempt(now, pair, addr)
	if !admitted {
		secs := int(until.Sub(now).Seconds()) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		data.RetryAfter = until.UTC()
		data.Error = "Too many failed sign-in attempts."
		p.write(w, r, http.StatusTooManyRequests, "signin", &view{Title: "Sign in", Now: now.UTC(), Data: data})
		return
	}
	accountID, ok, err := p.checkOwner(r.Context(), email, password)
	if err != nil {
		p.throttle.forgive(now, pair, addr)
		p.serverError(w, r, err)
		return
	}
	if !ok { // already counted by attempt
		data.Error = "Wrong e-mail address or password."
		p.write(w, r, http.StatusUnauthorized, "signin", &view{Title: "Sign in", Data: data})
		return
	}
	p.throttle.succeeded(now, pair, addr)
	// The password is right: only now may the page say the account is
	// suspended (a stranger learns nothing from it).
	acc, err := p.deps.Store.Account(r.Context(), accountID)
	if err != nil {
		p.serverError(w, r, err)
		return
	}
	if acc.Suspended {
		data.Error = suspendedText
		p.write(w, r, http.StatusForbidden, "signin", &view{Title: "Sign in", Data: data})
		return
	}
	if old, err := p.session(r); err == nil {
		p.deps.Store.DeletePortalSession(r.Context(), old.IDHash)
	}
	if err := p.newSession(w, r, accountID, time.Time{}); err != nil {
		p.serverError(w, r, err)
		return
	}
	// Sweep every account's expired sessions now and then: at sign-in.
	if _, err := p.deps.Store.DeleteStalePortalSessions(r.Context(), now.Add(-p.idleLimit()), now.Add(-p.opts.SessionMax)); err != nil {
		p.deps.Logger.Warn("portal: delete expired sessions", "error", err)
	}
	http.Redirect(w, r, orDefault(data.Next, "/overview"), http.StatusSeeOther)
}

// checkOwner checks an owner's password and returns the account. An
// unknown or malformed address is checked against a dummy hash, so it
// takes as long as a wrong password. The store query and the check run in
// the check slot, one sign-in at a time.
func (p *Portal) checkOwner(ctx context.Context, email, password string) (string, bool, error) {
	release, err := p.takeCheck(ctx)
	if err != nil {
		return "", false, err
	}
	defer release()
	accountID, hash := "", ""
	if a, err := mail.ParseAddress(email); err == nil && a.Address == email && len(password) <= MaxPasswordLen {
		accountID, hash, err = p.deps.Store.OwnerPasswordHash(ctx, email)
		if err != nil && fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
			return "", false, err
		}
	}
	if len(password) > MaxPasswordLen {
		password = password[:MaxPasswordLen]
	}
	known := hash != ""
	if !known {
		hash = p.dummy()
	}
	return accountID, p.checkPassword(hash, password) && known, nil
}

// takeCheck waits for the process's one check slot (p.checks). A
// sign-in's store query and argon2id check, a password change's check and
// the making of the dummy hash each run in it, so a burst of sign-ins
// waits here, one at a time, instead of taking the cores and memory the
// brokers need (each check holds a core and 19 MiB) and opening store
// connections the platform needs (on PostgreSQL, a new server process
// each). The returned func gives the slot back. (It once ran a garbage
// collection first, so that each check reused the last one's 19 MiB; but
// a stranger's sign-ins would then force full collections of the whole
// heap, brokers' sessions included, at the throttle's pace: a burst's
// transient memory is the cheaper price.)
func (p *Portal) takeCheck(ctx context.Context) (func(), error) {
	select {
	case p.checks <- struct{}{}:
		return func() { <-p.checks }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// prepareDummy makes the dummy hash in the background, in the check slot,
// unless it was started before.
func (p *Portal) prepareDummy() {
	if !p.dummyStarted.CompareAndSwap(false, true) {
		return
	}
	go func() {
		release, _ := p.takeCheck(context.Background())
		defer release()
		p.dummy()
	}()
}

// dummy returns a hash with the parameters of real ones, made once.
// Callers hold the check slot.
func (p *Portal) dummy() string {
	p.dummyOnce.Do(func() {
		h, err := p.hashPassword(fleetmq.NewSecret(32))
		if err != nil {
			panic("portal: dummy password hash: " + err.Error())
		}
		p.dummyHash = h
	})
	return p.dummyHash
}

// checkPassword runs an argon2id check; callers hold the check slot.
func (p *Portal) checkPassword(hash, password string) bool {
	ok, err := p.verifyPassword(hash, password)
	if err != nil {
		// A stored hash this portal cannot read signs no one in.
		p.deps.Logger.Error("portal: owner password hash", "error", err)
		return false
	}
	return ok
}

// signout ends the session on the server and in the browser.
func (p *Portal) signout(c *call) {
	if err := p.deps.Store.DeletePortalSession(c.ctx, c.sess.IDHash); err != nil {
		c.fail(err)
		return
	}
	p.clearCookie(c.w, c.r, SessionCookie)
	c.setFlash("success", "You have signed out.")
	c.redirect("/signin")
}

// checkCurrent checks an owner's current password, in the check slot.
func (p *Portal) checkCurrent(ctx context.Context, email, password string) (bool, error) {
	release, err := p.takeCheck(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	_, hash, err := p.deps.Store.OwnerPasswordHash(ctx, email)
	if err != nil {
		return false, err
	}
	return p.checkPassword(hash, password), nil
}

// settingsData is the Profile page.
type settingsData struct {
	PasswordRules string
}

func (p *Portal) settings(c *call) {
	c.render(http.StatusOK, "settings", "Settings", "settings", "profile", settingsData{PasswordRules: passwordRules()})
}

func passwordRules() string {
	return "At least " + strconv.Itoa(MinPasswordLen) + " characters. A long passphrase is best."
}

// changePassword sets a new owner password after checking the current
// one. Every other session of the account is signed out, and this one
// gets a new id (its maximum still counts from its sign-in).
func (p *Portal) changePassword(c *call) {
	f := c.r.PostForm
	cur, next, confirm := f.Get("current_password"), f.Get("new_password"), f.Get("confirm_password")
	errs := map[string]string{}
	switch n := utf8.RuneCountInString(next); {
	case n < MinPasswordLen:
		errs["new_password"] = "Use at least " + strconv.Itoa(MinPasswordLen) + " characters."
	case len(next) > MaxPasswordLen:
		errs["new_password"] = "Use at most " + strconv.Itoa(MaxPasswordLen) + " bytes."
	}
	if confirm != next {
		errs["confirm_password"] = "The two new passwords differ."
	}
	now := c.p.deps.Now()
	key := "p\x00" + c.acc.ID + "\x00" + clientIP(c.r)
	free, admitted := p.throttle.attempt(now, key) // counted before the slow check
	if !admitted {
		errs = map[string]string{"current_password": "Too many wrong attempts. Try again " + until(c.now, free) + "."}
		c.renderForm(http.StatusTooManyRequests, "settings", "Settings", "settings", "profile", settingsData{PasswordRules: passwordRules()}, nil, errs)
		return
	}
	ok, err := p.checkCurrent(c.ctx, c.acc.OwnerEmail, cur)
	if err != nil {
		p.throttle.forgive(now, key)
		c.fail(err)
		return
	}
	if ok {
		p.throttle.succeeded(now, key)
	} else {
		errs["current_password"] = "This is not your current password."
	}
	if len(errs) > 0 {
		c.renderForm(http.StatusUnprocessableEntity, "settings", "Settings", "settings", "profile", settingsData{PasswordRules: passwordRules()}, nil, errs)
		return
	}
	// The control service stores the hash and ends every session of the
	// account, this one too: it gets a new one below, with a new id but
	// the old one's sign-in time, so the change does not make it last
	// longer than the sign-in allowed.
	if _, err := p.deps.Service.SetOwnerPassword(c.ctx, c.acc.ID, next); err != nil {
		c.fail(err)
		return
	}
	if err := p.newSession(c.w, c.r, c.acc.ID, c.sess.CreatedAt); err != nil {
		c.fail(err)
		return
	}
	c.setFlash("success", "Your password was changed. Other browsers signed in to this account were signed out.")
	c.redirect("/settings")
}
