package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
)

// publisher is a Publisher as a client decodes it.
type publisher struct {
	ClientID           string    `json:"client_id"`
	Label              string    `json:"label"`
	MaxPublishQoS      int       `json:"max_publish_qos"`
	HistoryTopicPrefix string    `json:"history_topic_prefix"`
	CreatedAt          time.Time `json:"created_at"`
}

type publisherList struct {
	Publishers []publisher `json:"publishers"`
	NextCursor string      `json:"next_cursor"`
}

// publisherIDs pages through GET /publishers with limit and returns the
// client ids in order.
func (e *env) publisherIDs(t *testing.T, token string, limit int) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("GET /publishers: the cursor never ends")
		}
		var l publisherList
		path := "/publishers?limit=" + itoa(limit)
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		e.get(t, token, path).ok(t, http.StatusOK, &l)
		if len(l.Publishers) > limit {
			t.Fatalf("page of %d with limit %d", len(l.Publishers), limit)
		}
		for _, p := range l.Publishers {
			ids = append(ids, p.ClientID)
		}
		if l.NextCursor == "" {
			return ids
		}
		cursor = l.NextCursor
	}
}

// TestPublishersCRUD: register, read, list in pages, change and remove
// MQTT clients; the plan's client limit is a 409 conflict; a duplicate is
// a conflict; max_publish_qos 2 needs the QoS 2 add-on (403
// addon_required naming qos2) and works once it is on; a removed client
// frees its place.
func TestPublishersCRUD(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.plan(t, "three", 3, 100)
	A := e.tenant(t, "A", "three", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})

	var p publisher
	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "pump-2", "label": " Pump 2 "}).ok(t, http.StatusCreated, &p)
	want := publisher{ClientID: "pump-2", Label: "Pump 2", MaxPublishQoS: 1, HistoryTopicPrefix: A.ID + "/pump-2", CreatedAt: t0}
	if p != want {
		t.Fatalf("created %+v, want %+v", p, want)
	}
	var got publisher
	e.get(t, A.Token, "/publishers/pump-2").ok(t, http.StatusOK, &got)
	if got != want {
		t.Fatalf("GET %+v, want %+v", got, want)
	}
	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "pump-1", "max_publish_qos": 0}).ok(t, http.StatusCreated, &p)
	if p.MaxPublishQoS != 0 || p.Label != "" {
		t.Fatalf("created %+v", p)
	}
	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "pump-2"}).problem(t, http.StatusConflict, fleetmq.CodeConflict)
	pr := e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "pump-3", "max_publish_qos": 2}).problem(t, http.StatusForbidden, fleetmq.CodeAddOnRequired)
	if pr.AddOn != string(fleetmq.AddOnQoS2) {
		t.Fatalf("max_publish_qos 2 refused naming %q, want qos2", pr.AddOn)
	}
	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "A.b_c:d@e-3"}).ok(t, http.StatusCreated, nil)
	pr = e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "pump-4"}).problem(t, http.StatusConflict, fleetmq.CodeConflict)
	if pr.Detail == "" {
		t.Fatal("the plan limit's conflict says nothing")
	}

	// Listed by client id, in pages of any size, without gaps or repeats.
	all := []string{"A.b_c:d@e-3", "pump-1", "pump-2"}
	for _, limit := range []int{1, 2, 3, 100} {
		if ids := e.publisherIDs(t, A.Token, limit); !equal(ids, all) {
			t.Fatalf("limit %d: %v, want %v", limit, ids, all)
		}
	}

	// PATCH: the label alone keeps max_publish_qos; QoS 2 needs the add-on.
	e.req(t, A.Token, "PATCH", "/publishers/pump-2", map[string]any{"label": "north"}).ok(t, http.StatusOK, &p)
	if p.Label != "north" || p.MaxPublishQoS != 1 {
		t.Fatalf("after the label change: %+v", p)
	}
	e.req(t, A.Token, "PATCH", "/publishers/pump-2", map[string]any{"max_publish_qos": 0}).ok(t, http.StatusOK, &p)
	if p.Label != "north" || p.MaxPublishQoS != 0 {
		t.Fatalf("after the QoS change: %+v", p)
	}
	pr = e.req(t, A.Token, "PATCH", "/publishers/pump-2", map[string]any{"max_publish_qos": 2, "label": "south"}).problem(t, http.StatusForbidden, fleetmq.CodeAddOnRequired)
	if pr.AddOn != string(fleetmq.AddOnQoS2) {
		t.Fatalf("max_publish_qos 2 refused naming %q, want qos2", pr.AddOn)
	}
	e.get(t, A.Token, "/publishers/pump-2").ok(t, http.StatusOK, &p)
	if p.Label != "north" || p.MaxPublishQoS != 0 {
		t.Fatalf("a refused PATCH changed the client: %+v", p)
	}
	if err := e.Service.SetAddOn(e.ctx, A.ID, fleetmq.AddOnQoS2, true); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.ctx) // as the portal does after a change
	e.req(t, A.Token, "PATCH", "/publishers/pump-2", map[string]any{"max_publish_qos": 2}).ok(t, http.StatusOK, &p)
	if p.MaxPublishQoS != 2 || p.Label != "north" || !p.CreatedAt.Equal(t0) {
		t.Fatalf("after QoS 2: %+v", p)
	}
	e.req(t, A.Token, "PATCH", "/publishers/nobody", map[string]any{"label": "x"}).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)

	// DELETE frees a place.
	e.req(t, A.Token, "DELETE", "/publishers/pump-1", nil).ok(t, http.StatusNoContent, nil)
	e.get(t, A.Token, "/publishers/pump-1").problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
	e.req(t, A.Token, "DELETE", "/publishers/pump-1", nil).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "pump-4", "max_publish_qos": 2}).ok(t, http.StatusCreated, nil)
	if ids := e.publisherIDs(t, A.Token, 2); !equal(ids, []string{"A.b_c:d@e-3", "pump-2", "pump-4"}) {
		t.Fatalf("after the changes: %v", ids)
	}
}

// TestPublisherChangesReachDevices: changes through the API apply to a
// connected device at once. A device registered through the API connects
// with the fleet credential; a lowered max_publish_qos makes its very
// next PUBLISH above the limit end its connection (v5: DISCONNECT 0x9B);
// DELETE disconnects a connected device and it cannot connect again; a
// device registered through the API can connect right after the POST.
func TestPublisherChangesReachDevices(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	B := e.tenant(t, "B", "starter", allAddOns, "dev1")

	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "dev1", "max_publish_qos": 2}).ok(t, http.StatusCreated, nil)
	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "dev2"}).ok(t, http.StatusCreated, nil)
	// No waiting for a reload: the POST applied at once.
	dev1 := e.dial(t, "dev1", A.PubUser, A.PubPass)
	dev2 := e.dial(t, "dev2", A.PubUser, A.PubPass)
	bdev1 := e.dial(t, "dev1", B.PubUser, B.PubPass)
	dev1.Pub(t, A.topic("dev1", "state/a"), 2, "at 2")

	// Lower dev1 to 0: its next QoS 1 publish ends the connection.
	e.req(t, A.Token, "PATCH", "/publishers/dev1", map[string]any{"max_publish_qos": 0}).ok(t, http.StatusOK, nil)
	// (paho waits for a PUBACK that never comes: do not wait with it.)
	go dev1.TryPublish(&paho.Publish{Topic: A.topic("dev1", "state/a"), QoS: 1, Payload: []byte("above the limit")})
	if rc := dev1.Disconnected(t, atOnce); rc != 0x9B {
		t.Fatalf("dev1 disconnected with 0x%02x, want 0x9B (QoS not supported)", rc)
	}
	// It may still connect and publish at QoS 0; the v5 CONNACK says so.
	dev1 = e.dial(t, "dev1", A.PubUser, A.PubPass)
	dev1.Pub(t, A.topic("dev1", "telemetry/x"), 0, "at 0")

	// B's dev1 (the same client id in another account) was not touched.
	bdev1.Pub(t, B.topic("dev1", "state/b"), 1, "B at 1")
	bdev1.StillConnected(t)

	// DELETE dev2: disconnected at once, refused afterwards.
	dev2.Pub(t, A.topic("dev2", "event/e"), 1, "before")
	e.req(t, A.Token, "DELETE", "/publishers/dev2", nil).ok(t, http.StatusNoContent, nil)
	dev2.Disconnected(t, atOnce)
	e.refused(t, "dev2", A.PubUser, A.PubPass)
	bdev1.StillConnected(t)
	dev1.StillConnected(t)

	// Its stored history stays.
	var page historyPage
	if err := e.Service.SetAddOn(e.ctx, A.ID, fleetmq.AddOnHistoryDownload, true); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.ctx) // as the portal does after a change
	e.get(t, A.Token, "/history?client_id=dev2").ok(t, http.StatusOK, &page)
	if len(page.Records) != 1 || page.Records[0].Topic != A.topic("dev2", "event/e") {
		t.Fatalf("dev2's history after the DELETE: %+v", page.Records)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
