package app_test

import (
	"testing"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
)

func persistent(o *mqtt3.ClientOptions) { o.SetCleanSession(false) }

// TestSessionsBelongToWhoMayResumeThem: a read-only subscriber password
// connecting with a device's client id does not take over the device's
// session; a subscriber password narrowed to part of the account does not
// resume the persistent session another password created on the whole
// account (it would receive what its own filters refuse), and that
// session is still there, with what was queued for it, when its own
// password comes back.
func TestSessionsBelongToWhoMayResumeThem(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	A := p.newTenant(t, "A", "starter", false, "dev1")
	narrowUser, narrowPass, _ := p.credential(t, A, control.NewCredential{Kind: fleetmq.KindSubscriber, Filters: []string{A.topic("dev1", "state/#")}})
	p.synced(t)
	addr := p.MQTTAddr

	dev := dialV5(t, addr, "dev1", A.PubUser, A.PubPass)
	dialV5(t, addr, "dev1", A.SubUser, A.SubPass) // a subscriber with the device's client id
	dev.Pub(t, A.topic("dev1", "state/online"), 1, "still here")
	dev.StillConnected(t)

	wide := dialV3(t, addr, "dash", A.SubUser, A.SubPass, persistent)
	if wide.SessionPresent {
		t.Fatal("a new client id got session present")
	}
	mqtttest.Await(t, "wide subscribes", wide.Subscribe(A.all(), 1, nil))
	wide.Disconnect(0)

	narrow := dialV3(t, addr, "dash", narrowUser, narrowPass, persistent)
	if narrow.SessionPresent {
		t.Fatal("the narrow password resumed the session the whole-account password created")
	}
	mqtttest.Await(t, "narrow subscribes", narrow.Subscribe(A.topic("dev1", "state/#"), 1, nil))
	dev.Pub(t, A.topic("dev1", "event/door"), 1, "outside the narrow filter")
	dev.Pub(t, A.topic("dev1", "state/level"), 1, "inside")
	if m := narrow.Next(t); m.Topic() != A.topic("dev1", "state/level") {
		t.Fatalf("the narrow password received %s %q first, want only its own filter's message", m.Topic(), m.Payload())
	}
	narrow.Disconnect(0)

	wide = dialV3(t, addr, "dash", A.SubUser, A.SubPass, persistent)
	if !wide.SessionPresent {
		t.Fatal("the whole-account password lost its session to the narrow one")
	}
	for _, want := range []string{A.topic("dev1", "event/door"), A.topic("dev1", "state/level")} {
		if m := wide.Next(t); m.Topic() != want {
			t.Fatalf("queued for the whole-account session: %s, want %s", m.Topic(), want)
		}
	}
}
