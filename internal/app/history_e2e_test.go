package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/app"
)

// storedHistory returns an account's history, oldest first.
func (p *platform) storedHistory(t *testing.T, accountID string) []*fleetmq.Record {
	t.Helper()
	var out []*fleetmq.Record
	err := p.Store.QueryHistory(p.ctx, &fleetmq.HistoryQuery{AccountID: accountID, Ascending: true}, func(r *fleetmq.Record) error {
		c := *r
		c.Payload = append([]byte(nil), r.Payload...)
		out = append(out, &c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// historyCount polls until an account's history holds want records.
func (p *platform) historyCount(t *testing.T, accountID string, want int) []*fleetmq.Record {
	t.Helper()
	var recs []*fleetmq.Record
	eventually(t, "history to hold the QoS 0 messages", func() bool {
		recs = p.storedHistory(t, accountID)
		return len(recs) >= want
	})
	return recs
}

// TestPlatformHistory: every accepted message of two accounts is stored
// with its fields (normalized topic, class, published and effective QoS,
// retain, v5 properties, station controller), QoS 1/2 ones before the
// publisher has its PUBACK/PUBREC; refused messages are not stored; each
// account's history holds only its own messages.
func TestPlatformHistory(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	p.plan(t, "pool1", 5, 1)
	A := p.newTenant(t, "A", "pool1", true)
	p.addClient(t, A, "dev1", 2)
	B := p.newTenant(t, "B", "pool1", false, "dev1")
	if err := p.Service.PutLayout(p.ctx, &fleetmq.Layout{Name: "acme", WireRoot: "acme",
		Rules: []string{"acme/{client_id}/sensor/+=telemetry/{1}"}, Fanout: false}); err != nil {
		t.Fatal(err)
	}
	p.synced(t)
	addr := p.MQTTAddr
	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)

	// QoS 1 with v5 properties and a station controller: in history as
	// soon as PUBACK arrives (no polling).
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "telemetry/power"), QoS: 1,
		Payload: []byte(`{"station_controller_device_id":"sc-7","w":1200}`),
		Properties: &paho.PublishProperties{ContentType: "application/json", PayloadFormat: paho.Byte(1),
			User: paho.UserProperties{{Key: "site", Value: "north"}, {Key: "site", Value: "south"}}}})
	got := p.storedHistory(t, A.ID)
	if len(got) != 1 {
		t.Fatalf("after PUBACK, A's history holds %d records, want 1", len(got))
	}
	r := got[0]
	if r.AccountID != A.ID || r.ClientID != "dev1" || r.Topic != A.topic("dev1", "telemetry/power") || r.Class != "telemetry" ||
		r.QoS != 1 || r.PublishedQoS != 1 || r.Retain || r.StationControllerDeviceID != "sc-7" ||
		r.ContentType != "application/json" || r.PayloadFormat != 1 || string(r.Payload) != `{"station_controller_device_id":"sc-7","w":1200}` {
		t.Errorf("stored record %+v", r)
	}
	if len(r.UserProperties) != 2 || r.UserProperties[0] != (fleetmq.UserProperty{Key: "site", Value: "north"}) || r.UserProperties[1].Value != "south" {
		t.Errorf("user properties %+v, want site=north, site=south in order", r.UserProperties)
	}
	if !r.Received.Equal(p.clock.Now().Truncate(time.Microsecond)) {
		t.Errorf("received %v, want the broker clock %v", r.Received, p.clock.Now())
	}

	// QoS 2 retained takes the one pool unit; the next QoS 2 is demoted.
	// Both are stored by the time the QoS 2 flow completes.
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "state/mode"), QoS: 2, Retain: true, Payload: []byte("auto")})
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "event/door"), QoS: 2, Payload: []byte("open")})
	// A vendor layout without fanout: normalized, stored, not delivered.
	pubA.Pub(t, "acme/dev1/sensor/temp", 1, "21.5")
	// Refused: another client's prefix and a topic outside any class.
	refusedPub(t, pubA, A.topic("dev2", "state/x"))
	refusedPub(t, pubA, A.topic("dev1", "unknown/x"))
	refusedPub(t, pubA, B.topic("dev1", "state/x"))
	// QoS 0 is stored too (without an acknowledgement to wait for).
	pubA.Pub(t, A.topic("dev1", "sample/s"), 0, "s0")
	pubB.Pub(t, B.topic("dev1", "state/mode"), 1, "b-manual")
	pubB.Pub(t, B.topic("dev1", "event/door"), 0, "b-open")

	got = p.historyCount(t, A.ID, 5)
	type row struct {
		topic, class, payload string
		qos, published        byte
		retain                bool
	}
	want := []row{
		{A.topic("dev1", "telemetry/power"), "telemetry", `{"station_controller_device_id":"sc-7","w":1200}`, 1, 1, false},
		{A.topic("dev1", "state/mode"), "state", "auto", 2, 2, true},
		{A.topic("dev1", "event/door"), "event", "open", 1, 2, false}, // demoted
		{A.topic("dev1", "telemetry/temp"), "telemetry", "21.5", 1, 1, false},
		{A.topic("dev1", "sample/s"), "sample", "s0", 0, 0, false},
	}
	if len(got) != len(want) {
		t.Fatalf("A's history holds %d records, want %d (refused publishes must not be stored): %v", len(got), len(want), topics(got))
	}
	for i, w := range want {
		g := got[i]
		have := row{g.Topic, g.Class, string(g.Payload), g.QoS, g.PublishedQoS, g.Retain}
		if have != w {
			t.Errorf("A record %d: %+v, want %+v", i, have, w)
		}
		if g.AccountID != A.ID || g.ClientID != "dev1" {
			t.Errorf("A record %d belongs to %s/%s", i, g.AccountID, g.ClientID)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i].ID <= got[i-1].ID {
			t.Errorf("ids not increasing in receive order: %d then %d", got[i-1].ID, got[i].ID)
		}
	}
	gotB := p.historyCount(t, B.ID, 2)
	if len(gotB) != 2 || gotB[0].Topic != B.topic("dev1", "state/mode") || string(gotB[1].Payload) != "b-open" {
		t.Fatalf("B's history: %v, want its own two messages only", topics(gotB))
	}
	for _, g := range gotB {
		if g.AccountID != B.ID || !strings.HasPrefix(g.Topic, B.ID+"/") {
			t.Errorf("B's history holds %s (%s)", g.Topic, g.AccountID)
		}
	}

	// The ingest counters behind /metrics agree. The writer counts a batch
	// after its commit, so a reader can see the rows an instant before the
	// count: poll for it.
	var st ingest.Stats
	eventually(t, "the ingest writer to count 7 records written", func() bool { st = p.Ingest.Stats(); return st.Written >= 7 })
	if st.Written != 7 || st.DroppedQoS0 != 0 || st.Abandoned != 0 {
		t.Errorf("ingest stats %+v, want 7 written, nothing dropped or abandoned", st)
	}
}

// TestPlatformHistoryTopicPrefix: with a topic_prefix, stored topics are
// the platform path without it.
func TestPlatformHistoryTopicPrefix(t *testing.T) {
	t.Parallel()
	p := startPlatform(t, func(c *app.Config) { c.TopicPrefix = "fleet/v1" })
	A := p.newTenant(t, "A", "starter", false, "dev1")
	p.synced(t)
	pub := dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	pub.Pub(t, "fleet/v1/"+A.topic("dev1", "state/x"), 1, "on")
	got := p.storedHistory(t, A.ID)
	if len(got) != 1 || got[0].Topic != A.topic("dev1", "state/x") {
		t.Fatalf("stored %v, want [%s]", topics(got), A.topic("dev1", "state/x"))
	}
}

// TestPlatformCloseDrainsIngest: messages accepted before Close are all
// stored when Close returns, and a restarted platform on the same data
// directory serves them.
func TestPlatformCloseDrainsIngest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startPlatform(t, func(c *app.Config) { c.DataDir = dir })
	p.plan(t, "unthrottled", 10, 0) // no publish rates: the burst is read at once
	A := p.newTenant(t, "A", "unthrottled", false, "dev1")
	p.synced(t)
	pub := dialV3(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	const n = 2000
	for i := range n {
		pub.Client.Publish(A.topic("dev1", "telemetry/seq"), 0, false, []byte{byte(i)}) // QoS 0: not waited for
	}
	pub.Pub(t, A.topic("dev1", "telemetry/seq"), 1, false, "last") // TCP order: everything before it was read
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Ingest.Stats()
	if st.Written+st.DroppedQoS0 != n+1 || st.Abandoned != 0 {
		t.Fatalf("after Close: %+v, want %d written or counted as dropped", st, n+1)
	}
	store, err := app.OpenStore(context.Background(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	count := 0
	if err := store.QueryHistory(context.Background(), &fleetmq.HistoryQuery{AccountID: A.ID}, func(*fleetmq.Record) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	if int64(count) != st.Written {
		t.Fatalf("reopened store holds %d records, the writer committed %d", count, st.Written)
	}
}

func topics(recs []*fleetmq.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Topic + "=" + string(r.Payload)
	}
	return out
}
