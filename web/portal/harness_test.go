package portal_test

// The harness of the portal tests: a real App (SQLite in a temp data
// directory, MQTT and HTTP on 127.0.0.1:0, a settable test clock), two
// accounts made through the control service, and browsers: HTTP clients
// with their own cookie jar that do not follow redirects, so each test
// sees every status and Set-Cookie. Owner passwords are stored with cheap
// argon2id parameters (the portal reads them from the hash), so signing in
// many times stays fast under -race.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"golang.org/x/crypto/argon2"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/apptest"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/web/portal"
)

// waitFor bounds every wait for something expected to happen.
const waitFor = 10 * time.Second

// requestTimeout bounds one request of a test browser, only against a
// hang: sign-in and password changes hash with argon2id, one check at a
// time in the process, so with parallel tests on a busy machine one
// request has waited over 10 s.
const requestTimeout = 2 * time.Minute

// t0 is where the test clock starts: 2030-03-10 12:20:00 UTC.
var t0 = time.Date(2030, 3, 10, 12, 20, 0, 0, time.UTC)

// env is a running App under test.
type env struct {
	*app.App
	clock *testkit.Clock
	ctx   context.Context
	base  string // http://127.0.0.1:port
}

// start starts an App on a temp data directory with HTTP and MQTT on
// loopback and the test clock at t0.
func start(t testing.TB, edit ...func(*app.Config)) *env {
	t.Helper()
	clk := testkit.NewClock(t0)
	cfg := apptest.Config(t, clk.Now)
	for _, e := range edit {
		e(&cfg)
	}
	a := apptest.Start(t, cfg)
	return &env{App: a, clock: clk, ctx: context.Background(), base: "http://" + a.HTTPAddr}
}

// cheapHash is an argon2id hash in control.HashPassword's format with
// small parameters.
func cheapHash(t testing.TB, pw string) string {
	t.Helper()
	salt := make([]byte, 16)
	rand.Read(salt)
	key := argon2.IDKey([]byte(pw), salt, 1, 64, 1, 32)
	enc := base64.RawStdEncoding
	h := fmt.Sprintf("$argon2id$v=%d$m=64,t=1,p=1$%s$%s", argon2.Version, enc.EncodeToString(salt), enc.EncodeToString(key))
	if ok, err := control.CheckPassword(h, pw); !ok || err != nil {
		t.Fatalf("cheap hash does not check: %v", err)
	}
	return h
}

// owner is an account and its owner's sign-in.
type owner struct {
	ID       string
	Email    string
	Password string
}

// account creates an account on plan ("" for none) with a known owner
// password.
func (e *env) account(t testing.TB, name, plan string, addOns ...fleetmq.AddOn) *owner {
	t.Helper()
	email := strings.ToLower(name) + "@example.com"
	acc, _, err := e.Service.CreateAccount(e.ctx, control.NewAccount{Name: name, OwnerEmail: email, Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{ID: acc.ID, Email: email, Password: "correct horse " + name}
	if _, err := e.Store.SetOwnerPasswordHash(e.ctx, acc.ID, cheapHash(t, o.Password)); err != nil {
		t.Fatal(err)
	}
	for _, x := range addOns {
		if err := e.Service.SetAddOn(e.ctx, acc.ID, x, true); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// browser is an HTTP client with its own cookies that does not follow
// redirects.
type browser struct {
	e    *env
	c    *http.Client
	csrf string // from the last page that had a form
}

func (e *env) browser(t testing.TB) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{e: e, c: &http.Client{Jar: jar, Timeout: requestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is a response, read whole.
type page struct {
	Method, Path string
	Status       int
	Header       http.Header
	Body         string
	Cookies      []*http.Cookie
}

func (p *page) String() string {
	b := p.Body
	if len(b) > 3000 {
		b = b[:3000] + "..."
	}
	return fmt.Sprintf("%s %s -> %d (Location %q)\n%s", p.Method, p.Path, p.Status, p.Header.Get("Location"), b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// do sends a request; headers are name, value pairs ("" value deletes).
func (b *browser) do(t testing.TB, method, path string, form url.Values, headers ...string) *page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequest(method, b.e.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", b.e.base)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			r.Header.Del(headers[i])
		} else {
			r.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := b.c.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := &page{Method: method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: string(raw), Cookies: resp.Cookies()}
	if m := csrfRE.FindStringSubmatch(p.Body); m != nil {
		b.csrf = html.UnescapeString(m[1])
	}
	return p
}

// get fetches a page.
func (b *browser) get(t testing.TB, path string) *page {
	t.Helper()
	return b.do(t, http.MethodGet, path, nil)
}

// post submits a form with the browser's current CSRF token (unless the
// form has one) and a same-origin Origin header.
func (b *browser) post(t testing.TB, path string, form url.Values, headers ...string) *page {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	return b.do(t, http.MethodPost, path, form, headers...)
}

// signIn signs the owner in and checks it worked.
func (b *browser) signIn(t testing.TB, o *owner) {
	t.Helper()
	b.get(t, "/signin")
	p := b.post(t, "/signin", url.Values{"email": {o.Email}, "password": {o.Password}})
	if p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/overview" {
		t.Fatalf("sign-in of %s: %s", o.Email, p)
	}
	b.get(t, "/overview").want(t, http.StatusOK) // picks the session's CSRF token
}

// want fails unless the page has the status.
func (p *page) want(t testing.TB, status int) *page {
	t.Helper()
	if p.Status != status {
		t.Fatalf("%s\nwant status %d", p, status)
	}
	return p
}

// redirects fails unless the page is a 303 to location.
func (p *page) redirects(t testing.TB, location string) *page {
	t.Helper()
	if p.Status != http.StatusSeeOther || p.Header.Get("Location") != location {
		t.Fatalf("%s\nwant 303 to %s", p, location)
	}
	return p
}

// contains reports whether the body contains s as markup or as text.
func (p *page) contains(s string) bool {
	return strings.Contains(p.Body, s) || strings.Contains(html.UnescapeString(p.Body), s)
}

// has fails unless the body contains every string (as markup or text).
func (p *page) has(t testing.TB, ss ...string) *page {
	t.Helper()
	for _, s := range ss {
		if !p.contains(s) {
			t.Fatalf("%s\nwant it to contain %q", p, s)
		}
	}
	return p
}

// hasNot fails if the body contains any string (as markup or text).
func (p *page) hasNot(t testing.TB, ss ...string) *page {
	t.Helper()
	for _, s := range ss {
		if p.contains(s) {
			t.Fatalf("%s\nwant it NOT to contain %q", p, s)
		}
	}
	return p
}

// element returns the first start tag with the id (e.g. `<input id="x" ...>`).
func (p *page) element(t testing.TB, id string) string {
	t.Helper()
	re := regexp.MustCompile(`<[a-z]+[^>]*\sid="` + regexp.QuoteMeta(id) + `"[^>]*>`)
	m := re.FindString(p.Body)
	if m == "" {
		t.Fatalf("%s\nno element with id %q", p, id)
	}
	return m
}

// text returns the text of the element with the id (no nested tags).
func (p *page) text(t testing.TB, id string) string {
	t.Helper()
	re := regexp.MustCompile(`<[a-z]+[^>]*\sid="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`)
	m := re.FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("%s\nno text element with id %q", p, id)
	}
	return html.UnescapeString(strings.TrimSpace(m[1]))
}

// count counts occurrences of s in the body.
func (p *page) count(s string) int { return strings.Count(p.Body, s) }

// cookie returns the Set-Cookie of a name, or nil.
func (p *page) cookie(name string) *http.Cookie {
	for _, c := range p.Cookies {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// sessionCookie returns the browser's session cookie value.
func (b *browser) sessionCookie(t testing.TB) string {
	t.Helper()
	u, _ := url.Parse(b.e.base)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == portal.SessionCookie {
			return c.Value
		}
	}
	return ""
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

func itoa(n int) string { return strconv.Itoa(n) }

// connect connects an MQTT 5 client to the App's broker.
func (e *env) connect(t testing.TB, clientID, user, pass string) *mqtttest.V5 {
	t.Helper()
	return mqtttest.DialV5(t, e.MQTTAddr, mqtttest.Login(clientID, user, pass))
}

// tryConnect connects and returns the refusal as an error.
func (e *env) tryConnect(t testing.TB, clientID, user, pass string) (*mqtttest.V5, error) {
	t.Helper()
	c, _, err := mqtttest.TryV5(t, e.MQTTAddr, mqtttest.Login(clientID, user, pass))
	return c, err
}

// publish publishes and waits for the acknowledgement (QoS 1 and 2: the
// message is stored).
func publish(t testing.TB, d *mqtttest.V5, topic string, qos byte, retain bool, payload string) {
	t.Helper()
	d.MustPublish(t, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: []byte(payload)})
}
