package fleetmq_test

import (
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// wantChecksum computes a value's checksum from the definition (docs/design.md:
// 6 base62 characters of the CRC32 IEEE of everything before them),
// independently of the package's code.
func wantChecksum(body string) string {
	c := uint64(crc32.ChecksumIEEE([]byte(body)))
	out := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		out[i] = digits[c%62]
		c /= 62
	}
	return string(out)
}

func TestNewRESTTokenValue(t *testing.T) {
	const n = 2000
	seen := map[string]bool{}
	freq := map[byte]int{}
	for range n {
		v := fleetmq.NewRESTTokenValue()
		if len(v) != 50 || !strings.HasPrefix(v, "svc_mqtt_rest_") {
			t.Fatalf("value %q: want svc_mqtt_rest_ and 36 characters (50 in all)", v)
		}
		body, sum := v[:44], v[44:]
		if sum != wantChecksum(body) {
			t.Fatalf("value %q: checksum %q, want %q", v, sum, wantChecksum(body))
		}
		for i := 14; i < 44; i++ {
			if !strings.ContainsRune(digits, rune(v[i])) {
				t.Fatalf("value %q: %q is not base62", v, v[i])
			}
			freq[v[i]]++
		}
		if !fleetmq.CheckRESTTokenFormat(v) {
			t.Fatalf("CheckRESTTokenFormat(%q) = false for a new value", v)
		}
		if p := fleetmq.RESTTokenDisplayPrefix(v); p != v[:18] {
			t.Fatalf("display prefix %q, want %q", p, v[:18])
		}
		if seen[v] {
			t.Fatalf("value %q drawn twice", v)
		}
		seen[v] = true
	}
	// 60,000 random characters: each of the 62 expected ~968 times (sd ~31).
	// A modulo bias (bytes 248-255 folded onto the first 8 digits) or a
	// missing digit would show far outside these bounds.
	for i := 0; i < len(digits); i++ {
		if c := freq[digits[i]]; c < 800 || c > 1140 {
			t.Errorf("digit %q drawn %d times in %d, want about %d", digits[i], c, n*30, n*30/62)
		}
	}
}

func TestCheckRESTTokenFormat(t *testing.T) {
	v := fleetmq.NewRESTTokenValue()
	if !fleetmq.CheckRESTTokenFormat(v) {
		t.Fatalf("CheckRESTTokenFormat(%q) = false", v)
	}
	body := v[:44]
	bad := map[string]string{
		"empty":                 "",
		"prefix only":           "svc_mqtt_rest_",
		"one short":             v[:49],
		"one long":              v + "0",
		"no checksum":           body,
		"other prefix":          "svc_mqtt_resT_" + v[14:],
		"prefix upper case":     strings.ToUpper(v[:14]) + v[14:],
		"leading space":         " " + v[:49],
		"trailing newline":      v[:49] + "\n",
		"hyphen in body":        fixSum(body[:20] + "-" + body[21:]),
		"underscore in body":    fixSum(body[:20] + "_" + body[21:]),
		"non-ASCII in body":     fixSum(body[:42] + "é"), // 2 bytes: length still 50
		"non-base62 checksum":   body + "00000+",
		"checksum too big":      body + "zzzzzz", // > 2^32, never a CRC32
		"MQTT password":         "Xq2mV8ZkP0aLr7TbN4cW9yHs3JdE6fGu",
		"MQTT username":         "pub-0123456789abcdef",
		"REST-prefixed garbage": "svc_mqtt_rest_" + strings.Repeat("a", 36),
	}
	for name, s := range bad {
		if fleetmq.CheckRESTTokenFormat(s) {
			t.Errorf("%s: CheckRESTTokenFormat(%q) = true", name, s)
		}
	}
	// The checksum catches every change of a single character after the
	// prefix (CRC32 detects every burst error up to 32 bits; a changed
	// checksum digit is another number), and the prefix is compared whole.
	for i := 0; i < len(v); i++ {
		for j := 0; j < len(digits); j++ {
			if digits[j] == v[i] {
				continue
			}
			w := v[:i] + string(digits[j]) + v[i+1:]
			if fleetmq.CheckRESTTokenFormat(w) {
				t.Fatalf("%q (position %d changed from %q) passes the check", w, i, v[i])
			}
		}
	}
	// Two characters swapped: also caught (a burst of at most 16 bits).
	for i := 14; i < 49; i++ {
		if v[i] == v[i+1] {
			continue
		}
		w := v[:i] + string(v[i+1]) + string(v[i]) + v[i+2:]
		if fleetmq.CheckRESTTokenFormat(w) {
			t.Fatalf("%q (positions %d and %d swapped) passes the check", w, i, i+1)
		}
	}
}

// fixSum completes a 44-byte body with its correct checksum, so that only
// the body's alphabet is wrong.
func fixSum(body string) string { return body + wantChecksum(body) }

func TestRESTTokenStates(t *testing.T) {
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name                     string
		tok                      fleetmq.RESTToken
		active, expired, revoked bool
	}{
		{"never expires", fleetmq.RESTToken{}, true, false, false},
		{"expires later", fleetmq.RESTToken{ExpiresAt: now.Add(time.Microsecond)}, true, false, false},
		{"expires now", fleetmq.RESTToken{ExpiresAt: now}, false, true, false},
		{"expired", fleetmq.RESTToken{ExpiresAt: now.Add(-time.Hour)}, false, true, false},
		{"revoked", fleetmq.RESTToken{RevokedAt: now.Add(-time.Hour)}, false, false, true},
		{"revoked later", fleetmq.RESTToken{RevokedAt: now.Add(time.Hour)}, false, false, true},
		{"revoked and expired", fleetmq.RESTToken{RevokedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)}, false, true, true},
	}
	for _, c := range cases {
		if a, e, r := c.tok.Active(now), c.tok.Expired(now), c.tok.Revoked(); a != c.active || e != c.expired || r != c.revoked {
			t.Errorf("%s: active %v expired %v revoked %v, want %v %v %v", c.name, a, e, r, c.active, c.expired, c.revoked)
		}
	}
}

func FuzzCheckRESTTokenFormat(f *testing.F) {
	v := fleetmq.NewRESTTokenValue()
	for _, s := range []string{v, v[:49] + "x", "", "svc_mqtt_rest_", "Bearer " + v, strings.Repeat("\xff", 50)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !fleetmq.CheckRESTTokenFormat(s) {
			return
		}
		if len(s) != 50 || !strings.HasPrefix(s, "svc_mqtt_rest_") || s[44:] != wantChecksum(s[:44]) {
			t.Fatalf("CheckRESTTokenFormat(%q) = true", s)
		}
		for i := 14; i < 50; i++ {
			if !strings.ContainsRune(digits, rune(s[i])) {
				t.Fatalf("CheckRESTTokenFormat(%q) = true with %q", s, s[i])
			}
		}
	})
}
