package portal_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var (
	inputRE = regexp.MustCompile(`<(input|select|textarea)\s[^>]*>`)
	idRE    = regexp.MustCompile(`\sid="([^"]+)"`)
)

// TestMountedBesideTheAPI: the portal at "/" takes only what the other
// routes of the HTTP listener do not: health, metrics and the REST API
// keep working, unknown paths get the portal's 404 page, and portal pages
// carry their security headers and assets.
func TestMountedBesideTheAPI(t *testing.T) {
	t.Parallel()
	e := start(t)
	b := e.browser(t)
	for _, c := range []struct {
		path   string
		status int
		ctype  string
		body   string
	}{
		{"/livez", 200, "text/plain", "ok"},
		{"/readyz", 200, "text/plain", "ok"},
		{"/metrics", 200, "text/plain", "fleetmq_"},
		{"/api/v1/subscriber/openapi.json", 200, "application/vnd.oai.openapi+json", `"openapi"`},
		{"/api/v1/subscriber/docs", 200, "text/html", "swagger"},
		{"/api/v1/subscriber/nope", 404, "application/problem+json", "not_found"},
		{"/api/v1/subscriber/publishers", 401, "application/problem+json", "invalid_token"},
		{"/nope", 404, "text/html", "Page not found"},
		{"/static/portal.css", 200, "text/css", "--accent"},
		{"/static/portal.js", 200, "text/javascript", "data-copy"},
		{"/static/missing.css", 404, "text/html", "Page not found"},
		{"/signin", 200, "text/html", "Sign in to your account"},
	} {
		p := b.get(t, c.path)
		if p.Status != c.status || !strings.HasPrefix(p.Header.Get("Content-Type"), c.ctype) || !strings.Contains(strings.ToLower(p.Body), strings.ToLower(c.body)) {
			t.Fatalf("%s\nwant %d %s with %q", p, c.status, c.ctype, c.body)
		}
	}
	p := b.get(t, "/signin")
	for h, want := range map[string]string{
		"X-Frame-Options":        "DENY",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "same-origin",
	} {
		if got := p.Header.Get(h); got != want {
			t.Fatalf("%s: %q, want %q", h, got, want)
		}
	}
	if csp := p.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
		strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
	// No inline script or style anywhere (the CSP forbids them).
	if strings.Contains(p.Body, "<script>") || strings.Contains(p.Body, " style=") || strings.Contains(p.Body, "<style") || strings.Contains(p.Body, " onclick=") {
		t.Fatal("inline script or style on the sign-in page")
	}
	// Versioned assets are cached for good.
	ver := p.Body[strings.Index(p.Body, "portal.css?v=")+len("portal.css?v="):]
	ver = ver[:strings.IndexByte(ver, '"')]
	if cc := b.get(t, "/static/portal.css?v="+ver).Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
		t.Fatalf("versioned CSS Cache-Control %q", cc)
	}
}

// TestPagesHaveNoInlineCode: every signed-in page keeps to the CSP (no
// inline script, style or handlers) and labels its form controls.
func TestPagesHaveNoInlineCode(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	b := e.browser(t)
	b.signIn(t, a)
	for _, path := range []string{"/overview", "/clients", "/credentials", "/subscriptions", "/settings", "/settings/tokens"} {
		p := b.get(t, path).want(t, http.StatusOK)
		for _, bad := range []string{"<script>", " style=", "<style", " onclick=", " onsubmit="} {
			if strings.Contains(p.Body, bad) {
				t.Fatalf("%s has %q", path, bad)
			}
		}
		p.has(t, `<html lang="en">`, `href="#main"`, `aria-label="Main"`, `aria-current="page"`)
		// Every visible input, select and textarea has a label.
		for _, m := range inputRE.FindAllStringSubmatch(p.Body, -1) {
			tag := m[0]
			if strings.Contains(tag, `type="hidden"`) || strings.Contains(tag, `aria-hidden="true"`) {
				continue
			}
			id := idRE.FindStringSubmatch(tag)
			if id == nil || !strings.Contains(p.Body, `for="`+id[1]+`"`) {
				t.Fatalf("%s: control without a label: %s", path, tag)
			}
		}
	}
}
