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
	"net/http"
	"sort"
	"strings"
)

// Error codes, stable across the CLI, the REST API and the portal
// (docs/design.md "REST API"). Each is registered in ErrorCodes with its
// HTTP status; a test fails on a code that is used but not registered.
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

	// The REST API's codes for requests it cannot take as HTTP requests,
	// before any rule of the domain is asked.
	CodeBadRequest           = "bad_request"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeNotAcceptable        = "not_acceptable"
	CodeRequestTooLarge      = "request_too_large"
	CodeURITooLong           = "uri_too_long"
	CodeUnsupportedMediaType = "unsupported_media_type"
)

// An ErrorCode is a registered error code: the HTTP status the REST API
// answers it with, and when it is reported.
type ErrorCode struct {
	Code    string
	Status  int
	Meaning string
}

// ErrorCodes registers every error code, in the order the REST API
// documents them (its OpenAPI document lists them from here).
var ErrorCodes = []ErrorCode{
	{CodeBadRequest, http.StatusBadRequest, "the request cannot be read: a malformed body, query string or parameter"},
	{CodeInvalidToken, http.StatusUnauthorized, "no token, or a malformed or unknown one, or its account is gone or suspended"},
	{CodeTokenRevoked, http.StatusUnauthorized, "the token was revoked"},
	{CodeTokenExpired, http.StatusUnauthorized, "the token's expiry passed"},
	{CodeAddOnRequired, http.StatusForbidden, "the account lacks the add-on the request needs"},
	{CodeBasePlanRequired, http.StatusForbidden, "the account has no base plan"},
	{CodeNotFound, http.StatusNotFound, "no such thing, or no such route"},
	{CodeMethodNotAllowed, http.StatusMethodNotAllowed, "the path exists with other methods"},
	{CodeNotAcceptable, http.StatusNotAcceptable, "no response format the Accept header allows"},
	{CodeConflict, http.StatusConflict, "a duplicate, or a limit of the plan reached"},
	{CodeRequestTooLarge, http.StatusRequestEntityTooLarge, "the body is too long"},
	{CodeURITooLong, http.StatusRequestURITooLong, "the query string is too long"},
	{CodeUnsupportedMediaType, http.StatusUnsupportedMediaType, "the body's Content-Type is not JSON"},
	{CodeValidation, http.StatusUnprocessableEntity, "fields are wrong; each is named with why"},
	{CodeRateLimited, http.StatusTooManyRequests, "over a rate limit; retry after the time given"},
	{CodeInternal, http.StatusInternalServerError, "a fault of the server"},
}

// HTTPStatus is the HTTP status of a registered code, 0 for any other.
func HTTPStatus(code string) int {
	for _, c := range ErrorCodes {
		if c.Code == code {
			return c.Status
		}
	}
	return 0
}

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
