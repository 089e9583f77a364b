package broker_test

import (
	"fmt"
	"testing"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestResponseTopicWithWildcardIsAProtocolError: a Response Topic must
// not contain wildcard characters ([MQTT-3.3.2-14]). A PUBLISH carrying
// one ends the connection with DISCONNECT 0x82 and reaches no subscriber,
// at any QoS; a CONNECT whose will carries one is refused with CONNACK
// 0x82 (the will would be forwarded with it); a Response Topic without
// wildcards passes unaltered ([MQTT-3.3.2-15]).
func TestResponseTopicWithWildcardIsAProtocolError(t *testing.T) {
	b := startBroker(t, broker.Options{})
	sub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "rt-sub", CleanStart: true, KeepAlive: 30})
	sub.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "rt/#", QoS: 2}}})
	sub.Expect(t, packet.SUBACK)
	for i, rt := range []string{"reply/+", "reply/#", "#"} {
		qos := byte(i % 3)
		pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: fmt.Sprintf("rt-pub%d", i), CleanStart: true, KeepAlive: 30})
		p := &packet.Publish{Topic: "rt/x", QoS: qos, Payload: []byte("request")}
		if qos > 0 {
			p.PacketID = 1
		}
		p.Properties.SetString(packet.PropResponseTopic, rt)
		pub.Must(t, p)
		hAExpectDisconnect(t, pub, packet.ProtocolError)
	}

	wc := mqtttest.DialRaw(t, b.Addr, packet.Version5)
	cp := &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version5, ClientID: "rt-will", CleanStart: true,
		Will: &packet.Will{Topic: "rt/will", Payload: []byte("will")}}
	cp.Will.Properties.SetString(packet.PropResponseTopic, "reply/+")
	wc.Must(t, cp)
	got := wc.Closed(t)
	if len(got) != 1 || got[0].(*packet.Connack).ReasonCode != packet.ProtocolError {
		t.Fatalf("CONNECT with a will's Response Topic %q: got %+v before close, want CONNACK 0x82", "reply/+", got)
	}

	// Nothing reached the subscriber: the next PUBLISH it sees is a clean
	// one, its Response Topic unaltered.
	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "rt-pub", CleanStart: true, KeepAlive: 30})
	p := &packet.Publish{Topic: "rt/y", Payload: []byte("clean")}
	p.Properties.SetString(packet.PropResponseTopic, "reply/rt-pub")
	pub.Must(t, p)
	gp := sub.Expect(t, packet.PUBLISH).(*packet.Publish)
	if string(gp.Payload) != "clean" || gp.Properties.ResponseTopic != "reply/rt-pub" {
		t.Fatalf("subscriber got %q on %s with Response Topic %q, want \"clean\" with \"reply/rt-pub\"", gp.Payload, gp.Topic, gp.Properties.ResponseTopic)
	}
}

// TestTopicAliasWithinMaximumPacketSize: the server must not send a
// packet over the client's Maximum Packet Size ([MQTT-3.1.2-24]), a
// Topic Alias it adds included. A message that fits only without a new
// alias goes without one (and the alias is not taken: the next message on
// the topic sets it), one that fits only with the alias already set for
// its topic goes with it, and every alias sent without a topic was set
// before.
func TestTopicAliasWithinMaximumPacketSize(t *testing.T) {
	const limit = 100
	b := startBroker(t, broker.Options{})
	cp := &packet.Connect{ClientID: "tam-sub", CleanStart: true, KeepAlive: 30}
	cp.Properties.SetUint32(packet.PropMaximumPacketSize, limit)
	cp.Properties.SetUint16(packet.PropTopicAliasMaximum, 5)
	sub, _ := mqtttest.ConnectRaw(t, b.Addr, cp)
	sub.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "tam/#"}}})
	sub.Expect(t, packet.SUBACK)
	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "tam-pub", CleanStart: true, KeepAlive: 30})

	// A QoS 0 PUBLISH on tam/x to the subscriber without an alias: fixed
	// header 2, topic 7, property length 1, then the payload.
	full := limit - 10
	payloads := []struct {
		topic string
		n     int
	}{
		{"tam/x", full},     // fits exactly, but not with a new alias
		{"tam/x", 10},       // sets the alias of tam/x
		{"tam/x", full + 2}, // fits only through that alias (exactly)
		{"tam/y", 10},       // sets the alias of tam/y
	}
	for i, p := range payloads {
		payload := make([]byte, p.n)
		payload[0] = byte('0' + i)
		pub.Must(t, &packet.Publish{Topic: p.topic, Payload: payload})
	}
	aliases := map[uint16]string{}
	for i, want := range payloads {
		got := sub.Expect(t, packet.PUBLISH).(*packet.Publish)
		enc, err := packet.Encode(nil, got, packet.Version5)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) > limit {
			t.Errorf("message %d: a PUBLISH of %d bytes (alias %d, topic %q), over the client's Maximum Packet Size %d", i, len(enc), got.Properties.TopicAlias, got.Topic, limit)
		}
		topic := got.Topic
		if a := got.Properties.TopicAlias; a != 0 {
			if topic != "" {
				aliases[a] = topic
			} else if topic = aliases[a]; topic == "" {
				t.Fatalf("message %d: Topic Alias %d without a topic, never set", i, a)
			}
		}
		if topic != want.topic || len(got.Payload) != want.n || got.Payload[0] != byte('0'+i) {
			t.Fatalf("message %d: got %d bytes on %q, want %d on %q", i, len(got.Payload), topic, want.n, want.topic)
		}
	}
}

// TestWillTopicOverMaxTopicLevels: a will topic is a topic name, held to
// Options.MaxTopicLevels as a PUBLISH topic is: a CONNECT whose will topic
// is deeper is refused (v5: CONNACK 0x90; 3.1.1, without a code for it:
// 0x03), so the will is never published; one at the limit connects.
func TestWillTopicOverMaxTopicLevels(t *testing.T) {
	b := startBroker(t, broker.Options{MaxTopicLevels: 4})
	sub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "wl-sub", CleanStart: true, KeepAlive: 30})
	sub.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "wl/#"}}})
	sub.Expect(t, packet.SUBACK)
	for _, version := range []byte{packet.Version311, packet.Version5} {
		rc := mqtttest.DialRaw(t, b.Addr, version)
		rc.Must(t, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: version, ClientID: "wl-deep", CleanStart: true, KeepAlive: 30,
			Will: &packet.Will{Topic: "wl/a/b/c/d", Payload: []byte("deep")}})
		want := packet.TopicNameInvalid
		if version == packet.Version311 {
			want = packet.ServerUnavailable
		}
		got := rc.Closed(t)
		if len(got) != 1 || got[0].(*packet.Connack).ReasonCode != want {
			t.Fatalf("v%d CONNECT with a will topic of 5 levels: got %+v before close, want CONNACK %v", version, got, want)
		}
	}
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "wl-ok", CleanStart: true, KeepAlive: 30,
		Will: &packet.Will{Topic: "wl/a/b/c", Payload: []byte("at the limit")}})
	rc.Conn.Close() // an abnormal close: the will goes
	if p := sub.Expect(t, packet.PUBLISH).(*packet.Publish); p.Topic != "wl/a/b/c" {
		t.Fatalf("subscriber got %q on %s, want the will at the limit", p.Payload, p.Topic)
	}
}
