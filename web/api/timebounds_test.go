package api_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// TestHistoryTimeBounds: the REST history route's from and to at their
// edges: a "to" between two microseconds keeps the record just before it,
// a "from" there leaves it out, and to=0001-01-01T00:00:00Z (the zero
// time) is refused with 422, not answered as if there were no bound.
func TestHistoryTimeBounds(t *testing.T) {
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns, "dev1")
	at := t0.Add(-time.Hour)
	if err := e.Store.AppendHistory(e.ctx, []*fleetmq.Record{{AccountID: A.ID, ClientID: "dev1", Topic: A.topic("dev1", "state/x"),
		Class: "state", QoS: 1, PublishedQoS: 1, Payload: []byte(`{"v":1}`), Received: at}}); err != nil {
		t.Fatal(err)
	}
	half := url.QueryEscape(at.Add(500 * time.Nanosecond).Format(time.RFC3339Nano))
	var p historyPage
	e.get(t, A.Token, "/history?to="+half).ok(t, http.StatusOK, &p)
	if len(p.Records) != 1 {
		t.Errorf("to=%s: %d records, want 1 (the record at %s is before to)", half, len(p.Records), at.Format(time.RFC3339Nano))
	}
	p = historyPage{}
	e.get(t, A.Token, "/history?from="+half).ok(t, http.StatusOK, &p)
	if len(p.Records) != 0 {
		t.Errorf("from=%s: %d records, want 0 (the record at %s is before from)", half, len(p.Records), at.Format(time.RFC3339Nano))
	}
	r := e.get(t, A.Token, "/history?from=2030-01-01T00:00:00Z&to=0001-01-01T00:00:00Z")
	if r.Status != http.StatusUnprocessableEntity {
		t.Errorf("from=2030-01-01 to=0001-01-01: status %d, want 422: %s", r.Status, r)
	}
}
