package fleetmq

import "strings"

// Topic classes: the first subpath level under {account_id}/{client_id}/.
// A record's Class is one of them.
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
