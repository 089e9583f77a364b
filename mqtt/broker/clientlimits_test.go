package broker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The limits a client states in its CONNECT (Receive Maximum, Maximum
// Packet Size) and the one the server gives it (Maximum QoS) hold on a
// resumed session's retransmissions, on wills, and on the reason strings
// of the server's own packets.

// clConnect connects a raw v5 client with a session expiry of 300 s, a
// Receive Maximum (when recvMax > 0) and a Maximum Packet Size (when
// maxPacket > 0).
func clConnect(tb testing.TB, addr, id string, clean bool, recvMax uint16, maxPacket uint32) (*mqtttest.Raw, *packet.Connack) {
	tb.Helper()
	return hcConnect(tb, addr, id, clean, 300, recvMax, func(cp *packet.Connect) {
		if maxPacket > 0 {
			cp.Properties.SetUint32(packet.PropMaximumPacketSize, maxPacket)
		}
	})
}

// TestResumeRespectsReceiveMaximum: a subscriber holds 5 QoS 1 messages
// unacknowledged, goes away, and resumes its session with a Receive
// Maximum of 2. The server has at most 2 unacknowledged PUBLISHes on the
// new connection [MQTT-3.3.4-9]: the first two come again (DUP), the
// others each as an acknowledgement frees a place, in order, and a
// message published meanwhile only after them.
func TestResumeRespectsReceiveMaximum(t *testing.T) {
	b := startBroker(t, broker.Options{})
	sub, _ := clConnect(t, b.Addr, "rm-sub", true, 20, 0)
	hcSubscribe(t, sub, "rm/#", 1, 0)
	pub, _ := hcConnect(t, b.Addr, "rm-pub", true, 0, 0)
	hcPublishN(t, pub, "rm/x", 1, 0, 5)
	for i := range 5 {
		hcExpectPub(t, sub, hcPayload(i), 1, false)
	}
	sub.Conn.Close()
	hcConns(t, b, 1)

	sub, ack := clConnect(t, b.Addr, "rm-sub", false, 2, 0)
	if !ack.SessionPresent {
		t.Fatal("session not present")
	}
	hcPublishN(t, pub, "rm/x", 1, 5, 1) // queued behind the resent ones
	p0 := hcExpectPub(t, sub, hcPayload(0), 1, true)
	p1 := hcExpectPub(t, sub, hcPayload(1), 1, true)
	hcAbsent(t, sub, "Receive Maximum 2 reached on the resumed connection")
	sub.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: p0.PacketID})
	p2 := hcExpectPub(t, sub, hcPayload(2), 1, true)
	hcAbsent(t, sub, "Receive Maximum 2 reached again")
	for _, p := range []*packet.Publish{p1, p2} {
		sub.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: p.PacketID})
	}
	p3 := hcExpectPub(t, sub, hcPayload(3), 1, true)
	p4 := hcExpectPub(t, sub, hcPayload(4), 1, true)
	sub.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: p3.PacketID})
	hcExpectPub(t, sub, hcPayload(5), 1, false)
	sub.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: p4.PacketID})
}

// TestResumeSkipsWhatNoLongerFits: a QoS 1 message in flight when the
// subscriber went away is too large for the Maximum Packet Size it gives
// when it resumes. It is not sent, it is counted packet_too_large, and it
// frees its place in the window: the next message reaches the client.
func TestResumeSkipsWhatNoLongerFits(t *testing.T) {
	b := startBroker(t, broker.Options{})
	sub, _ := clConnect(t, b.Addr, "big-sub", true, 1, 0)
	hcSubscribe(t, sub, "big/#", 1, 0)
	pub, _ := hcConnect(t, b.Addr, "big-pub", true, 0, 0)

	big := strings.Repeat("x", 1000)
	pub.Must(t, &packet.Publish{Topic: "big/x", QoS: 1, PacketID: 1, Payload: []byte(big)})
	hcExpectAck(t, pub, packet.PUBACK, 1)
	hcExpectPub(t, sub, big, 1, false) // not acknowledged
	sub.Conn.Close()
	hcConns(t, b, 1)

	sub, ack := clConnect(t, b.Addr, "big-sub", false, 1, 200)
	if !ack.SessionPresent {
		t.Fatal("session not present")
	}
	hcPublishN(t, pub, "big/y", 1, 1, 1)
	sub.Conn.SetReadDeadline(time.Now().Add(waitFor))
	p, err := sub.ReadPacket()
	if err != nil {
		st := b.Stats()
		t.Fatalf("the next message never came (%v): inflight %d, queued %d, packet_too_large drops %d",
			err, st.Inflight, st.Queued, st.Drops[hcDrop(t, "packet_too_large")])
	}
	if pp, ok := p.(*packet.Publish); !ok || string(pp.Payload) != hcPayload(1) {
		t.Fatalf("got %v, want PUBLISH %q", p, hcPayload(1))
	}
	if n := b.Stats().Drops[hcDrop(t, "packet_too_large")]; n != 1 {
		t.Fatalf("packet_too_large drops = %d, want 1", n)
	}
}

// TestWillQoSAboveMaximum: a client whose maximum QoS is 1 connects with
// a Will QoS of 2. MQTT 5 refuses the CONNECT with 0x9B QoS not supported
// [MQTT-3.2.2-12]; 3.1.1, which cannot be told a Maximum QoS, is accepted
// and its will is published at QoS 1 when it goes.
func TestWillQoSAboveMaximum(t *testing.T) {
	b := startBroker(t, broker.Options{Policy: hdCapPolicy{}})
	watch, _ := hcConnect(t, b.Addr, "will-watch", true, 0, 0)
	hcSubscribe(t, watch, "wq/#", 2, 0)

	rc := mqtttest.DialRaw(t, b.Addr, packet.Version5)
	rc.Must(t, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version5, ClientID: "capped-will", CleanStart: true, KeepAlive: 30,
		Will: &packet.Will{Topic: "wq/v5", QoS: 2, Payload: []byte("gone")}})
	if ack := rc.Expect(t, packet.CONNACK).(*packet.Connack); ack.ReasonCode != packet.QoSNotSupported {
		t.Fatalf("v5 CONNACK 0x%02X, want 0x%02X", byte(ack.ReasonCode), byte(packet.QoSNotSupported))
	}

	v3 := mqtttest.DialRaw(t, b.Addr, packet.Version311)
	v3.Must(t, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version311, ClientID: "capped-will3", CleanStart: true, KeepAlive: 30,
		Will: &packet.Will{Topic: "wq/v3", QoS: 2, Payload: []byte("gone")}})
	if ack := v3.Expect(t, packet.CONNACK).(*packet.Connack); ack.ReasonCode != packet.Success {
		t.Fatalf("3.1.1 CONNACK 0x%02X, want accepted", byte(ack.ReasonCode))
	}
	v3.Conn.Close() // not a DISCONNECT: the will is due
	if p := hcExpectPub(t, watch, "gone", 1, false); p.Topic != "wq/v3" {
		t.Fatalf("will on %q, want wq/v3", p.Topic)
	}
}

// TestDisconnectReasonFitsMaximumPacketSize: a v5 client with a Maximum
// Packet Size of 40 is taken over by a new connection with its client id:
// its DISCONNECT 0x8E comes without the reason string that would make it
// larger than that [MQTT-3.1.2-24, MQTT-3.14.2-3].
func TestDisconnectReasonFitsMaximumPacketSize(t *testing.T) {
	const maxSize = 40
	b := startBroker(t, broker.Options{})
	old, _ := clConnect(t, b.Addr, "small-max", true, 0, maxSize)
	clConnect(t, b.Addr, "small-max", false, 0, 0) // takes the session over
	got := old.Closed(t)
	if len(got) != 1 || got[0].Type() != packet.DISCONNECT {
		t.Fatalf("got %v before the close, want one DISCONNECT", got)
	}
	d := got[0].(*packet.Disconnect)
	wire, err := packet.Encode(nil, d, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	if d.ReasonCode != packet.SessionTakenOver || len(wire) > maxSize {
		t.Fatalf("DISCONNECT 0x%02X of %d bytes (reason string %q) sent to a client whose Maximum Packet Size is %d",
			byte(d.ReasonCode), len(wire), d.Properties.ReasonString, maxSize)
	}
}

// refuseAfterPolicy takes every message and then cannot keep it
// (Message.Refuse), with a reason as long as the platform's ingest gives.
type refuseAfterPolicy struct{ broker.OpenPolicy }

func (refuseAfterPolicy) Accepted(_ *broker.Identity, m *broker.Message) bool {
	m.Refuse(packet.ImplementationSpecificError, "the message could not be stored: "+strings.Repeat("x", 120))
	return true
}

// TestRefusalReasonFitsMaximumPacketSize: a QoS 1 PUBLISH refused after
// the policy took it comes back PUBACK 0x83 without the reason string that
// would make it larger than the client's Maximum Packet Size of 64
// [MQTT-3.1.2-24, MQTT-3.4.2-2]; a client with room gets the reason.
func TestRefusalReasonFitsMaximumPacketSize(t *testing.T) {
	const maxSize = 64
	b := startBroker(t, broker.Options{Policy: refuseAfterPolicy{}})
	for _, tc := range []struct {
		max        uint32
		wantReason bool
	}{{maxSize, false}, {0, true}} {
		rc, _ := clConnect(t, b.Addr, "refused-pub", true, 0, tc.max)
		rc.Must(t, &packet.Publish{Topic: "a/b", QoS: 1, PacketID: 1, Payload: []byte("x")})
		ack := rc.Expect(t, packet.PUBACK).(*packet.Ack)
		wire, err := packet.Encode(nil, ack, packet.Version5)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ack.ReasonCode != packet.ImplementationSpecificError:
			t.Fatalf("PUBACK 0x%02X, want 0x83", byte(ack.ReasonCode))
		case tc.max > 0 && len(wire) > int(tc.max):
			t.Fatalf("PUBACK of %d bytes (reason string %d bytes) sent to a client whose Maximum Packet Size is %d", len(wire), len(ack.Properties.ReasonString), tc.max)
		case tc.wantReason != (ack.Properties.ReasonString != ""):
			t.Fatalf("Maximum Packet Size %d: reason string %q", tc.max, ack.Properties.ReasonString)
		}
		rc.Conn.Close()
	}
}
