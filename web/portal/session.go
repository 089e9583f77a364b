package portal

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

// Cookies of the portal.
const (
	// SessionCookie holds the session id (tokenLen random base62
	// characters).
	SessionCookie = "fleetmq_session"
	// SigninCookie holds the sign-in form's CSRF token (before a session
	// exists).
	SigninCookie = "fleetmq_signin"
	// flashCookie carries a one-time message across a redirect.
	flashCookie = "fleetmq_flash"
	// CSRFField is the hidden form field of every POST.
	CSRFField = "csrf"
)

// touchEvery is how stale a session's last-seen time may get before a
// request writes it again. A request less than this after the stored
// time is not written, so the idle expiry counts from the stored time
// plus this (idleLimit): a session never ends before SessionIdle of real
// non-use, and at most touchEvery after.
const touchEvery = time.Minute

// idleLimit is how far behind now a session's stored last-seen time may
// be before the session has been idle for SessionIdle.
func (p *Portal) idleLimit() time.Duration { return p.opts.SessionIdle + touchEvery }

// maxFormBytes bounds a form body.
const maxFormBytes = 64 << 10

// errNoSession means the request has no valid session.
var errNoSession = errors.New("no session")

// tokenLen is the length of a session id or a sign-in CSRF token
// (fleetmq.NewSecret): 256 bits of entropy.
const tokenLen = 43

// csrfOf derives a session's CSRF token from its id: the store keeps only
// the id's hash, so the token cannot be read from the database either.
func csrfOf(sessionID string) string {
	m := hmac.New(sha256.New, []byte(sessionID))
	m.Write([]byte("fleetmq portal csrf v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// secure reports whether cookies of r's response are marked Secure.
func (p *Portal) secure(r *http.Request) bool { return p.opts.SecureCookies || r.TLS != nil }

func (p *Portal) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: p.secure(r), SameSite: http.SameSiteLaxMode})
}

func (p *Portal) clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	p.setCookie(w, r, name, "", -1)
}

// sessionState is a request's valid session.
type sessionState struct {
	id string // the cookie's value
	*fleetmq.PortalSession
}

// session returns the request's valid session. An expired one is deleted.
func (p *Portal) session(r *http.Request) (*sessionState, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || len(c.Value) < 40 || len(c.Value) > 64 {
		return nil, errNoSession
	}
	ps, err := p.deps.Store.PortalSession(r.Context(), fleetmq.HashSecret(c.Value))
	if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	now := p.deps.Now()
	if !now.Before(ps.LastSeenAt.Add(p.idleLimit())) || !now.Before(ps.CreatedAt.Add(p.opts.SessionMax)) {
		p.deps.Store.DeletePortalSession(r.Context(), ps.IDHash)
		return nil, errNoSession
	}
	if now.Sub(ps.LastSeenAt) >= touchEvery {
		if err := p.deps.Store.TouchPortalSession(r.Context(), ps.IDHash, now); err != nil {
			return nil, err
		}
		ps.LastSeenAt = now
	}
	return &sessionState{id: c.Value, PortalSession: ps}, nil
}

// newSession signs the account in: a new session and its cookie. A
// session that replaces one (a password change gives it a new id) keeps
// signedIn, the time of its sign-in, from which the session maximum
// counts; zero for a sign-in now.
func (p *Portal) newSession(w http.ResponseWriter, r *http.Request, accountID string, signedIn time.Time) error {
	id := fleetmq.NewSecret(tokenLen)
	now := p.deps.Now().UTC().Truncate(time.Microsecond)
	if signedIn.IsZero() {
		signedIn = now
	}
	ps := &fleetmq.PortalSession{IDHash: fleetmq.HashSecret(id), AccountID: accountID, CreatedAt: signedIn, LastSeenAt: now}
	if err := p.deps.Store.CreatePortalSession(r.Context(), ps); err != nil {
		return err
	}
	// A session cookie (no Max-Age): the server ends the session.
	p.setCookie(w, r, SessionCookie, id, 0)
	return nil
}

// call is one authenticated request.
type call struct {
	p     *Portal
	w     http.ResponseWriter
	r     *http.Request
	ctx   context.Context
	sess  *sessionState
	acc   *fleetmq.Account
	plan  *fleetmq.Plan // nil without a base plan
	csrf  string
	now   time.Time
	flash *flash
}

// suspendedText tells the owner of a suspended account why the portal
// does not let them in.
const suspendedText = "This account is suspended: it cannot be used in the portal until your operator resumes it."

// authed wraps a handler that needs a signed-in owner. Without a valid
// session a GET goes to the sign-in page (and back after it), a POST too;
// a POST must come from the portal's origin and carry the session's CSRF
// token (403 otherwise). The session of a suspended account is ended, and
// the browser sent to the sign-in page, which says why.
func (p *Portal) authed(h func(*call)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s, err := p.session(r)
		if err != nil {
			if !errors.Is(err, errNoSession) {
				p.serverError(w, r, err)
				return
			}
			p.clearCookie(w, r, SessionCookie)
			next := ""
			if r.Method == http.MethodGet {
				next = r.URL.RequestURI()
			}
			target := "/signin"
			if next != "" && next != "/overview" {
				target += "?next=" + url.QueryEscape(next)
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		c := &call{p: p, w: w, r: r, ctx: r.Context(), sess: s, csrf: csrfOf(s.id), now: p.deps.Now().UTC()}
		if r.Method == http.MethodPost {
			if !p.sameOrigin(r) {
				p.forbidden(w, r, "This form was sent from another site. Reload the page and try again.")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil {
				p.errorPage(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
				return
			}
			if got := r.PostForm.Get(CSRFField); subtle.ConstantTimeCompare([]byte(got), []byte(c.csrf)) != 1 {
				p.forbidden(w, r, "The form has expired or did not come from this portal. Reload the page and try again.")
				return
			}
		}
		c.acc, err = p.deps.Store.Account(c.ctx, s.AccountID)
		if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
			p.deps.Store.DeletePortalSession(c.ctx, s.IDHash)
			p.clearCookie(w, r, SessionCookie)
			http.Redirect(w, r, "/signin", http.StatusSeeOther)
			return
		}
		if err != nil {
			p.serverError(w, r, err)
			return
		}
		if c.acc.Suspended {
			// Suspended since this session signed in: it ends here, and
			// nothing the request asked for is done.
			p.deps.Store.DeletePortalSession(c.ctx, s.IDHash)
			p.clearCookie(w, r, SessionCookie)
			p.setFlashCookie(w, r, "error", suspendedText)
			http.Redirect(w, r, "/signin", http.StatusSeeOther)
			return
		}
		if c.acc.Plan != "" {
			if c.plan, err = p.deps.Store.Plan(c.ctx, c.acc.Plan); err != nil {
				p.serverError(w, r, err)
				return
			}
		}
		c.flash = p.takeFlash(w, r)
		h(c)
	})
}

// sameOrigin reports whether a POST comes from the portal's own pages: a
// browser's Sec-Fetch-Site, Origin or (without Origin) Referer must name
// this host. A request with none of them (not a browser) passes on to the
// CSRF token check.
func (p *Portal) sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		return sameHost(o, r.Host)
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		return sameHost(ref, r.Host)
	}
	return true
}

// sameHost reports whether the http(s) URL u is on host (host[:port]).
func sameHost(u, host string) bool {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") {
		return false
	}
	return strings.EqualFold(pu.Host, host)
}

// flash is a one-time message shown on the next page.
type flash struct {
	Kind string // "success" or "error"
	Text string
}

// setFlash sets the message the next page shows.
func (c *call) setFlash(kind, text string) {
	c.p.setFlashCookie(c.w, c.r, kind, text)
}

func (p *Portal) setFlashCookie(w http.ResponseWriter, r *http.Request, kind, text string) {
	p.setCookie(w, r, flashCookie, base64.RawURLEncoding.EncodeToString([]byte(kind+"\n"+text)), 60)
}

// takeFlash reads and clears the flash message.
func (p *Portal) takeFlash(w http.ResponseWriter, r *http.Request) *flash {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	p.clearCookie(w, r, flashCookie)
	b, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil {
		return nil
	}
	kind, text, ok := strings.Cut(string(b), "\n")
	if !ok || (kind != "success" && kind != "error") || len(text) > 500 {
		return nil
	}
	return &flash{Kind: kind, Text: text}
}

// redirect ends a successful POST: 303 to a page.
func (c *call) redirect(path string) { http.Redirect(c.w, c.r, path, http.StatusSeeOther) }
