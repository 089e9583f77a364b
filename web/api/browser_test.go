package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/browsertest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestDocsInBrowser opens /api/v1/subscriber/docs in headless Chromium:
// Swagger UI loads from the binary (the page makes no request outside
// the server) and lists the operations; "Try it out" on GET /publishers
// without authorizing shows 401; Authorize with a pasted REST API token,
// then Execute, shows 200 with the account's clients. Nothing of it
// breaks the page's Content-Security-Policy. A screenshot of the
// authorized page is written to the test's temp directory, and to
// docs/screenshots/api-docs.png when FLEETMQ_UPDATE_SCREENSHOTS=1.
func TestDocsInBrowser(t *testing.T) {
	testkit.NeedChromium(t)
	t.Parallel()
	e := start(t)
	tn := e.tenant(t, "Docs", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	label := "Pump 17, north field"
	if _, err := e.Service.CreateClient(e.ctx, tn.ID, control.ClientInput{ClientID: "pump-17", Label: &label}); err != nil {
		t.Fatal(err)
	}

	ctx := browsertest.Start(t, 1280, 1400)

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	text := func(what, sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("%s (%s): %v", what, sel, err)
		}
		return v
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			// What the page shows, for the failure report.
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)); err == nil {
				f := filepath.Join(os.TempDir(), "fleetmq-api-docs-failure.png") // kept after the test
				os.WriteFile(f, png, 0o644)
				t.Logf("the page at the failure: %s", f)
			}
			if html, err := chromedp.Run(sctx, chromedp.Evaluate[string](`(document.querySelector('[id$="-listPublishers"]') || document.body).outerHTML`)); err == nil {
				t.Logf("the operation's HTML: %.3000s", html)
			}
			t.Fatalf("%s: %v", what, err)
		}
	}
	// The page records what its Content-Security-Policy blocks.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.cspViolations = [];
			document.addEventListener("securitypolicyviolation", e => window.cspViolations.push(e.violatedDirective + " " + e.blockedURI));`,
	}); err != nil {
		t.Fatal(err)
	}
	op := `[id$="-listPublishers"]`
	status := op + ` .live-responses-table tr.response .response-col_status`
	body := op + ` .live-responses-table tr.response .response-col_description`

	do("load the docs",
		chromedp.Navigate(e.url("/docs")),
		chromedp.WaitVisible(css(`.swagger-ui .information-container .title`)),
		chromedp.WaitVisible(css(op)),
	)
	title := text("title", `.swagger-ui .information-container .title`)
	opblocks, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".opblock").length`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(title, "fleetmq subscriber API") || opblocks != len(routes) {
		t.Fatalf("docs page: title %q, %d operations shown, want %d", title, opblocks, len(routes))
	}

	// Try it out without a token: 401.
	do("try it out without a token",
		chromedp.Click(css(op+` .opblock-summary-control`)),
		chromedp.WaitVisible(css(op+` .try-out__btn`)),
	)
	// The docs are configured with try-it-out on: the button then says
	// Cancel. Click it only when it offers to try.
	if b := text("the try-out button", op+` .try-out__btn`); strings.Contains(b, "Try it out") {
		do("try it out", chromedp.Click(css(op+` .try-out__btn`)))
	} else if !strings.Contains(b, "Cancel") {
		t.Fatalf("the try-out button says %q", b)
	}
	do("execute without a token",
		chromedp.WaitVisible(css(op+` .execute`)),
		chromedp.Click(css(op+` .execute`)),
		chromedp.WaitVisible(css(status)),
	)
	if st, b := text("status", status), text("body", body); !strings.HasPrefix(strings.TrimSpace(st), "401") || !strings.Contains(b, "invalid_token") {
		t.Fatalf("without a token the docs show status %q, body %q; want 401 invalid_token", st, b)
	}

	// Authorize with the pasted token, execute again: 200 and the client.
	do("authorize",
		chromedp.Click(css(`.swagger-ui .auth-wrapper .btn.authorize`)),
		chromedp.WaitVisible(css(`.modal-ux input`)),
		chromedp.SendKeys(css(`.modal-ux input`), tn.Token),
		chromedp.Click(css(`.modal-ux .auth-btn-wrapper .authorize`)),
		chromedp.WaitVisible(css(`.modal-ux .auth-btn-wrapper .btn-done`)),
		chromedp.Click(css(`.modal-ux .auth-btn-wrapper .btn-done`)),
		chromedp.WaitNotPresent(css(`.modal-ux`)),
	)
	do("execute authorized",
		chromedp.Click(css(op+` .execute`)),
		chromedp.Poll[chromedp.Void](`(() => { const s = document.querySelector('`+status+`');
			return s && s.textContent.trim().startsWith("200"); })()`, chromedp.WithPollingTimeout(30*time.Second)),
	)
	if st, b := text("status", status), text("body", body); !strings.HasPrefix(strings.TrimSpace(st), "200") || !strings.Contains(b, "pump-17") ||
		!strings.Contains(b, label) || !strings.Contains(b, tn.ID+"/pump-17") {
		t.Fatalf("authorized: status %q, body %q; want 200 with pump-17", st, b)
	}
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.cspViolations`)); err != nil || len(v) > 0 {
		t.Fatalf("Content-Security-Policy violations of the docs page: %q (%v)", v, err)
	}
	// The request the page sent carried the token (shown as curl).
	if curl := text("curl", op+` .curl-command`); !strings.Contains(curl, "Authorization: Bearer "+tn.Token) {
		t.Fatalf("the curl command shown does not carry the token: %q", curl)
	}

	// The screenshot: the page from its top (title, Authorize) down to the
	// response, with the token in the curl command masked.
	mask := strings.Replace(fmt.Sprintf("%q", tn.Token), tn.Token[len(fleetmq.RESTTokenPrefix):], "…", 1)
	do("frame the screenshot",
		chromedp.EmulateViewport(1280, 1760),
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('.curl-command, .curl-command *').forEach(n => {
			if (n.childNodes.length === 1 && n.firstChild.nodeType === 3) n.firstChild.textContent = n.firstChild.textContent.split(`+fmt.Sprintf("%q", tn.Token)+`).join(`+mask+`); });
			window.scrollTo(0, 0)`),
	)
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join(t.TempDir(), "api-docs.png")
	if os.Getenv("FLEETMQ_UPDATE_SCREENSHOTS") == "1" {
		out = filepath.Join("..", "..", "docs", "screenshots", "api-docs.png")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)
}
