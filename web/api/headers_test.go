package api_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// inlineScriptRE finds a <script> element without a src: inline code.
var inlineScriptRE = regexp.MustCompile(`<script(\s[^>]*)?>`)

// TestResponsesCarrySecurityHeaders: every answer of the API, errors,
// JSON, a CSV export of a device's payload that looks like HTML, the
// OpenAPI document and the docs page with its files, tells the browser not
// to guess its type (nosniff) and not to show it in a frame of another
// site; the docs page, on the portal's origin, allows scripts from this
// server only, and has none inline.
func TestResponsesCarrySecurityHeaders(t *testing.T) {
	t.Parallel()
	e := start(t)
	tn := e.tenant(t, "Acme", "starter", []fleetmq.AddOn{fleetmq.AddOnHistoryDownload, fleetmq.AddOnMgmtREST}, "dev1")
	if err := e.Store.AppendHistory(e.ctx, []*fleetmq.Record{{AccountID: tn.ID, ClientID: "dev1", Topic: tn.topic("dev1", "state/x"),
		Class: "state", QoS: 1, Payload: []byte(`<html><script>alert(document.domain)</script>`), Received: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token, method, path string
		status              int
	}{
		{"", http.MethodGet, "/nope", http.StatusNotFound},
		{"", http.MethodGet, "/publishers", http.StatusUnauthorized},
		{tn.Token, http.MethodPut, "/publishers", http.StatusMethodNotAllowed},
		{tn.Token, http.MethodGet, "/publishers", http.StatusOK},
		{tn.Token, http.MethodGet, "/history?format=csv", http.StatusOK},
		{tn.Token, http.MethodGet, "/history?format=ndjson", http.StatusOK},
		{"", http.MethodGet, "/openapi.json", http.StatusOK},
		{"", http.MethodGet, "/docs", http.StatusOK},
		{"", http.MethodGet, "/docs/", http.StatusOK},
		{"", http.MethodGet, "/docs/swagger-ui-bundle.js", http.StatusOK},
	} {
		r := e.req(t, c.token, c.method, c.path, nil)
		if r.Status != c.status {
			t.Fatalf("%s: want %d", r, c.status)
		}
		csp := r.Header.Get("Content-Security-Policy")
		if r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("X-Frame-Options") != "DENY" ||
			directive(csp, "frame-ancestors") != "'none'" {
			t.Errorf("%s %s: headers %v: want X-Content-Type-Options nosniff, X-Frame-Options DENY, a CSP with frame-ancestors 'none'", c.method, c.path, r.Header)
		}
		if strings.HasPrefix(c.path, "/docs") {
			if s := directive(csp, "script-src"); s != "'self'" {
				t.Errorf("%s: Content-Security-Policy %q: want script-src 'self' only", c.path, csp)
			}
			if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
				continue
			}
			for _, m := range inlineScriptRE.FindAllStringSubmatch(string(r.Body), -1) {
				if !strings.Contains(m[1], " src=") {
					t.Errorf("%s has an inline script", c.path)
				}
			}
		} else if directive(csp, "default-src") != "'none'" {
			t.Errorf("%s: Content-Security-Policy %q: want default-src 'none'", c.path, csp)
		}
	}
}

// directive returns the value of a Content-Security-Policy directive.
func directive(csp, name string) string {
	for _, d := range strings.Split(csp, ";") {
		if n, v, _ := strings.Cut(strings.TrimSpace(d), " "); n == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
