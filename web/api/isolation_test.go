package api_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
)

// TestIsolation: two accounts with every add-on, the same client id
// "dev1" in both, and B's data made through B's own token and devices. A
// token of A never reads or changes anything of B: B's client ids are
// not_found to A on GET, PATCH and DELETE and B's clients are untouched
// afterwards (a connected device of B stays connected); A's changes to
// its own "dev1" leave B's "dev1" alone; B's credential ids are not_found
// to A on both revoke routes and B's credentials keep working; history
// cursors taken from B's pages reveal none of B's records to A; history
// filters naming B's account are refused; lists, usage and the live view
// show A's data only.
func TestIsolation(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	B := e.tenant(t, "B", "starter", allAddOns)

	// Each account registers its devices with its own token.
	for _, c := range []struct {
		tn  *tenant
		ids []string
	}{{A, []string{"dev1"}}, {B, []string{"dev1", "b-only", "b-two"}}} {
		for _, id := range c.ids {
			e.req(t, c.tn.Token, "POST", "/publishers", map[string]any{"client_id": id, "label": "label of " + id, "max_publish_qos": 2}).ok(t, http.StatusCreated, nil)
		}
	}
	var bSub, bPub credential
	e.req(t, B.Token, "POST", "/subscriber-mqtt-passwords", map[string]any{"label": "B dash"}).ok(t, http.StatusCreated, &bSub)
	e.req(t, B.Token, "POST", "/publisher-credentials", map[string]any{"label": "B fleet"}).ok(t, http.StatusCreated, &bPub)

	// Devices of both publish; B publishes more, so counts tell them apart.
	aDev := e.dial(t, "dev1", A.PubUser, A.PubPass)
	bDev := e.dial(t, "dev1", B.PubUser, B.PubPass)
	bOnly := e.dial(t, "b-only", bPub.Username, bPub.Password)
	bWatch := e.dial(t, "watch", bSub.Username, bSub.Password)
	if rc := bWatch.SubCode(t, B.ID+"/#", 1); rc != 1 {
		t.Fatalf("B's subscriber: 0x%02x", rc)
	}
	for i := 0; i < 3; i++ {
		aDev.Pub(t, A.topic("dev1", "state/s"), 1, `{"a":`+itoa(i)+`}`)
	}
	for i := 0; i < 12; i++ {
		bDev.Pub(t, B.topic("dev1", "state/s"), 1, `{"b":`+itoa(i)+`}`)
		bOnly.Pub(t, B.topic("b-only", "event/e"), 1, `{"b-only":`+itoa(i)+`}`)
	}
	for i := 0; i < 24; i++ {
		bWatch.Next(t)
	}

	bState := func() []byte {
		t.Helper()
		r := e.get(t, B.Token, "/publishers?limit=1000").ok(t, http.StatusOK, nil)
		return r.Body
	}
	before := bState()

	// B's client ids, guessed by A.
	for _, id := range []string{"b-only", "b-two"} {
		e.get(t, A.Token, "/publishers/"+id).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
		e.req(t, A.Token, "PATCH", "/publishers/"+id, map[string]any{"label": "A was here", "max_publish_qos": 0}).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
		e.req(t, A.Token, "DELETE", "/publishers/"+id, nil).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
	}
	// A changes and removes its own dev1; B's dev1 stays.
	e.req(t, A.Token, "PATCH", "/publishers/dev1", map[string]any{"label": "A's", "max_publish_qos": 0}).ok(t, http.StatusOK, nil)
	if after := bState(); !bytes.Equal(before, after) {
		t.Fatalf("B's clients changed by A's calls:\nbefore %s\nafter  %s", before, after)
	}
	bDev.Pub(t, B.topic("dev1", "state/s"), 2, `{"b":"still at QoS 2"}`)
	bWatch.Next(t)
	e.req(t, A.Token, "DELETE", "/publishers/dev1", nil).ok(t, http.StatusNoContent, nil)
	aDev.Disconnected(t, atOnce)
	if after := bState(); !bytes.Equal(before, after) {
		t.Fatalf("B's clients changed by A's DELETE of its own dev1:\nbefore %s\nafter  %s", before, after)
	}
	bDev.StillConnected(t)
	bOnly.StillConnected(t)
	bDev.Pub(t, B.topic("dev1", "state/s"), 1, `{"b":"after A's delete"}`)
	bWatch.Next(t)

	// B's credential ids, on both routes.
	for _, id := range []string{bSub.ID, bPub.ID, B.SubCredID, B.PubCredID} {
		for _, path := range []string{"/subscriber-mqtt-passwords/", "/publisher-credentials/"} {
			e.req(t, A.Token, "DELETE", path+id, nil).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
		}
	}
	bWatch.StillConnected(t)
	bOnly.StillConnected(t)
	for _, path := range []string{"/subscriber-mqtt-passwords", "/publisher-credentials"} {
		for id, c := range e.credentials(t, B.Token, path) {
			if !c.Active || c.RevokedAt != nil {
				t.Fatalf("B's credential %s after A's calls: %+v", id, c)
			}
		}
	}
	e.dial(t, "b-two", bPub.Username, bPub.Password)
	e.dial(t, "watch2", bSub.Username, bSub.Password)

	// Lists show A's own only.
	if ids := e.publisherIDs(t, A.Token, 1); len(ids) != 0 {
		t.Fatalf("A's clients after deleting dev1: %v", ids)
	}
	for _, path := range []string{"/subscriber-mqtt-passwords", "/publisher-credentials"} {
		l := e.credentials(t, A.Token, path)
		for _, id := range []string{bSub.ID, bPub.ID, B.SubCredID, B.PubCredID} {
			if _, ok := l[id]; ok {
				t.Fatalf("A's %s lists B's credential %s", path, id)
			}
		}
		if len(l) != 1 {
			t.Fatalf("A's %s: %+v", path, l)
		}
	}

	// History: A sees its 3 records only, whatever it asks.
	aOnly := func(what string, recs []history.Record) {
		t.Helper()
		for _, r := range recs {
			if r.AccountID != A.ID || !strings.HasPrefix(r.Topic, A.ID+"/") {
				t.Fatalf("%s: A received B's record %s", what, r.Topic)
			}
		}
	}
	recs, _ := e.pageJSON(t, A.Token, "", 2)
	if len(recs) != 3 {
		t.Fatalf("A's history: %d records, want 3", len(recs))
	}
	aOnly("A's history", recs)
	for _, q := range []string{"client_id=b-only", "topic=" + url.QueryEscape("+/b-only/#"), "class=event", "station_controller_device_id=x"} {
		var p historyPage
		e.get(t, A.Token, "/history?"+q).ok(t, http.StatusOK, &p)
		if len(p.Records) != 0 {
			t.Fatalf("A's history with %s: %d records", q, len(p.Records))
		}
	}
	// Cursors taken from B's pages (both orders), used by A.
	for _, order := range []string{"desc", "asc"} {
		var bp historyPage
		e.get(t, B.Token, "/history?limit=5&order="+order).ok(t, http.StatusOK, &bp)
		if bp.NextCursor == "" || len(bp.Records) != 5 {
			t.Fatalf("B's first %s page: %d records, cursor %q", order, len(bp.Records), bp.NextCursor)
		}
		for _, format := range []string{"json", "ndjson", "csv"} {
			r := e.get(t, A.Token, "/history?order="+order+"&format="+format+"&limit=100&cursor="+url.QueryEscape(bp.NextCursor)).ok(t, http.StatusOK, nil)
			if bytes.Contains(r.Body, []byte(B.ID)) || bytes.Contains(r.Body, []byte("b-only")) || bytes.Contains(r.Body, []byte(`\"b\"`)) {
				t.Fatalf("%s: B's cursor revealed B's data to A", r)
			}
		}
		var ap historyPage
		e.get(t, A.Token, "/history?limit=100&order="+order+"&cursor="+url.QueryEscape(bp.NextCursor)).ok(t, http.StatusOK, &ap)
		aOnly("A with B's cursor", ap.Records)
	}
	// Topic filters that name B's account are refused.
	for _, q := range []string{
		"topic=" + url.QueryEscape(B.ID+"/#"),
		"topic=" + url.QueryEscape(B.ID+"/dev1/state/s"),
	} {
		r := e.get(t, A.Token, "/history?"+q)
		r.problem(t, http.StatusUnprocessableEntity, fleetmq.CodeValidation)
	}
	// Expressions run within A's account whatever they say: one naming B
	// finds nothing, one matching both accounts finds A's only.
	for _, expr := range []string{
		"^" + B.ID + "/",
		"^" + A.ID + "/|^" + B.ID + "/",
		"^" + A.ID + "/.*|" + B.ID + "/.*",
		"^(" + A.ID + "|" + B.ID + ")/",
		"^[0-9a-f-]+/",
		".*",
	} {
		for _, format := range []string{"json", "ndjson", "csv"} {
			r := e.get(t, A.Token, "/history?format="+format+"&topic_regex="+url.QueryEscape(expr)).ok(t, http.StatusOK, nil)
			if bytes.Contains(r.Body, []byte(B.ID)) || bytes.Contains(r.Body, []byte("b-only")) {
				t.Fatalf("%s: the expression %s run by A revealed B's data", r, expr)
			}
		}
		var page historyPage
		e.get(t, A.Token, "/history?topic_regex="+url.QueryEscape(expr)).ok(t, http.StatusOK, &page)
		aOnly("A's expression "+expr, page.Records)
	}

	// Usage: A's 3 messages, B's 26.
	ua := e.usageUntil(t, A.Token, "", "A's 3 messages", func(u usage) bool { return u.Total.Total >= 3 })
	ub := e.usageUntil(t, B.Token, "", "B's 26 messages", func(u usage) bool { return u.Total.Total >= 26 })
	if ua.AccountID != A.ID || ua.Total != (qosMix{Q1: 3, Total: 3, Q1Pct: 100}) {
		t.Fatalf("A's usage: %+v", ua)
	}
	if ub.AccountID != B.ID || ub.Total.Total != 26 || ub.Total.Q2 != 1 {
		t.Fatalf("B's usage: %+v", ub)
	}
	if len(ua.Days) != 1 || ua.Days[0].Messages.Total != 3 {
		t.Fatalf("A's days: %+v", ua.Days)
	}

	// Live: A has no clients left; B's are not A's to see.
	if v := e.live(t, A.Token); len(v) != 0 {
		t.Fatalf("A's live view: %+v", v)
	}
	for _, id := range []string{"dev1", "b-only"} {
		e.get(t, A.Token, "/publishers/live?client_id="+id).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
	}
	if v := e.live(t, B.Token); len(v) != 3 || !v["dev1"].Connected || !v["b-only"].Connected || v["dev1"].QoSMixToday.Total != 14 {
		t.Fatalf("B's live view: %+v", v)
	}
}
