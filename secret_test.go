package fleetmq_test

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
)

// TestNewSecret: n base62 characters, new at every call. (The draw's
// spread over the digits is checked by TestNewRESTTokenValue, whose random
// part is the same generator's.)
func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range []int{1, 16, 20, 32, 43, 64, 65, 200} {
		for range 20 {
			s := fleetmq.NewSecret(n)
			if len(s) != n {
				t.Fatalf("NewSecret(%d) = %q: %d characters", n, s, len(s))
			}
			if i := strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune(digits, r) }); i >= 0 {
				t.Fatalf("NewSecret(%d) = %q: %q is not base62", n, s, s[i])
			}
			if n >= 16 && seen[s] {
				t.Fatalf("NewSecret(%d) gave %q twice", n, s)
			}
			seen[s] = true
		}
	}
	if s := fleetmq.NewSecret(0); s != "" {
		t.Fatalf("NewSecret(0) = %q", s)
	}
}
