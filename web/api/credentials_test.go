package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
)

// credential is a Credential (with the password when just created) as a
// client decodes it.
type credential struct {
	ID        string     `json:"id"`
	Username  string     `json:"username"`
	Label     string     `json:"label"`
	Filters   []string   `json:"filters"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	Active    bool       `json:"active"`
	Password  string     `json:"password"`
}

// credentials lists a credential route and checks that no secret is in
// the answer.
func (e *env) credentials(t *testing.T, token, path string) map[string]credential {
	t.Helper()
	r := e.get(t, token, path)
	var l struct {
		Credentials []credential `json:"credentials"`
	}
	r.ok(t, http.StatusOK, &l)
	var raw struct {
		Credentials []map[string]json.RawMessage `json:"credentials"`
	}
	json.Unmarshal(r.Body, &raw)
	out := map[string]credential{}
	for i, c := range l.Credentials {
		for k := range raw.Credentials[i] {
			if strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "hash") {
				t.Fatalf("%s: a listed credential has %q", r, k)
			}
		}
		out[c.ID] = c
	}
	return out
}

// TestSubscriberPasswords: a subscriber MQTT password created through the
// API is returned once with its username and password, connects at once
// with any client id, subscribes within its filters (default the whole
// account) and receives the account's messages, can never publish, and is
// refused at once after DELETE (a connected subscriber is disconnected).
// Expired passwords are inactive; the publisher route does not know a
// subscriber password's id.
func TestSubscriberPasswords(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload)
	A := e.tenant(t, "A", "starter", allAddOns, "dev1")
	B := e.tenant(t, "B", "starter", allAddOns, "dev1")
	e.App.Sync(e.ctx) // the tenants were made through the service
	dev := e.dial(t, "dev1", A.PubUser, A.PubPass)

	var c credential
	e.req(t, A.Token, "POST", "/subscriber-mqtt-passwords", map[string]any{"label": "dashboard", "expires_in_days": 30}).ok(t, http.StatusCreated, &c)
	if !strings.HasPrefix(c.Username, "sub-") || len(c.Password) < 20 || c.Label != "dashboard" || !c.Active ||
		len(c.Filters) != 1 || c.Filters[0] != A.ID+"/#" || !c.CreatedAt.Equal(t0) || c.ExpiresAt == nil ||
		!c.ExpiresAt.Equal(t0.AddDate(0, 0, 30)) || c.RevokedAt != nil {
		t.Fatalf("created %+v", c)
	}
	var unlabelled credential
	e.req(t, A.Token, "POST", "/subscriber-mqtt-passwords", map[string]any{}).ok(t, http.StatusCreated, &unlabelled)
	if unlabelled.ExpiresAt != nil || unlabelled.Label != "" || unlabelled.Password == c.Password || unlabelled.Username == c.Username {
		t.Fatalf("created without fields: %+v", unlabelled)
	}
	list := e.credentials(t, A.Token, "/subscriber-mqtt-passwords")
	if len(list) != 3 || list[c.ID].Username != c.Username || !list[c.ID].Active || list[A.SubCredID].Username != A.SubUser {
		t.Fatalf("list %+v", list)
	}

	// It works at once, with any client id.
	sub := e.dial(t, "any-client-id", c.Username, c.Password)
	if rc := sub.SubCode(t, A.ID+"/#", 1); rc != 1 {
		t.Fatalf("subscribe to the account: 0x%02x", rc)
	}
	if rc := sub.SubCode(t, B.ID+"/#", 1); rc < 0x80 {
		t.Fatalf("subscribe to B's account: granted 0x%02x", rc)
	}
	dev.Pub(t, A.topic("dev1", "state/x"), 1, "hello")
	if m := sub.Next(t); m.Topic != A.topic("dev1", "state/x") || string(m.Payload) != "hello" {
		t.Fatalf("received %q on %s", m.Payload, m.Topic)
	}
	r, err := sub.TryPublish(&paho.Publish{Topic: A.topic("dev1", "state/x"), QoS: 1, Payload: []byte("from a subscriber")})
	if err == nil && (r == nil || r.ReasonCode < 0x80) {
		t.Fatalf("a subscriber password published: %+v", r)
	}
	var p historyPage
	e.get(t, A.Token, "/history?limit=10").ok(t, http.StatusOK, &p)
	if len(p.Records) != 1 {
		t.Fatalf("history after the subscriber's publish: %+v", p.Records)
	}

	// Filters limit what it may subscribe to.
	var narrow credential
	e.req(t, A.Token, "POST", "/subscriber-mqtt-passwords", map[string]any{"filters": []string{A.ID + "/+/state/#"}}).ok(t, http.StatusCreated, &narrow)
	ns := e.dial(t, "narrow", narrow.Username, narrow.Password)
	if rc := ns.SubCode(t, A.ID+"/dev1/state/#", 0); rc != 0 {
		t.Fatalf("subscribe within the filter: 0x%02x", rc)
	}
	for _, f := range []string{A.ID + "/#", A.ID + "/dev1/telemetry/#"} {
		if rc := ns.SubCode(t, f, 0); rc < 0x80 {
			t.Fatalf("subscribe to %s outside the filter: granted 0x%02x", f, rc)
		}
	}

	// The publisher route does not revoke a subscriber password.
	e.req(t, A.Token, "DELETE", "/publisher-credentials/"+c.ID, nil).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
	sub.StillConnected(t)

	// Revoked: disconnected and refused at once.
	e.req(t, A.Token, "DELETE", "/subscriber-mqtt-passwords/"+c.ID, nil).ok(t, http.StatusNoContent, nil)
	sub.Disconnected(t, atOnce)
	e.refused(t, "any-client-id", c.Username, c.Password)
	ns.StillConnected(t)
	list = e.credentials(t, A.Token, "/subscriber-mqtt-passwords")
	if got := list[c.ID]; got.Active || got.RevokedAt == nil || !got.RevokedAt.Equal(t0) {
		t.Fatalf("revoked: %+v", got)
	}
	e.req(t, A.Token, "DELETE", "/subscriber-mqtt-passwords/"+c.ID, nil).ok(t, http.StatusNoContent, nil) // again: no change
	if got := e.credentials(t, A.Token, "/subscriber-mqtt-passwords")[c.ID]; !got.RevokedAt.Equal(t0) {
		t.Fatalf("revoked twice: %+v", got)
	}

	// Expiry.
	var day credential
	e.req(t, A.Token, "POST", "/subscriber-mqtt-passwords", map[string]any{"expires_in_days": 1}).ok(t, http.StatusCreated, &day)
	e.dial(t, "day", day.Username, day.Password)
	e.clock.Add(24 * time.Hour)
	if got := e.credentials(t, A.Token, "/subscriber-mqtt-passwords")[day.ID]; got.Active {
		t.Fatalf("expired but active: %+v", got)
	}
	e.refused(t, "day2", day.Username, day.Password)
}

// TestPublisherCredentials: a fleet publisher credential created through
// the API is returned once; devices registered in the account connect
// with it (unregistered client ids are refused) and their messages are
// stored; DELETE disconnects them at once and refuses them afterwards,
// while the account's other credential keeps working; the subscriber
// route does not know a publisher credential's id.
func TestPublisherCredentials(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload)
	A := e.tenant(t, "A", "starter", allAddOns)
	e.App.Sync(e.ctx) // the tenant was made through the service

	var c credential
	e.req(t, A.Token, "POST", "/publisher-credentials", map[string]any{"label": "fleet 2031"}).ok(t, http.StatusCreated, &c)
	if !strings.HasPrefix(c.Username, "pub-") || len(c.Password) < 20 || c.Label != "fleet 2031" || !c.Active || len(c.Filters) != 0 || c.ExpiresAt != nil {
		t.Fatalf("created %+v", c)
	}
	if l := e.credentials(t, A.Token, "/publisher-credentials"); len(l) != 2 || l[c.ID].Username != c.Username {
		t.Fatalf("list %+v", l)
	}
	if l := e.credentials(t, A.Token, "/subscriber-mqtt-passwords"); len(l) != 1 {
		t.Fatalf("the subscriber list has %d entries, want only the subscriber password", len(l))
	}
	e.req(t, A.Token, "POST", "/publishers", map[string]any{"client_id": "dev9"}).ok(t, http.StatusCreated, nil)
	e.refused(t, "dev10", c.Username, c.Password) // not registered
	dev := e.dial(t, "dev9", c.Username, c.Password)
	dev.Pub(t, A.topic("dev9", "event/boot"), 1, "up")
	var p historyPage
	e.get(t, A.Token, "/history?client_id=dev9").ok(t, http.StatusOK, &p)
	if len(p.Records) != 1 || p.Records[0].Topic != A.topic("dev9", "event/boot") {
		t.Fatalf("dev9's history: %+v", p.Records)
	}

	e.req(t, A.Token, "DELETE", "/subscriber-mqtt-passwords/"+c.ID, nil).problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
	dev.StillConnected(t)
	e.req(t, A.Token, "DELETE", "/publisher-credentials/"+c.ID, nil).ok(t, http.StatusNoContent, nil)
	dev.Disconnected(t, atOnce)
	e.refused(t, "dev9", c.Username, c.Password)
	e.dial(t, "dev9", A.PubUser, A.PubPass).Pub(t, A.topic("dev9", "event/boot"), 1, "again")
}
