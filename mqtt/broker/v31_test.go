package broker_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// MQTT 3.1 ("MQIsdp", level 3), for legacy device firmware: served as
// 3.1.1 with 3.1's CONNECT rules (see docs/broker.md, "MQTT 3.1").

// v31Connect is a 3.1 CONNECT with a clean session.
func v31Connect(id string) *packet.Connect {
	return &packet.Connect{ProtocolName: "MQIsdp", ProtocolLevel: packet.Version31, CleanStart: true, ClientID: id, KeepAlive: 30}
}

// dialV31 connects a paho.mqtt.golang client speaking MQTT 3.1.
func dialV31(tb testing.TB, addr, id string, edit ...func(*mqtt3.ClientOptions)) *mqtttest.V3 {
	tb.Helper()
	return mqtttest.DialV3(tb, addr, id, append([]func(*mqtt3.ClientOptions){func(o *mqtt3.ClientOptions) { o.SetProtocolVersion(3) }}, edit...)...)
}

// TestMQTT31Paho: paho.mqtt.golang clients speaking 3.1 publish and
// subscribe at QoS 0, 1 and 2 among themselves and with a v5 client, and
// every outbound flow completes; a persistent 3.1 session gets what was
// published while it was away.
func TestMQTT31Paho(t *testing.T) {
	log, sink := testkit.NewLog()
	b := startBroker(t, broker.Options{Logger: log})
	pub := dialV31(t, b.Addr, "v31-pub")
	sub := dialV31(t, b.Addr, "v31-sub")
	in := sub.Subscription(t, "v31/#", 2)
	v5 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("v31-v5"))
	v5.MustSubscribe(t, paho.SubscribeOptions{Topic: "v31/#", QoS: 2})
	for q := byte(0); q <= 2; q++ {
		tp := "v31/q" + string('0'+q)
		mqtttest.Await(t, "publish", pub.Publish(tp, q, false, "from 3.1"))
		mqtttest.ExpectV3(t, in, tp, "from 3.1", q)
		hdExpectV5(t, v5, tp, "from 3.1", q)
		v5.MustPublish(t, &paho.Publish{Topic: tp, QoS: q, Payload: []byte("from 5")})
		mqtttest.ExpectV3(t, in, tp, "from 5", q)
		hdExpectV5(t, v5, tp, "from 5", q)
	}
	eventually(t, "outbound handshakes complete", func() bool { return b.Stats().Inflight == 0 })
	if lines := sink.Lines("client connected", "client_id", "v31-pub", "protocol", "3.1"); len(lines) != 1 {
		t.Fatalf("connect of a 3.1 client logged %d times with protocol 3.1", len(lines))
	}

	// A persistent session, resumed.
	persistent := func(o *mqtt3.ClientOptions) { o.SetCleanSession(false) }
	p := dialV31(t, b.Addr, "v31-away", persistent)
	mqtttest.Await(t, "subscribe", p.Subscribe("away/#", 1, nil))
	p.Disconnect(250)
	eventually(t, "the 3.1 session offline", func() bool { return b.Stats().Queued == 0 && b.Stats().Connections == 3 })
	mqtttest.Await(t, "publish", pub.Publish("away/x", 1, false, "kept"))
	eventually(t, "queued for the 3.1 session", func() bool { return b.Stats().Queued == 1 })
	again := dialV31(t, b.Addr, "v31-away", persistent)
	mqtttest.ExpectV3(t, again.Msgs, "away/x", "kept", 1)
}

// v31Policy refuses user "bad" (bad user name or password) and user
// "banned" (not authorized).
type v31Policy struct{ broker.OpenPolicy }

func (p v31Policy) Authenticate(ctx context.Context, req *broker.ConnectRequest) (*broker.Identity, error) {
	switch req.Connect.Username {
	case "bad":
		return nil, packet.Errorf(packet.BadUserNameOrPassword, "wrong password")
	case "banned":
		return nil, packet.Errorf(packet.NotAuthorized, "banned")
	}
	return p.OpenPolicy.Authenticate(ctx, req)
}

// TestMQTT31Connect: the exact CONNACK bytes a 3.1 client gets. A client
// id of 1 to 23 characters is accepted, an empty or a longer one refused
// 0x02 identifier rejected; credentials 0x04, authorization 0x05; a level
// other than 3 under "MQIsdp" 0x01. 3.1's CONNACK has no session present
// flag: a resumed 3.1 session is answered 0x00 0x00. 3.1's CONNECT may
// carry its unused flag bits.
func TestMQTT31Connect(t *testing.T) {
	b := startBroker(t, broker.Options{Policy: v31Policy{}})
	refused := func(code byte) []byte { return []byte{0x20, 0x02, 0x00, code} }
	for _, tc := range []struct {
		name string
		cp   *packet.Connect
		want []byte
	}{
		{"client id of 24 characters", v31Connect(strings.Repeat("x", 24)), refused(0x02)},
		{"empty client id", v31Connect(""), refused(0x02)},
		{"empty client id, persistent", &packet.Connect{ProtocolName: "MQIsdp", ProtocolLevel: 3, KeepAlive: 30}, refused(0x02)},
		{"24 characters, not bytes", v31Connect(strings.Repeat("é", 24)), refused(0x02)},
		{"bad password", func() *packet.Connect {
			c := v31Connect("pw")
			c.HasUsername, c.Username, c.HasPassword, c.Password = true, "bad", true, []byte("x")
			return c
		}(), refused(0x04)},
		{"not authorized", func() *packet.Connect {
			c := v31Connect("banned")
			c.HasUsername, c.Username = true, "banned"
			return c
		}(), refused(0x05)},
		{"MQIsdp level 4", &packet.Connect{ProtocolName: "MQIsdp", ProtocolLevel: 4, CleanStart: true, ClientID: "x", KeepAlive: 30}, refused(0x01)},
	} {
		if got := hARefusalBytes(t, b.Addr, tc.cp); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: server sent % x, want % x", tc.name, got, tc.want)
		}
	}

	// 23 characters (multi-byte ones count once) are accepted.
	for _, id := range []string{strings.Repeat("x", 23), strings.Repeat("é", 23), "a"} {
		rc := mqtttest.DialRaw(t, b.Addr, packet.Version31)
		rc.Must(t, v31Connect(id))
		if ack := rc.Expect(t, packet.CONNACK).(*packet.Connack); ack.ReasonCode != packet.Success || ack.SessionPresent {
			t.Fatalf("client id %q: CONNACK %+v", id, ack)
		}
		rc.Conn.Close()
	}

	// A resumed persistent session: 3.1.1 would say session present; 3.1
	// has no such flag.
	persistent := &packet.Connect{ProtocolName: "MQIsdp", ProtocolLevel: 3, ClientID: "keeper", KeepAlive: 30}
	for range 2 {
		rc := mqtttest.DialRaw(t, b.Addr, packet.Version31)
		rc.Must(t, persistent)
		rc.Conn.SetReadDeadline(time.Now().Add(waitFor))
		var ack [4]byte
		if _, err := io.ReadFull(rc, ack[:]); err != nil || ack != [4]byte{0x20, 0x02, 0x00, 0x00} {
			t.Fatalf("persistent 3.1 CONNACK % x (%v), want 20 02 00 00", ack, err)
		}
		rc.Must(t, &packet.Disconnect{})
		hAUntilClosed(rc, waitFor)
		eventually(t, "keeper offline", func() bool { return b.Stats().Sessions == 1 && b.Stats().Connections == 0 })
	}

	// The flag bits 3.1 leaves unused: the reserved bit, Will QoS and Will
	// Retain without the Will Flag. A 3.1.1 client is refused for them.
	body := []byte{0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 3, 0x3B, 0, 30, 0, 3, 'o', 'l', 'd'}
	rc := mqtttest.DialRaw(t, b.Addr, packet.Version31)
	rc.Conn.Write(append([]byte{0x10, byte(len(body))}, body...))
	if ack := rc.Expect(t, packet.CONNACK).(*packet.Connack); ack.ReasonCode != packet.Success {
		t.Fatalf("3.1 CONNECT with unused flags set: %v", ack.ReasonCode)
	}
}

// TestMQTT31Session: after CONNECT a 3.1 connection is served as 3.1.1: a
// SUBSCRIBE sent again with DUP set (as 3.1 does) is answered, a filter
// the server refuses gets 0x80 in SUBACK (3.1 defines no failure code;
// docs/broker.md says why 0x80), and a protocol violation closes the
// connection without a DISCONNECT.
func TestMQTT31Session(t *testing.T) {
	b := startBroker(t, broker.Options{})
	rc := mqtttest.DialRaw(t, b.Addr, packet.Version31)
	rc.Must(t, v31Connect("session31"))
	rc.Expect(t, packet.CONNACK)

	sub := []byte{0x8A, 12, 0, 7, 0, 3, 's', '/', '#', 1, 0, 3, 'a', '#', 'b', 0} // DUP; "a#b" is invalid
	sub[1] = byte(len(sub) - 2)
	rc.Conn.Write(sub)
	sa := rc.Expect(t, packet.SUBACK).(*packet.Suback)
	if sa.PacketID != 7 || !slices.Equal(sa.ReasonCodes, []packet.ReasonCode{packet.GrantedQoS1, 0x80}) {
		t.Fatalf("SUBACK %+v, want id 7 with 0x01 and 0x80", sa)
	}

	rc.Must(t, &packet.Publish{Topic: "s/x", QoS: 1, PacketID: 1, Payload: []byte("back")})
	for got := 0; got < 2; {
		switch p := rc.Next(t).(type) {
		case *packet.Ack:
			got++
		case *packet.Publish:
			rc.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: p.PacketID})
			got++
		}
	}

	rc.Must(t, &packet.Publish{Topic: "s/+", Payload: []byte("x")})
	if got := rc.Closed(t); len(got) != 0 {
		t.Fatalf("got %v before the close, want nothing (3.1 has no DISCONNECT from the server)", got)
	}
}
