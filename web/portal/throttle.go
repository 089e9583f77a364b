package portal

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxThrottleKeys bounds the throttle's memory: past it, keys whose
// failures have all left the window are dropped.
const maxThrottleKeys = 100_000

// throttle counts failed sign-ins per key over a sliding window.
type throttle struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	fails  map[string][]time.Time // oldest first
}

func newThrottle(max int, window time.Duration) *throttle {
	return &throttle{max: max, window: window, fails: map[string][]time.Time{}}
}

// keys of a sign-in attempt: the e-mail address from the IP address, and
// the IP address over all e-mail addresses (with a 10 times higher bound).
func signinKeys(email, ip string) (pair, addr string) {
	return "e\x00" + strings.ToLower(email) + "\x00" + ip, "i\x00" + ip
}

// limit is the bound of a key.
func (t *throttle) limit(key string) int {
	if strings.HasPrefix(key, "i\x00") {
		return t.max * 10
	}
	return t.max
}

// recent returns key's failures within the window at now (pruning the
// rest). Callers hold mu.
func (t *throttle) recent(key string, now time.Time) []time.Time {
	f := t.fails[key]
	i := 0
	for i < len(f) && !f[i].After(now.Add(-t.window)) {
		i++
	}
	f = f[i:]
	if len(f) == 0 {
		delete(t.fails, key)
		return nil
	}
	t.fails[key] = f
	return f
}

// blockedLocked returns until when a key is at its bound at now (zero:
// none is). Callers hold mu.
func (t *throttle) blockedLocked(now time.Time, keys []string) time.Time {
	var until time.Time
	for _, k := range keys {
		f := t.recent(k, now)
		if n := t.limit(k); len(f) >= n {
			// Free again when enough failures leave the window.
			if u := f[len(f)-n].Add(t.window); u.After(until) {
				until = u
			}
		}
	}
	return until
}

// attempt admits a sign-in attempt unless a key is at its bound (then it
// says until when). An admitted attempt counts as a failure at once,
// before the slow password check, so attempts sent together cannot all
// pass the check of the bound; succeeded or forgive take it back.
func (t *throttle) attempt(now time.Time, keys ...string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if until := t.blockedLocked(now, keys); !until.IsZero() {
		return until, false
	}
	t.failLocked(now, keys)
	return time.Time{}, true
}

// succeeded ends an admitted attempt that signed in: the first key's
// failures are forgotten, and the attempt no longer counts for the others.
func (t *throttle) succeeded(now time.Time, first string, others ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.fails, first)
	t.forgiveLocked(now, others)
}

// forgive takes back an admitted attempt that was not the client's
// failure (the store did not answer).
func (t *throttle) forgive(now time.Time, keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgiveLocked(now, keys)
}

func (t *throttle) forgiveLocked(now time.Time, keys []string) {
	for _, k := range keys {
		f := t.fails[k]
		for i := len(f) - 1; i >= 0; i-- {
			if f[i].Equal(now) {
				t.fails[k] = append(f[:i:i], f[i+1:]...)
				break
			}
		}
	}
}

// failLocked records a failure of every key at now. Callers hold mu.
func (t *throttle) failLocked(now time.Time, keys []string) {
	if len(t.fails) >= maxThrottleKeys {
		for k := range t.fails {
			t.recent(k, now)
		}
	}
	for _, k := range keys {
		f := t.recent(k, now)
		if len(f) >= t.limit(k)*2 {
			f = f[1:] // enough to stay blocked; keep the list bounded
		}
		t.fails[k] = append(f, now)
	}
}

// clientIP is the peer address of r (no proxy headers are trusted).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
