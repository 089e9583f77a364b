package portal_test

// End-to-end tests of the portal in headless Chromium (Debian's chromium,
// driven with chromedp) against a real App: the browser does every step
// as a user would (it types into fields found by their label, clicks
// buttons and links found by their text, confirms in the dialog) and the
// tests assert on what the page shows. Waits poll with deadlines; nothing
// sleeps.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/browsertest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// stepTimeout bounds one browser step (a page load, a wait for text),
// only against a hang: a step that signs in or changes the password waits
// for argon2id, which on a busy machine under -race has taken over 15 s
// (see requestTimeout).
const stepTimeout = requestTimeout

// tab is a headless Chromium with one tab on the App, at a desktop size
// (1280x800) until told otherwise. Each tab is a fresh browser profile, so
// it has its own cookies.
type tab struct {
	t   *testing.T
	e   *env
	ctx context.Context
}

// chrome starts Chromium for the test; it is closed when the test ends.
func (e *env) chrome(t *testing.T) *tab {
	t.Helper()
	ctx := browsertest.Start(t, 1280, 800,
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-color-profile", "srgb"))
	b := &tab{t: t, e: e, ctx: ctx}
	b.do("set the desktop viewport", chromedp.EmulateViewport(1280, 800))
	return b
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fail reports a failed step with what the page shows: its address, its
// text, and a screenshot kept in the temp directory.
func (b *tab) fail(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err == nil {
		b.t.Logf("the page at the failure: %s", loc)
	}
	if txt, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`)); err == nil {
		b.t.Logf("its text:\n%.4000s", txt)
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		f := filepath.Join(os.TempDir(), "fleetmq-"+strings.ReplaceAll(b.t.Name(), "/", "-")+"-failure.png") // kept after the test
		if os.WriteFile(f, png, 0o644) == nil {
			b.t.Logf("its screenshot: %s", f)
		}
	}
	b.t.Fatalf("%s: %v", what, err)
}

// do runs steps within stepTimeout.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

// stale reports whether err means the page changed under a script: an
// execution context that a page load has just replaced. chromedp learns of
// the new context from an event, which can come after the load event.
func stale(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "Cannot find context with specified id") ||
		strings.Contains(err.Error(), "Execution context was destroyed"))
}

// read runs an action that reads the page (it has no effect, so it may
// run again) within stepTimeout, again while the page's context is stale.
func read[T any](b *tab, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	for {
		v, err := chromedp.Run(ctx, a)
		if err == nil {
			return v
		}
		if !stale(err) || ctx.Err() != nil {
			b.fail(what, err)
		}
	}
}

// eval evaluates a JavaScript expression and returns its value.
func eval[T any](b *tab, what, expr string) T {
	b.t.Helper()
	return read(b, what, chromedp.Evaluate[T](expr))
}

// poll waits until the JavaScript expression is truthy and returns it.
func poll[T any](b *tab, what, expr string) T {
	b.t.Helper()
	return read(b, what, chromedp.Poll[T](expr, chromedp.WithPollingTimeout(stepTimeout-time.Second)))
}

// load runs steps that start a page load (a navigation, a click on a link
// or a submit button), waits for the page and returns its HTTP status.
func (b *tab) load(what string, steps ...chromedp.Action[chromedp.Void]) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.fail(what, err)
	}
	if resp == nil {
		b.fail(what, fmt.Errorf("no response"))
	}
	// The steps that follow run in the new page's context.
	poll[bool](b, what+": wait for the page", `document.readyState === "complete"`)
	return resp.Status
}

// open navigates to a path of the portal and returns the status.
func (b *tab) open(path string) int64 {
	b.t.Helper()
	return b.load("open "+path, chromedp.Navigate(b.e.base+path))
}

// path is the path (and query) of the page shown.
func (b *tab) path() string {
	b.t.Helper()
	return eval[string](b, "read the location", `location.pathname + location.search`)
}

// wantPath fails unless the page shown is at path.
func (b *tab) wantPath(path string) {
	b.t.Helper()
	if got := b.path(); got != path {
		b.fail("the page's address", fmt.Errorf("at %s, want %s", got, path))
	}
}

// clickable finds a visible button, link or summary whose text is text
// (within the element matched by scope, "" for the page).
func clickable(scope, text string) chromedp.JSPath {
	root := "document"
	if scope != "" {
		root = "document.querySelector(" + js(scope) + ")"
	}
	return chromedp.JSPath(`(() => { const r = ` + root + `; if (!r) return null;
		return [...r.querySelectorAll("button, a, summary, input[type=submit]")].find(e =>
			e.checkVisibility({visibilityProperty: true}) && (e.value || e.textContent).replace(/\s+/g, " ").trim() === ` + js(text) + `) || null; })()`)
}

// click clicks the button, link or summary with the text (no page load).
func (b *tab) click(scope, text string) {
	b.t.Helper()
	b.do("click "+text, chromedp.Click(clickable(scope, text), chromedp.NodeVisible))
}

// press clicks the button or link with the text, waits for the page it
// loads and returns its status.
func (b *tab) press(scope, text string) int64 {
	b.t.Helper()
	return b.load("press "+text, chromedp.Click(clickable(scope, text), chromedp.NodeVisible))
}

// control returns the id of the visible form control labelled label (the
// label's text without its "optional" note), waiting for it to show. A
// control in a closed <details> is not visible.
func (b *tab) control(label string) string {
	b.t.Helper()
	return poll[string](b, "find the field labelled "+label, `(() => {
		for (const l of document.querySelectorAll("label")) {
			const c = l.control;
			if (!c || !c.checkVisibility({visibilityProperty: true})) continue;
			const text = [...l.childNodes].filter(n => !(n.classList && n.classList.contains("optional")))
				.map(n => n.textContent).join("").replace(/\s+/g, " ").trim();
			if (text === `+js(label)+`) return c.id;
		}
		return "";
	})()`)
}

// fill types value into the field labelled label, replacing its value.
func (b *tab) fill(label, value string) {
	b.t.Helper()
	id := b.control(label)
	eval[chromedp.Void](b, "clear "+label, `document.getElementById(`+js(id)+`).value = ""`)
	b.do("type into "+label, chromedp.SendKeys(chromedp.ID(id), value))
	if got := eval[string](b, "read "+label, `document.getElementById(`+js(id)+`).value`); got != value {
		b.fail("type into "+label, fmt.Errorf("the field has %q, want %q", got, value))
	}
}

// choose picks the option whose text starts with option in the select
// labelled label.
func (b *tab) choose(label, option string) {
	b.t.Helper()
	id := b.control(label)
	ok := eval[bool](b, "choose "+option, `(() => { const s = document.getElementById(`+js(id)+`);
		const o = [...s.options].find(o => o.textContent.trim().startsWith(`+js(option)+`));
		if (!o) return false; s.value = o.value; s.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`)
	if !ok {
		b.fail("choose "+option, fmt.Errorf("the select labelled %q has no such option", label))
	}
}

// setChecked ticks or unticks the checkbox labelled label by clicking it.
func (b *tab) setChecked(label string, on bool) {
	b.t.Helper()
	id := b.control(label)
	if b.checked(id) != on {
		b.do("click "+label, chromedp.Click(chromedp.ID(id), chromedp.NodeVisible))
	}
	if b.checked(id) != on {
		b.fail("tick "+label, fmt.Errorf("the checkbox did not change"))
	}
}

func (b *tab) checked(id string) bool {
	b.t.Helper()
	return eval[bool](b, "read checkbox "+id, `document.getElementById(`+js(id)+`).checked`)
}

// text returns the visible text of the element matched by sel, waiting for it.
func (b *tab) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(poll[string](b, "read "+sel, `(() => { const e = document.querySelector(`+js(sel)+`);
		return e ? (e.innerText.trim() || " ") : ""; })()`))
}

// has fails unless the element matched by sel shows every string (waiting
// for the element, not for its text: the page is loaded already).
func (b *tab) has(sel string, want ...string) string {
	b.t.Helper()
	got := b.text(sel)
	for _, w := range want {
		if !strings.Contains(got, w) {
			b.fail("the text of "+sel, fmt.Errorf("%q does not contain %q", got, w))
		}
	}
	return got
}

// hasNot fails if the element matched by sel shows any of the strings.
func (b *tab) hasNot(sel string, bad ...string) {
	b.t.Helper()
	got := b.text(sel)
	for _, w := range bad {
		if strings.Contains(got, w) {
			b.fail("the text of "+sel, fmt.Errorf("%q contains %q", got, w))
		}
	}
}

// html is the page's whole markup.
func (b *tab) html() string {
	b.t.Helper()
	return eval[string](b, "read the page's HTML", `document.documentElement.outerHTML`)
}

// reloadUntil reloads the page until the element matched by sel shows
// want, or the deadline passes.
func (b *tab) reloadUntil(what, sel, want string) {
	b.t.Helper()
	var got string
	if !testkit.Within(waitFor, func() bool {
		b.load("reload", chromedp.Reload())
		got = eval[string](b, "read "+sel, `(() => { const e = document.querySelector(`+js(sel)+`); return e ? e.innerText : ""; })()`)
		return strings.Contains(got, want)
	}) {
		b.fail(what, fmt.Errorf("%s shows %q, want %q", sel, got, want))
	}
}

// signIn signs the owner in through the sign-in form.
func (b *tab) signIn(o *owner) {
	b.t.Helper()
	if st := b.open("/signin"); st != http.StatusOK {
		b.fail("open the sign-in page", fmt.Errorf("status %d", st))
	}
	b.fill("E-mail address", o.Email)
	b.fill("Password", o.Password)
	if st := b.press("", "Sign in"); st != http.StatusOK {
		b.fail("sign in", fmt.Errorf("status %d", st))
	}
	b.wantPath("/overview")
	b.has("h1", "Overview")
}

// api calls the subscriber REST API with a bearer token and returns the
// status and the problem's code ("" on success).
func (e *env) api(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(method, e.base+"/api/v1/subscriber"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p struct {
		Code string `json:"code"`
	}
	if resp.StatusCode >= 400 {
		json.Unmarshal(raw, &p)
	}
	return resp.StatusCode, p.Code
}

// apiAnswers polls the API until a call answers status and code (the
// token index follows the store within a reload interval).
func (e *env) apiAnswers(t *testing.T, path, token string, status int, code string) {
	t.Helper()
	testkit.CheckFor(t, waitFor, func() error {
		if st, c := e.api(t, http.MethodGet, path, token); st != status || c != code {
			return fmt.Errorf("GET %s: %d %q, want %d %q", path, st, c, status, code)
		}
		return nil
	})
}

// shot writes a screenshot of the whole page: to docs/screenshots/name.png
// when FLEETMQ_UPDATE_SCREENSHOTS=1, else to the test's temp directory.
func (b *tab) shot(name string) {
	b.t.Helper()
	b.capture(name, chromedp.FullScreenshot(100))
}

// shotTop writes a screenshot of the top of a long page, at most height
// pixels of it, like shot.
func (b *tab) shotTop(name string, height int64) {
	b.t.Helper()
	w := eval[int64](b, "read the width", `window.innerWidth`)
	h := eval[int64](b, "read the height", `window.innerHeight`)
	if full := eval[int64](b, "read the page height", `document.documentElement.scrollHeight`); full < height {
		height = full
	}
	b.do("frame "+name, chromedp.EmulateViewport(w, height))
	b.capture(name, chromedp.CaptureScreenshot())
	b.do("restore the viewport", chromedp.EmulateViewport(w, h))
}

func (b *tab) capture(name string, screenshot chromedp.Action[[]byte]) {
	b.t.Helper()
	// Nothing focused or hovered (the mouse rests on the empty middle of
	// the top bar), the page at its top.
	b.do("frame "+name, chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)`),
		chromedp.MouseEvent("mouseMoved", 640, 2))
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, screenshot)
	if err != nil {
		b.fail("screenshot "+name, err)
	}
	out := filepath.Join(b.t.TempDir(), name+".png")
	if os.Getenv("FLEETMQ_UPDATE_SCREENSHOTS") == "1" {
		out = filepath.Join("..", "..", "docs", "screenshots", name+".png")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			b.t.Fatal(err)
		}
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// fitsWidth fails if the page is wider than the viewport (it would scroll
// sideways).
func (b *tab) fitsWidth(page string) {
	b.t.Helper()
	if over := eval[int](b, "measure "+page, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 0 {
		wide := eval[string](b, "find the wide elements", `[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
			.slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + "." + [...e.classList].join(".")).join(", ")`)
		b.fail(page+" at "+b.path(), fmt.Errorf("%d px wider than the viewport: %s", over, wide))
	}
}

// tablesFit fails if a table of the page scrolls sideways in its box (on
// a desktop screen every table should fit).
func (b *tab) tablesFit(page string) {
	b.t.Helper()
	if wide := eval[string](b, "measure the tables of "+page, `[...document.querySelectorAll(".table-wrap")].filter(w => w.checkVisibility() && w.scrollWidth > w.clientWidth)
		.map(w => (w.querySelector("table") || w).getAttribute("data-testid") + ": " + (w.scrollWidth - w.clientWidth) + " px").join(", ")`); wide != "" {
		b.fail(page+" at "+b.path(), fmt.Errorf("tables wider than their box: %s", wide))
	}
}

// TestBrowserSignInAndTokens: sign-in (a wrong password first shows the
// error); a REST API token created in Settings is shown once and works,
// afterwards the list shows only its prefix (the value is nowhere in the
// page); enabling Mgmt REST API under Subscriptions opens the usage route
// to it; revoked through the confirmation dialog it is refused with
// token_revoked; a password change, sign-out, and sign-in with the new
// password.
func TestBrowserSignInAndTokens(t *testing.T) {
	testkit.NeedChromium(t)
	e := start(t)
	a := e.account(t, "Acme", "starter")
	b := e.chrome(t)

	// Sign in: "/" leads to the form; a wrong password is refused.
	if st := b.open("/"); st != http.StatusOK {
		t.Fatalf("GET / -> %d", st)
	}
	b.wantPath("/signin")
	b.has("h1", "Sign in to your account")
	b.fill("E-mail address", a.Email)
	b.fill("Password", "not the password")
	if st := b.press("", "Sign in"); st != http.StatusUnauthorized {
		t.Fatalf("a wrong password: status %d, want 401", st)
	}
	b.has(`[role="alert"]`, "Wrong e-mail address or password.")
	b.hasNot("main", "Overview")
	b.fill("Password", a.Password)
	if st := b.press("", "Sign in"); st != http.StatusOK {
		t.Fatalf("sign in: status %d", st)
	}
	b.wantPath("/overview")
	b.has(`[data-testid="account-name"]`, "Acme")

	// Settings → REST API tokens: none yet.
	b.press(`nav[aria-label="Main"]`, "Settings")
	b.wantPath("/settings")
	b.has(`[data-testid="profile"]`, a.ID, a.Email)
	b.press(`nav[aria-label="Settings"]`, "REST API tokens")
	b.wantPath("/settings/tokens")
	b.has(`[data-testid="tokens-empty"]`, "No tokens yet")
	b.has(`[data-testid="tokens-active"]`, "0 of 10 active")

	// Create one: its value is shown once.
	b.fill("Label", "nightly export")
	b.fill("Expires in (days)", "30")
	if st := b.press("#new-token", "Create token"); st != http.StatusCreated {
		t.Fatalf("create a token: status %d, want 201", st)
	}
	b.has("h1", "Your new REST API token")
	b.has(`[data-testid="token-warning"]`, "Copy the token now.", "This is the only time it is shown")
	b.has(`[data-testid="token-created"]`, "nightly export", t0.AddDate(0, 0, 30).Format("2006-01-02 15:04 UTC"), "1 of 10")
	token := b.text("#token-value")
	if !strings.HasPrefix(token, "svc_mqtt_rest_") || len(token) < 40 {
		t.Fatalf("the token shown is %q", token)
	}
	b.has(`[data-testid="token-example"]`, `curl -H "Authorization: Bearer `+token+`"`, e.base+"/api/v1/subscriber/publishers")
	// It is a live token: the API knows it, and refuses the route only
	// for the missing add-on.
	e.apiAnswers(t, "/usage", token, http.StatusForbidden, "addon_required")

	// Back on the list: only its prefix.
	b.press("", "I have copied it")
	b.wantPath("/settings/tokens")
	row := `[data-testid="token-row"]`
	prefix := strings.TrimSuffix(b.has(row+` [data-testid="token-prefix"]`, "svc_mqtt_rest_"), "…")
	if !strings.HasPrefix(token, prefix) || len(prefix) >= len(token)-16 {
		t.Fatalf("the list shows %q for the token %q: want a short prefix of it", prefix, token)
	}
	b.has(row, "nightly export", "Active", t0.AddDate(0, 0, 30).Format("Jan 2, 2006"))
	// Its use by the API call above shows as Last used.
	b.reloadUntil("the token's last use to show", row, "a few seconds ago")
	if h := b.html(); strings.Contains(h, token) || strings.Contains(h, token[len(prefix):]) {
		t.Fatal("the tokens page shows the token's value (or its secret part) after the created page")
	}
	b.has(`[data-testid="tokens-active"]`, "1 of 10 active")

	// Enable Mgmt REST API: the token gets the usage route.
	b.press(`nav[aria-label="Main"]`, "Subscriptions")
	mgmt := `[data-addon="mgmt_rest_api"]`
	b.has(mgmt+` [data-testid="addon-status"]`, "Off")
	b.press(mgmt, "Enable")
	b.has(`[data-testid="flash"]`, "Mgmt REST API is enabled.")
	b.has(mgmt+` [data-testid="addon-status"]`, "Enabled")
	e.apiAnswers(t, "/usage", token, http.StatusOK, "")

	// Revoke it through the confirmation dialog.
	b.press(`nav[aria-label="Main"]`, "Settings")
	b.press(`nav[aria-label="Settings"]`, "REST API tokens")
	b.click(row, "Revoke")
	b.has(`#confirm-dialog[open]`, "Revoke nightly export ("+prefix+"…)?", "Scripts using it stop working at once.")
	b.press("#confirm-dialog", "Revoke token")
	b.wantPath("/settings/tokens")
	b.has(`[data-testid="flash"]`, "Token nightly export ("+prefix+"…) was revoked.")
	b.has(row+` [data-testid="token-status"]`, "Revoked")
	if eval[bool](b, "look for a Revoke link", `document.querySelector('`+row+` [data-testid="revoke-token"]') !== null`) {
		t.Fatal("a revoked token still offers Revoke")
	}
	b.has(`[data-testid="tokens-active"]`, "0 of 10 active")
	e.apiAnswers(t, "/usage", token, http.StatusUnauthorized, "token_revoked")

	// Change the password, sign out, sign in with the new one.
	b.press(`nav[aria-label="Settings"]`, "Profile")
	b.fill("Current password", a.Password)
	b.fill("New password", "a much better passphrase")
	b.fill("Confirm new password", "a much better passphrase")
	b.press("#password-form", "Change password")
	b.has(`[data-testid="flash"]`, "Your password was changed.")
	b.press("", "Sign out")
	b.wantPath("/signin")
	b.has(`[data-testid="flash"]`, "You have signed out.")
	b.open("/settings/tokens")
	b.wantPath("/signin?next=%2Fsettings%2Ftokens")
	a.Password = "a much better passphrase"
	b.signIn(a)
}

// TestBrowserQoS2Checkbox: on MQTT Clients the "QoS 2 guaranteed
// delivery" checkbox is disabled, with its reason, until the Guaranteed
// delivery (QoS 2) add-on is switched on under Subscriptions; a client
// created with it ticked has Max QoS 2. Editing (label, Max QoS) and
// deleting (through the confirmation dialog) the client work too.
func TestBrowserQoS2Checkbox(t *testing.T) {
	testkit.NeedChromium(t)
	e := start(t)
	a := e.account(t, "Acme", "starter")
	b := e.chrome(t)
	b.signIn(a)

	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	b.wantPath("/clients")
	b.has(`[data-testid="clients-empty"]`, "No MQTT clients yet")
	box := b.control("QoS 2 guaranteed delivery")
	if !eval[bool](b, "read the checkbox", `document.getElementById(`+js(box)+`).disabled`) {
		t.Fatal("the QoS 2 checkbox is enabled without the add-on")
	}
	reason := b.has(`[data-testid="qos2-reason"]`, "Needs the Guaranteed delivery (QoS 2) add-on, which is off.")
	if d := eval[string](b, "read aria-describedby", `document.getElementById(`+js(box)+`).getAttribute("aria-describedby")`); d == "" ||
		b.text("#"+d) != reason {
		t.Fatalf("the disabled checkbox is not described by its reason (aria-describedby %q)", d)
	}

	// The reason links to the add-on.
	b.press(`[data-testid="qos2-reason"]`, "Enable it under Subscriptions")
	b.wantPath("/subscriptions")
	qos2 := `[data-addon="qos2"]`
	b.has(qos2, "Guaranteed delivery (QoS 2)", "Max QoS 2 on MQTT clients")
	b.press(qos2, "Enable")
	b.has(`[data-testid="flash"]`, "Guaranteed delivery (QoS 2) is enabled.")
	b.has(qos2+` [data-testid="addon-status"]`, "Enabled")

	// Back on the form the checkbox is enabled.
	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	box = b.control("QoS 2 guaranteed delivery")
	if eval[bool](b, "read the checkbox", `document.getElementById(`+js(box)+`).disabled`) {
		t.Fatal("the QoS 2 checkbox is still disabled with the add-on on")
	}
	b.has("#new-client", "Sets Max QoS to 2")
	b.fill("Client ID", "pump-17")
	b.fill("Label", "Pump 17, north field")
	b.setChecked("QoS 2 guaranteed delivery", true)
	b.press("#new-client", "Register client")
	b.wantPath("/clients/pump-17")
	b.has(`[data-testid="flash"]`, "Client pump-17 was registered.")
	b.has(`[data-testid="device-client-id"]`, "pump-17")

	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	row := `[data-client-id="pump-17"]`
	b.has(row+` [data-testid="client-max-qos"]`, "QoS 2")
	b.has(row, "Pump 17, north field", a.ID+"/pump-17", "Never connected", "No traffic today")
	if c, err := e.Store.Client(e.ctx, a.ID, "pump-17"); err != nil || c.MaxPublishQoS != 2 {
		t.Fatalf("stored client: %+v, %v", c, err)
	}

	// Edit: a new label and Max QoS 0.
	b.press(row, "Edit")
	b.wantPath("/clients/pump-17/edit")
	b.fill("Label", "Pump 17, south field")
	b.setChecked("QoS 2 guaranteed delivery", false)
	b.choose("Max publish QoS", "QoS 0")
	b.press("#edit-client-form", "Save")
	b.wantPath("/clients/pump-17")
	b.has(`[data-testid="flash"]`, "Client pump-17 was saved.")
	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	b.has(row+` [data-testid="client-max-qos"]`, "QoS 0")
	b.has(row, "Pump 17, south field")

	// Delete, confirmed in the dialog.
	b.click(row, "Delete")
	b.has(`#confirm-dialog[open]`, "Delete pump-17?")
	b.press("#confirm-dialog", "Delete client")
	b.wantPath("/clients")
	b.has(`[data-testid="flash"]`, "Client pump-17 was deleted.")
	b.has(`[data-testid="clients-empty"]`, "No MQTT clients yet")
}

// TestBrowserQoS2PoolDemotion: on a plan with a QoS 2 pool of 3, a fleet
// publisher credential created on the Credentials page (its password
// read from the page that shows it once) connects a real MQTT device,
// which publishes 5 state messages at QoS 2: the Overview reports the
// pool used up, the demotion and when the pool resets. Revoking the
// credential disconnects the device.
func TestBrowserQoS2PoolDemotion(t *testing.T) {
	testkit.NeedChromium(t)
	e := start(t)
	if err := e.Store.PutPlan(e.ctx, fleetmq.Plan{Name: "tiny", MaxPublisherClients: 5, QoS2DailyPool: 3, HistoryRetentionDays: 7}); err != nil {
		t.Fatal(err)
	}
	a := e.account(t, "Acme", "tiny", fleetmq.AddOnQoS2)
	two := 2
	if _, err := e.Service.CreateClient(e.ctx, a.ID, control.ClientInput{ClientID: "pump-1", MaxPublishQoS: &two}); err != nil {
		t.Fatal(err)
	}
	b := e.chrome(t)
	b.signIn(a)
	b.has(`[data-testid="pool-status"]`, "Normal")
	b.has(`[data-testid="pool-card"]`, "0 of 3 used")

	// A fleet publisher credential, created in the browser.
	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	b.press(`nav[aria-label="MQTT Clients"]`, "Credentials")
	b.wantPath("/credentials")
	b.click("#pub-credentials", "Create a fleet credential")
	b.fill("Label", "field fleet")
	if st := b.press("#create-pub-form", "Create"); st != http.StatusCreated {
		t.Fatalf("create a credential: status %d, want 201", st)
	}
	b.has("h1", "Fleet publisher credential created")
	b.has(`[data-testid="credential-created"]`, "Copy the password now.", "field fleet")
	user, pass := b.text("#credential-username"), b.text("#credential-password")
	if user == "" || len(pass) < 16 {
		t.Fatalf("the created page shows username %q, password %q", user, pass)
	}
	b.has(`[data-testid="created-example"]`, "mosquitto_pub", user, pass, "pump-1")
	b.press("", "I have copied it")
	b.wantPath("/credentials")
	b.has(`#pub-credentials [data-testid="credential-row"]`, user, "field fleet", "Active")
	if strings.Contains(b.html(), pass) {
		t.Fatal("the credentials page shows the password after the created page")
	}

	// A real device exhausts the pool.
	d := e.connect(t, "pump-1", user, pass)
	for i := range 5 {
		publish(t, d, a.ID+"/pump-1/state/valve", 2, false, fmt.Sprintf(`{"open":%v}`, i%2 == 0))
	}
	b.press(`nav[aria-label="Main"]`, "Overview")
	b.reloadUntil("the 5 messages to be metered", "#messages-today", "5")
	b.has("#pool-used", "3")
	b.has(`[data-testid="pool-status"]`, "Demoted")
	b.has(`[data-testid="demotion-notice"]`, "The pool is used up since", "treated as QoS 1 until the pool resets")
	b.has(`[data-testid="pool-demotions"]`, "2")
	b.has(`[data-testid="pool-resets"]`, "2030-03-11 00:00 UTC", "in 11 hours")
	b.has(`[data-testid="pool-card"]`, "3 of 3 used", "0 remaining")
	b.has(`[data-testid="qos-mix-table"]`, "QoS 1 · at least once\t2", "QoS 2 · exactly once\t3")
	b.has("#connected-clients", "1")

	// Revoking the credential ends the device's connection.
	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	b.press(`nav[aria-label="MQTT Clients"]`, "Credentials")
	b.click(`#pub-credentials [data-testid="credential-row"]`, "Revoke")
	b.has(`#confirm-dialog[open]`, "Revoke "+user+"?")
	b.press("#confirm-dialog", "Revoke")
	b.has(`[data-testid="flash"]`, user+" was revoked.")
	b.has(`#pub-credentials [data-testid="credential-row"]`, "Revoked")
	b.press(`nav[aria-label="Main"]`, "Overview")
	b.reloadUntil("the device to be disconnected", "#connected-clients", "0")
}

// TestBrowserAccountsIsolated: signed in as A, the client ids of B's
// devices in URLs give the not-found page and show nothing of B's; the
// client id both accounts use shows A's client.
func TestBrowserAccountsIsolated(t *testing.T) {
	testkit.NeedChromium(t)
	e := start(t)
	a := e.account(t, "Acme", "starter")
	bo := e.account(t, "Bolt", "starter")
	label := func(s string) *string { return &s }
	for _, c := range []struct{ acc, id, label string }{
		{a.ID, "dev1", "Acme's dev1"}, {bo.ID, "dev1", "Bolt-secret-1"}, {bo.ID, "b-only", "Bolt-secret-2"},
	} {
		if _, err := e.Service.CreateClient(e.ctx, c.acc, control.ClientInput{ClientID: c.id, Label: label(c.label)}); err != nil {
			t.Fatal(err)
		}
	}
	b := e.chrome(t)
	b.signIn(a)
	for _, path := range []string{"/clients/b-only", "/clients/b-only/edit", "/clients/b-only/delete", "/clients/" + bo.ID + "%2Fb-only"} {
		if st := b.open(path); st != http.StatusNotFound {
			t.Fatalf("GET %s as A: status %d, want 404", path, st)
		}
		b.has(`[data-testid="error-page"]`, "404", "MQTT client not found")
		b.hasNot("body", "Bolt", "b-only", bo.ID)
	}
	b.press(`[data-testid="error-page"]`, "Go to the portal")
	b.wantPath("/overview")
	b.open("/clients/dev1")
	b.has(`[data-testid="device-client-id"]`, "dev1")
	b.has("main", "Acme's dev1")
	b.hasNot("body", "Bolt")
	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	b.has(`[data-testid="clients-table"]`, "dev1", "Acme's dev1")
	b.hasNot("body", "b-only", "Bolt-secret")
}
