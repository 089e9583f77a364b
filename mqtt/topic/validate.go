// Package topic validates MQTT topic names and filters, tells whether one filter covers
// another, and indexes subscriptions for matching.
//
// Names are what PUBLISH carries; filters are what SUBSCRIBE carries and may contain the
// wildcards '+' (exactly one level) and '#' (any number of trailing levels, including the
// parent level). A filter of the form "$share/{group}/{filter}" is a shared subscription:
// each matching message goes to one member of the group.
//
// Levels are separated by '/' and empty levels are real levels: "a//b" has three.
// Wildcards in the first level never match names beginning with '$' (MQTT-4.7.2-1), so
// "#" does not match "$SYS/uptime" while "$SYS/#" does.
package topic

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxLen is the longest topic name or filter MQTT can encode: a two-byte length prefix.
const MaxLen = 65535

// Sentinel errors. Validation errors wrap one of them with detail, so callers test with
// errors.Is. A shared filter whose inner filter is invalid wraps both ErrInvalidShare and
// ErrInvalidFilter.
var (
	ErrInvalidName   = errors.New("topic: invalid topic name")
	ErrInvalidFilter = errors.New("topic: invalid topic filter")
	ErrInvalidShare  = errors.New("topic: invalid shared subscription")
)

// sharePrefix starts every shared subscription filter.
const sharePrefix = "$share/"

// ValidateName reports whether name may be used as a PUBLISH topic name: non-empty, at
// most MaxLen bytes, valid UTF-8 without U+0000, and free of the wildcards '+' and '#'.
// The returned error wraps ErrInvalidName.
func ValidateName(name string) error {
	if err := checkString(name); err != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, err)
	}
	if i := strings.IndexAny(name, "+#"); i >= 0 {
		return fmt.Errorf("%w: wildcard %q at byte %d", ErrInvalidName, name[i], i)
	}
	return nil
}

// ValidateFilter reports whether filter may be used in SUBSCRIBE or UNSUBSCRIBE:
// non-empty, at most MaxLen bytes, valid UTF-8 without U+0000, '#' only as the whole
// last level and '+' only as a whole level. A "$share/..." filter is validated as
// ParseShare does. The returned error wraps ErrInvalidFilter or ErrInvalidShare.
func ValidateFilter(filter string) error {
	_, _, _, err := ParseShare(filter)
	return err
}

// ParseShare splits a shared subscription filter "$share/{group}/{filter}" into its group
// and inner filter. For a filter that does not start with "$share/" it returns
// shared=false and inner=filter. The group must be non-empty and contain no '+', '#' or
// '/'; the inner filter must be a valid, non-empty filter. err is non-nil if the filter,
// shared or not, is invalid; it wraps ErrInvalidShare for a malformed shared filter and
// ErrInvalidFilter otherwise.
func ParseShare(filter string) (group, inner string, shared bool, err error) {
	if !strings.HasPrefix(filter, sharePrefix) {
		return "", filter, false, validatePlain(filter)
	}
	if msg := checkString(filter); msg != "" {
		return "", "", true, fmt.Errorf("%w: %s", ErrInvalidShare, msg)
	}
	rest := filter[len(sharePrefix):]
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return "", "", true, fmt.Errorf("%w: no filter after the share name", ErrInvalidShare)
	}
	group, inner = rest[:slash], rest[slash+1:]
	if group == "" {
		return "", "", true, fmt.Errorf("%w: empty share name", ErrInvalidShare)
	}
	if i := strings.IndexAny(group, "+#"); i >= 0 {
		return "", "", true, fmt.Errorf("%w: share name contains %q", ErrInvalidShare, group[i])
	}
	if err := validatePlain(inner); err != nil {
		return "", "", true, fmt.Errorf("%w: %w", ErrInvalidShare, err)
	}
	return group, inner, true, nil
}

// validatePlain validates a filter without interpreting "$share/".
func validatePlain(filter string) error {
	if msg := checkString(filter); msg != "" {
		return fmt.Errorf("%w: %s", ErrInvalidFilter, msg)
	}
	for i := 0; i >= 0; {
		l, next := level(filter, i)
		if l == "#" && next >= 0 {
			return fmt.Errorf("%w: '#' is not the last level", ErrInvalidFilter)
		}
		if len(l) > 1 {
			if j := strings.IndexAny(l, "+#"); j >= 0 {
				return fmt.Errorf("%w: %q is not a whole level", ErrInvalidFilter, l[j])
			}
		}
		i = next
	}
	return nil
}

// checkString applies the rules shared by names and filters and returns what is wrong,
// or "" if nothing is.
func checkString(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxLen:
		return fmt.Sprintf("%d bytes, longer than %d", len(s), MaxLen)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains U+0000"
	}
	return ""
}

// level returns the level of s starting at byte i and the start of the next level, or
// -1 if it is the last one.
func level(s string, i int) (lvl string, next int) {
	j := strings.IndexByte(s[i:], '/')
	if j < 0 {
		return s[i:], -1
	}
	return s[i : i+j], i + j + 1
}

// ControlChar returns the first control character in s that the MQTT
// specifications let a server refuse in a topic, client identifier or user
// name: U+0001..U+001F and U+007F..U+009F (MQTT 5 §1.5.4, 3.1.1 §1.5.3;
// U+0000 is never valid). ok is false when s has none.
func ControlChar(s string) (r rune, ok bool) {
	for _, r := range s {
		if (r >= 0x01 && r <= 0x1f) || (r >= 0x7f && r <= 0x9f) {
			return r, true
		}
	}
	return 0, false
}
