package app_test

// End-to-end tests of the platform rules (docs/design.md "Identities", "Plans
// and add-ons", "QoS rules (exact)", "Retained messages", "Topics"): the
// App runs in-process on a temp data directory, two accounts are set up
// through the control service, and real MQTT clients connect over TCP.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/apptest"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
)

// MQTT reason codes and 3.1.1 return codes the tests expect.
const (
	rcBadUserOrPassword = 0x86
	rcClientIDNotValid  = 0x85
	rcNotAuthorized     = 0x87
	rcQoSNotSupported   = 0x9B
	rcTopicNameInvalid  = 0x90

	v3BadUserOrPassword  = 4
	v3IdentifierRejected = 2
	v3NotAuthorized      = 5
)

// disconnectWithin is how soon a control-plane change must end a live
// session (docs/design.md: CLI changes apply within 2 s).
const disconnectWithin = 2 * time.Second

// TestPlatformConnect: who may connect. A publisher credential with a client
// id registered in its account is accepted; a wrong password or unknown
// username is 0x86 / return code 4; an unregistered client id (including
// one registered only in the other account) is 0x85 / 2; an expired
// subscriber password is refused and its live session ended; a suspended
// account is refused with 0x87 / 5 and its live sessions are disconnected
// within 2 s while the other account carries on.
func TestPlatformConnect(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1")
	B := p.newTenant(t, "B", "starter", false, "dev1", "bonly")
	expUser, expPass, _ := p.credential(t, A, control.NewCredential{Kind: fleetmq.KindSubscriber, Label: "short", ExpiresInDays: 1})
	p.synced(t)
	addr := p.MQTTAddr

	// Accepted: v5 and 3.1.1, publisher and subscriber.
	dialV5(t, addr, "dev1", A.PubUser, A.PubPass).Disconnect(&paho.Disconnect{})
	dialV3(t, addr, "dev1", A.PubUser, A.PubPass).Disconnect(0)
	dialV5(t, addr, "subA", A.SubUser, A.SubPass).Disconnect(&paho.Disconnect{})

	// Wrong password (including the other account's password).
	if rc := refusedV5(t, addr, "dev1", A.PubUser, "wrong"); rc != rcBadUserOrPassword {
		t.Errorf("wrong password (v5): 0x%02x, want 0x86", rc)
	}
	if rc := refusedV5(t, addr, "dev1", A.PubUser, B.PubPass); rc != rcBadUserOrPassword {
		t.Errorf("B's password with A's username (v5): 0x%02x, want 0x86", rc)
	}
	if rc := refusedV3(t, addr, "dev1", A.PubUser, "wrong"); rc != v3BadUserOrPassword {
		t.Errorf("wrong password (3.1.1): %d, want 4", rc)
	}
	// Unknown username.
	if rc := refusedV5(t, addr, "dev1", "pub-nosuchuser", A.PubPass); rc != rcBadUserOrPassword {
		t.Errorf("unknown username (v5): 0x%02x, want 0x86", rc)
	}
	if rc := refusedV3(t, addr, "dev1", "pub-nosuchuser", A.PubPass); rc != v3BadUserOrPassword {
		t.Errorf("unknown username (3.1.1): %d, want 4", rc)
	}
	// Unregistered client id, and a client id registered only in B.
	for _, id := range []string{"dev9", "bonly"} {
		if rc := refusedV5(t, addr, id, A.PubUser, A.PubPass); rc != rcClientIDNotValid {
			t.Errorf("client id %s not registered in A (v5): 0x%02x, want 0x85", id, rc)
		}
		if rc := refusedV3(t, addr, id, A.PubUser, A.PubPass); rc != v3IdentifierRejected {
			t.Errorf("client id %s not registered in A (3.1.1): %d, want 2", id, rc)
		}
	}
	dialV5(t, addr, "bonly", B.PubUser, B.PubPass).Disconnect(&paho.Disconnect{})

	// Expired subscriber password: works now, refused once the clock passes
	// its expiry, and a session opened before is ended.
	live := dialV5(t, addr, "subExp", expUser, expPass)
	p.clock.Add(24*time.Hour + time.Second)
	if rc := live.Disconnected(t, disconnectWithin); rc != rcNotAuthorized {
		t.Errorf("expired password's live session: DISCONNECT 0x%02x, want 0x87", rc)
	}
	if rc := refusedV5(t, addr, "subExp", expUser, expPass); rc != rcBadUserOrPassword {
		t.Errorf("expired password (v5): 0x%02x, want 0x86", rc)
	}
	if rc := refusedV3(t, addr, "subExp", expUser, expPass); rc != v3BadUserOrPassword {
		t.Errorf("expired password (3.1.1): %d, want 4", rc)
	}
	// A password without expiry is unaffected by the clock.
	dialV5(t, addr, "subA", A.SubUser, A.SubPass).Disconnect(&paho.Disconnect{})

	// Suspension.
	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	subB.Sub(t, B.all(), 1)
	start := time.Now()
	if err := p.Store.SetSuspended(p.ctx, A.ID, true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*mqtttest.V5{pubA, subA} {
		if rc := c.Disconnected(t, disconnectWithin-time.Since(start)); rc != rcNotAuthorized {
			t.Errorf("%s of the suspended account: DISCONNECT 0x%02x, want 0x87", c.Name, rc)
		}
	}
	t.Logf("suspended account's sessions ended after %v", time.Since(start))
	if rc := refusedV5(t, addr, "dev1", A.PubUser, A.PubPass); rc != rcNotAuthorized {
		t.Errorf("suspended account publisher (v5): 0x%02x, want 0x87", rc)
	}
	if rc := refusedV5(t, addr, "subA", A.SubUser, A.SubPass); rc != rcNotAuthorized {
		t.Errorf("suspended account subscriber (v5): 0x%02x, want 0x87", rc)
	}
	if rc := refusedV3(t, addr, "dev1", A.PubUser, A.PubPass); rc != v3NotAuthorized {
		t.Errorf("suspended account (3.1.1): %d, want 5", rc)
	}
	// A wrong password on a suspended account still says "bad password".
	if rc := refusedV5(t, addr, "dev1", A.PubUser, "wrong"); rc != rcBadUserOrPassword {
		t.Errorf("wrong password on a suspended account: 0x%02x, want 0x86", rc)
	}
	// B carries on.
	pubB.Pub(t, B.topic("dev1", "state/x"), 1, "still here")
	subB.ExpectOn(t, B.topic("dev1", "state/x"), "still here")
	pubB.StillConnected(t)
	subB.StillConnected(t)

	// Lifting the suspension lets A back in.
	if err := p.Store.SetSuspended(p.ctx, A.ID, false); err != nil {
		t.Fatal(err)
	}
	p.synced(t)
	dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
}

// TestPlatformSameClientIDInTwoAccounts: "dev1" registered in A and in B are
// two devices. Connecting one does not take the other over; both keep
// publishing and receiving, and each sees only its own account's messages.
func TestPlatformSameClientIDInTwoAccounts(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	p.synced(t)
	addr := p.MQTTAddr

	a := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	a.Sub(t, A.topic("dev1", "#"), 1)
	a.Pub(t, A.topic("dev1", "state/x"), 1, "a1")
	a.ExpectOn(t, A.topic("dev1", "state/x"), "a1")

	b := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	b.Sub(t, B.topic("dev1", "#"), 1)

	// Both still work after the other connected, in both directions.
	a.Pub(t, A.topic("dev1", "state/x"), 1, "a2")
	a.ExpectOn(t, A.topic("dev1", "state/x"), "a2")
	b.Pub(t, B.topic("dev1", "state/x"), 1, "b1")
	b.ExpectOn(t, B.topic("dev1", "state/x"), "b1")

	// A third connection of B's dev1 takes over B's session only.
	b2 := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	if rc := b.Disconnected(t, waitFor); rc != 0x8E {
		t.Errorf("B's first dev1 after B's second connected: DISCONNECT 0x%02x, want 0x8E (session taken over)", rc)
	}
	b2.Sub(t, B.topic("dev1", "#"), 1)
	a.Pub(t, A.topic("dev1", "state/x"), 1, "a3")
	a.ExpectOn(t, A.topic("dev1", "state/x"), "a3")
	b2.Pub(t, B.topic("dev1", "state/x"), 1, "b2")
	b2.ExpectOn(t, B.topic("dev1", "state/x"), "b2")
	mqtttest.Barrier(t, a, A.topic("dev1", "state/barrier"), a)
	a.StillConnected(t)
	b2.StillConnected(t)
}

// TestPlatformConfinement: nothing escapes an account. Escaping filters are
// refused with 0x87, escaping publishes are refused in the PUBACK and
// delivered to no one, a subscriber cannot publish, topics outside the four
// classes are refused, accounts never see each other's messages, and a
// subscriber password limited to one client sees only that client.
func TestPlatformConfinement(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1", "dev2")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	oneUser, onePass, _ := p.credential(t, A, control.NewCredential{Kind: fleetmq.KindSubscriber, Label: "dev1 only", Filters: []string{A.ID + "/dev1/#"}})
	p.synced(t)
	addr := p.MQTTAddr

	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubA2 := dialV5(t, addr, "dev2", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)

	for _, f := range []string{"#", "+/#", "+/+/state/x", "$share/g/#", "$SYS/#", B.all(), B.topic("dev1", "state/x"), "$share/g/" + B.all()} {
		if rc := subA.SubCode(t, f, 1); rc != rcNotAuthorized {
			t.Errorf("A's subscriber subscribing %q: 0x%02x, want 0x87", f, rc)
		}
	}
	for _, f := range []string{A.topic("dev2", "#"), A.all(), "#", B.all()} {
		if rc := pubA.SubCode(t, f, 1); rc != rcNotAuthorized {
			t.Errorf("A's dev1 subscribing %q: 0x%02x, want 0x87", f, rc)
		}
	}
	pubA.Sub(t, A.topic("dev1", "#"), 1) // its own prefix is fine
	subA.Sub(t, A.all(), 1)
	subB.Sub(t, B.all(), 1)

	// Escaping publishes: refused, and delivered to no one.
	for _, tc := range []struct {
		c     *mqtttest.V5
		topic string
	}{
		{pubA, B.topic("dev1", "state/x")},
		{pubA, A.topic("dev2", "state/x")},
		{pubA, "B/dev1/state/x"},
		{pubA, A.topic("dev1", "other/x")},
		{pubA, A.topic("dev1", "state")},
		{pubA, "$SYS/x"},
		{subA, A.topic("dev1", "state/x")},
		{subA, B.topic("dev1", "state/x")},
	} {
		rc := refusedPub(t, tc.c, tc.topic)
		t.Logf("%s publishing %s: 0x%02x", tc.c.Name, tc.topic, rc)
	}
	if rc := refusedPub(t, pubA, A.topic("dev1", "other/x")); rc != rcTopicNameInvalid {
		t.Errorf("class other/: 0x%02x, want 0x90", rc)
	}
	if rc := refusedPub(t, subA, A.topic("dev1", "state/x")); rc != rcNotAuthorized {
		t.Errorf("subscriber publishing: 0x%02x, want 0x87", rc)
	}
	mqtttest.Barrier(t, pubA, A.topic("dev1", "state/barrier"), subA, pubA)
	mqtttest.Barrier(t, pubB, B.topic("dev1", "state/barrier"), subB)

	// Every class is accepted on the own prefix.
	for _, class := range []string{"state", "event", "telemetry", "sample"} {
		pubA.Pub(t, A.topic("dev1", class+"/x"), 1, class)
		subA.ExpectOn(t, A.topic("dev1", class+"/x"), class)
		pubA.ExpectOn(t, A.topic("dev1", class+"/x"), class)
	}

	// B's traffic never reaches A.
	pubB.Pub(t, B.topic("dev1", "state/x"), 1, "from B")
	subB.ExpectOn(t, B.topic("dev1", "state/x"), "from B")
	mqtttest.Barrier(t, pubA, A.topic("dev1", "state/barrier"), subA, pubA)

	// A password with filters [A/dev1/#] sees dev1 only.
	one := dialV5(t, addr, "subOne", oneUser, onePass)
	for _, f := range []string{A.all(), A.topic("+", "state/x"), A.topic("dev2", "#"), "#"} {
		if rc := one.SubCode(t, f, 1); rc != rcNotAuthorized {
			t.Errorf("dev1-only password subscribing %q: 0x%02x, want 0x87", f, rc)
		}
	}
	one.Sub(t, A.topic("dev1", "#"), 1)
	pubA2.Pub(t, A.topic("dev2", "state/x"), 1, "from dev2")
	subA.ExpectOn(t, A.topic("dev2", "state/x"), "from dev2")
	pubA.Pub(t, A.topic("dev1", "state/x"), 1, "from dev1")
	one.ExpectOn(t, A.topic("dev1", "state/x"), "from dev1") // dev2's came first and did not arrive
	subA.ExpectOn(t, A.topic("dev1", "state/x"), "from dev1")
	pubA.ExpectOn(t, A.topic("dev1", "state/x"), "from dev1")
}

// TestPlatformTopicPrefix: with topic_prefix "fleet" the wire topics carry
// the prefix both ways; unprefixed publishes and filters outside the
// account are refused.
func TestPlatformTopicPrefix(t *testing.T) {
	t.Parallel()
	p := startPlatform(t, func(c *app.Config) { c.TopicPrefix = "fleet" })
	A := p.newTenant(t, "A", "starter", false, "dev1")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	p.synced(t)
	addr := p.MQTTAddr

	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	for _, f := range []string{"fleet/#", "fleet/+/#", A.all(), "#", "fleet/" + B.all()} {
		if rc := subA.SubCode(t, f, 1); rc != rcNotAuthorized {
			t.Errorf("subscribing %q with topic_prefix fleet: 0x%02x, want 0x87", f, rc)
		}
	}
	subA.Sub(t, "fleet/"+A.all(), 1)
	subB.Sub(t, "fleet/"+B.all(), 1)

	pubA.Pub(t, "fleet/"+A.topic("dev1", "state/x"), 1, "prefixed")
	m := subA.ExpectOn(t, "fleet/"+A.topic("dev1", "state/x"), "prefixed")
	if m.QoS != 1 {
		t.Errorf("QoS %d, want 1", m.QoS)
	}
	refusedPub(t, pubA, A.topic("dev1", "state/x"))
	refusedPub(t, pubA, "fleet/"+B.topic("dev1", "state/x"))
	refusedPub(t, pubA, "other/"+A.topic("dev1", "state/x"))
	mqtttest.Barrier(t, pubA, "fleet/"+A.topic("dev1", "state/barrier"), subA)
	mqtttest.Barrier(t, pubB, "fleet/"+B.topic("dev1", "state/barrier"), subB)
}

// TestPlatformMaxPublishQoS: a client's max_publish_qos is advertised in the
// v5 CONNACK; a PUBLISH above it ends the connection (v5 DISCONNECT 0x9B,
// 3.1.1 closed) and is counted as refused; max 2 needs the QoS 2 add-on.
func TestPlatformMaxPublishQoS(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1")
	B := p.newTenant(t, "B", "starter", true, "dev1")
	p.addClient(t, A, "dev0", 0)
	p.addClient(t, B, "dev2", 2) // B has the add-on

	// max 2 without the add-on: refused by the service, on create and update.
	two := 2
	if _, err := p.Service.CreateClient(p.ctx, A.ID, control.ClientInput{ClientID: "devq2", MaxPublishQoS: &two}); !isDomainCode(err, fleetmq.CodeAddOnRequired) {
		t.Errorf("create max 2 without the add-on: %v, want %s", err, fleetmq.CodeAddOnRequired)
	}
	if _, err := p.Service.UpdateClient(p.ctx, A.ID, control.ClientInput{ClientID: "dev1", MaxPublishQoS: &two}); !isDomainCode(err, fleetmq.CodeAddOnRequired) {
		t.Errorf("update to max 2 without the add-on: %v, want %s", err, fleetmq.CodeAddOnRequired)
	}
	if c, err := p.Store.Client(p.ctx, A.ID, "dev1"); err != nil || c.MaxPublishQoS != 1 {
		t.Errorf("dev1 after the refused update: %+v, %v", c, err)
	}
	p.synced(t)
	addr := p.MQTTAddr

	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subA.Sub(t, A.all(), 2)

	// CONNACK Maximum QoS: 0 for dev0, 1 for dev1 (default), absent for 2.
	for _, tc := range []struct {
		tn   *tenant
		id   string
		want int // -1: absent
	}{{A, "dev0", 0}, {A, "dev1", 1}, {B, "dev2", -1}} {
		c := dialV5(t, addr, tc.id, tc.tn.PubUser, tc.tn.PubPass)
		got := -1
		if c.Connack.Properties != nil && c.Connack.Properties.MaximumQoS != nil {
			got = int(*c.Connack.Properties.MaximumQoS)
		}
		if got != tc.want {
			t.Errorf("%s: CONNACK Maximum QoS %d, want %d (-1: absent)", tc.id, got, tc.want)
		}
		c.Disconnect(&paho.Disconnect{})
	}

	// v5 dev0: QoS 0 is delivered; QoS 1 ends the connection with 0x9B.
	// paho.golang will not send above the advertised maximum, so the
	// PUBLISH is written on the connection directly.
	dev0 := dialV5(t, addr, "dev0", A.PubUser, A.PubPass)
	dev0.Pub(t, A.topic("dev0", "state/x"), 0, "qos0")
	subA.ExpectOn(t, A.topic("dev0", "state/x"), "qos0")
	if _, err := dev0.TryPublish(&paho.Publish{Topic: A.topic("dev0", "state/x"), QoS: 1, Payload: []byte("x")}); err == nil {
		t.Fatal("paho.golang sent QoS 1 above the advertised maximum")
	}
	raw := (&paho.Publish{Topic: A.topic("dev0", "state/x"), QoS: 1, PacketID: 999, Payload: []byte("too high")}).Packet()
	if _, err := raw.WriteTo(dev0.Conn); err != nil {
		t.Fatal(err)
	}
	if rc := dev0.Disconnected(t, waitFor); rc != rcQoSNotSupported {
		t.Errorf("v5 QoS 1 above max 0: DISCONNECT 0x%02x, want 0x9B", rc)
	}

	// 3.1.1 dev0: QoS 1 closes the connection.
	v3dev0 := dialV3(t, addr, "dev0", A.PubUser, A.PubPass)
	v3dev0.Pub(t, A.topic("dev0", "state/x"), 0, false, "v3 qos0")
	subA.ExpectOn(t, A.topic("dev0", "state/x"), "v3 qos0")
	v3dev0.Publish(A.topic("dev0", "state/x"), 1, false, "v3 too high")
	select {
	case <-v3dev0.Lost:
	case <-time.After(waitFor):
		t.Fatal("3.1.1 QoS 1 above max 0: connection still open")
	}

	// Neither message was delivered; dev1 (max 1) publishes QoS 1 fine.
	dev1 := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	mqtttest.Barrier(t, dev1, A.topic("dev1", "state/barrier"), subA)
	p.usage(t, A.ID, p.day(), "refused 2", func(u fleetmq.DailyUsage) bool { return u.Refused == 2 })
	p.usage(t, B.ID, p.day(), "nothing", func(u fleetmq.DailyUsage) bool { return u.Refused == 0 })
}

// TestPlatformEffectiveQoSAndPool: QoS 2 on state/ and event/ with the
// add-on uses the daily pool and arrives at QoS 2; once the pool is used up
// it arrives at QoS 1 while the publisher's QoS 2 handshake still
// completes; telemetry/ QoS 2 is QoS 1 without touching the pool; without
// the add-on every QoS 2 is QoS 1; UTC midnight refills the pool; the
// stored usage shows it all.
func TestPlatformEffectiveQoSAndPool(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	p.clock.Set(time.Date(2030, 3, 10, 23, 59, 0, 0, time.UTC))
	day1 := p.day()
	p.plan(t, "tiny2", 5, 2)
	A := p.newTenant(t, "A", "tiny2", true)
	p.addClient(t, A, "dev1", 2)
	B := p.newTenant(t, "B", "tiny2", true)
	p.addClient(t, B, "dev1", 2)
	if err := p.Service.SetAddOn(p.ctx, B.ID, fleetmq.AddOnQoS2, false); err != nil { // B's client keeps max 2
		t.Fatal(err)
	}
	p.synced(t)
	addr := p.MQTTAddr

	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subA.Sub(t, A.all(), 2)
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	subB.Sub(t, B.all(), 2)

	send := func(c *mqtttest.V5, sub *mqtttest.V5, topic, payload string, wantQoS byte) {
		t.Helper()
		r, err := c.TryPublish(&paho.Publish{Topic: topic, QoS: 2, Payload: []byte(payload)})
		if err != nil || r == nil || r.ReasonCode != 0 {
			t.Fatalf("QoS 2 publish %s: %+v, %v (want a completed handshake with success)", payload, r, err)
		}
		m := sub.ExpectOn(t, topic, payload)
		if m.QoS != wantQoS {
			t.Errorf("%s on %s: arrived at QoS %d, want %d", payload, topic, m.QoS, wantQoS)
		}
	}
	send(pubA, subA, A.topic("dev1", "telemetry/t"), "tel", 1) // before the pool runs out: it takes no unit
	send(pubA, subA, A.topic("dev1", "state/x"), "s1", 2)
	send(pubA, subA, A.topic("dev1", "event/e"), "e1", 2)
	send(pubA, subA, A.topic("dev1", "state/x"), "s2", 1) // pool used up: demoted
	send(pubA, subA, A.topic("dev1", "sample/s"), "smp", 1)
	send(pubB, subB, B.topic("dev1", "state/x"), "b1", 1) // no add-on
	send(pubB, subB, B.topic("dev1", "event/e"), "b2", 1)

	// A subscriber granted QoS 1 gets QoS 1 even for an effective QoS 2.
	// (The next UTC day; the pool is back.)
	p.clock.Set(time.Date(2030, 3, 11, 0, 0, 1, 0, time.UTC))
	day2 := p.day()
	sub1 := dialV5(t, addr, "subA1", A.SubUser, A.SubPass)
	sub1.Sub(t, A.topic("dev1", "state/#"), 1)
	send(pubA, subA, A.topic("dev1", "state/x"), "s3", 2)
	if m := sub1.ExpectOn(t, A.topic("dev1", "state/x"), "s3"); m.QoS != 1 {
		t.Errorf("subscriber granted QoS 1: arrived at %d", m.QoS)
	}
	send(pubB, subB, B.topic("dev1", "state/x"), "b3", 1)

	// Stored usage, by day.
	p.usage(t, A.ID, day1, "A day 1: messages [0 3 2], pool 2, demotions 1", func(u fleetmq.DailyUsage) bool {
		return u.Messages == [3]int64{0, 3, 2} && u.PoolUsed == 2 && u.Demotions == 1
	})
	p.usage(t, A.ID, day2, "A day 2: messages [0 0 1], pool 1, demotions 0", func(u fleetmq.DailyUsage) bool {
		return u.Messages == [3]int64{0, 0, 1} && u.PoolUsed == 1 && u.Demotions == 0
	})
	p.usage(t, B.ID, day1, "B day 1: messages [0 2 0], no pool", func(u fleetmq.DailyUsage) bool {
		return u.Messages == [3]int64{0, 2, 0} && u.PoolUsed == 0 && u.Demotions == 0
	})
	eventually(t, "per-client QoS mix", func() bool {
		ca, err := p.Store.ClientUsage(p.ctx, A.ID, day1, day2)
		if err != nil {
			t.Fatal(err)
		}
		cb, err := p.Store.ClientUsage(p.ctx, B.ID, day1, day2)
		if err != nil {
			t.Fatal(err)
		}
		return len(ca) == 1 && ca[0].ClientID == "dev1" && ca[0].Messages == [3]int64{0, 3, 3} &&
			len(cb) == 1 && cb[0].ClientID == "dev1" && cb[0].Messages == [3]int64{0, 3, 0}
	})
}

// TestPlatformRetained: retained messages live at most 24 h. A v5 retained
// publish without expiry, or with a longer one, is delivered with the
// remaining part of 86400 s; a 3.1.1 retained message ages from receipt;
// after 24 h + 1 s none is delivered and Sweep removes them. The other
// account never receives them.
func TestPlatformRetained(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1", "dev3")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	p.synced(t)
	addr := p.MQTTAddr
	before := p.Broker.Stats().Retained

	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	long := uint32(200000)
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "state/r1"), QoS: 1, Retain: true, Payload: []byte("r1")})
	pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "state/r2"), QoS: 1, Retain: true, Payload: []byte("r2"),
		Properties: &paho.PublishProperties{MessageExpiry: &long}})
	dialV3(t, addr, "dev3", A.PubUser, A.PubPass).Pub(t, A.topic("dev3", "state/r3"), 1, true, "r3")
	pubB.MustPublish(t, &paho.Publish{Topic: B.topic("dev1", "state/rb"), QoS: 1, Retain: true, Payload: []byte("rb")})
	if n := p.Broker.Stats().Retained - before; n != 4 {
		t.Fatalf("retained stored: %d, want 4", n)
	}

	p.clock.Add(1000 * time.Second)
	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subA.Sub(t, A.all(), 1)
	got := map[string]*paho.Publish{}
	for range 3 {
		m := subA.Next(t)
		if !m.Retain {
			t.Fatalf("%s: not flagged retained", m.Payload)
		}
		got[string(m.Payload)] = m
	}
	for _, name := range []string{"r1", "r2", "r3"} {
		m := got[name]
		if m == nil {
			t.Fatalf("retained %s not delivered (got %v)", name, got)
		}
		if m.Properties == nil || m.Properties.MessageExpiry == nil {
			t.Errorf("%s: delivered without Message Expiry", name)
			continue
		}
		if e := *m.Properties.MessageExpiry; e == 0 || e > 86400-1000 {
			t.Errorf("%s: Message Expiry %d after 1000 s, want 1..%d", name, e, 86400-1000)
		}
	}
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	subB.Sub(t, B.all(), 1)
	subB.ExpectOn(t, B.topic("dev1", "state/rb"), "rb")
	mqtttest.Barrier(t, pubA, A.topic("dev1", "state/barrier"), subA)
	mqtttest.Barrier(t, pubB, B.topic("dev1", "state/barrier"), subB)

	// 24 h + 1 s after receipt: expired, not delivered even before the sweep.
	p.clock.Add(24*time.Hour + time.Second - 1000*time.Second)
	late := dialV5(t, addr, "subA2", A.SubUser, A.SubPass)
	late.Sub(t, A.all(), 1)
	lateB := dialV5(t, addr, "subB2", B.SubUser, B.SubPass)
	lateB.Sub(t, B.all(), 1)
	mqtttest.Barrier(t, pubA, A.topic("dev1", "state/barrier"), late, subA)
	mqtttest.Barrier(t, pubB, B.topic("dev1", "state/barrier"), lateB, subB)
	if n := p.Broker.Stats().Retained - before; n != 4 {
		t.Fatalf("retained before the sweep: %d, want 4", n)
	}
	p.Broker.Sweep()
	if n := p.Broker.Stats().Retained - before; n != 0 {
		t.Errorf("retained after the sweep: %d, want 0", n)
	}
}

// TestPlatformRetainedBurst: a wildcard SUBSCRIBE gets at most
// max_queued_messages (max_publisher_clients x 3) retained messages; the
// excess is dropped and metered; live messages are unaffected; another
// account's bigger plan gets its whole set.
func TestPlatformRetainedBurst(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	p.plan(t, "one", 1, 0)
	A := p.newTenant(t, "A", "one", false, "dev1") // burst 3
	B := p.newTenant(t, "B", "starter", false, "dev1")
	p.synced(t)
	addr := p.MQTTAddr

	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	for i := 1; i <= 5; i++ {
		pubA.MustPublish(t, &paho.Publish{Topic: A.topic("dev1", "state/s"+string(rune('0'+i))), QoS: 1, Retain: true, Payload: []byte("a")})
		pubB.MustPublish(t, &paho.Publish{Topic: B.topic("dev1", "state/s"+string(rune('0'+i))), QoS: 1, Retain: true, Payload: []byte("b")})
	}

	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subA.Sub(t, A.all(), 1)
	for i := range 3 {
		if m := subA.Next(t); !m.Retain || string(m.Payload) != "a" {
			t.Fatalf("retained %d: %q on %s (retain %v)", i, m.Payload, m.Topic, m.Retain)
		}
	}
	for i := range 5 { // live messages after the burst all arrive
		pubA.Pub(t, A.topic("dev1", "event/live"), 1, "live")
		if m := subA.ExpectOn(t, A.topic("dev1", "event/live"), "live"); m.Retain {
			t.Errorf("live message %d flagged retained", i)
		}
	}
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	subB.Sub(t, B.all(), 1)
	for i := range 5 {
		if m := subB.Next(t); !m.Retain || string(m.Payload) != "b" {
			t.Fatalf("B retained %d: %q on %s (retain %v)", i, m.Payload, m.Topic, m.Retain)
		}
	}
	mqtttest.Barrier(t, pubB, B.topic("dev1", "state/barrier"), subB)

	p.usage(t, A.ID, p.day(), "retained_burst drops 2", func(u fleetmq.DailyUsage) bool { return u.Drops["retained_burst"] == 2 })
	p.usage(t, B.ID, p.day(), "no drops", func(u fleetmq.DailyUsage) bool { return u.Messages[1] == 6 && len(u.Drops) == 0 })
}

// TestPlatformVendorLayouts: a registered vendor layout maps wire topics to
// the publishing account's platform topics (fanout delivers them there);
// the client-id placeholder must be the publisher's own id; unregistered
// roots are refused; without fanout the message is accepted but not
// delivered.
func TestPlatformVendorLayouts(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1", "dev2")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	for _, l := range []*fleetmq.Layout{
		{Name: "acme", WireRoot: "acme", Rules: []string{"acme/{client_id}/status=state/summary", "acme/{client_id}/sensor/+=telemetry/{1}"}, Fanout: true},
		{Name: "bolt", WireRoot: "bolt", Rules: []string{"bolt/{client_id}/status=state/summary"}, Fanout: false},
	} {
		if err := p.Service.PutLayout(p.ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	p.synced(t)
	addr := p.MQTTAddr

	pubA := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subA.Sub(t, A.all(), 1)
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	subB.Sub(t, B.all(), 1)

	pubA.Pub(t, "acme/dev1/status", 1, "a-status")
	subA.ExpectOn(t, A.topic("dev1", "state/summary"), "a-status")
	pubA.Pub(t, "acme/dev1/sensor/temp", 1, "21.5")
	subA.ExpectOn(t, A.topic("dev1", "telemetry/temp"), "21.5")
	mqtttest.Barrier(t, pubB, B.topic("dev1", "state/barrier"), subB)

	pubB.Pub(t, "acme/dev1/status", 1, "b-status")
	subB.ExpectOn(t, B.topic("dev1", "state/summary"), "b-status")
	mqtttest.Barrier(t, pubA, A.topic("dev1", "state/barrier"), subA)

	if rc := refusedPub(t, pubA, "acme/dev2/status"); rc != rcNotAuthorized {
		t.Errorf("acme/dev2/status as dev1: 0x%02x, want 0x87", rc)
	}
	refusedPub(t, pubA, "vendorx/dev1/x")
	refusedPub(t, pubA, "acme/dev1/unknown")

	// Without fanout: accepted, not delivered.
	r, err := pubA.TryPublish(&paho.Publish{Topic: "bolt/dev1/status", QoS: 1, Payload: []byte("quiet")})
	if err != nil || r == nil || r.ReasonCode != 0 {
		t.Fatalf("bolt (fanout off): %+v, %v, want PUBACK success", r, err)
	}
	mqtttest.Barrier(t, pubA, A.topic("dev1", "state/barrier"), subA)
	mqtttest.Barrier(t, pubB, B.topic("dev1", "state/barrier"), subB)
}

// TestPlatformRevokeAndDelete: revoking a publisher credential or deleting a
// client ends the live session within 2 s (v5 DISCONNECT 0x87) and refuses
// the reconnect; other credentials, clients and the other account are
// untouched.
func TestPlatformRevokeAndDelete(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1", "dev2")
	B := p.newTenant(t, "B", "starter", false, "dev1", "dev2")
	pub2User, pub2Pass, _ := p.credential(t, A, control.NewCredential{Kind: fleetmq.KindPublisher, Label: "second"})
	p.synced(t)
	addr := p.MQTTAddr

	dev1 := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	dev2 := dialV5(t, addr, "dev2", pub2User, pub2Pass)
	subA := dialV5(t, addr, "subA", A.SubUser, A.SubPass)
	subA.Sub(t, A.all(), 1)
	pubB := dialV5(t, addr, "dev1", B.PubUser, B.PubPass)
	pubB2 := dialV5(t, addr, "dev2", B.PubUser, B.PubPass)
	subB := dialV5(t, addr, "subB", B.SubUser, B.SubPass)
	subB.Sub(t, B.all(), 1)

	start := time.Now()
	if err := p.Service.RevokeCredential(p.ctx, A.ID, A.PubCredID); err != nil {
		t.Fatal(err)
	}
	if rc := dev1.Disconnected(t, disconnectWithin); rc != rcNotAuthorized {
		t.Errorf("revoked credential's session: DISCONNECT 0x%02x, want 0x87", rc)
	}
	t.Logf("revoked session ended after %v", time.Since(start))
	if rc := refusedV5(t, addr, "dev1", A.PubUser, A.PubPass); rc != rcBadUserOrPassword {
		t.Errorf("reconnect with the revoked credential: 0x%02x, want 0x86", rc)
	}
	// dev2 (another credential) and B carry on.
	dev2.Pub(t, A.topic("dev2", "state/x"), 1, "dev2 ok")
	subA.ExpectOn(t, A.topic("dev2", "state/x"), "dev2 ok")
	pubB.Pub(t, B.topic("dev1", "state/x"), 1, "B ok")
	subB.ExpectOn(t, B.topic("dev1", "state/x"), "B ok")

	start = time.Now()
	if err := p.Service.DeleteClient(p.ctx, A.ID, "dev2"); err != nil {
		t.Fatal(err)
	}
	if rc := dev2.Disconnected(t, disconnectWithin); rc != rcNotAuthorized {
		t.Errorf("deleted client's session: DISCONNECT 0x%02x, want 0x87", rc)
	}
	t.Logf("deleted client's session ended after %v", time.Since(start))
	if rc := refusedV5(t, addr, "dev2", pub2User, pub2Pass); rc != rcClientIDNotValid {
		t.Errorf("reconnect of the deleted client: 0x%02x, want 0x85", rc)
	}
	// B's dev2 (same id, other account) is untouched; A's subscriber too.
	pubB2.Pub(t, B.topic("dev2", "state/x"), 1, "B dev2 ok")
	subB.ExpectOn(t, B.topic("dev2", "state/x"), "B dev2 ok")
	for _, c := range []*mqtttest.V5{subA, pubB, pubB2, subB} {
		c.StillConnected(t)
	}
}

// TestPlatformClientUsageInterval: the accounts' usage reaches the store
// every reload interval, the per-client usage every ClientUsageInterval
// only (one write per device), while the live view counts at once; what a
// client sent is written when the platform closes, before its interval.
func TestPlatformClientUsageInterval(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startPlatform(t, func(c *app.Config) { c.DataDir, c.ClientUsageInterval = dir, time.Hour })
	p.plan(t, "small", 5, 0)
	A := p.newTenant(t, "A", "small", false, "dev1")
	B := p.newTenant(t, "B", "small", false, "dev1")
	p.synced(t)
	day := p.day()
	pubA := dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	pubB := dialV5(t, p.MQTTAddr, "dev1", B.PubUser, B.PubPass)
	for range 3 {
		pubA.Pub(t, A.topic("dev1", "state/x"), 1, "on")
	}
	pubB.Pub(t, B.topic("dev1", "state/x"), 1, "on")

	p.usage(t, A.ID, day, "3 QoS 1 messages", func(u fleetmq.DailyUsage) bool { return u.Messages == [3]int64{0, 3, 0} })
	p.usage(t, B.ID, day, "1 QoS 1 message", func(u fleetmq.DailyUsage) bool { return u.Messages == [3]int64{0, 1, 0} })
	// The flush that wrote the accounts' usage left the clients'.
	for _, acc := range []string{A.ID, B.ID} {
		if cu, err := p.Store.ClientUsage(p.ctx, acc, day, day); err != nil || len(cu) != 0 {
			t.Fatalf("per-client usage of %s before its interval: %+v, %v; want none stored yet", acc, cu, err)
		}
	}
	if pl, ok := p.Policy.LivePublisher(A.ID, "dev1", p.clock.Now()); !ok || pl.Today != [3]int64{0, 3, 0} {
		t.Fatalf("live view of A's dev1: %+v, %v; want today's 3 QoS 1 messages", pl.Today, ok)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := app.OpenStore(context.Background(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, c := range []struct {
		acc  string
		want [3]int64
	}{{A.ID, [3]int64{0, 3, 0}}, {B.ID, [3]int64{0, 1, 0}}} {
		cu, err := store.ClientUsage(context.Background(), c.acc, day, day)
		if err != nil || len(cu) != 1 || cu[0].ClientID != "dev1" || cu[0].Messages != c.want {
			t.Fatalf("per-client usage of %s after close: %+v, %v; want dev1 %v", c.acc, cu, err, c.want)
		}
	}

	// The meter keeps two days per client: longer than an hour is refused.
	cfg := apptest.Config(t, time.Now)
	cfg.ClientUsageInterval = 2 * time.Hour
	if _, err := app.Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "-client-usage-interval") {
		t.Fatalf("-client-usage-interval 2h: %v, want an error naming the flag", err)
	}
}
