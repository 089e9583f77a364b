package api_test

// The harness of the subscriber REST API tests: a real App (SQLite in a
// temp data directory, MQTT and HTTP on 127.0.0.1:0, a test clock as
// Config.Now), accounts made through the control service, REST calls over
// a real net/http client, and real MQTT clients (paho.golang) for what a
// change through the API does to connected devices. Small MQTT helpers are
// copied from internal/app/e2e_harness_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/apptest"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/web/api"
)

// waitFor bounds every wait for something expected to happen.
const waitFor = 10 * time.Second

// atOnce bounds a wait for something the API promises happens at once
// (a lowered max QoS, a removed client, a revoked credential).
const atOnce = 2 * time.Second

// t0 is where the test clock starts: 2030-03-10 12:20:00 UTC, a time
// that is not on an hour boundary.
var t0 = time.Date(2030, 3, 10, 12, 20, 0, 0, time.UTC)

// env is a running App under test.
type env struct {
	*app.App
	cfg   app.Config
	clock *testkit.Clock
	ctx   context.Context
	http  *http.Client
}

// start starts an App on a temp data directory with HTTP and MQTT on
// loopback, a fast reload interval and the test clock at t0.
func start(t testing.TB, edit ...func(*app.Config)) *env {
	t.Helper()
	clk := testkit.NewClock(t0)
	cfg := apptest.Config(t, clk.Now)
	// The test clock stands still, so an account's request bucket would
	// never refill: tests of other things get a bucket they cannot empty
	// (those of the limits set their own).
	cfg.RESTAccountLimits.Burst = 1 << 20
	for _, e := range edit {
		e(&cfg)
	}
	e := &env{cfg: cfg, clock: clk, ctx: context.Background(),
		http: &http.Client{Timeout: waitFor, Transport: &http.Transport{MaxIdleConnsPerHost: 8, ExpectContinueTimeout: waitFor}}}
	e.open(t)
	return e
}

// open starts the App on e.cfg.
func (e *env) open(t testing.TB) {
	t.Helper()
	e.App = apptest.Start(t, e.cfg)
}

// restart closes the App and starts a new one on the same data directory
// (and clock).
func (e *env) restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.App.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	e.http.CloseIdleConnections()
	e.open(t)
}

// slowReload leaves control-plane changes to the API's own Changed call
// (the reload loop waits an hour), so a test shows that what a request
// changed is in force when its response arrives.
func slowReload(c *app.Config) { c.ReloadInterval = time.Hour }

// synced waits until the policy's snapshot is the store's current version,
// so control-plane changes made through the service are in force.
func (e *env) synced(t testing.TB) {
	t.Helper()
	apptest.Synced(t, e.App)
}

// tenant is an account with a REST API token, a publisher credential and
// a subscriber password.
type tenant struct {
	ID               string
	Token, TokenID   string
	PubUser, PubPass string
	PubCredID        string
	SubUser, SubPass string
	SubCredID        string
}

// topic returns the platform topic {account}/{client}/{subpath}.
func (tn *tenant) topic(client, subpath string) string { return tn.ID + "/" + client + "/" + subpath }

// tenant creates an account on plan with the add-ons, one REST API token,
// one publisher credential and one subscriber password, and registers the
// clients (max_publish_qos 2 when the QoS 2 add-on is on, else 1).
func (e *env) tenant(t testing.TB, name, plan string, addOns []fleetmq.AddOn, clients ...string) *tenant {
	t.Helper()
	ctx := e.ctx
	acc, _, err := e.Service.CreateAccount(ctx, control.NewAccount{Name: name, OwnerEmail: strings.ToLower(name) + "@example.com", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{ID: acc.ID}
	maxQoS := 1
	for _, x := range addOns {
		if err := e.Service.SetAddOn(ctx, acc.ID, x, true); err != nil {
			t.Fatal(err)
		}
		e.Sync(e.ctx) // as the portal does after a change
		if x == fleetmq.AddOnQoS2 {
			maxQoS = 2
		}
	}
	tn.Token, tn.TokenID = e.token(t, acc.ID, "tests")
	for _, c := range clients {
		if _, err := e.Service.CreateClient(ctx, acc.ID, control.ClientInput{ClientID: c, MaxPublishQoS: &maxQoS}); err != nil {
			t.Fatalf("register client %s: %v", c, err)
		}
	}
	pub, sub := apptest.Credentials(t, e.App, acc.ID)
	tn.PubUser, tn.PubPass, tn.PubCredID = pub.Username, pub.Password, pub.ID
	tn.SubUser, tn.SubPass, tn.SubCredID = sub.Username, sub.Password, sub.ID
	return tn
}

// token creates a REST API token (as the portal does) and returns its
// value and id.
func (e *env) token(t testing.TB, accountID, label string) (value, id string) {
	t.Helper()
	tok, v, err := e.Service.CreateRESTToken(e.ctx, accountID, control.NewRESTToken{Label: label})
	if err != nil {
		t.Fatalf("create REST token: %v", err)
	}
	return v, tok.ID
}

// plan puts a plan into the catalog.
func (e *env) plan(t testing.TB, name string, maxClients int, pool int64) {
	t.Helper()
	if err := e.Store.PutPlan(e.ctx, fleetmq.Plan{Name: name, MaxPublisherClients: maxClients, QoS2DailyPool: pool, HistoryRetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
}

// allAddOns are the add-ons an account needs for every route (and QoS 2).
var allAddOns = []fleetmq.AddOn{fleetmq.AddOnHistoryDownload, fleetmq.AddOnLiveREST, fleetmq.AddOnMgmtREST, fleetmq.AddOnQoS2}

// url is the URL of an API path ("/publishers?limit=1").
func (e *env) url(path string) string { return "http://" + e.HTTPAddr + api.Prefix + path }

// response is an HTTP response, read whole.
type response struct {
	Method, Path string
	Status       int
	Header       http.Header
	Body         []byte
}

func (r *response) String() string {
	b := r.Body
	if len(b) > 600 {
		b = append(b[:600:600], "..."...)
	}
	return r.Method + " " + r.Path + " -> " + strconv.Itoa(r.Status) + " " + r.Header.Get("Content-Type") + " " + string(b)
}

// req is one request: a token ("" for none), a method and path, a body
// (sent as application/json unless a Content-Type header is given) and
// extra headers as name, value pairs.
func (e *env) req(t testing.TB, token, method, path string, body any, headers ...string) *response {
	t.Helper()
	var rd io.Reader
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	if body != nil {
		rd = bytes.NewReader(raw)
	}
	hr, err := http.NewRequest(method, e.url(path), rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			hr.Header.Del(headers[i])
			continue
		}
		hr.Header.Set(headers[i], headers[i+1])
	}
	return e.send(t, hr)
}

// send sends a prepared request.
func (e *env) send(t testing.TB, hr *http.Request) *response {
	t.Helper()
	resp, err := e.http.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", hr.Method, hr.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", hr.Method, hr.URL.Path, err)
	}
	p := hr.URL.Path
	if hr.URL.RawQuery != "" {
		p += "?" + hr.URL.RawQuery
	}
	if len(p) > 200 {
		p = p[:200] + "..."
	}
	return &response{Method: hr.Method, Path: p, Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// get is a GET with a token.
func (e *env) get(t testing.TB, token, path string, headers ...string) *response {
	t.Helper()
	return e.req(t, token, http.MethodGet, path, nil, headers...)
}

// ok fails unless the response has the status, and decodes a JSON body
// into v (when not nil).
func (r *response) ok(t testing.TB, status int, v any) *response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: want status %d", r, status)
	}
	if v != nil {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s: want application/json", r)
		}
		if err := json.Unmarshal(r.Body, v); err != nil {
			t.Fatalf("%s: decode: %v", r, err)
		}
	}
	return r
}

// problem is an RFC 9457 problem details body as the API sends it.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance"`
	Code     string `json:"code"`
	AddOn    string `json:"addon"`
	Errors   []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

// locations lists the field locations of a problem's errors.
func (p *problem) locations() []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Location)
	}
	return out
}

// hasLocation reports whether one of the errors is at loc.
func (p *problem) hasLocation(loc string) bool {
	for _, e := range p.Errors {
		if e.Location == loc {
			return true
		}
	}
	return false
}

// asProblem fails unless the response is a well-formed problem (its
// media type, a body whose status is the response's, a title, a code
// registered in fleetmq.ErrorCodes with that status) and returns it.
func (r *response) asProblem(t testing.TB) *problem {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: want Content-Type application/problem+json", r)
	}
	var p problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("%s: problem body: %v", r, err)
	}
	if p.Status != r.Status || p.Title != http.StatusText(r.Status) || p.Code == "" || p.Type == "" {
		t.Fatalf("%s: problem body does not match its response (status %d, title %q, code %q, type %q)", r, p.Status, p.Title, p.Code, p.Type)
	}
	if status := fleetmq.HTTPStatus(p.Code); status != r.Status {
		t.Fatalf("%s: code %q is registered in fleetmq.ErrorCodes with status %d (0: not registered)", r, p.Code, status)
	}
	return &p
}

// problem fails unless the response is a problem with the status and code.
func (r *response) problem(t testing.TB, status int, code string) *problem {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: want a %d %s problem", r, status, code)
	}
	p := r.asProblem(t)
	if p.Code != code {
		t.Fatalf("%s: want code %s", r, code)
	}
	return p
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// dial connects an MQTT 5 client (clean start) as clientID and fails the
// test unless the server accepts.
func (e *env) dial(t testing.TB, clientID, user, pass string) *mqtttest.V5 {
	t.Helper()
	return mqtttest.DialV5(t, e.MQTTAddr, mqtttest.Login(clientID, user, pass))
}

// refused connects and fails unless the server refuses with a CONNACK,
// whose reason code it returns.
func (e *env) refused(t testing.TB, clientID, user, pass string) byte {
	t.Helper()
	return mqtttest.RefusedV5(t, e.MQTTAddr, mqtttest.Login(clientID, user, pass))
}
