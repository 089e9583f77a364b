// Package testkit holds the small helpers fleetmq's tests share: a
// settable clock to pass as a Now function, polling with a deadline (tests
// never sleep to synchronise), and finding the headless browser the
// browser tests drive.
package testkit

import (
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/procs"
)

// Clock is a settable clock; pass its Now where a component takes a clock.
// It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Eventually polls cond every few milliseconds until it holds, and fails
// the test naming what it waited for when within passes first.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Within(within, cond) {
		tb.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// CheckFor polls check every few milliseconds until it returns nil, and
// fails the test with the last error it returned when within passes first:
// Eventually for a wait whose failure should say what was seen last.
func CheckFor(tb testing.TB, within time.Duration, check func() error) {
	tb.Helper()
	var err error
	if !Within(within, func() bool { err = check(); return err == nil }) {
		tb.Fatalf("after %v: %v", within, err)
	}
}

// Within polls cond every few milliseconds until it holds (true) or d
// passes (false). It does not fail the test: use it to wait for something
// that may not come, such as a proof that something does not happen.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// ChromiumPath is Debian's chromium, which scripts/test.sh installs.
const ChromiumPath = "/usr/bin/chromium"

// NeedChromium skips the test when Chromium is not installed, or fails it
// when FLEETMQ_REQUIRE_TOOLS=1 (scripts/test.sh installed the tools, so a
// missing one is an error, not a reason to skip).
func NeedChromium(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		if os.Getenv("FLEETMQ_REQUIRE_TOOLS") == "1" {
			tb.Fatalf("%s: %v (FLEETMQ_REQUIRE_TOOLS=1): the browser tests need Debian's chromium; scripts/test.sh installs it", ChromiumPath, err)
		}
		tb.Skipf("%s is not installed (Debian package chromium; scripts/test.sh installs it)", ChromiumPath)
	}
}

// FreePorts returns the first of n consecutive loopback TCP ports that are
// free now, for programs that must be told a port (Mosquitto, a child
// process with several listeners). The ports lie below Linux's ephemeral
// range (32768 and up), so no outgoing connection of a concurrently running
// test can take one between this check and the program's bind; only another
// program binding an explicit port could.
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	const lo, hi = 20000, 32000
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for range 200 {
		base := lo + r.IntN(hi-lo-n)
		var held []net.Listener
		for p := base; p < base+n; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				break
			}
			held = append(held, ln)
		}
		for _, ln := range held {
			ln.Close()
		}
		if len(held) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free loopback ports between %d and %d", n, lo, hi)
	return 0
}

// NeedTools checks that the named commands are on PATH. When one is
// missing the test is skipped, unless FLEETMQ_REQUIRE_TOOLS=1 (set by
// scripts/test.sh, which installs them), where it fails.
func NeedTools(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("FLEETMQ_REQUIRE_TOOLS") == "1" {
				tb.Fatalf("%s not found (FLEETMQ_REQUIRE_TOOLS=1): %v", n, err)
			}
			tb.Skipf("%s not found (install it, or run scripts/test.sh)", n)
		}
	}
}

// ProcessCPU is the CPU time this process has used so far, user and
// system: the difference over a benchmark is what its work cost the
// machine, waits excluded.
func ProcessCPU(t testing.TB) time.Duration {
	d, err := procs.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
