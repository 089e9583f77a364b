package broker_test

import (
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// TestQoSFlowsV5 sends each QoS from a v5 publisher to a v5 subscriber that
// subscribed at each QoS, and checks delivery at min(published, granted).
func TestQoSFlowsV5(t *testing.T) {
	b := startBroker(t, broker.Options{})
	for sq := byte(0); sq <= 2; sq++ {
		sub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("sub"+string('0'+sq)))
		sub.MustSubscribe(t, paho.SubscribeOptions{Topic: "q/" + string('0'+sq) + "/#", QoS: sq})
		pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pub"+string('0'+sq)))
		for pq := byte(0); pq <= 2; pq++ {
			pub.MustPublish(t, &paho.Publish{Topic: "q/" + string('0'+sq) + "/x", QoS: pq, Payload: []byte{'0' + pq}})
			m := sub.Next(t)
			if want := min(pq, sq); m.QoS != want || m.Payload[0] != '0'+pq {
				t.Fatalf("sub qos %d pub qos %d: got qos %d payload %q", sq, pq, m.QoS, m.Payload)
			}
		}
	}
}
