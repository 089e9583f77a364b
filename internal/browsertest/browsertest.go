// Package browsertest starts headless Chromium (Debian's chromium, which
// scripts/test.sh installs) for the browser tests of the REST API docs and
// the portal, driven with chromedp. The browser reaches nothing but
// 127.0.0.1: a page that needs another host fails its test.
package browsertest

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// Start starts a headless Chromium with a window of width x height and
// returns its context; the browser is closed when the test ends. Without
// Chromium the test is skipped (or fails under FLEETMQ_REQUIRE_TOOLS=1,
// see testkit.NeedChromium). extra are further allocator options.
func Start(t *testing.T, width, height int, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	testkit.NeedChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(testkit.ChromiumPath),
		chromedp.NoSandbox, // root in containers and CI
		chromedp.DisableGPU,
		chromedp.WindowSize(width, height),
		// Everything must come from the server under test: any other host
		// is unreachable.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first Do starts the browser on ctx itself: steps then run with
	// timeouts of their own, whose cancel must not end the browser.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", testkit.ChromiumPath, err)
	}
	return ctx
}
