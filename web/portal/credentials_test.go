package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
)

// TestCredentials: a subscriber MQTT password and a fleet publisher
// credential are created with their password shown once (with filled-in
// mosquitto examples), work on the broker at once, are listed without
// their password, and stop working at once when revoked.
func TestCredentials(t *testing.T) {
	t.Parallel()
	e := start(t, slowReload)
	a := e.account(t, "Acme", "starter")
	bo := e.account(t, "Bolt", "starter")
	if _, err := e.Service.CreateClient(e.ctx, a.ID, control.ClientInput{ClientID: "pump-1"}); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.ctx)
	b := e.browser(t)
	b.signIn(t, a)
	p := b.get(t, "/credentials").want(t, http.StatusOK)
	p.has(t, `id="create-pub-form"`, `id="create-sub-form"`, `id="sub-filters"`, `id="sub-expires"`, `id="pub-label"`, `id="create-sub"`, `id="create-pub"`,
		`data-testid="mqtt-address">127.0.0.1:1883<`, "mosquitto_sub -h 127.0.0.1 -p 1883", "-t '"+a.ID+"/#'", "-i pump-1", "&lt;password&gt;")

	// Validation: a filter of another account.
	b.post(t, "/credentials", url.Values{"kind": {"subscriber"}, "filters": {bo.ID + "/#"}}).want(t, http.StatusUnprocessableEntity).
		has(t, "must be a topic filter under "+a.ID)
	b.post(t, "/credentials", url.Values{"kind": {"subscriber"}, "expires_in_days": {"0"}}).want(t, http.StatusUnprocessableEntity).
		has(t, "Enter a whole number of days from 1")
	b.post(t, "/credentials", url.Values{"kind": {"admin"}}).want(t, http.StatusBadRequest)

	// A subscriber password with a filter and an expiry.
	p = b.post(t, "/credentials", url.Values{"kind": {"subscriber"}, "label": {"grafana"}, "expires_in_days": {"30"},
		"filters": {a.ID + "/+/state/#\n" + a.ID + "/pump-1/#"}}).want(t, http.StatusCreated)
	user, pw := p.text(t, "credential-username"), p.text(t, "credential-password")
	p.has(t, "cannot be displayed again", `id="credential-password-copy"`, "-u "+user+" -P "+pw)
	if cc := p.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q on the page with a password", cc)
	}
	subs, _ := e.Store.Credentials(e.ctx, a.ID, fleetmq.KindSubscriber)
	if len(subs) != 1 || subs[0].Username != user || subs[0].SecretHash != fleetmq.HashSecret(pw) || subs[0].Label != "grafana" ||
		len(subs[0].Filters) != 2 || !subs[0].ExpiresAt.Equal(t0.AddDate(0, 0, 30)) {
		t.Fatalf("stored subscriber password %+v", subs)
	}
	sd := e.connect(t, "dashboard-1", user, pw) // works at once
	sd.Disconnect(&paho.Disconnect{})
	list := b.get(t, "/credentials").has(t, user, "grafana", a.ID+"/+/state/#").hasNot(t, pw)
	if list.count(`data-testid="credential-row"`) != 1 {
		t.Fatal("want one credential row")
	}

	// A fleet publisher credential: a registered device connects with it.
	p = b.post(t, "/credentials", url.Values{"kind": {"publisher"}, "label": {"fleet"}}).want(t, http.StatusCreated)
	pubUser, pubPW := p.text(t, "credential-username"), p.text(t, "credential-password")
	p.has(t, "mosquitto_pub", "-u "+pubUser+" -P "+pubPW+" -i pump-1", a.ID+"/pump-1/telemetry/temp_probe")
	dev := e.connect(t, "pump-1", pubUser, pubPW)
	dev.Disconnect(&paho.Disconnect{})
	b.get(t, "/credentials").hasNot(t, pubPW, pw)

	// Revoke the subscriber password: confirmation, POST, refused at once.
	b.get(t, "/credentials/"+subs[0].ID+"/revoke").has(t, "Revoke this subscriber MQTT password?", user, `data-testid="revoke-credential-confirm"`)
	b.post(t, "/credentials/"+subs[0].ID+"/revoke", nil).redirects(t, "/credentials")
	b.get(t, "/credentials").has(t, "was revoked", "Revoked")
	if _, err := e.tryConnect(t, "dashboard-2", user, pw); err == nil {
		t.Fatal("a revoked subscriber password still connects")
	}
	if _, err := e.tryConnect(t, "pump-1", pubUser, pubPW); err != nil {
		t.Fatalf("the publisher credential stopped working: %v", err)
	}
}

// TestMQTTPublicAddr: the examples use the configured broker address.
func TestMQTTPublicAddr(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.Config) { c.MQTTPublicAddr = "mqtt.example.com:8883" })
	a := e.account(t, "Acme", "starter")
	b := e.browser(t)
	b.signIn(t, a)
	p := b.get(t, "/credentials").has(t, "mosquitto_sub -h mqtt.example.com -p 8883", "mosquitto_pub -h mqtt.example.com -p 8883",
		`data-testid="mqtt-address">mqtt.example.com:8883<`)
	if strings.Contains(p.Body, "127.0.0.1:1883") {
		t.Fatal("the request host shows instead of the configured address")
	}
}
