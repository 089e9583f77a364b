// Package portal is the account owner's web portal: sign-in, the Overview
// (QoS mix, the daily QoS 2 pool, connected clients, drops, the last 14
// days), MQTT Clients (registered devices with their live status and
// history, fleet publisher credentials and subscriber MQTT passwords),
// Subscriptions (the base plan and the add-ons) and Settings (profile,
// password, REST API tokens).
//
// Pages are rendered on the server with html/template from files embedded
// in the binary, charts are SVG drawn on the server, and every flow works
// without JavaScript; a small script only adds copy buttons and confirm
// dialogs. Sessions are server-side (the cookie holds a random id, the
// store its SHA-256), every POST carries a per-session CSRF token and must
// come from the portal's own origin, and failed sign-ins are throttled.
//
// The account always comes from the session, never from the request: a
// client, credential or token id of another account is not found.
package portal

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/platform"
)

//go:embed templates static
var assets embed.FS

// Store is what the portal reads directly (a *sqlstore.Store is one);
// control-plane changes go through the control service.
type Store interface {
	fleetmq.ControlReader
	fleetmq.UsageStore
	fleetmq.HistoryStore
	fleetmq.PortalStore
	fleetmq.ProblemStore
}

// Deps are the parts the portal works with.
type Deps struct {
	Service *control.Service
	Store   Store
	// Policy gives the live view of publishers and the QoS 2 pools.
	Policy *platform.Policy
	Now    func() time.Time
	// Changed, when set, is called after a change made in the portal (a
	// client, credential or add-on) so the broker applies it at once
	// rather than at its next reload.
	Changed func(ctx context.Context)
	Logger  *slog.Logger
	// HistorySlots bounds the history requests each account runs at once;
	// shared with the REST API. Nil: the portal's own.
	HistorySlots *history.Slots
}

// HistoryTimeout stops the history reads of a device page.
const HistoryTimeout = 15 * time.Second

// Options tune the portal; zero values take the defaults below.
type Options struct {
	// SecureCookies marks the cookies Secure on every request, for a
	// portal served over plain HTTP behind a TLS-terminating proxy. They
	// are Secure on TLS requests anyway.
	SecureCookies bool
	// MQTTPublicAddr is the broker's address as devices and subscribers
	// reach it ("mqtt.example.com:1883"), used in the mosquitto examples.
	// Empty: the host of the portal request and port 1883.
	MQTTPublicAddr string
	// SessionIdle ends a session not used for this long. Default 12 hours.
	SessionIdle time.Duration
	// SessionMax ends a session this long after sign-in, used or not.
	// Default 7 days.
	SessionMax time.Duration
	// LoginFailures failed sign-ins of one e-mail address from one IP
	// address within LoginWindow block further attempts until the oldest
	// of them leaves the window. Defaults 5 and 15 minutes; an IP address
	// gets 10 times LoginFailures over all e-mail addresses.
	LoginFailures int
	LoginWindow   time.Duration
}

func (o *Options) defaults() {
	if o.SessionIdle <= 0 {
		o.SessionIdle = 12 * time.Hour
	}
	if o.SessionMax <= 0 {
		o.SessionMax = 7 * 24 * time.Hour
	}
	if o.LoginFailures <= 0 {
		o.LoginFailures = 5
	}
	if o.LoginWindow <= 0 {
		o.LoginWindow = 15 * time.Minute
	}
}

// Portal is the portal's HTTP handler.
type Portal struct {
	deps     Deps
	opts     Options
	mux      *http.ServeMux
	pages    map[string]*template.Template
	throttle *throttle
	// checks is the check slot (see takeCheck): one sign-in's store
	// query and argon2id check at a time.
	checks chan struct{}
	// hashPassword and verifyPassword are control's (tests count them).
	hashPassword   func(pw string) (string, error)
	verifyPassword func(hash, pw string) (bool, error)

	dummyStarted atomic.Bool
	dummyOnce    sync.Once
	dummyHash    string // compared against for unknown e-mail addresses

	// assetVersion changes with the embedded CSS and JS (cache busting).
	assetVersion string
}

// New builds the portal.
func New(d Deps, o Options) *Portal {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.HistorySlots == nil {
		d.HistorySlots = new(history.Slots)
	}
	o.defaults()
	p := &Portal{deps: d, opts: o, mux: http.NewServeMux(), throttle: newThrottle(o.LoginFailures, o.LoginWindow),
		checks: make(chan struct{}, 1), hashPassword: control.HashPassword, verifyPassword: control.CheckPassword}
	p.assetVersion = hashAssets()
	p.pages = parsePages(p.funcs())
	p.routes()
	return p
}

// route is a route of a signed-in owner.
type route struct {
	pattern string
	h       func(*call)
}

// routeTable lists every route of a signed-in owner. A POST changes
// something; each one is checked for its origin and CSRF token first.
func (p *Portal) routeTable() []route {
	return []route{
		{"POST /signout", p.signout},
		{"GET /overview", p.overview},
		{"GET /clients", p.clients},
		{"POST /clients", p.createClient},
		{"GET /clients/{id}", p.device},
		{"GET /clients/{id}/edit", p.editClientPage},
		{"POST /clients/{id}/edit", p.editClient},
		{"GET /clients/{id}/delete", p.deleteClientPage},
		{"POST /clients/{id}/delete", p.deleteClient},
		{"GET /credentials", p.credentials},
		{"POST /credentials", p.createCredential},
		{"GET /credentials/{id}/revoke", p.revokeCredentialPage},
		{"POST /credentials/{id}/revoke", p.revokeCredential},
		{"GET /subscriptions", p.subscriptions},
		{"POST /subscriptions/{addon}", p.setAddOn},
		{"GET /settings", p.settings},
		{"POST /settings/password", p.changePassword},
		{"GET /settings/tokens", p.tokens},
		{"POST /settings/tokens", p.createToken},
		{"GET /settings/tokens/{id}/revoke", p.revokeTokenPage},
		{"POST /settings/tokens/{id}/revoke", p.revokeToken},
	}
}

// routes declares every route of the portal.
func (p *Portal) routes() {
	m := p.mux
	m.HandleFunc("GET /static/{file}", p.static)
	m.HandleFunc("GET /{$}", p.root)
	m.HandleFunc("GET /signin", p.signinPage)
	m.HandleFunc("POST /signin", p.signin)
	for _, r := range p.routeTable() {
		m.Handle(r.pattern, p.authed(r.h))
	}
	m.HandleFunc("/", p.notFound)
}

// ServeHTTP serves the portal. Mounted at "/", it answers every path no
// more specific route of the surrounding mux takes.
func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	p.mux.ServeHTTP(w, r)
}

func (p *Portal) root(w http.ResponseWriter, r *http.Request) {
	if _, err := p.session(r); err == nil {
		http.Redirect(w, r, "/overview", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// static serves the embedded CSS and JavaScript.
func (p *Portal) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := fs.ReadFile(assets, "static/"+name)
	if err != nil || strings.Contains(name, "/") {
		p.notFound(w, r)
		return
	}
	switch {
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".svg"):
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	if r.URL.Query().Get("v") == p.assetVersion {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Write(b)
}

// hashAssets returns a short hash of the static files.
func hashAssets() string {
	h := sha256.New()
	fs.WalkDir(assets, "static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(assets, path)
			h.Write([]byte(path))
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// changed tells the broker about a control-plane change.
func (p *Portal) changed(ctx context.Context) {
	if p.deps.Changed != nil {
		p.deps.Changed(ctx)
	}
}
