//go:build linux

package broker_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Idle clients past CONNECT wait without a reader goroutine once they have
// sent nothing for Options.IdleParkAfter (Stats.IdleParked): the tests
// shorten it to tens of milliseconds, and check that a parked client is
// served exactly as one whose reader waits.

const parkAfter = 50 * time.Millisecond

// noPingsV3 keeps a paho.mqtt.golang client quiet for the test.
func noPingsV3(o *mqtt3.ClientOptions) { o.SetKeepAlive(time.Hour) }

// parkedNow is how many idle clients wait without a goroutine.
func parkedNow(b *testBroker) int64 { return b.Stats().IdleParked }

// TestIdleClientsParkAndCarryOn: a 3.1.1 subscriber (paho.mqtt.golang) and
// a v5 publisher (paho.golang), idle, both park; each QoS 1 publish of the
// publisher is acknowledged, the parked subscriber receives it (written
// while nothing reads its socket) and acknowledges it, and both park again.
func TestIdleClientsParkAndCarryOn(t *testing.T) {
	b := startBroker(t, broker.Options{IdleParkAfter: parkAfter})
	sub := mqtttest.DialV3(t, b.Addr, "park-sub", noPingsV3)
	msgs := sub.Subscription(t, "park/#", 1)
	pub := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "park-pub", CleanStart: true})
	eventually(t, "both clients parked", func() bool { return parkedNow(b) == 2 })
	for i := range 3 {
		payload := fmt.Sprintf("m%d", i)
		pub.Pub(t, "park/x", 1, payload) // waits for the PUBACK
		mqtttest.ExpectV3(t, msgs, "park/x", payload, 1)
		// 2 at first, then 2 per message: the publisher's PUBLISH and the
		// subscriber's PUBACK each woke a parked client, which parks
		// again (the PUBACK may still be on its way when both are seen
		// parked: the count says when it came).
		parks := int64(2 + 2*(i+1))
		eventually(t, fmt.Sprintf("both clients parked again after message %d", i), func() bool {
			return parkedNow(b) == 2 && b.Stats().IdleParks >= parks
		})
	}
	if st := b.Stats(); st.StrangersWaiting != 0 {
		t.Fatalf("StrangersWaiting %d: parked clients counted as strangers", st.StrangersWaiting)
	}
}

// TestParkedClientKeepAlive: the keep alive of a parked client is still
// enforced (DISCONNECT 0x8D), and a client that pings is never ended.
func TestParkedClientKeepAlive(t *testing.T) {
	b := startBroker(t, broker.Options{IdleParkAfter: parkAfter})
	quiet, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "ka-quiet", CleanStart: true, KeepAlive: 1})
	eventually(t, "the quiet client parked", func() bool { return parkedNow(b) == 1 })
	got := quiet.Closed(t)
	if len(got) != 1 || got[0].Type() != packet.DISCONNECT || got[0].(*packet.Disconnect).ReasonCode != packet.KeepAliveTimeout {
		t.Fatalf("a parked client past its keep alive got %v, want DISCONNECT 0x8D", got)
	}
}

// TestParkedSessionTakenOver: a client connecting with a parked client's id
// takes its session over; the parked one gets DISCONNECT 0x8E.
func TestParkedSessionTakenOver(t *testing.T) {
	b := startBroker(t, broker.Options{IdleParkAfter: parkAfter})
	old := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "same", CleanStart: true})
	eventually(t, "the first connection parked", func() bool { return parkedNow(b) == 1 })
	newer := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "same", CleanStart: true})
	if code := old.Disconnected(t, waitFor); code != byte(packet.SessionTakenOver) {
		t.Fatalf("the parked connection ended with 0x%02x, want 0x8E", code)
	}
	newer.Sub(t, "take/#", 1)
	newer.Pub(t, "take/x", 1, "after")
	newer.ExpectOn(t, "take/x", "after")
	eventually(t, "only the new connection parked", func() bool { return parkedNow(b) == 1 && b.Stats().Connections == 1 })
}

// TestHalfAPacketIsNotIdle: a client that sent part of a packet is not
// parked however long it pauses (its bytes are in its reader's buffer),
// and the packet is handled when the rest comes.
func TestHalfAPacketIsNotIdle(t *testing.T) {
	b := startBroker(t, broker.Options{IdleParkAfter: parkAfter})
	c, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "half", CleanStart: true})
	wire, err := packet.Encode(nil, &packet.Publish{Topic: "half/x", QoS: 1, PacketID: 7, Payload: []byte("split")}, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Conn.Write(wire[:5]); err != nil {
		t.Fatal(err)
	}
	if testkit.Within(8*parkAfter, func() bool { return parkedNow(b) != 0 }) {
		t.Fatal("a client in the middle of a packet was parked")
	}
	if _, err := c.Conn.Write(wire[5:]); err != nil {
		t.Fatal(err)
	}
	if ack := c.Expect(t, packet.PUBACK).(*packet.Ack); ack.PacketID != 7 {
		t.Fatalf("PUBACK for %d, want 7", ack.PacketID)
	}
}

// TestTLSClientsAreNotParked: a TLS connection keeps its reader (the TLS
// layer holds bytes the socket no longer shows), and a negative
// IdleParkAfter parks nobody.
func TestTLSClientsAreNotParked(t *testing.T) {
	b := startBroker(t, broker.Options{IdleParkAfter: parkAfter})
	cert, pool := testkit.SelfSigned(t)
	ln, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	c := mqtttest.DialV5Over(t, nc, &paho.Connect{ClientID: "tls", CleanStart: true})
	if testkit.Within(8*parkAfter, func() bool { return parkedNow(b) != 0 }) {
		t.Fatal("a TLS client was parked")
	}
	c.Sub(t, "tls/#", 1)
	c.Pub(t, "tls/x", 1, "still served")
	c.ExpectOn(t, "tls/x", "still served")

	never := startBroker(t, broker.Options{IdleParkAfter: -1})
	mqtttest.DialV5(t, never.Addr, &paho.Connect{ClientID: "plain", CleanStart: true})
	if testkit.Within(8*parkAfter, func() bool { return parkedNow(never) != 0 }) {
		t.Fatal("IdleParkAfter -1 parked a client")
	}
}

// TestCloseWithParkedClients: the server's Close ends parked clients like
// any (v5: DISCONNECT 0x8B) and returns.
func TestCloseWithParkedClients(t *testing.T) {
	b := startBroker(t, broker.Options{IdleParkAfter: parkAfter})
	var clients []*mqtttest.V5
	for i := range 3 {
		clients = append(clients, mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: fmt.Sprintf("c%d", i), CleanStart: true}))
	}
	eventually(t, "the clients parked", func() bool { return parkedNow(b) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		if code := c.Disconnected(t, waitFor); code != byte(packet.ServerShuttingDown) {
			t.Fatalf("%s: DISCONNECT 0x%02x at shutdown, want 0x8B", c.Name, code)
		}
	}
}
