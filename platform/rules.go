package platform

import (
	"strings"
)

// Topic classes: the first subpath level under {account_id}/{client_id}/.
const (
	ClassState     = "state"
	ClassEvent     = "event"
	ClassTelemetry = "telemetry"
	ClassSample    = "sample"
)

// ValidClass reports whether c is one of the four topic classes.
func ValidClass(c string) bool {
	switch c {
	case ClassState, ClassEvent, ClassTelemetry, ClassSample:
		return true
	}
	return false
}

// PlatformTopic is a topic in the platform layout.
type PlatformTopic struct {
	AccountID string
	ClientID  string
	Class     string // state, event, telemetry or sample
	Subpath   string // everything after {client_id}/, starting with the class
}

// ParsePlatformTopic splits "{account_id}/{client_id}/{class}/{rest}".
// It requires a valid class and at least one level after it.
func ParsePlatformTopic(t string) (PlatformTopic, bool) {
	acc, rest, ok := strings.Cut(t, "/")
	if !ok || acc == "" {
		return PlatformTopic{}, false
	}
	client, sub, ok := strings.Cut(rest, "/")
	if !ok || client == "" {
		return PlatformTopic{}, false
	}
	class, after, ok := strings.Cut(sub, "/")
	if !ok || after == "" || !ValidClass(class) {
		return PlatformTopic{}, false
	}
	return PlatformTopic{AccountID: acc, ClientID: client, Class: class, Subpath: sub}, true
}

// StripPrefix removes a configured topic_prefix ("legacy/site") and its
// separator from a wire topic or filter. With no prefix configured it
// returns t unchanged; with one, t must carry it.
func StripPrefix(prefix, t string) (string, bool) {
	if prefix == "" {
		return t, true
	}
	if len(t) > len(prefix) && strings.HasPrefix(t, prefix) && t[len(prefix)] == '/' {
		return t[len(prefix)+1:], true
	}
	return "", false
}

// EffectiveQoS applies the platform's QoS rules (docs/design.md "QoS rules") to a
// published QoS on a topic class. poolTake is called only when a QoS 2 on
// state/ or event/ with the add-on active needs a unit of the daily pool; it
// reports whether one was available. demoted reports a QoS 2 lowered because
// the pool was used up.
func EffectiveQoS(published byte, class string, qos2AddOn bool, poolTake func() bool) (effective byte, demoted bool) {
	if published < 2 {
		return published, false
	}
	if !qos2AddOn || (class != ClassState && class != ClassEvent) {
		return 1, false
	}
	if poolTake() {
		return 2, false
	}
	return 1, true
}
