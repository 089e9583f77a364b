package broker_test

import (
	"strconv"
	"testing"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The allocation budget of a message when clients send one packet per
// write, as paho and mosquitto_pub do: each PUBLISH is its own read, and
// each delivery its own write. Allocations are most of what the broker
// spends per message beyond its system calls (the garbage collector's
// work grows with them), so a regression fails here, not only in a
// benchmark. Counted for the whole process, the test's two clients
// included.
func TestMessageAllocationsOnePacketPerRead(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for _, tc := range []struct {
		qos  byte
		most float64
	}{
		// Broker: the packet's bytes, the Message and its delivery. The
		// clients: the encoded packets, and the subscriber's and the
		// publisher's decoded ones.
		{qos: 0, most: 6},
		{qos: 1, most: 10},
	} {
		one := onePacketPerRead(t, tc.qos)
		if n := testing.AllocsPerRun(500, one); n > tc.most {
			t.Errorf("QoS %d: %.1f allocations per message, want at most %v", tc.qos, n, tc.most)
		} else {
			t.Logf("QoS %d: %.1f allocations per message", tc.qos, n)
		}
	}
}

// BenchmarkOnePacketPerRead is one message at a time from a publisher to a
// subscriber, each packet written on its own and the next sent once the
// last was delivered (and acknowledged at QoS 1): the isolated messages of
// a fleet at a steady low rate, where nothing is batched. cpu-µs/msg is
// the process's CPU time (broker and both clients) per message. Run: go
// test ./mqtt/broker -run '^$' -bench OnePacketPerRead -benchmem
func BenchmarkOnePacketPerRead(b *testing.B) {
	for _, qos := range []byte{0, 1} {
		b.Run("qos"+strconv.Itoa(int(qos)), func(b *testing.B) {
			one := onePacketPerRead(b, qos)
			one() // connections warm
			b.ReportAllocs()
			start := testkit.ProcessCPU(b)
			b.ResetTimer()
			for range b.N {
				one()
			}
			b.StopTimer()
			b.ReportMetric(float64((testkit.ProcessCPU(b)-start).Microseconds())/float64(b.N), "cpu-µs/msg")
		})
	}
}

// onePacketPerRead starts a broker with a subscriber to allocs/# and a
// publisher, and returns a function that sends one message at qos and
// waits until the subscriber has it (and, at QoS 1, both PUBACKs are
// through).
func onePacketPerRead(tb testing.TB, qos byte) func() {
	addr := startBroker(tb, broker.Options{}).Addr
	sub := dialBench(tb, addr, "sub")
	sub.Must(tb, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "allocs/#", QoS: 1}}})
	sub.Expect(tb, packet.SUBACK)
	pub := dialBench(tb, addr, "pub")
	payload := make([]byte, 200)
	id := uint16(0)
	return func() {
		id = id%60000 + 1
		p := &packet.Publish{Topic: "allocs/dev/telemetry", QoS: qos, Payload: payload}
		if qos > 0 {
			p.PacketID = id
		}
		pub.Must(tb, p) // one packet, one write
		got := sub.Expect(tb, packet.PUBLISH).(*packet.Publish)
		if qos > 0 {
			sub.Must(tb, &packet.Ack{Kind: packet.PUBACK, PacketID: got.PacketID})
			pub.Expect(tb, packet.PUBACK)
		}
	}
}
