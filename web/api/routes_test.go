package api_test

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// route is one operation of the API as the tests know it. This list is
// the tests' statement of what the API has: TestOpenAPIMatchesRoutes fails
// when a route is registered (or documented) that is not here, or the
// other way, and TestAddOnGating calls every one of them with and without
// its add-on.
type route struct {
	Method, Path string // Path as documented, with {parameters}
	AddOn        fleetmq.AddOn
	// call returns a request that succeeds for tn when the add-on is on:
	// its concrete path, its body (nil for none) and the success status.
	// It may create what the request needs (a client to delete).
	call func(t testing.TB, e *env, tn *tenant) (path string, body any, status int)
}

var seq atomic.Int64

// fresh returns a new unique name.
func fresh(prefix string) string { return prefix + strconv.FormatInt(seq.Add(1), 10) }

// routes are every operation of the subscriber REST API.
var routes = []route{
	{http.MethodGet, "/history", fleetmq.AddOnHistoryDownload, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/history?limit=5", nil, http.StatusOK
	}},
	{http.MethodGet, "/publishers/live", fleetmq.AddOnLiveREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/publishers/live", nil, http.StatusOK
	}},
	{http.MethodGet, "/publishers/{client_id}/problems", fleetmq.AddOnLiveREST, func(t testing.TB, e *env, tn *tenant) (string, any, int) {
		return "/publishers/" + e.client(t, tn) + "/problems", nil, http.StatusOK
	}},
	{http.MethodGet, "/problems", fleetmq.AddOnLiveREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/problems?limit=10", nil, http.StatusOK
	}},
	{http.MethodGet, "/publishers", fleetmq.AddOnMgmtREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/publishers", nil, http.StatusOK
	}},
	{http.MethodPost, "/publishers", fleetmq.AddOnMgmtREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/publishers", map[string]any{"client_id": fresh("new-")}, http.StatusCreated
	}},
	{http.MethodGet, "/publishers/{client_id}", fleetmq.AddOnMgmtREST, func(t testing.TB, e *env, tn *tenant) (string, any, int) {
		return "/publishers/" + e.client(t, tn), nil, http.StatusOK
	}},
	{http.MethodPatch, "/publishers/{client_id}", fleetmq.AddOnMgmtREST, func(t testing.TB, e *env, tn *tenant) (string, any, int) {
		return "/publishers/" + e.client(t, tn), map[string]any{"label": "changed"}, http.StatusOK
	}},
	{http.MethodDelete, "/publishers/{client_id}", fleetmq.AddOnMgmtREST, func(t testing.TB, e *env, tn *tenant) (string, any, int) {
		return "/publishers/" + e.client(t, tn), nil, http.StatusNoContent
	}},
	{http.MethodGet, "/subscriber-mqtt-passwords", fleetmq.AddOnMgmtREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/subscriber-mqtt-passwords", nil, http.StatusOK
	}},
	{http.MethodPost, "/subscriber-mqtt-passwords", fleetmq.AddOnMgmtREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/subscriber-mqtt-passwords", map[string]any{"label": "dash"}, http.StatusCreated
	}},
	{http.MethodDelete, "/subscriber-mqtt-passwords/{id}", fleetmq.AddOnMgmtREST, func(t testing.TB, e *env, tn *tenant) (string, any, int) {
		return "/subscriber-mqtt-passwords/" + e.credential(t, tn, fleetmq.KindSubscriber), nil, http.StatusNoContent
	}},
	{http.MethodGet, "/publisher-credentials", fleetmq.AddOnMgmtREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/publisher-credentials", nil, http.StatusOK
	}},
	{http.MethodPost, "/publisher-credentials", fleetmq.AddOnMgmtREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/publisher-credentials", map[string]any{"label": "fleet"}, http.StatusCreated
	}},
	{http.MethodDelete, "/publisher-credentials/{id}", fleetmq.AddOnMgmtREST, func(t testing.TB, e *env, tn *tenant) (string, any, int) {
		return "/publisher-credentials/" + e.credential(t, tn, fleetmq.KindPublisher), nil, http.StatusNoContent
	}},
	{http.MethodGet, "/usage", fleetmq.AddOnMgmtREST, func(testing.TB, *env, *tenant) (string, any, int) {
		return "/usage", nil, http.StatusOK
	}},
}

// client registers a new client in tn through the service and returns
// its id.
func (e *env) client(t testing.TB, tn *tenant) string {
	t.Helper()
	id := fresh("dev-")
	if _, err := e.Service.CreateClient(e.ctx, tn.ID, control.ClientInput{ClientID: id}); err != nil {
		t.Fatal(err)
	}
	return id
}

// credential creates a credential of the kind in tn through the service
// and returns its id.
func (e *env) credential(t testing.TB, tn *tenant, kind string) string {
	t.Helper()
	c, _, err := e.Service.CreateCredential(e.ctx, tn.ID, control.NewCredential{Kind: kind, Label: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}
