package broker_test

import (
	"fmt"
	"testing"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestEndSessionsDropsAsExpired: a connected persistent session that the
// server ends for good (Server.EndSessions: its owner is gone) ends with
// its connection, and what it held (in flight and queued) is dropped as
// when a session expires, not as a connection's loss; a DISCONNECT that
// asks to keep the session, arriving meanwhile, does not keep it.
func TestEndSessionsDropsAsExpired(t *testing.T) {
	b := startBroker(t, broker.Options{})
	c := &packet.Connect{ClientID: "es-gone", CleanStart: true, KeepAlive: 30, ProtocolLevel: packet.Version5}
	c.Properties.SetSessionExpiry(3600)
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, c)
	hcSubscribe(t, rc, "es/#", 1, 0)
	const n = 25 // more than the inflight window: some stay queued
	for i := range n {
		b.Publish(&broker.Message{Topic: "es/x", QoS: 1, Payload: fmt.Appendf(nil, "m%d", i)})
	}
	eventually(t, "the messages in flight or queued", func() bool {
		st := b.Stats()
		return st.Inflight+st.Queued == n
	})
	before := b.Stats().Drops
	if got := b.EndSessions(func(id *broker.Identity) string {
		if id.ClientID == "es-gone" {
			return "its owner is gone"
		}
		return ""
	}, packet.NotAuthorized); got != 1 {
		t.Fatalf("EndSessions ended %d sessions, want 1", got)
	}
	d := &packet.Disconnect{ReasonCode: packet.Success}
	d.Properties.SetSessionExpiry(3600)
	rc.Send(d, true) // may arrive before the server's close, or be refused with the connection
	eventually(t, "the session ended", func() bool { return b.Stats().Sessions == 0 })
	after := b.Stats().Drops
	if exp, lost := after[broker.DropSessionExpired]-before[broker.DropSessionExpired], after[broker.DropConnectionClosed]-before[broker.DropConnectionClosed]; exp != n || lost != 0 {
		t.Fatalf("dropped %d as session expired and %d as connection closed, want %d and 0", exp, lost, n)
	}
}
