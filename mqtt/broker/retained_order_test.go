package broker_test

import (
	"fmt"
	"testing"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestRetainedBurstNotOvertakenByLive: a retained message sent on
// SUBSCRIBE never reaches the subscriber after a newer live message on
// the same topic (the last value it would see for the topic would be the
// stale one, the store holding the new): 4,000 retained topics are
// updated while a subscriber subscribes to them all.
func TestRetainedBurstNotOvertakenByLive(t *testing.T) {
	const n = 4000
	for attempt := range 8 {
		b := startBroker(t, broker.Options{MaxQueued: 4 * n})
		pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: fmt.Sprintf("pub%d", attempt), CleanStart: true, KeepAlive: 30})
		send := func(payload string) {
			for i := range n {
				if err := pub.Send(&packet.Publish{Topic: fmt.Sprintf("ord/%d", i), Retain: true, Payload: []byte(payload)}, false); err != nil {
					t.Error(err)
					return
				}
			}
		}
		sync := func(pid uint16) {
			pub.Send(&packet.Publish{Topic: "ord-marker", QoS: 1, PacketID: pid, Payload: []byte("m")}, true)
			pub.Expect(t, packet.PUBACK)
		}
		send("old")
		sync(1)

		sub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: fmt.Sprintf("sub%d", attempt), CleanStart: true, KeepAlive: 30})
		sub.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "ord/#"}, {Filter: "ord-marker"}}})
		done := make(chan struct{})
		go func() {
			defer close(done)
			send("new")
			// QoS 1 marker: every "new" above was routed before its PUBACK.
			// Retained: on a loaded machine the subscriber's SUBSCRIBE may
			// be handled after all of it, and then brings it in its burst.
			pub.Send(&packet.Publish{Topic: "ord-marker", QoS: 1, PacketID: 2, Retain: true, Payload: []byte("end")}, true)
		}()
		last := map[string]string{}
		var stale []string
		for {
			p := sub.Next(t)
			m, ok := p.(*packet.Publish)
			if !ok {
				continue
			}
			if m.Topic == "ord-marker" {
				if string(m.Payload) == "end" {
					break
				}
				continue
			}
			if last[m.Topic] == "new" && string(m.Payload) == "old" {
				stale = append(stale, m.Topic)
			}
			last[m.Topic] = string(m.Payload)
		}
		<-done
		// The SUBSCRIBE's burst is queued by the subscriber's reader before
		// it reads the PINGREQ: after the PINGRESP every message is in.
		sub.Must(t, &packet.Pingreq{})
		for {
			p := sub.Next(t)
			if _, ok := p.(*packet.Pingresp); ok {
				break
			}
			if m, ok := p.(*packet.Publish); ok && m.Topic != "ord-marker" {
				if last[m.Topic] == "new" && string(m.Payload) == "old" {
					stale = append(stale, m.Topic)
				}
				last[m.Topic] = string(m.Payload)
			}
		}
		if len(stale) > 0 {
			rs, _ := b.Retained(stale[0], 0)
			t.Fatalf("attempt %d: %d topics got the old retained value (retain=1, from the SUBSCRIBE burst) after the new live value, e.g. %v; last value seen on %s = %q, store holds %q",
				attempt, len(stale), stale[:min(3, len(stale))], stale[0], last[stale[0]], rs[0].Payload)
		}
	}
}
