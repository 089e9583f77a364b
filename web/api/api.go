// Package api is the subscriber REST API under /api/v1/subscriber/: a
// token-authenticated, rate-limited HTTP API over an account's history,
// live publisher state, MQTT clients, credentials and usage, each route
// gated by its add-on. Routes are declared with huma, so the OpenAPI 3.1
// document served at /api/v1/subscriber/openapi.json is generated from the
// same Go types the handlers use and cannot drift from them; Swagger UI at
// /api/v1/subscriber/docs is served from the binary. Errors are RFC 9457
// problem details with the stable codes of docs/design.md.
//
// The account always comes from the token, never from the request: every
// handler reads and writes only the token's account.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// Prefix is where the API lives.
const Prefix = "/api/v1/subscriber"

// Limits on requests (beyond each route's own validation).
const (
	MaxBodyBytes  = 64 << 10 // request bodies are small JSON objects
	MaxQueryBytes = 8 << 10  // longer query strings get 414
)

// Store is what the API reads directly (a *sqlstore.Store is one); changes
// go through the control service.
type Store interface {
	fleetmq.ControlReader
	fleetmq.HistoryStore
	fleetmq.UsageStore
	fleetmq.ProblemStore
}

// Deps are the parts the API works with.
type Deps struct {
	Service *control.Service
	Store   Store
	// Policy gives the live view of publishers and the QoS 2 pools.
	Policy  *platform.Policy
	Auth    *restauth.Authenticator
	Limiter *restauth.Limiter
	// Accounts holds the secondary limits per account (requests in
	// flight, requests per second). Nil: restauth's defaults.
	Accounts *restauth.AccountLimiter
	Now      func() time.Time
	// Changed, when set, is called after a change made through the API
	// (a client or credential created, changed or removed) so the broker
	// applies it at once rather than at the next reload.
	Changed func(ctx context.Context)
	Logger  *slog.Logger
	// QueryTimeout stops a history page's query (default QueryTimeout).
	QueryTimeout time.Duration
	// HistorySlots bounds the history requests each account runs at once;
	// share it with the portal. Nil: the API's own.
	HistorySlots *history.Slots
	// ScanBudget bounds the rows a history page or export batch examines
	// (default history.ScanBudget).
	ScanBudget int
}

// API is the subscriber REST API.
type API struct {
	deps Deps
	huma huma.API
	mux  *http.ServeMux
}

// Operation metadata keys.
const metaAddOn = "fleetmq.addon"

var setErrorOnce sync.Once

// New builds the API.
func New(d Deps) *API {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.HistorySlots == nil {
		d.HistorySlots = new(history.Slots)
	}
	if d.Accounts == nil {
		d.Accounts = restauth.NewAccountLimiter(restauth.AccountLimits{})
	}
	if d.QueryTimeout <= 0 {
		d.QueryTimeout = QueryTimeout
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	setErrorOnce.Do(func() { huma.NewError = humaError })
	a := &API{deps: d, mux: http.NewServeMux()}
	cfg := huma.DefaultConfig("fleetmq subscriber API", "1.0.0")
	cfg.CreateHooks = nil // no $schema links in bodies
	cfg.OpenAPIPath = ""  // served below as openapi.json only
	cfg.DocsPath = ""     // Swagger UI is served from the binary below
	cfg.SchemasPath = ""
	cfg.RejectUnknownQueryParameters = true
	lim := d.Accounts.Limits()
	cfg.Info.Description = "The subscriber REST API of an account: stored history, live publisher state, MQTT clients " +
		"and credentials, usage. Authenticate with a REST API token (`Authorization: Bearer svc_mqtt_rest_...`), " +
		"created in the portal under Settings, REST API tokens. Each token may make " + strconv.Itoa(d.Limiter.Limit()) + " requests per hour; every " +
		"response says how many are left in `X-RateLimit-*` headers. Beside it, each account, over all its tokens, may have " +
		strconv.Itoa(lim.Concurrency) + " requests in flight at once and make " + strconv.Itoa(lim.Rate) + " requests a second " +
		"after a burst of " + strconv.Itoa(lim.Burst) + "; a single client making one request at a time can always spend its " +
		"token's hour. A request over any limit gets 429 `rate_limited` with `Retry-After` (seconds) and a `detail` naming " +
		"the limit, sent after a pause of up to " + lim.RefusalPause.String() + " (never longer than its `Retry-After`); " +
		"refused requests are not counted. Every route needs the account to have a base plan (else 403 " +
		"`base_plan_required`); which routes work depends on the account's " +
		"add-ons, not on the token. Errors are RFC 9457 problem details with a stable `code`."
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"token": {Type: "http", Scheme: "bearer", BearerFormat: "svc_mqtt_rest_ token",
			Description: "A REST API token from the portal (Settings, REST API tokens)."},
	}
	cfg.Security = []map[string][]string{{"token": {}}}
	a.huma = humago.NewWithPrefix(a.mux, Prefix, cfg)
	a.huma.UseMiddleware(a.authenticate)
	a.register()
	a.mux.HandleFunc("GET "+Prefix+"/openapi.json", a.serveOpenAPI)
	a.mux.Handle("GET "+Prefix+"/docs", docsHandler())
	a.mux.Handle("GET "+Prefix+"/docs/", docsHandler())
	return a
}

// OpenAPI returns the generated document.
func (a *API) OpenAPI() *huma.OpenAPI { return a.huma.OpenAPI() }

// apiCSP is the Content-Security-Policy of every answer but the docs
// page's (docsCSP): nothing in it may run, load or be framed.
const apiCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// ServeHTTP serves the API: requests under Prefix. Every answer tells a
// browser not to guess its type (an exported payload that looks like HTML
// stays CSV or JSON), not to run or load anything in it, and not to show
// it in a frame.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", apiCSP)
	if len(r.URL.RawQuery) > MaxQueryBytes {
		writeProblem(w, r, newProblem(http.StatusRequestURITooLong, fleetmq.CodeURITooLong, "the query string is longer than "+strconv.Itoa(MaxQueryBytes)+" bytes"))
		return
	}
	if _, pattern := a.mux.Handler(r); pattern == "" {
		// No route: a problem rather than the mux's plain text. A path
		// that exists with another method gets 405 with Allow.
		if allow := a.allowed(r); allow != "" {
			w.Header().Set("Allow", allow)
			writeProblem(w, r, newProblem(http.StatusMethodNotAllowed, fleetmq.CodeMethodNotAllowed, r.Method+" is not allowed here; allowed: "+allow))
			return
		}
		writeProblem(w, r, newProblem(http.StatusNotFound, fleetmq.CodeNotFound, "no such route: "+r.URL.Path))
		return
	}
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		// net/http drops pairs it cannot decode: a history filter would
		// be left out silently.
		writeProblem(w, r, newProblem(http.StatusBadRequest, fleetmq.CodeBadRequest, "the query string is malformed: "+err.Error()))
		return
	}
	if r.ContentLength > MaxBodyBytes {
		// Refused before reading: a client that sent "Expect:
		// 100-continue" never sends the body.
		writeProblem(w, r, newProblem(http.StatusRequestEntityTooLarge, fleetmq.CodeRequestTooLarge, "the body is longer than "+strconv.Itoa(MaxBodyBytes)+" bytes"))
		return
	}
	// The limited body goes on a shallow copy: net/http must still see
	// its own body on its request, or it cannot tell that the handler
	// left a large body unread, keeps the connection and parses the rest
	// of the body as the next request.
	r = r.WithContext(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes+1) // huma stops first (see op)
	a.mux.ServeHTTP(w, r)
}

// allowed lists the methods that have a route at r's path.
func (a *API) allowed(r *http.Request) string {
	var out string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		rr := r.Clone(r.Context())
		rr.Method = m
		if _, p := a.mux.Handler(rr); p != "" {
			if out != "" {
				out += ", "
			}
			out += m
		}
	}
	return out
}

func (a *API) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(a.huma.OpenAPI())
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusInternalServerError, fleetmq.CodeInternal, "internal error"))
		return
	}
	w.Header().Set("Content-Type", "application/vnd.oai.openapi+json")
	w.Write(b)
}

// writeProblem writes a problem outside huma.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	for k, vs := range p.headers {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// principal is the authenticated caller of a request.
type principal struct {
	token   *fleetmq.RESTToken
	account *fleetmq.Account
	counted restauth.Decision // the token's hour, this request counted
	hctx    huma.Context      // the request's, whose headers a handler's refusal corrects
	release func()            // gives back the account's place among its requests running (once)
}

type principalKey struct{}

// caller returns the request's principal (set by authenticate).
func caller(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// authenticate runs before every operation: token, rate limit, account,
// base plan, add-on.
func (a *API) authenticate(ctx huma.Context, next func(huma.Context)) {
	now := a.deps.Now()
	tok, err := a.deps.Auth.Authenticate(ctx.Header("Authorization"), now)
	if err != nil {
		p := problemOf(err, "")
		p.Status, p.Title = http.StatusUnauthorized, http.StatusText(http.StatusUnauthorized)
		// RFC 6750 section 3.1: no error code when the request had no
		// credentials at all.
		challenge := `Bearer realm="fleetmq", error="invalid_token"`
		if errors.Is(err, restauth.ErrMissingHeader) {
			challenge = `Bearer realm="fleetmq"`
		}
		p.GetHeaders().Set("WWW-Authenticate", challenge)
		a.writeHuma(ctx, p)
		return
	}
	// A token that spent its hour is told so (and when it resets) before
	// the account's secondary limits are asked; a request those refuse is
	// not counted against the token's hour, and one the hour refuses
	// after all (a race with the token's other requests) is given back to
	// the account.
	if d := a.deps.Limiter.Peek(tok.ID, now); !d.Allowed {
		a.hourlyRefusal(ctx, d)
		return
	}
	release, sd := a.deps.Accounts.Admit(tok.AccountID, now)
	if sd.Refused != "" {
		setRateHeaders(ctx, a.deps.Limiter.Peek(tok.ID, now))
		a.refuse(ctx, secondaryProblem(sd), sd.RetryAfter)
		return
	}
	release = sync.OnceFunc(release) // a handler's refusal may give it back first (uncounted)
	defer release()
	d := a.deps.Limiter.Allow(tok.ID, now)
	if !d.Allowed {
		release()
		a.deps.Accounts.Refund(tok.AccountID)
		a.hourlyRefusal(ctx, d)
		return
	}
	setRateHeaders(ctx, d)
	acct, err := a.account(ctx.Context(), tok.AccountID)
	if err != nil {
		if fleetmq.CodeOf(err) == fleetmq.CodeNotFound {
			a.writeHuma(ctx, newProblem(http.StatusUnauthorized, fleetmq.CodeInvalidToken, "the token's account no longer exists"))
			return
		}
		if ctx.Context().Err() == nil { // else the client went away
			a.deps.Logger.Error("api: load account", "account", tok.AccountID, "error", err)
		}
		a.writeHuma(ctx, newProblem(http.StatusInternalServerError, fleetmq.CodeInternal, "internal error"))
		return
	}
	if acct.Plan == "" {
		a.writeHuma(ctx, basePlanRequired())
		return
	}
	if x, ok := ctx.Operation().Metadata[metaAddOn].(fleetmq.AddOn); ok && !acct.HasAddOn(x) {
		a.writeHuma(ctx, addOnRequired(x))
		return
	}
	next(huma.WithValue(ctx, principalKey{}, &principal{token: tok, account: acct, counted: d, hctx: ctx, release: release}))
}

// uncounted gives back what the middleware counted for a request its
// handler refuses with 429 (docs/api.md: a refused request is counted by
// no limit: the token's hour and the account's bucket, nor holds one of
// the account's places among its requests running), waits as the
// middleware's refusals do (pause), sets
// the X-RateLimit-* headers to the token's hour as it stands, and returns
// p.
func (a *API) uncounted(ctx context.Context, p *Problem, retry time.Duration) *Problem {
	pr := caller(ctx)
	pr.release() // not held through the pause, as for the middleware's refusals
	a.deps.Limiter.Unallow(pr.token.ID, pr.counted)
	a.deps.Accounts.Refund(pr.token.AccountID)
	setRateHeaders(pr.hctx, a.deps.Limiter.Peek(pr.token.ID, a.deps.Now()))
	a.pause(ctx, retry)
	return p
}

// setRateHeaders writes the token's hourly standing, on every response to
// an authenticated caller.
func setRateHeaders(ctx huma.Context, d restauth.Decision) {
	ctx.SetHeader("X-RateLimit-Limit", strconv.Itoa(d.Limit))
	ctx.SetHeader("X-RateLimit-Remaining", strconv.Itoa(d.Remaining))
	ctx.SetHeader("X-RateLimit-Used", strconv.Itoa(d.Used))
	ctx.SetHeader("X-RateLimit-Reset", strconv.FormatInt(d.Reset.Unix(), 10))
	ctx.SetHeader("X-RateLimit-Resource", "subscriber")
}

// hourlyRefusal is the 429 of a token that spent its hour.
func (a *API) hourlyRefusal(ctx huma.Context, d restauth.Decision) {
	setRateHeaders(ctx, d)
	detail := "this token made " + strconv.Itoa(d.Used) + " requests this hour, the limit is " + strconv.Itoa(d.Limit) + "; the window resets at " + d.Reset.UTC().Format(time.RFC3339)
	if d.Unavailable {
		detail = "this token's hourly limit cannot be checked now (the database is out of reach); try again in a second"
	}
	p := newProblem(http.StatusTooManyRequests, fleetmq.CodeRateLimited, detail)
	p.GetHeaders().Set("Retry-After", retryAfter(d.RetryAfter))
	a.refuse(ctx, p, d.RetryAfter)
}

// refuse writes a rate limit's 429 after the refusal pause (at most
// retry; sooner when the client goes away), holding nothing but the
// connection meanwhile.
func (a *API) refuse(ctx huma.Context, p *Problem, retry time.Duration) {
	a.pause(ctx.Context(), retry)
	a.writeHuma(ctx, p)
}

// pause is the wait before a 429: RefusalPause, never longer than retry
// (its Retry-After), over when the client goes.
func (a *API) pause(ctx context.Context, retry time.Duration) {
	t := time.NewTimer(min(retry, a.deps.Accounts.Limits().RefusalPause))
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
}

// retryAfter is a Retry-After value: whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}

// secondaryProblem is the 429 of a request an account's secondary limit
// refused.
func secondaryProblem(d restauth.AccountDecision) *Problem {
	var detail string
	switch d.Refused {
	case restauth.RefusedConcurrency:
		detail = "this account has " + strconv.Itoa(d.Limits.Concurrency) + " requests in flight already (over all its tokens), " +
			"the most it may have at once; retry when one has been answered"
	default:
		detail = "this account's requests (over all its tokens) came faster than " + strconv.Itoa(d.Limits.Rate) +
			" a second after a burst of " + strconv.Itoa(d.Limits.Burst) + "; retry after " + retryAfter(d.RetryAfter) + " s"
	}
	p := newProblem(http.StatusTooManyRequests, fleetmq.CodeRateLimited, detail)
	p.GetHeaders().Set("Retry-After", retryAfter(d.RetryAfter))
	return p
}

// account returns the caller's account: from the policy's in-memory
// snapshot of the control plane, which every change made through this
// process reaches before it returns and every change made elsewhere (the
// CLI) reaches before the CLI returns; from the store when there is no
// policy or the snapshot does not know the account yet. So a request,
// even one refused a moment later, costs the store nothing here: a flood
// of requests cannot load the database the history writer needs.
func (a *API) account(ctx context.Context, id string) (*fleetmq.Account, error) {
	if a.deps.Policy != nil {
		if snap := a.deps.Policy.Snapshot(); snap != nil {
			if acc := snap.Accounts[id]; acc != nil && acc.Record != nil {
				return acc.Record, nil
			}
		}
	}
	return a.deps.Store.Account(ctx, id)
}

// writeHuma writes a problem from a middleware.
func (a *API) writeHuma(ctx huma.Context, p *Problem) {
	if p.Instance == "" {
		u := ctx.URL()
		p.Instance = u.Path
	}
	for k, vs := range p.headers {
		for _, v := range vs {
			ctx.AppendHeader(k, v)
		}
	}
	ctx.SetHeader("Content-Type", "application/problem+json")
	ctx.SetStatus(p.Status)
	json.NewEncoder(ctx.BodyWriter()).Encode(p)
}

// changed tells the platform that something the broker enforces changed.
func (a *API) changed(ctx context.Context) {
	if a.deps.Changed != nil {
		a.deps.Changed(ctx)
	}
}

// op is an operation of the API with the parts every route shares.
func op(id, method, path, summary, description string, addOn fleetmq.AddOn, status int, errs ...int) huma.Operation {
	o := huma.Operation{
		OperationID:   id,
		Method:        method,
		Path:          path,
		Summary:       summary,
		Description:   description,
		DefaultStatus: status,
		MaxBodyBytes:  MaxBodyBytes + 1, // huma refuses a body that fills its limit
		Errors:        append([]int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests}, errs...),
		Metadata:      map[string]any{},
	}
	if addOn != "" {
		o.Metadata[metaAddOn] = addOn
		o.Tags = []string{addOn.Title()}
		o.Description += "\n\nNeeds the **" + addOn.Title() + "** add-on (`" + string(addOn) + "`); without it the call is refused with 403 `addon_required`."
	}
	return o
}

// register declares every route.
func (a *API) register() {
	a.registerHistory()
	a.registerPublishers()
	a.registerProblems()
	a.registerCredentials()
	a.registerUsage()
}
