package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
)

// slowReload makes the broker's own reload slow, so that a test sees
// changes applied by the portal's Changed callback, not by the poll.
func slowReload(c *app.Config) { c.ReloadInterval = time.Hour }

// TestQoS2CheckboxFollowsTheAddOn: the "QoS 2 guaranteed delivery" box
// is disabled with the reason and a link to Subscriptions while the add-on
// is off; enabling the add-on there enables it (and the broker knows at
// once), and a client created with it has Max QoS 2; disabling it again
// disables the box.
func TestQoS2CheckboxFollowsTheAddOn(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload)
	a := e.account(t, "Acme", "starter")
	b := e.browser(t)
	b.signIn(t, a)

	p := b.get(t, "/clients").want(t, http.StatusOK)
	if box := p.element(t, "new-client-qos2"); !strings.Contains(box, " disabled") {
		t.Fatalf("QoS 2 checkbox without the add-on: %s, want disabled", box)
	}
	p.has(t, `data-testid="qos2-reason"`, "Needs the Guaranteed delivery (QoS 2) add-on", `href="/subscriptions#addon-qos2"`)
	// A forced qos2 without the add-on is refused.
	b.post(t, "/clients", url.Values{"client_id": {"pump-1"}, "qos2": {"1"}}).want(t, http.StatusUnprocessableEntity).
		has(t, "QoS 2 needs the Guaranteed delivery (QoS 2) add-on")
	if _, err := e.Store.Client(e.ctx, a.ID, "pump-1"); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Fatalf("a refused client was stored: %v", err)
	}

	// Enable the add-on on the Subscriptions page.
	// The starter plan's catch-up bound: 10 publisher clients x 3.
	s := b.get(t, "/subscriptions").has(t, `id="addon-qos2"`, `data-active="false"`, `id="addon-qos2-toggle"`, "Guaranteed delivery (QoS 2)",
		"gets at most 30 of them at once")
	if !strings.Contains(s.element(t, "addon-qos2-toggle"), `data-testid="addon-toggle"`) {
		t.Fatal("no toggle")
	}
	b.post(t, "/subscriptions/qos2", url.Values{"on": {"1"}}).redirects(t, "/subscriptions#addon-qos2")
	if acc := e.Policy.Snapshot().Accounts[a.ID]; acc == nil || !acc.QoS2AddOn {
		t.Fatal("the broker does not know the add-on right after the change (Changed not called?)")
	}
	b.get(t, "/subscriptions").has(t, "Guaranteed delivery (QoS 2) is enabled.").has(t, `data-addon="qos2" data-active="true"`)

	p = b.get(t, "/clients")
	if box := p.element(t, "new-client-qos2"); strings.Contains(box, " disabled") {
		t.Fatalf("QoS 2 checkbox with the add-on: %s, want enabled", box)
	}
	p.hasNot(t, `data-testid="qos2-reason"`)
	b.post(t, "/clients", url.Values{"client_id": {"pump-1"}, "label": {"Pump 1"}, "max_qos": {"1"}, "qos2": {"1"}}).redirects(t, "/clients/pump-1")
	c, err := e.Store.Client(e.ctx, a.ID, "pump-1")
	if err != nil || c.MaxPublishQoS != 2 || c.Label != "Pump 1" {
		t.Fatalf("created client %+v, %v: want max QoS 2", c, err)
	}
	if cl := e.Policy.Snapshot().Accounts[a.ID].Clients["pump-1"]; cl == nil || cl.MaxPublishQoS != 2 {
		t.Fatal("the broker does not know the new client right after it was registered")
	}
	// The edit page: checked, enabled.
	ed := b.get(t, "/clients/pump-1/edit")
	if box := ed.element(t, "edit-client-qos2"); strings.Contains(box, " disabled") || !strings.Contains(box, " checked") {
		t.Fatalf("edit page QoS 2 box %s: want enabled and checked", box)
	}

	// Off again: the box is disabled, and says so on the edit page too.
	b.post(t, "/subscriptions/qos2", url.Values{"on": {"0"}}).redirects(t, "/subscriptions#addon-qos2")
	if e.Policy.Snapshot().Accounts[a.ID].QoS2AddOn {
		t.Fatal("the broker still has the add-on right after it was disabled")
	}
	if box := b.get(t, "/clients").element(t, "new-client-qos2"); !strings.Contains(box, " disabled") {
		t.Fatalf("QoS 2 checkbox after disabling the add-on: %s", box)
	}
	b.get(t, "/clients/pump-1/edit").has(t, "still has Max QoS 2")
	changes, err := e.Store.SubscriptionChanges(e.ctx, a.ID)
	if err != nil || len(changes) != 3 { // plan, on, off
		t.Fatalf("subscription changes %+v, %v", changes, err)
	}
	b.get(t, "/subscriptions").has(t, "Guaranteed delivery (QoS 2) enabled", "Guaranteed delivery (QoS 2) disabled", "Base plan set to starter")
}

// TestAddOnToggles: each add-on switches on and off from its button; an
// unknown add-on is not found.
func TestAddOnToggles(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload)
	a := e.account(t, "Acme", "starter")
	other := e.account(t, "Bolt", "starter")
	b := e.browser(t)
	b.signIn(t, a)
	for _, x := range fleetmq.AddOns {
		b.get(t, "/subscriptions").has(t, `data-addon="`+string(x)+`" data-active="false"`, x.Title(), addonSummary(x))
		b.post(t, "/subscriptions/"+string(x), url.Values{"on": {"1"}}).redirects(t, "/subscriptions#addon-"+string(x))
		acc, err := e.Store.Account(e.ctx, a.ID)
		if err != nil || !acc.HasAddOn(x) {
			t.Fatalf("%s not on after enabling: %v", x, err)
		}
		b.get(t, "/subscriptions").has(t, `data-addon="`+string(x)+`" data-active="true"`)
	}
	b.post(t, "/subscriptions/"+string(fleetmq.AddOnLiveREST), url.Values{"on": {"0"}}).redirects(t, "/subscriptions#addon-live_rest_api")
	acc, _ := e.Store.Account(e.ctx, a.ID)
	if acc.HasAddOn(fleetmq.AddOnLiveREST) || !acc.HasAddOn(fleetmq.AddOnMgmtREST) {
		t.Fatalf("add-ons after disabling Live REST API: %v", acc.AddOns)
	}
	b.post(t, "/subscriptions/teleportation", url.Values{"on": {"1"}}).want(t, http.StatusNotFound)
	b.post(t, "/subscriptions/qos2", url.Values{"on": {"maybe"}}).want(t, http.StatusBadRequest)
	if o, _ := e.Store.Account(e.ctx, other.ID); len(o.AddOns) != 0 {
		t.Fatalf("the other account's add-ons changed: %v", o.AddOns)
	}
	b.get(t, "/subscriptions").has(t, `data-testid="plan-name">starter<`, `data-testid="plan-clients">10<`, `data-testid="plan-pool">10,000<`, `data-testid="plan-retention">7<`)
}

func addonSummary(x fleetmq.AddOn) string {
	switch x {
	case fleetmq.AddOnHistoryDownload:
		return "/api/v1/subscriber/history"
	case fleetmq.AddOnLiveREST:
		return "/api/v1/subscriber/publishers/live"
	case fleetmq.AddOnMgmtREST:
		return "subscriber-mqtt-passwords"
	}
	return "state/ and event/"
}

// TestClientsCRUD: register (validation, plan limit), list with Max QoS,
// history prefix and status, edit label and max QoS, delete with a
// confirmation; a connected device shows as connected with its QoS mix.
func TestClientsCRUD(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload)
	if err := e.Store.PutPlan(e.ctx, fleetmq.Plan{Name: "tiny", MaxPublisherClients: 2, QoS2DailyPool: 5, HistoryRetentionDays: 1}); err != nil {
		t.Fatal(err)
	}
	a := e.account(t, "Acme", "tiny")
	b := e.browser(t)
	b.signIn(t, a)
	b.get(t, "/clients").has(t, `data-testid="clients-empty"`, `id="create-client-form"`, `id="new-client-id"`, `id="new-client-label"`,
		`id="new-client-max-qos"`, `id="create-client"`)

	b.post(t, "/clients", url.Values{"client_id": {"bad/id"}}).want(t, http.StatusUnprocessableEntity).has(t, "Must be 1-128 letters", `value="bad/id"`)
	b.post(t, "/clients", url.Values{"client_id": {"ok"}, "max_qos": {"7"}}).want(t, http.StatusUnprocessableEntity).has(t, "Choose QoS 0 or 1.")
	b.post(t, "/clients", url.Values{"client_id": {"pump-1"}, "label": {"North"}, "max_qos": {"0"}}).redirects(t, "/clients/pump-1")
	b.get(t, "/clients/pump-1").has(t, "Client pump-1 was registered.")
	b.post(t, "/clients", url.Values{"client_id": {"pump-1"}}).want(t, http.StatusConflict).has(t, "pump-1")
	b.post(t, "/clients", url.Values{"client_id": {"pump-2"}}).redirects(t, "/clients/pump-2")
	full := b.get(t, "/clients").has(t, `data-testid="clients-count">2 of 2 registered<`, "<fieldset disabled", `data-testid="clients-limit-reason"`,
		"All 2 clients of the tiny plan are registered.")
	if full.count(`data-testid="client-row"`) != 2 {
		t.Fatal("want 2 client rows")
	}
	full.has(t, a.ID+"/<wbr>pump-1", "QoS 0", "QoS 1", `data-status="never"`, "North")
	b.post(t, "/clients", url.Values{"client_id": {"pump-3"}}).want(t, http.StatusConflict).has(t, "pump-3")

	// Edit.
	b.get(t, "/clients/pump-1/edit").has(t, `id="edit-client-label"`, `value="North"`, `id="edit-client-max-qos"`, `id="save-client"`)
	b.post(t, "/clients/pump-1/edit", url.Values{"label": {"North field"}, "max_qos": {"1"}}).redirects(t, "/clients/pump-1")
	c, _ := e.Store.Client(e.ctx, a.ID, "pump-1")
	if c.Label != "North field" || c.MaxPublishQoS != 1 {
		t.Fatalf("after edit: %+v", c)
	}
	b.post(t, "/clients/pump-1/edit", url.Values{"label": {strings.Repeat("x", 201)}}).want(t, http.StatusUnprocessableEntity).has(t, "at most 200")

	// A device connects and publishes: connected, with its QoS mix.
	_, pw, err := e.Service.CreateCredential(e.ctx, a.ID, control.NewCredential{Kind: fleetmq.KindPublisher})
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := e.Store.Credentials(e.ctx, a.ID, fleetmq.KindPublisher)
	e.Sync(e.ctx)
	d := e.connect(t, "pump-1", creds[0].Username, pw)
	for i := 0; i < 3; i++ {
		publish(t, d, a.ID+"/pump-1/telemetry/t", 0, false, `{"temperature":20}`)
	}
	publish(t, d, a.ID+"/pump-1/event/change", 1, false, `{"x":1}`)
	eventually(t, "the clients page to show pump-1 connected with its QoS mix", func() bool {
		p := b.get(t, "/clients")
		return strings.Contains(p.Body, `data-status="connected"`) && strings.Contains(p.Body, "Q0 75% · Q1 25% · Q2 0%")
	})
	d.Disconnect(&paho.Disconnect{})
	eventually(t, "pump-1 to show offline", func() bool {
		return strings.Contains(b.get(t, "/clients").Body, `data-status="offline"`)
	})

	// Delete: a confirmation page, then the POST.
	b.get(t, "/clients/pump-2/delete").has(t, "Delete this MQTT client?", `action="/clients/pump-2/delete"`, `data-testid="delete-client-confirm"`)
	b.post(t, "/clients/pump-2/delete", nil).redirects(t, "/clients")
	if _, err := e.Store.Client(e.ctx, a.ID, "pump-2"); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Fatalf("pump-2 after delete: %v", err)
	}
	if e.Policy.Snapshot().Accounts[a.ID].Clients["pump-2"] != nil {
		t.Fatal("the broker still has the deleted client")
	}
	b.get(t, "/clients").has(t, "Client pump-2 was deleted.", `data-testid="clients-count">1 of 2 registered<`).hasNot(t, "<fieldset disabled")
	b.get(t, "/clients/pump-2").want(t, http.StatusNotFound)
}
