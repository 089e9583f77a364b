// Package fleetmq holds the platform's domain: accounts and their plans
// and add-ons, MQTT clients, credentials, vendor layouts and usage, the
// store interfaces that keep them, and the error codes every interface
// (CLI, REST API, portal) reports. It also holds the words the other
// packages share: the topic classes and the platform topic
// {account_id}/{client_id}/{class}/..., vendor layouts compiled and their
// one lookup (LayoutIndex.Match), a plan's catch-up bound, catalog names,
// and generated secrets. It uses the standard library only; sqlstore
// implements the stores, platform applies the rules in the broker, and
// control is the service the CLI, REST API and portal call.
package fleetmq

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Error codes, stable across the CLI, the REST API and the portal
// (docs/design.md "REST API").
const (
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeValidation       = "validation_failed"
	CodeBasePlanRequired = "base_plan_required"
	CodeAddOnRequired    = "addon_required"
	CodeInvalidToken     = "invalid_token" // REST: missing, malformed or unknown token
	CodeTokenExpired     = "token_expired"
	CodeTokenRevoked     = "token_revoked"
	CodeRateLimited      = "rate_limited"
	CodeInternal         = "internal"
)

// Error is a domain error with a stable code. Fields holds field-level
// messages for validation errors; AddOn names the missing add-on.
type Error struct {
	Code    string
	Message string
	Fields  map[string]string
	AddOn   string
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return e.Message
	}
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(e.Message)
	for i, k := range keys {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", k, e.Fields[k])
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotFound) and friends match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotFound   = &Error{Code: CodeNotFound}
	ErrConflict   = &Error{Code: CodeConflict}
	ErrValidation = &Error{Code: CodeValidation}
)

// NotFound reports a missing thing ("account", "client", ...).
func NotFound(what, id string) error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf("%s %q not found", what, id)}
}

// Conflictf reports a state conflict (a duplicate, a limit reached).
func Conflictf(format string, args ...any) error {
	return &Error{Code: CodeConflict, Message: fmt.Sprintf(format, args...)}
}

// BasePlanRequired reports an action the account cannot take without a
// base plan; action reads "registering MQTT clients", say.
func BasePlanRequired(action string) error {
	return &Error{Code: CodeBasePlanRequired, Message: action + " needs a base plan"}
}

// Invalid reports field-level validation failures.
func Invalid(fields map[string]string) error {
	return &Error{Code: CodeValidation, Message: "validation failed", Fields: fields}
}

// CodeOf returns the code of a domain error, or "" for other errors.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
