package portal_test

import (
	"context"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/apptest"
)

// TestRecentProblems: a device's refused publish (wrong topic class) is on
// its device page with the topic, the reason and how many times, and on
// the Overview with a link to the device; a subscriber's refused
// subscription is on the Overview (it has no device page). The other
// account's pages, for a client of the same id, show none of it.
func TestRecentProblems(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter")
	bo := e.account(t, "Bolt", "starter")
	for _, acc := range []string{a.ID, bo.ID} {
		if _, err := e.Service.CreateClient(e.ctx, acc, control.ClientInput{ClientID: "pump-17"}); err != nil {
			t.Fatal(err)
		}
	}
	pub, sub := apptest.Credentials(t, e.App, a.ID)
	apptest.Synced(t, e.App)

	dev := e.connect(t, "pump-17", pub.Username, pub.Password)
	for range 2 {
		r, err := dev.Publish(context.Background(), &paho.Publish{Topic: a.ID + "/pump-17/data/level", QoS: 1, Payload: []byte("7")})
		if err == nil && r.ReasonCode < 0x80 {
			t.Fatalf("the wrong topic class was accepted: %+v", r)
		}
	}
	dash := e.connect(t, "dashboard-1", sub.Username, sub.Password)
	if sa, err := dash.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: bo.ID + "/#", QoS: 1}}}); err == nil && sa.Reasons[0] < 0x80 {
		t.Fatalf("A's subscriber subscribed to B's account: %+v", sa)
	}

	ba := e.browser(t)
	ba.signIn(t, a)
	var p *page
	eventually(t, "the refused publishes on the device page", func() bool {
		p = ba.get(t, "/clients/pump-17").want(t, 200)
		return p.contains(`data-kind="publish_refused"`)
	})
	p.has(t, `data-testid="device-problems"`, "Publish refused", "<code>data/level</code>", "QoS 1",
		`topic class &#34;data/&#34; is not one of state, event, telemetry, sample`, "0x90 Topic Name invalid", `data-testid="problem-count">2<`)
	eventually(t, "both problems on the Overview", func() bool {
		p = ba.get(t, "/overview").want(t, 200)
		return p.count(`data-testid="problem-row"`) == 2
	})
	p.has(t, `href="/clients/pump-17#problems"`, "Subscription refused", `<span class="mono">dashboard-1</span>`, "<code>"+bo.ID+"/#</code>", "0x87 Not authorized")

	bb := e.browser(t)
	bb.signIn(t, bo)
	bb.get(t, "/clients/pump-17").want(t, 200).has(t, `data-testid="problems-empty"`).hasNot(t, "data/level", "Publish refused")
	bb.get(t, "/overview").want(t, 200).has(t, `data-testid="problems-empty"`).hasNot(t, "dashboard-1", "data/level")
}
