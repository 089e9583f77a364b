package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/fleetmq/fleetmq"
)

// Problem is an RFC 9457 problem details body with a stable code (one of
// fleetmq.ErrorCodes) as an extension member. Clients branch on code, never
// on title or detail.
type Problem struct {
	Type     string `json:"type" doc:"A URI reference identifying the problem type; about:blank, the code says which problem it is." example:"about:blank"`
	Title    string `json:"title" doc:"The HTTP status phrase." example:"Forbidden"`
	Status   int    `json:"status" doc:"The HTTP status code." example:"403"`
	Detail   string `json:"detail,omitempty" doc:"What went wrong, for a human." example:"this route needs the Mgmt REST API add-on"`
	Instance string `json:"instance,omitempty" doc:"The request path." example:"/api/v1/subscriber/publishers"`
	// Code and AddOn get their enums (and Code its doc) from
	// fleetmq.ErrorCodes and fleetmq.AddOns: see TransformSchema.
	Code   string        `json:"code" example:"addon_required"`
	AddOn  string        `json:"addon,omitempty" doc:"addon_required: the add-on the route needs." example:"mgmt_rest_api"`
	Errors []*FieldError `json:"errors,omitempty" doc:"validation_failed and bad_request: what is wrong with which field."`

	headers http.Header
}

// FieldError is one invalid field of a request.
type FieldError struct {
	Location string `json:"location" doc:"Where: body.<field>, query.<name> or path.<name>." example:"body.max_publish_qos"`
	Message  string `json:"message" example:"must be 0, 1 or 2"`
	Value    any    `json:"value,omitempty" doc:"The value that was refused, when it helps."`
}

// TransformSchema implements huma.SchemaTransformer: the document lists
// the codes of fleetmq.ErrorCodes, each with its status and meaning, and
// the add-ons of fleetmq.AddOns, so neither list is written twice.
func (p *Problem) TransformSchema(r huma.Registry, s *huma.Schema) *huma.Schema {
	code := s.Properties["code"]
	var doc strings.Builder
	doc.WriteString("Stable error code:")
	code.Enum = code.Enum[:0]
	for _, c := range fleetmq.ErrorCodes {
		code.Enum = append(code.Enum, c.Code)
		fmt.Fprintf(&doc, "\n- `%s` (%d): %s", c.Code, c.Status, c.Meaning)
	}
	code.Description = doc.String()
	addOn := s.Properties["addon"]
	addOn.Enum = addOn.Enum[:0]
	for _, x := range fleetmq.AddOns {
		addOn.Enum = append(addOn.Enum, string(x))
	}
	return s
}

// Error implements error.
func (p *Problem) Error() string { return p.Detail }

// GetStatus implements huma.StatusError.
func (p *Problem) GetStatus() int { return p.Status }

// GetHeaders implements huma.HeadersError (Retry-After, WWW-Authenticate).
func (p *Problem) GetHeaders() http.Header {
	if p.headers == nil {
		p.headers = http.Header{}
	}
	return p.headers
}

// ContentType implements huma.ContentTypeFilter: problems are
// application/problem+json.
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" || ct == "" {
		return "application/problem+json"
	}
	return ct
}

// codeForStatus is the code of a problem that huma raises itself
// (malformed bodies, unknown parameters, limits).
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return fleetmq.CodeBadRequest
	case http.StatusUnauthorized:
		return fleetmq.CodeInvalidToken
	case http.StatusNotFound:
		return fleetmq.CodeNotFound
	case http.StatusMethodNotAllowed:
		return fleetmq.CodeMethodNotAllowed
	case http.StatusNotAcceptable:
		return fleetmq.CodeNotAcceptable
	case http.StatusConflict:
		return fleetmq.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return fleetmq.CodeRequestTooLarge
	case http.StatusRequestURITooLong:
		return fleetmq.CodeURITooLong
	case http.StatusUnsupportedMediaType:
		return fleetmq.CodeUnsupportedMediaType
	case http.StatusUnprocessableEntity:
		return fleetmq.CodeValidation
	case http.StatusTooManyRequests:
		return fleetmq.CodeRateLimited
	}
	if status >= 500 {
		return fleetmq.CodeInternal
	}
	return fleetmq.CodeBadRequest
}

// newProblem is a problem with the status phrase as title.
func newProblem(status int, code, detail string) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// humaError replaces huma.NewError: every error huma writes (validation,
// malformed JSON, oversized bodies) becomes a Problem with a code.
func humaError(status int, msg string, errs ...error) huma.StatusError {
	if status == http.StatusInternalServerError && msg == "cannot read request body" {
		// huma's answer to a body it could not read (a broken chunked
		// encoding): the request's fault, not the server's.
		status, msg = http.StatusBadRequest, "the request body could not be read"
	}
	if status == http.StatusRequestEntityTooLarge {
		msg = "the body is longer than " + strconv.Itoa(MaxBodyBytes) + " bytes" // huma's limit is one more
	}
	p := newProblem(status, codeForStatus(status), msg)
	for _, err := range errs {
		if err == nil {
			continue
		}
		var d huma.ErrorDetailer
		if errors.As(err, &d) {
			ed := d.ErrorDetail()
			p.Errors = append(p.Errors, &FieldError{Location: ed.Location, Message: ed.Message, Value: ed.Value})
			continue
		}
		p.Errors = append(p.Errors, &FieldError{Message: err.Error()})
	}
	// huma reports a JSON body it cannot parse as 422 with the parser's
	// message and no location; that is a malformed request (400), not a
	// validation failure of a field.
	if status == http.StatusUnprocessableEntity && len(p.Errors) > 0 && allUnlocated(p.Errors) {
		p.Status, p.Title, p.Code = http.StatusBadRequest, http.StatusText(http.StatusBadRequest), fleetmq.CodeBadRequest
		p.Detail = "the body is not valid JSON"
	}
	if p.Status == http.StatusBadRequest {
		for _, e := range p.Errors {
			if e.Location == "" {
				e.Location = "body" // what huma could not read or parse
			}
		}
	}
	if status == http.StatusUnprocessableEntity && p.Code == fleetmq.CodeValidation && p.Detail == "" {
		p.Detail = "validation failed"
	}
	return p
}

func allUnlocated(es []*FieldError) bool {
	for _, e := range es {
		if e.Location != "" {
			return false
		}
	}
	return true
}

// problemOf maps an error from the domain (control service, history
// queries) to a problem. where prefixes field names ("body" or "query").
func problemOf(err error, where string) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var e *fleetmq.Error
	if !errors.As(err, &e) {
		return newProblem(http.StatusInternalServerError, fleetmq.CodeInternal, "internal error")
	}
	status := fleetmq.HTTPStatus(e.Code)
	if status == 0 {
		status = http.StatusInternalServerError
	}
	p = newProblem(status, e.Code, e.Message)
	p.AddOn = e.AddOn
	if status == http.StatusInternalServerError {
		p.Code, p.Detail = fleetmq.CodeInternal, "internal error"
	}
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		loc := k
		if where != "" && !strings.Contains(k, ".") {
			loc = where + "." + k
		}
		p.Errors = append(p.Errors, &FieldError{Location: loc, Message: e.Fields[k]})
	}
	return p
}

// addOnRequired is the 403 of a route whose add-on the account lacks.
func addOnRequired(x fleetmq.AddOn) *Problem {
	p := newProblem(http.StatusForbidden, fleetmq.CodeAddOnRequired,
		fmt.Sprintf("this route needs the %s add-on; the account owner can switch it on in the portal (Subscriptions)", x.Title()))
	p.AddOn = string(x)
	return p
}

// basePlanRequired is the refusal of every route to a token whose account
// has no base plan (any more): the REST API is part of the subscription.
func basePlanRequired() *Problem {
	return newProblem(http.StatusForbidden, fleetmq.CodeBasePlanRequired,
		"the token's account has no base plan, and the REST API needs one; its tokens work again once the operator assigns a plan")
}

// fail is problemOf for a handler: an error that becomes a 500 is logged
// with the request's account (its problem says nothing more than
// "internal error").
func (a *API) fail(ctx context.Context, err error, where string) *Problem {
	p := problemOf(err, where)
	if p.Status >= http.StatusInternalServerError {
		acc := ""
		if c := caller(ctx); c != nil {
			acc = c.account.ID
		}
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			// The client went away: nothing failed on our side.
			a.deps.Logger.Debug("api: request abandoned by the client", "account", acc, "where", where)
			return p
		}
		a.deps.Logger.Error("api: internal error", "account", acc, "error", err)
	}
	return p
}
