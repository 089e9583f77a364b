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
