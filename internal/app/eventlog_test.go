package app_test

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestEventLogAnswersWhyDataDoesNotArrive: everything an operator needs to
// answer "my device's data does not arrive" is in serve's event log, one
// line per event, with the account, the client and the reason: the wrong
// password, the unregistered client id, the refused topic, the QoS above
// the client's maximum, the revoked credential; and the control-plane
// changes that caused them (credential created and revoked, client
// added).
func TestEventLogAnswersWhyDataDoesNotArrive(t *testing.T) {
	log, sink := testkit.NewLog()
	p := startPlatform(t, func(c *app.Config) { c.Logger = log })
	a := p.newTenant(t, "acme", "starter", false, "pump-17")
	p.addClient(t, a, "valve-0", 0)
	p.synced(t)
	line := func(what, msg string, kv ...string) map[string]any {
		t.Helper()
		kv = append(kv, "account", a.ID)
		var got []map[string]any
		eventually(t, what+" logged", func() bool { got = sink.Lines(msg, kv...); return len(got) > 0 })
		if len(got) != 1 {
			t.Fatalf("%s: %d lines %q %v, want 1:\n%s", what, len(got), msg, kv, sink.String())
		}
		return got[0]
	}
	detail := func(l map[string]any, want string) {
		t.Helper()
		if d, _ := l["detail"].(string); !strings.Contains(d, want) {
			t.Fatalf("detail %q, want it to contain %q (line %v)", d, want, l)
		}
	}

	// The control plane: the credentials and clients made above.
	line("publisher credential", "credential created", "credential", a.PubCredID, "kind", "publisher")
	line("client", "client added", "client_id", "valve-0")

	// A wrong password, an unregistered client id.
	refusedV5(t, p.MQTTAddr, "pump-17", a.PubUser, "not-the-password")
	detail(line("wrong password", "connect refused", "client_id", "pump-17", "username", a.PubUser), "wrong password for credential "+a.PubCredID)
	refusedV5(t, p.MQTTAddr, "pump-99", a.PubUser, a.PubPass)
	detail(line("unregistered client", "connect refused", "client_id", "pump-99"), `client id "pump-99" is not registered`)

	// A device on the wrong topic class, then one above its maximum QoS.
	dev := dialV5(t, p.MQTTAddr, "pump-17", a.PubUser, a.PubPass)
	line("the device's connect", "client connected", "client_id", "pump-17", "kind", "publisher")
	refusedPub(t, dev, a.topic("pump-17", "data/level"))
	detail(line("the wrong class", "publish refused", "client_id", "pump-17", "topic", a.topic("pump-17", "data/level")),
		`topic class "data/" is not one of state, event, telemetry, sample`)
	// (3.1.1: a v5 client would not send above the Maximum QoS its CONNACK
	// advertised.)
	valve := dialV3(t, p.MQTTAddr, "valve-0", a.PubUser, a.PubPass)
	valve.Publish(a.topic("valve-0", "state/open"), 1, false, "1")
	detail(line("QoS above max", "client disconnected", "client_id", "valve-0", "reason", "qos_not_allowed", "by", "server"),
		"above this client's maximum QoS 0")

	// The credential revoked: the change, then the device's disconnect.
	if err := p.Service.RevokeCredential(p.ctx, a.ID, a.PubCredID); err != nil {
		t.Fatal(err)
	}
	p.Sync(p.ctx)
	line("the revocation", "credential revoked", "credential", a.PubCredID)
	detail(line("the device's disconnect", "client disconnected", "client_id", "pump-17", "reason", "not_authorized"),
		"credential "+a.PubCredID+" was revoked")
	if dev.Disconnected(t, waitFor) != 0x87 {
		t.Fatal("the device was not told Not authorized")
	}
}
