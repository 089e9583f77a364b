package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// dialBench connects a raw MQTT 5 client for benchmarks.
func dialBench(tb testing.TB, addr, id string) *mqtttest.Raw {
	tb.Helper()
	c, _ := mqtttest.ConnectRaw(tb, addr, &packet.Connect{CleanStart: true, ClientID: id})
	return c
}

// BenchmarkFanIn measures the broker's cost of one 200-byte message from a
// publisher to a wildcard subscriber, per QoS, both clients pipelining and
// acknowledging. Run: go test ./mqtt/broker -run '^$' -bench FanIn -benchmem
func BenchmarkFanIn(b *testing.B) {
	for _, qos := range []byte{0, 1, 2} {
		b.Run("qos"+strconv.Itoa(int(qos)), func(b *testing.B) { benchFanIn(b, qos, false) })
	}
}

// BenchmarkFanInOverlap is BenchmarkFanIn with a subscriber whose two
// subscriptions (bench/# and bench/+/telemetry, Subscription Identifiers 1
// and 2) both match every message: one copy carries both identifiers.
// ns/op is per message published, however many copies the subscriber gets
// (the subscriber stops at the last message's first copy).
func BenchmarkFanInOverlap(b *testing.B) {
	for _, qos := range []byte{0, 1, 2} {
		b.Run("qos"+strconv.Itoa(int(qos)), func(b *testing.B) { benchFanIn(b, qos, true) })
	}
}

func benchFanIn(b *testing.B, qos byte, overlap bool) {
	srv, err := broker.New(broker.Options{MaxQueued: 1 << 20, MaxInflight: 1000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	sub := dialBench(b, addr, "sub")
	filters := []string{"bench/#"}
	if overlap {
		filters = append(filters, "bench/+/telemetry")
	}
	for i, f := range filters {
		s := &packet.Subscribe{PacketID: uint16(i + 1), Subscriptions: []packet.Subscription{{Filter: f, QoS: qos}}}
		if overlap {
			s.Properties.SubscriptionIDs = []uint32{uint32(i + 1)}
		}
		if err := sub.Send(s, true); err != nil {
			b.Fatal(err)
		}
		if p, err := sub.ReadPacket(); err != nil || p.Type() != packet.SUBACK {
			b.Fatalf("want SUBACK, got %v %v", p, err)
		}
	}
	pub := dialBench(b, addr, "pub")
	payload := make([]byte, 200)
	last := make([]byte, 200)
	last[0] = 1 // marks the last message (overlap)
	topics := make([]string, 50)
	for i := range topics {
		topics[i] = "bench/" + strconv.Itoa(i) + "/telemetry"
	}

	subDone := make(chan error, 1)
	go func() {
		if overlap {
			subDone <- subscriberLoopLast(sub)
		} else {
			subDone <- subscriberLoop(sub, b.N)
		}
	}()
	// window keeps the publisher within the broker's Receive Maximum.
	window := make(chan struct{}, 512)
	go publisherAcks(pub, window)

	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := &packet.Publish{Topic: topics[i%len(topics)], QoS: qos, Payload: payload}
		if i == b.N-1 {
			p.Payload = last
		}
		if qos > 0 {
			select {
			case window <- struct{}{}:
			default:
				pub.Flush()
				window <- struct{}{}
			}
			p.PacketID = uint16(i%60000 + 1)
		}
		if err := pub.Send(p, i%64 == 63); err != nil {
			b.Fatal(err)
		}
	}
	pub.Flush()
	if err := <-subDone; err != nil {
		b.Fatal(err)
	}
}

// subscriberLoop reads n PUBLISH packets, acknowledging each flow.
func subscriberLoop(c *mqtttest.Raw, n int) error {
	got := 0
	for got < n {
		p, err := c.ReadPacket()
		if err != nil {
			return fmt.Errorf("subscriber after %d messages: %w", got, err)
		}
		var reply packet.Packet
		switch p := p.(type) {
		case *packet.Publish:
			got++
			switch p.QoS {
			case 1:
				reply = &packet.Ack{Kind: packet.PUBACK, PacketID: p.PacketID}
			case 2:
				reply = &packet.Ack{Kind: packet.PUBREC, PacketID: p.PacketID}
			}
		case *packet.Ack:
			if p.Kind == packet.PUBREL {
				reply = &packet.Ack{Kind: packet.PUBCOMP, PacketID: p.PacketID}
			}
		}
		if reply != nil {
			if err := c.Send(reply, c.Buffered() == 0); err != nil {
				return err
			}
		}
	}
	return c.Flush()
}

// subscriberLoopLast is subscriberLoop until the first PUBLISH whose
// payload starts with 1 (the last message).
func subscriberLoopLast(c *mqtttest.Raw) error {
	for {
		p, err := c.ReadPacket()
		if err != nil {
			return fmt.Errorf("subscriber: %w", err)
		}
		var reply packet.Packet
		switch p := p.(type) {
		case *packet.Publish:
			if p.Payload[0] == 1 {
				return c.Flush()
			}
			switch p.QoS {
			case 1:
				reply = &packet.Ack{Kind: packet.PUBACK, PacketID: p.PacketID}
			case 2:
				reply = &packet.Ack{Kind: packet.PUBREC, PacketID: p.PacketID}
			}
		case *packet.Ack:
			if p.Kind == packet.PUBREL {
				reply = &packet.Ack{Kind: packet.PUBCOMP, PacketID: p.PacketID}
			}
		}
		if reply != nil {
			if err := c.Send(reply, c.Buffered() == 0); err != nil {
				return err
			}
		}
	}
}

// publisherAcks completes the publisher's flows and frees window slots.
func publisherAcks(c *mqtttest.Raw, window chan struct{}) {
	for {
		p, err := c.ReadPacket()
		if err != nil {
			return
		}
		a, ok := p.(*packet.Ack)
		if !ok {
			continue
		}
		switch a.Kind {
		case packet.PUBACK, packet.PUBCOMP:
			<-window
		case packet.PUBREC:
			if c.Send(&packet.Ack{Kind: packet.PUBREL, PacketID: a.PacketID}, c.Buffered() == 0) != nil {
				return
			}
		}
	}
}

// BenchmarkConnect measures a whole connection's life as a device sees it:
// TCP connect, CONNECT, CONNACK, DISCONNECT, for MQTT 3.1.1 (a stranger's
// CONNECT goes through the parker on Linux). Run:
// go test ./mqtt/broker -run '^$' -bench Connect -benchmem
func BenchmarkConnect(b *testing.B) {
	srv, err := broker.New(broker.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, ack := mqtttest.ConnectRaw(b, addr, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version311, CleanStart: true, ClientID: "bench-connect"})
		if ack.ReasonCode != 0 {
			b.Fatalf("CONNACK 0x%02x", byte(ack.ReasonCode))
		}
		c.Send(&packet.Disconnect{}, true)
		c.Conn.Close()
	}
}
