package portal_test

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// TestAccountsAreIsolated: every page of account A shows only A's
// clients, tokens, credentials and history, and every id of B's (guessed
// into URLs and forms) is not found, changes nothing, and leaks nothing;
// the same client id in both accounts is two separate clients.
func TestAccountsAreIsolated(t *testing.T) {
	t.Parallel()
	e := start(t)
	ctx := e.ctx
	a := e.account(t, "Acme", "starter", fleetmq.AddOnQoS2)
	bo := e.account(t, "Bolt", "growth", fleetmq.AddOnQoS2, fleetmq.AddOnMgmtREST)
	label := func(s string) *string { return &s }
	for _, c := range []struct {
		acc, id, label string
	}{{a.ID, "dev1", "A first"}, {a.ID, "a-only", "A second"}, {bo.ID, "dev1", "B-secret-label-1"}, {bo.ID, "b-only", "B-secret-label-2"}} {
		if _, err := e.Service.CreateClient(ctx, c.acc, control.ClientInput{ClientID: c.id, Label: label(c.label)}); err != nil {
			t.Fatal(err)
		}
	}
	bTok, _, err := e.Service.CreateRESTToken(ctx, bo.ID, control.NewRESTToken{Label: "B-token-label"})
	if err != nil {
		t.Fatal(err)
	}
	aTok, _, err := e.Service.CreateRESTToken(ctx, a.ID, control.NewRESTToken{Label: "A token"})
	if err != nil {
		t.Fatal(err)
	}
	bSub, _, err := e.Service.CreateCredential(ctx, bo.ID, control.NewCredential{Kind: fleetmq.KindSubscriber, Label: "B-sub-label"})
	if err != nil {
		t.Fatal(err)
	}
	bPub, _, err := e.Service.CreateCredential(ctx, bo.ID, control.NewCredential{Kind: fleetmq.KindPublisher, Label: "B-pub-label"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Service.CreateCredential(ctx, a.ID, control.NewCredential{Kind: fleetmq.KindPublisher, Label: "A fleet"}); err != nil {
		t.Fatal(err)
	}
	// History of dev1 in both accounts.
	now := t0.Add(-time.Minute)
	recs := []*fleetmq.Record{
		{AccountID: a.ID, ClientID: "dev1", Topic: a.ID + "/dev1/telemetry/t", Class: "telemetry", Payload: []byte(`{"temperature":21.5,"who":"A-payload"}`), Received: now},
		{AccountID: bo.ID, ClientID: "dev1", Topic: bo.ID + "/dev1/telemetry/t", Class: "telemetry", Payload: []byte(`{"temperature":99,"who":"B-payload"}`), Received: now},
		{AccountID: bo.ID, ClientID: "dev1", Topic: bo.ID + "/dev1/state/summary", Class: "state", Payload: []byte(`{"who":"B-state"}`), Received: now},
	}
	if err := e.Store.AppendHistory(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := e.Store.AddUsage(ctx, []fleetmq.DailyUsage{{AccountID: bo.ID, Day: t0.Format(time.DateOnly), Messages: [3]int64{777001, 0, 0}}}, nil); err != nil {
		t.Fatal(err)
	}

	bBrowser := e.browser(t)
	bBrowser.signIn(t, bo)
	bBefore := e.state(t, bo, bBrowser)

	b := e.browser(t)
	b.signIn(t, a)
	secrets := []string{bo.ID, "b-only", "B-secret-label", bTok.ID, bTok.Prefix, "B-token-label", bSub.ID, bSub.Username, "B-sub-label",
		bPub.ID, bPub.Username, "B-pub-label", "B-payload", "B-state", "777,001", "777001", bo.Email, "Bolt"}
	for _, path := range []string{"/overview", "/clients", "/clients/dev1", "/clients/dev1?field=temperature&range=1h", "/clients/dev1/edit",
		"/clients/dev1/delete", "/credentials", "/subscriptions", "/settings", "/settings/tokens", "/settings/tokens/" + aTok.ID + "/revoke"} {
		b.get(t, path).want(t, http.StatusOK).hasNot(t, secrets...)
	}
	b.get(t, "/clients/dev1").has(t, "A-payload", "A first")

	// B's ids in A's URLs and forms: not found, nothing leaks.
	for _, c := range []struct {
		method, path string
		form         url.Values
	}{
		{"GET", "/clients/b-only", nil},
		{"GET", "/clients/b-only/edit", nil},
		{"POST", "/clients/b-only/edit", url.Values{"label": {"hijack"}, "max_qos": {"0"}}},
		{"GET", "/clients/b-only/delete", nil},
		{"POST", "/clients/b-only/delete", url.Values{}},
		{"GET", "/credentials/" + bSub.ID + "/revoke", nil},
		{"POST", "/credentials/" + bSub.ID + "/revoke", url.Values{}},
		{"POST", "/credentials/" + bPub.ID + "/revoke", url.Values{}},
		{"GET", "/settings/tokens/" + bTok.ID + "/revoke", nil},
		{"POST", "/settings/tokens/" + bTok.ID + "/revoke", url.Values{}},
		{"GET", "/clients/" + url.PathEscape(bo.ID+"/dev1"), nil},
	} {
		var p *page
		if c.method == "GET" {
			p = b.get(t, c.path)
		} else {
			p = b.post(t, c.path, c.form)
		}
		p.want(t, http.StatusNotFound).hasNot(t, secrets...)
	}

	// Editing the shared client id changes A's client only.
	b.post(t, "/clients/dev1/edit", url.Values{"label": {"A renamed"}, "max_qos": {"0"}}).redirects(t, "/clients/dev1")
	ac, err := e.Store.Client(ctx, a.ID, "dev1")
	if err != nil || ac.Label != "A renamed" || ac.MaxPublishQoS != 0 {
		t.Fatalf("A's dev1 after the edit: %+v, %v", ac, err)
	}
	// Deleting it too.
	b.post(t, "/clients/dev1/delete", nil).redirects(t, "/clients")
	if _, err := e.Store.Client(ctx, a.ID, "dev1"); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
		t.Fatalf("A's dev1 after delete: %v", err)
	}
	if after := e.state(t, bo, bBrowser); !reflect.DeepEqual(after, bBefore) {
		t.Fatalf("B's account changed through A's portal:\nbefore %+v\nafter  %+v", bBefore, after)
	}
	// B still sees its own.
	bBrowser.get(t, "/clients").has(t, "b-only", "B-secret-label-1")
	bBrowser.get(t, "/clients/dev1").has(t, "B-payload").hasNot(t, "A-payload", a.ID)
}
