package api_test

import (
	"net/http"
	"testing"

	"github.com/fleetmq/fleetmq"
)

// TestAddOnGating: an account with a base plan and no add-on gets 403
// addon_required naming the add-on from every route; switching one add-on
// on (control.Service.SetAddOn, as the portal's Subscriptions page does)
// makes its routes work on the very next request and only its routes;
// switching it off closes them again. The token is the same throughout: a
// token carries no scope, the account's add-ons decide.
func TestAddOnGating(t *testing.T) {
	t.Parallel()
	e := start(t)
	tn := e.tenant(t, "Gated", "growth", nil)

	// check calls every route and expects success from those of the add-ons
	// in on, addon_required naming the route's add-on from the others.
	check := func(t *testing.T, on ...fleetmq.AddOn) {
		t.Helper()
		for _, rt := range routes {
			path, body, status := rt.call(t, e, tn)
			r := e.req(t, tn.Token, rt.Method, path, body)
			open := false
			for _, x := range on {
				open = open || x == rt.AddOn
			}
			if open {
				if r.Status != status {
					t.Errorf("%s %s with %v on: %s, want %d", rt.Method, rt.Path, on, r, status)
				}
				continue
			}
			if r.Status != http.StatusForbidden {
				t.Errorf("%s %s with %v on: %s, want 403 addon_required", rt.Method, rt.Path, on, r)
				continue
			}
			p := r.asProblem(t)
			if p.Code != fleetmq.CodeAddOnRequired || p.AddOn != string(rt.AddOn) {
				t.Errorf("%s %s: code %q addon %q, want addon_required naming %s", rt.Method, rt.Path, p.Code, p.AddOn, rt.AddOn)
			}
			if r.Header.Get("X-RateLimit-Limit") == "" {
				t.Errorf("%s %s: a refused call of an authenticated caller has no X-RateLimit-Limit", rt.Method, rt.Path)
			}
		}
	}

	check(t)
	for _, x := range []fleetmq.AddOn{fleetmq.AddOnHistoryDownload, fleetmq.AddOnLiveREST, fleetmq.AddOnMgmtREST} {
		if err := e.Service.SetAddOn(e.ctx, tn.ID, x, true); err != nil {
			t.Fatal(err)
		}
		e.Sync(e.ctx) // as the portal does after a change
		check(t, x)
		if err := e.Service.SetAddOn(e.ctx, tn.ID, x, false); err != nil {
			t.Fatal(err)
		}
		e.Sync(e.ctx) // as the portal does after a change
	}
	check(t)
	// The QoS 2 add-on opens no route.
	if err := e.Service.SetAddOn(e.ctx, tn.ID, fleetmq.AddOnQoS2, true); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.ctx) // as the portal does after a change
	check(t)
	// All at once.
	for _, x := range allAddOns {
		if err := e.Service.SetAddOn(e.ctx, tn.ID, x, true); err != nil {
			t.Fatal(err)
		}
		e.Sync(e.ctx) // as the portal does after a change
	}
	check(t, allAddOns...)
	if t.Failed() {
		return
	}

	// Nothing was done by a refused call: the account's clients are the ones
	// the service and the successful POSTs registered, no more.
	var list struct {
		Publishers []struct {
			ClientID string `json:"client_id"`
		} `json:"publishers"`
	}
	e.get(t, tn.Token, "/publishers?limit=1000").ok(t, http.StatusOK, &list)
	stored, err := e.Store.Clients(e.ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Publishers) != len(stored) {
		t.Fatalf("the API lists %d clients, the store has %d", len(list.Publishers), len(stored))
	}
	posted := 0
	for _, p := range list.Publishers {
		if len(p.ClientID) > 4 && p.ClientID[:4] == "new-" {
			posted++
		}
	}
	if posted != 2 { // the mgmt round and the all-add-ons round
		t.Fatalf("%d clients were created by POST /publishers, want 2 (refused calls must not create any)", posted)
	}
}

// TestTokensRefusedWithoutABasePlan: the REST API is part of an account's
// subscription. When the operator removes the base plan, every route
// refuses the account's tokens with 403 base_plan_required at once (once
// the change is applied, as "fleetmq account set-plan" waits for), add-ons
// or not; the other account's token still works; with a plan again the
// same token works again (it was not revoked).
func TestTokensRefusedWithoutABasePlan(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload)
	A := e.tenant(t, "A", "starter", allAddOns)
	B := e.tenant(t, "B", "starter", allAddOns)

	// The requests, prepared while A has a plan (a client to delete, say).
	type call struct {
		rt     route
		path   string
		body   any
		status int
	}
	var calls []call
	for _, rt := range routes {
		path, body, status := rt.call(t, e, A)
		calls = append(calls, call{rt, path, body, status})
	}
	if err := e.Service.SetPlan(e.ctx, A.ID, ""); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.ctx) // what the CLI waits for before it returns
	for _, c := range calls {
		r := e.req(t, A.Token, c.rt.Method, c.path, c.body)
		if r.Status != http.StatusForbidden {
			t.Errorf("%s %s without a base plan: %s, want 403 base_plan_required", c.rt.Method, c.rt.Path, r)
			continue
		}
		if p := r.asProblem(t); p.Code != fleetmq.CodeBasePlanRequired {
			t.Errorf("%s %s without a base plan: code %q, want base_plan_required", c.rt.Method, c.rt.Path, p.Code)
		}
	}
	if t.Failed() {
		return
	}
	e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil)
	e.get(t, B.Token, "/history").ok(t, http.StatusOK, nil)

	if err := e.Service.SetPlan(e.ctx, A.ID, "growth"); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.ctx)
	for _, c := range calls {
		if r := e.req(t, A.Token, c.rt.Method, c.path, c.body); r.Status != c.status {
			t.Errorf("%s %s with a plan again: %s, want %d", c.rt.Method, c.rt.Path, r, c.status)
		}
	}
}
