package app_test

// End-to-end test of the live publisher view behind GET
// /api/v1/subscriber/publishers/live (platform.Policy.LivePublishers): two
// accounts with the same client id "dev1", real v5 and 3.1.1 clients over
// TCP, the harness's test clock for times and retained expiry.

import (
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/control"
	policy "github.com/fleetmq/fleetmq/platform"
)

// live returns the view of one client, failing when it is not listed.
func (p *platform) live(t *testing.T, accountID, clientID string) policy.PublisherLive {
	t.Helper()
	pl, ok := p.Policy.LivePublisher(accountID, clientID, p.clock.Now())
	if !ok {
		t.Fatalf("live view of %s in %s: not found", clientID, accountID)
	}
	return pl
}

// retainedTopics lists "topic=payload" of a client's live retained state.
func retainedTopics(pl policy.PublisherLive) []string {
	var out []string
	for _, r := range pl.Retained {
		out = append(out, r.Topic+"="+string(r.Payload))
	}
	return out
}

// TestLivePublishers: the live view lists every registered client of the
// account (never-connected ones with zero times); a v5 connection shows
// Connected, "MQTT 5.0", tcp, its address and since; QoS 0/1/2 publishes
// count today's mix by effective QoS and set the last publish; retained
// state/ messages are listed and an expired one is not; a 3.1.1 client
// shows "MQTT 3.1.1"; a takeover keeps the client connected on the newer
// connection; a disconnect sets last seen. Account B's "dev1" is connected,
// counted and retained on its own throughout, and neither account's view
// lists the other's clients.
func TestLivePublishers(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", true)
	B := p.newTenant(t, "B", "starter", true)
	two := 2
	pump := "pump"
	for _, tn := range []*tenant{A, B} {
		if _, err := p.Service.CreateClient(p.ctx, tn.ID, control.ClientInput{ClientID: "dev1", Label: &pump, MaxPublishQoS: &two}); err != nil {
			t.Fatal(err)
		}
	}
	p.addClient(t, A, "dev2", 1)
	p.synced(t)
	addr := p.MQTTAddr
	t0 := p.clock.Now()

	// Registered, never connected.
	all := p.Policy.LivePublishers(A.ID, t0)
	if len(all) != 2 || all[0].ClientID != "dev1" || all[1].ClientID != "dev2" {
		t.Fatalf("A's clients: %+v, want dev1 and dev2", all)
	}
	for _, pl := range all {
		if pl.Connected || !pl.ConnectedSince.IsZero() || !pl.LastSeen.IsZero() || !pl.LastPublish.IsZero() ||
			pl.Protocol != "" || pl.Transport != "" || pl.RemoteAddr != "" || pl.Today != [3]int64{} || len(pl.Retained) != 0 {
			t.Fatalf("never connected: %+v", pl)
		}
	}
	if all[0].Label != "pump" || all[0].MaxPublishQoS != 2 || all[1].MaxPublishQoS != 1 {
		t.Fatalf("labels and max QoS: %+v", all)
	}
	if bl := p.Policy.LivePublishers(B.ID, t0); len(bl) != 1 || bl[0].ClientID != "dev1" {
		t.Fatalf("B's clients: %+v, want only dev1", bl)
	}
	if _, ok := p.Policy.LivePublisher(B.ID, "dev2", t0); ok {
		t.Fatal("A's dev2 is visible in B")
	}

	// Connect dev1 in both accounts (v5). The view is updated before the
	// CONNACK, so no polling is needed.
	p.clock.Add(time.Minute)
	since := p.clock.Now()
	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	pl := p.live(t, A.ID, "dev1")
	if !pl.Connected || !pl.ConnectedSince.Equal(since) || !pl.LastSeen.Equal(since) || pl.Protocol != "MQTT 5.0" ||
		pl.Transport != policy.TransportTCP || pl.RemoteAddr != pubA.Conn.LocalAddr().String() {
		t.Fatalf("A dev1 connected: %+v (client address %s)", pl, pubA.Conn.LocalAddr())
	}
	if pl := p.live(t, B.ID, "dev1"); !pl.Connected || pl.RemoteAddr != pubB.Conn.LocalAddr().String() {
		t.Fatalf("B dev1 connected: %+v (client address %s)", pl, pubB.Conn.LocalAddr())
	}
	if pl := p.live(t, A.ID, "dev2"); pl.Connected {
		t.Fatalf("dev2 is connected: %+v", pl)
	}

	// Publishes at QoS 0, 1 and 2: QoS 2 on state/ stays 2 (add-on, pool),
	// QoS 2 on telemetry/ is effective 1. The QoS 1/2 acknowledgements come
	// after the policy counted (and after the QoS 0 before them).
	p.clock.Add(time.Minute)
	pubTime := p.clock.Now()
	pubA.Pub(t, A.topic("dev1", "telemetry/t"), 0, "q0")
	pubA.Pub(t, A.topic("dev1", "telemetry/t"), 1, "q1")
	pubA.Pub(t, A.topic("dev1", "state/mode"), 2, "q2")
	pubA.Pub(t, A.topic("dev1", "telemetry/t"), 2, "q2 demoted by class")
	pubB.Pub(t, B.topic("dev1", "telemetry/t"), 1, "b")
	pl = p.live(t, A.ID, "dev1")
	if pl.Today != [3]int64{1, 2, 1} || !pl.LastPublish.Equal(pubTime) || !pl.LastSeen.Equal(pubTime) || !pl.ConnectedSince.Equal(since) {
		t.Fatalf("A dev1 after publishing: today %v, last publish %v, last seen %v, since %v; want [1 2 1] at %v, since %v",
			pl.Today, pl.LastPublish, pl.LastSeen, pl.ConnectedSince, pubTime, since)
	}
	if pl := p.live(t, B.ID, "dev1"); pl.Today != [3]int64{0, 1, 0} || !pl.LastPublish.Equal(pubTime) {
		t.Fatalf("B dev1: today %v, last publish %v, want [0 1 0] at %v", pl.Today, pl.LastPublish, pubTime)
	}

	// Retained state: A's two state/ retains (one expiring in 60 s), not its
	// retained telemetry, not B's.
	sixty := uint32(60)
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "state/config"), QoS: 1, Retain: true, Payload: []byte("A config")})
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "state/blink"), QoS: 1, Retain: true, Payload: []byte("A blink"),
		Properties: &paho.PublishProperties{MessageExpiry: &sixty}})
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "telemetry/last"), QoS: 1, Retain: true, Payload: []byte("A telemetry")})
	pubB.MustPublish(t, &paho.Publish{Topic: B.topic("dev1", "state/config"), QoS: 1, Retain: true, Payload: []byte("B config")})
	pl = p.live(t, A.ID, "dev1")
	want := fmt.Sprint([]string{A.topic("dev1", "state/blink") + "=A blink", A.topic("dev1", "state/config") + "=A config"})
	if got := fmt.Sprint(retainedTopics(pl)); got != want {
		t.Fatalf("A dev1 retained %s, want %s", got, want)
	}
	for _, r := range pl.Retained {
		wantExp := pubTime.Add(24 * time.Hour) // the retained maximum age
		if r.Topic == A.topic("dev1", "state/blink") {
			wantExp = pubTime.Add(60 * time.Second)
		}
		if r.QoS != 1 || !r.Received.Equal(pubTime) || !r.Expires.Equal(wantExp) {
			t.Fatalf("retained %s: QoS %d received %v expires %v, want 1, %v, %v", r.Topic, r.QoS, r.Received, r.Expires, pubTime, wantExp)
		}
	}
	if got, want := fmt.Sprint(retainedTopics(p.live(t, B.ID, "dev1"))), fmt.Sprint([]string{B.topic("dev1", "state/config") + "=B config"}); got != want {
		t.Fatalf("B dev1 retained %s, want %s", got, want)
	}
	p.clock.Add(61 * time.Second)
	want = fmt.Sprint([]string{A.topic("dev1", "state/config") + "=A config"})
	if got := fmt.Sprint(retainedTopics(p.live(t, A.ID, "dev1"))); got != want {
		t.Fatalf("after the expiry: A dev1 retained %s, want %s", got, want)
	}

	// A 3.1.1 client.
	v3c := dialV3(t, addr, "dev2", A.PubUser, A.PubPass)
	if pl := p.live(t, A.ID, "dev2"); !pl.Connected || pl.Protocol != "MQTT 3.1.1" || pl.Transport != policy.TransportTCP {
		t.Fatalf("dev2 over 3.1.1: %+v", pl)
	}
	v3c.Pub(t, A.topic("dev2", "event/boot"), 1, false, "up")
	if pl := p.live(t, A.ID, "dev2"); pl.Today != [3]int64{0, 1, 0} || !pl.LastPublish.Equal(p.clock.Now()) {
		t.Fatalf("dev2 after publishing: %+v", pl)
	}

	// A takeover: a second connection of A's dev1 wins; the first one's end
	// (after the broker reported it: the open connection count drops back)
	// leaves the client connected on the second.
	open := p.Broker.Stats().Connections
	p.clock.Add(time.Minute)
	second := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	eventually(t, "the taken-over connection to end", func() bool { return p.Broker.Stats().Connections == open })
	pl = p.live(t, A.ID, "dev1")
	// Today: the four publishes above and the three retained ones (QoS 1).
	if !pl.Connected || pl.RemoteAddr != second.Conn.LocalAddr().String() || !pl.ConnectedSince.Equal(p.clock.Now()) || pl.Today != [3]int64{1, 5, 1} {
		t.Fatalf("after the takeover: %+v, want connected from %s since %v", pl, second.Conn.LocalAddr(), p.clock.Now())
	}

	// Disconnect: not connected, last seen at the disconnect.
	p.clock.Add(time.Minute)
	gone := p.clock.Now()
	if err := second.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A dev1 to show as disconnected", func() bool { return !p.live(t, A.ID, "dev1").Connected })
	pl = p.live(t, A.ID, "dev1")
	if !pl.ConnectedSince.IsZero() || pl.RemoteAddr != "" || !pl.LastSeen.Equal(gone) || pl.Protocol != "MQTT 5.0" ||
		!pl.LastPublish.Equal(pubTime) || pl.Today != [3]int64{1, 5, 1} {
		t.Fatalf("A dev1 after disconnecting: %+v, want last seen %v", pl, gone)
	}
	// B's dev1 is untouched.
	if pl := p.live(t, B.ID, "dev1"); !pl.Connected || pl.RemoteAddr != pubB.Conn.LocalAddr().String() || pl.Today != [3]int64{0, 2, 0} {
		t.Fatalf("B dev1 after A's disconnect: %+v", pl)
	}
	pubB.StillConnected(t)
}
