package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	mqtt3packets "github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// hADrops returns the drop counter for the named reason (a DropNames entry).
func hADrops(tb testing.TB, b *testBroker, reason string) int64 {
	tb.Helper()
	for i, n := range broker.DropNames() {
		if n == reason {
			return b.Stats().Drops[i]
		}
	}
	tb.Fatalf("no drop reason %q in %v", reason, broker.DropNames())
	return 0
}

// hAConns waits until the broker has exactly n open connections (a closed
// client's session has then been detached, its will handled).
func hAConns(tb testing.TB, b *testBroker, n int64) {
	tb.Helper()
	eventually(tb, "open connections to settle", func() bool { return b.Stats().Connections == n })
}

// hARefusalBytes sends cp on a fresh connection and returns every byte the
// server writes before it closes the connection.
func hARefusalBytes(tb testing.TB, addr string, cp *packet.Connect) []byte {
	tb.Helper()
	rc := mqtttest.DialRaw(tb, addr, cp.ProtocolLevel)
	rc.Must(tb, cp)
	rc.Conn.SetReadDeadline(time.Now().Add(waitFor))
	got, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("connection not closed after refusal: %v (got % x)", err, got)
	}
	rc.Conn.Close() // the server's drain ends with it
	return got
}

// hAUntilClosed reads packets until the server closes the connection; it
// does not fail the test, so it can run in a goroutine.
func hAUntilClosed(rc *mqtttest.Raw, limit time.Duration) ([]packet.Packet, error) {
	rc.Conn.SetReadDeadline(time.Now().Add(limit))
	var got []packet.Packet
	for {
		p, err := rc.ReadPacket()
		if err != nil {
			var ne net.Error
			var pe *packet.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.As(err, &pe) {
				return got, err
			}
			return got, nil
		}
		got = append(got, p)
	}
}

// hAExpectDisconnect waits for the server to close rc and checks that the
// only packet before the close was a DISCONNECT with code.
func hAExpectDisconnect(tb testing.TB, rc *mqtttest.Raw, code packet.ReasonCode) {
	tb.Helper()
	got := rc.Closed(tb)
	if len(got) != 1 {
		tb.Fatalf("before close got %d packets %+v, want one DISCONNECT 0x%02x", len(got), got, byte(code))
	}
	d, ok := got[0].(*packet.Disconnect)
	if !ok || d.ReasonCode != code {
		tb.Fatalf("got %+v before close, want DISCONNECT 0x%02x", got[0], byte(code))
	}
}

// TestConnectProtocolLevels: 3.1.1 (level 4), 5 and 3.1 ("MQIsdp", level
// 3) clients connect; any other level is refused with the CONNACK
// "unsupported protocol version" and the connection closed, in the form
// the client can read: MQTT 5's (reason code 0x84, no properties) for
// "MQTT" with a level of 5 or more, 3.1.1's (return code 0x01) for lower
// levels and for "MQIsdp".
func TestConnectProtocolLevels(t *testing.T) {
	log, sink := testkit.NewLog()
	b := startBroker(t, broker.Options{Logger: log})
	c3 := mqtttest.DialV3(t, b.Addr, "level4")
	if !c3.IsConnected() {
		t.Fatal("3.1.1 client not connected")
	}
	c5 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("level5"))
	if c5.Connack.ReasonCode != 0 {
		t.Fatalf("v5 CONNACK reason 0x%02x", c5.Connack.ReasonCode)
	}
	if c31 := mqtttest.DialV3(t, b.Addr, "level3", func(o *mqtt3.ClientOptions) { o.SetProtocolVersion(3) }); !c31.IsConnected() {
		t.Fatal("3.1 client not connected")
	}

	v311 := []byte{0x20, 0x02, 0x00, 0x01}
	v5 := []byte{0x20, 0x03, 0x00, 0x84, 0x00}
	for _, tc := range []struct {
		name  string
		level byte
		want  []byte
	}{
		{"MQTT", 0, v311}, {"MQTT", 2, v311}, {"MQTT", 3, v311},
		{"MQTT", 6, v5}, {"MQTT", 255, v5},
		{"MQIsdp", 4, v311}, {"MQIsdp", 5, v311}, {"MQIsdp", 6, v311},
	} {
		got := hARefusalBytes(t, b.Addr, &packet.Connect{ProtocolName: tc.name, ProtocolLevel: tc.level, CleanStart: true, ClientID: "old", KeepAlive: 30})
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s level %d: server sent % x, want CONNACK % x", tc.name, tc.level, got, tc.want)
		}
	}
	// Refusals like any other: counted, logged with what was asked for.
	eventually(t, "the refusals counted", func() bool { return b.Stats().ConnectsRefused == 8 })
	if n := len(sink.Lines("connect refused", "protocol", "MQTT level 6", "code", "0x84 Unsupported Protocol Version")); n != 1 {
		t.Errorf("%d refusals of MQTT level 6 logged", n)
	}
	// The refused connections did not disturb the accepted ones.
	c5.MustSubscribe(t, paho.SubscribeOptions{Topic: "lv", QoS: 1})
	mqtttest.Barrier(t, c5, "lv", c5)
}

// TestConnectEmptyClientID: a v5 client without a client id gets an
// Assigned Client Identifier that names a real session; a 3.1.1 client
// without one is accepted only with clean session.
func TestConnectEmptyClientID(t *testing.T) {
	b := startBroker(t, broker.Options{})

	a := mqtttest.DialV5(t, b.Addr, &paho.Connect{CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: paho.Uint32(300)}})
	other := mqtttest.DialV5(t, b.Addr, mqtttest.Clean(""))
	id := a.Connack.Properties.AssignedClientID
	if id == "" || other.Connack.Properties.AssignedClientID == "" || id == other.Connack.Properties.AssignedClientID {
		t.Fatalf("assigned ids %q and %q: want two distinct non-empty ids", id, other.Connack.Properties.AssignedClientID)
	}
	a.MustSubscribe(t, paho.SubscribeOptions{Topic: "assigned/#", QoS: 1})
	a.Disconnect(&paho.Disconnect{})
	hAConns(t, b, 1)
	// The assigned id resumes the session, subscription included.
	again := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: id, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: paho.Uint32(300)}})
	if !again.Connack.SessionPresent {
		t.Fatalf("session of assigned id %q not present", id)
	}
	if again.Connack.Properties.AssignedClientID != "" {
		t.Fatalf("id assigned to a client that sent one: %q", again.Connack.Properties.AssignedClientID)
	}
	other.MustPublish(t, &paho.Publish{Topic: "assigned/x", QoS: 1, Payload: []byte("hi")})
	again.Expect(t, "hi")

	// 3.1.1: empty id with clean session is accepted ...
	mqtttest.DialV3(t, b.Addr, "")
	// ... and refused with identifier rejected (0x02) without it.
	_, _, err := mqtttest.TryV3(t, b.Addr, "", func(o *mqtt3.ClientOptions) { o.SetCleanSession(false) })
	if !errors.Is(err, mqtt3packets.ErrorRefusedIDRejected) {
		t.Fatalf("3.1.1 empty id, persistent session: err %v, want identifier rejected", err)
	}
	got := hARefusalBytes(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ProtocolName: "MQTT", KeepAlive: 30})
	if want := []byte{0x20, 0x02, 0x00, 0x02}; !bytes.Equal(got, want) {
		t.Fatalf("server sent % x, want CONNACK % x", got, want)
	}
}

// TestConnectAuthMethodRefused: fleetmq has no enhanced authentication, so
// a CONNECT with an Authentication Method gets CONNACK 0x8C and is closed;
// an AUTH packet on an established connection is a protocol error.
func TestConnectAuthMethodRefused(t *testing.T) {
	b := startBroker(t, broker.Options{})
	_, ack, err := mqtttest.TryV5(t, b.Addr, &paho.Connect{ClientID: "scram", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{AuthMethod: "SCRAM-SHA-256", AuthData: []byte("client-first")}})
	if err == nil || ack == nil || ack.ReasonCode != byte(packet.BadAuthenticationMethod) {
		t.Fatalf("connect with auth method: err %v connack %+v, want reason 0x8C", err, ack)
	}

	rc := mqtttest.DialRaw(t, b.Addr, packet.Version5)
	cp := &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version5, CleanStart: true, ClientID: "scram2", KeepAlive: 30}
	cp.Properties.SetString(packet.PropAuthMethod, "SCRAM-SHA-256")
	rc.Must(t, cp)
	got := rc.Closed(t)
	if len(got) != 1 || got[0].(*packet.Connack).ReasonCode != packet.BadAuthenticationMethod {
		t.Fatalf("got %+v, want CONNACK 0x8C then close", got)
	}

	rc, _ = mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{CleanStart: true, ClientID: "auth-later", KeepAlive: 30})
	rc.Must(t, &packet.Auth{ReasonCode: packet.ReAuthenticate})
	hAExpectDisconnect(t, rc, packet.ProtocolError)
	// The broker sends the DISCONNECT before it drops the session, so the
	// count reaches zero just after the client sees the packet.
	eventually(t, "no sessions left after refused connects", func() bool { return b.Stats().Sessions == 0 })
}

// TestKeepAliveTimeout: a client that sends nothing for 1.5x its keep alive
// is disconnected (and its will published, as for a network failure); a
// client that pings stays; Options.MaxKeepAlive caps a longer keep alive and
// is advertised as Server Keep Alive.
func TestKeepAliveTimeout(t *testing.T) {
	b := startBroker(t, broker.Options{MaxKeepAlive: 1})
	watcher := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("ka-watch"))
	watcher.MustSubscribe(t, paho.SubscribeOptions{Topic: "ka/#", QoS: 1})

	idle, ack := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "ka-idle", CleanStart: true, KeepAlive: 1,
		Will: &packet.Will{Topic: "ka/will", Payload: []byte("idle gone"), QoS: 1}})
	idleSince := time.Now()
	if ack.Properties.Has(packet.PropServerKeepAlive) {
		t.Fatalf("keep alive 1 under a cap of 1 was overridden: %d", ack.Properties.ServerKeepAlive)
	}
	capped, ack := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "ka-capped", CleanStart: true, KeepAlive: 60})
	cappedSince := time.Now()
	if !ack.Properties.Has(packet.PropServerKeepAlive) || ack.Properties.ServerKeepAlive != 1 {
		t.Fatalf("keep alive 60 under a cap of 1: CONNACK %+v, want Server Keep Alive 1", ack.Properties)
	}
	pinger, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "ka-pinger", CleanStart: true, KeepAlive: 1})

	type result struct {
		after time.Duration
		pkts  []packet.Packet
		err   error
	}
	watch := func(rc *mqtttest.Raw, since time.Time) chan result {
		ch := make(chan result, 1)
		go func() {
			pkts, err := hAUntilClosed(rc, waitFor)
			ch <- result{time.Since(since), pkts, err}
		}()
		return ch
	}
	idleDone, cappedDone := watch(idle, idleSince), watch(capped, cappedSince)

	// The pinger keeps pinging every 400 ms until both silent clients are
	// gone, and is still served afterwards.
	var results []result
	for len(results) < 2 {
		pinger.Must(t, &packet.Pingreq{})
		pinger.Expect(t, packet.PINGRESP)
		select {
		case r := <-idleDone:
			results = append(results, r)
		case r := <-cappedDone:
			results = append(results, r)
		case <-time.After(400 * time.Millisecond):
		}
	}
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("silent client: %v (got %+v)", r.err, r.pkts)
		}
		if r.after < 1200*time.Millisecond || r.after > 4*time.Second {
			t.Errorf("silent client with keep alive 1 s closed after %v, want about 1.5 s", r.after)
		}
		// The broker closes without a DISCONNECT; if it sends one, it
		// must say Keep Alive timeout.
		for _, p := range r.pkts {
			if d, ok := p.(*packet.Disconnect); !ok || d.ReasonCode != packet.KeepAliveTimeout {
				t.Errorf("before the keep alive close got %+v", p)
			}
		}
	}
	pinger.Must(t, &packet.Pingreq{})
	pinger.Expect(t, packet.PINGRESP)
	if m := watcher.Next(t); m.Topic != "ka/will" || string(m.Payload) != "idle gone" {
		t.Fatalf("got %q on %s, want the idle client's will", m.Payload, m.Topic)
	}
}

// TestServerKeepAlive: the cap is advertised only when it changes the
// client's keep alive (including keep alive 0, "none").
func TestServerKeepAlive(t *testing.T) {
	b := startBroker(t, broker.Options{MaxKeepAlive: 30})
	for _, tc := range []struct {
		ka   uint16
		want uint16 // 0: not advertised
	}{{60, 30}, {0, 30}, {10, 0}, {30, 0}} {
		c := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "ska", CleanStart: true, KeepAlive: tc.ka})
		got := c.Connack.Properties.ServerKeepAlive
		switch {
		case tc.want == 0 && got != nil:
			t.Errorf("keep alive %d: Server Keep Alive %d advertised, want none", tc.ka, *got)
		case tc.want != 0 && (got == nil || *got != tc.want):
			t.Errorf("keep alive %d: Server Keep Alive %v, want %d", tc.ka, got, tc.want)
		}
		c.Disconnect(&paho.Disconnect{})
	}
}

// TestMaxKeepAliveRefusesV3: a 3.1.1 client cannot be told another keep
// alive, so one asking for more than Options.MaxKeepAlive, or for none, is
// refused with CONNACK 0x02 (identifier rejected), as Mosquitto's
// max_keepalive does; one within the cap connects.
func TestMaxKeepAliveRefusesV3(t *testing.T) {
	b := startBroker(t, broker.Options{MaxKeepAlive: 30})
	for _, tc := range []struct {
		ka      time.Duration
		refused bool
	}{{60 * time.Second, true}, {0, true}, {10 * time.Second, false}, {30 * time.Second, false}} {
		c, _, err := mqtttest.TryV3(t, b.Addr, fmt.Sprintf("ka3-%d", int(tc.ka.Seconds())), func(o *mqtt3.ClientOptions) { o.SetKeepAlive(tc.ka) })
		switch {
		case tc.refused && !errors.Is(err, mqtt3packets.ErrorRefusedIDRejected):
			t.Errorf("3.1.1 keep alive %v under a cap of 30 s: %v, want refused with identifier rejected", tc.ka, err)
		case !tc.refused && err != nil:
			t.Errorf("3.1.1 keep alive %v under a cap of 30 s: %v, want connected", tc.ka, err)
		}
		if err == nil {
			c.Disconnect(0)
		}
	}
	if n := b.Stats().ConnectsRefusedBy[packet.ClientIdentifierNotValid]; n != 2 {
		t.Errorf("refusals counted: %d, want 2", n)
	}
}

// TestMaxPacketSizeInbound: the broker advertises Options.MaxPacketSize,
// accepts a packet of exactly that size and disconnects a v5 client whose
// packet is one byte larger with DISCONNECT 0x95 (3.1.1: just closed).
func TestMaxPacketSizeInbound(t *testing.T) {
	const limit = 512
	b := startBroker(t, broker.Options{MaxPacketSize: limit})
	sub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("mps-sub"))
	if p := sub.Connack.Properties.MaximumPacketSize; p == nil || *p != limit {
		t.Fatalf("advertised Maximum Packet Size %v, want %d", p, limit)
	}
	sub.MustSubscribe(t, paho.SubscribeOptions{Topic: "mps/#", QoS: 1})

	sized := func(size int, version byte) *packet.Publish {
		p := &packet.Publish{Topic: "mps/in", QoS: 1, PacketID: 1}
		for n := size - packet.PublishSize(p, version); n >= 0; n-- {
			p.Payload = make([]byte, n)
			if packet.PublishSize(p, version) == size {
				return p
			}
		}
		t.Fatalf("cannot build a PUBLISH of %d bytes", size)
		return nil
	}
	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "mps-pub", CleanStart: true, KeepAlive: 30})
	pub.Must(t, sized(limit, packet.Version5))
	if a := pub.Expect(t, packet.PUBACK).(*packet.Ack); a.ReasonCode != packet.Success {
		t.Fatalf("PUBACK %v for a packet of exactly the maximum size", a.ReasonCode)
	}
	if m := sub.Next(t); len(m.Payload) != len(sized(limit, packet.Version5).Payload) {
		t.Fatalf("got %d-byte payload", len(m.Payload))
	}
	pub.Must(t, sized(limit+1, packet.Version5))
	hAExpectDisconnect(t, pub, packet.PacketTooLarge)

	pub3, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "mps-pub3", CleanStart: true, KeepAlive: 30})
	pub3.Must(t, sized(limit+1, packet.Version311))
	if got := pub3.Closed(t); len(got) != 0 {
		t.Fatalf("3.1.1 client got %+v before close", got)
	}
	// Nothing of the oversized packets was delivered.
	mqtttest.Barrier(t, sub, "mps/barrier", sub)
}

// TestMaxPacketSizeOutbound: a message larger than the subscriber's Maximum
// Packet Size is not sent to it (and counted as packet_too_large) while
// smaller ones, before and after, arrive; other subscribers get it.
func TestMaxPacketSizeOutbound(t *testing.T) {
	b := startBroker(t, broker.Options{})
	small := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "mpo-small", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{MaximumPacketSize: paho.Uint32(200)}})
	small.MustSubscribe(t, paho.SubscribeOptions{Topic: "mpo/#", QoS: 1})
	big := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("mpo-big"))
	big.MustSubscribe(t, paho.SubscribeOptions{Topic: "mpo/#", QoS: 1})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("mpo-pub"))

	large := strings.Repeat("x", 300)
	pub.MustPublish(t, &paho.Publish{Topic: "mpo/a", QoS: 1, Payload: []byte("before")})
	pub.MustPublish(t, &paho.Publish{Topic: "mpo/a", QoS: 1, Payload: []byte(large)})
	pub.MustPublish(t, &paho.Publish{Topic: "mpo/a", QoS: 0, Payload: []byte(large)})
	pub.MustPublish(t, &paho.Publish{Topic: "mpo/a", QoS: 1, Payload: []byte("after")})
	small.Expect(t, "before", "after")
	big.Expect(t, "before", large, large, "after")
	if n := hADrops(t, b, "packet_too_large"); n != 2 {
		t.Fatalf("packet_too_large drops %d, want 2", n)
	}
	// The dropped QoS 1 message does not hold a slot of the window.
	eventually(t, "no deliveries inflight", func() bool { return b.Stats().Inflight == 0 })
}

// TestReceiveMaximumInbound: the broker advertises Options.ReceiveMaximum;
// a publisher with that many QoS 2 messages unreleased that sends one more
// gets DISCONNECT 0x93; releasing (PUBREL) frees the quota.
func TestReceiveMaximumInbound(t *testing.T) {
	b := startBroker(t, broker.Options{ReceiveMaximum: 3})
	sub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("rmi-sub"))
	if rm := sub.Connack.Properties.ReceiveMaximum; rm == nil || *rm != 3 {
		t.Fatalf("advertised Receive Maximum %v, want 3", rm)
	}
	sub.MustSubscribe(t, paho.SubscribeOptions{Topic: "rmi/#", QoS: 2})

	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "rmi-pub", CleanStart: true, KeepAlive: 30})
	send := func(pid uint16) {
		pub.Must(t, &packet.Publish{Topic: "rmi/x", QoS: 2, PacketID: pid, Payload: []byte{byte('0' + pid)}})
	}
	for pid := uint16(1); pid <= 3; pid++ {
		send(pid)
		if a := pub.Expect(t, packet.PUBREC).(*packet.Ack); a.PacketID != pid || a.ReasonCode != packet.Success {
			t.Fatalf("PUBREC %+v for %d", a, pid)
		}
	}
	for pid := uint16(1); pid <= 3; pid++ {
		pub.Must(t, &packet.Ack{Kind: packet.PUBREL, PacketID: pid})
		if a := pub.Expect(t, packet.PUBCOMP).(*packet.Ack); a.PacketID != pid {
			t.Fatalf("PUBCOMP %+v for %d", a, pid)
		}
	}
	for pid := uint16(4); pid <= 6; pid++ {
		send(pid)
		pub.Expect(t, packet.PUBREC)
	}
	send(7)
	hAExpectDisconnect(t, pub, packet.ReceiveMaximumExceeded)
	sub.Expect(t, "1", "2", "3", "4", "5", "6")
	mqtttest.Barrier(t, sub, "rmi/barrier", sub)
}

// TestReceiveMaximumOutbound: a subscriber with Receive Maximum 2 never has
// more than 2 unacknowledged QoS 1 messages; the rest wait in its queue and
// follow, in order, as it acknowledges.
func TestReceiveMaximumOutbound(t *testing.T) {
	b := startBroker(t, broker.Options{})
	cp := &packet.Connect{ClientID: "rmo-sub", CleanStart: true, KeepAlive: 30}
	cp.Properties.SetUint16(packet.PropReceiveMaximum, 2)
	sub, _ := mqtttest.ConnectRaw(t, b.Addr, cp)
	sub.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "rmo/#", QoS: 1}}})
	sub.Expect(t, packet.SUBACK)

	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("rmo-pub"))
	for i := range 5 {
		pub.MustPublish(t, &paho.Publish{Topic: "rmo/x", QoS: 1, Payload: []byte{byte('0' + i)}})
	}
	state := func(inflight, queued int64) {
		t.Helper()
		eventually(t, "inflight/queued state", func() bool {
			st := b.Stats()
			return st.Inflight == inflight && st.Queued == queued
		})
	}
	recv := func(want byte) uint16 {
		t.Helper()
		p := sub.Expect(t, packet.PUBLISH).(*packet.Publish)
		if p.QoS != 1 || len(p.Payload) != 1 || p.Payload[0] != want {
			t.Fatalf("got %+v, want QoS 1 payload %q", p, want)
		}
		return p.PacketID
	}
	ack := func(pid uint16) { sub.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: pid}) }

	p0, p1 := recv('0'), recv('1')
	state(2, 3) // two sent, three held back by the client's Receive Maximum
	ack(p0)
	p2 := recv('2')
	state(2, 2)
	ack(p1)
	ack(p2)
	p3, p4 := recv('3'), recv('4')
	state(2, 0)
	ack(p3)
	ack(p4)
	state(0, 0)
}

// TestTopicAliasInbound: a publisher's alias is set with a topic and reused
// alone (and can be remapped); subscribers see full topic names.
func TestTopicAliasInbound(t *testing.T) {
	b := startBroker(t, broker.Options{TopicAliasMaximum: 2})
	sub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("tai-sub"))
	sub.MustSubscribe(t, paho.SubscribeOptions{Topic: "ta/#", QoS: 1})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("tai-pub"))
	if m := pub.Connack.Properties.TopicAliasMaximum; m == nil || *m != 2 {
		t.Fatalf("advertised Topic Alias Maximum %v, want 2", m)
	}
	steps := []struct {
		topic string
		alias uint16
		want  string
	}{
		{"ta/x", 1, "ta/x"}, {"", 1, "ta/x"},
		{"ta/y", 1, "ta/y"}, {"", 1, "ta/y"}, // remapped
		{"ta/z", 2, "ta/z"}, {"", 2, "ta/z"}, {"", 1, "ta/y"},
	}
	for i, s := range steps {
		pub.MustPublish(t, &paho.Publish{Topic: s.topic, QoS: 1, Payload: []byte{byte('a' + i)},
			Properties: &paho.PublishProperties{TopicAlias: paho.Uint16(s.alias)}})
	}
	for i, s := range steps {
		m := sub.Next(t)
		if m.Topic != s.want || m.Payload[0] != byte('a'+i) {
			t.Fatalf("message %d: got %q on %q, want %q", i, m.Payload, m.Topic, s.want)
		}
		if m.Properties != nil && m.Properties.TopicAlias != nil {
			t.Fatalf("message %d carries topic alias %d to a subscriber that allows none", i, *m.Properties.TopicAlias)
		}
	}
}

// TestTopicAliasHoldsNoPayload: an inbound alias keeps its topic, not
// the PUBLISH that set it: a client setting every alias with a large
// message leaves none of those messages in memory once they are handled.
func TestTopicAliasHoldsNoPayload(t *testing.T) {
	const aliases, size = 32, 512 << 10
	b := startBroker(t, broker.Options{TopicAliasMaximum: aliases})
	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "tah-pub", CleanStart: true, KeepAlive: 30})
	heap := func() uint64 {
		pub.Must(t, &packet.Pingreq{}) // what came before it is handled
		pub.Expect(t, packet.PINGRESP)
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	pub.Must(t, &packet.Publish{Topic: "tah/warm", Payload: make([]byte, size)})
	before := heap()
	for a := uint16(1); a <= aliases; a++ {
		p := &packet.Publish{Topic: fmt.Sprintf("tah/%d", a), Payload: make([]byte, size)}
		p.Properties.SetTopicAlias(a)
		pub.Must(t, p)
	}
	after := heap()
	if after > before && after-before > aliases*size/4 {
		t.Fatalf("heap grew by %d KiB after %d aliases set with %d KiB messages: the aliases hold them", (after-before)>>10, aliases, size>>10)
	}
	p := &packet.Publish{Payload: []byte("x")} // the aliases still work
	p.Properties.SetTopicAlias(aliases)
	pub.Must(t, p)
	pub.Must(t, &packet.Pingreq{})
	pub.Expect(t, packet.PINGRESP)
}

// TestTopicAliasInvalid: an alias of 0 or above the advertised maximum
// ends the connection with DISCONNECT 0x94; an alias used before it was
// set is a protocol error (0x82).
func TestTopicAliasInvalid(t *testing.T) {
	b := startBroker(t, broker.Options{TopicAliasMaximum: 2})
	for _, tc := range []struct {
		topic string
		alias uint16
		code  packet.ReasonCode
	}{{"tai/x", 3, packet.TopicAliasInvalid}, {"tai/x", 0, packet.TopicAliasInvalid}, {"", 2, packet.ProtocolError}} {
		t.Run(fmt.Sprintf("topic=%q,alias=%d", tc.topic, tc.alias), func(t *testing.T) {
			rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "tai-bad", CleanStart: true, KeepAlive: 30})
			p := &packet.Publish{Topic: tc.topic, QoS: 1, PacketID: 1, Payload: []byte("x")}
			p.Properties.SetTopicAlias(tc.alias)
			rc.Must(t, p)
			hAExpectDisconnect(t, rc, tc.code)
		})
	}
}

// TestTopicAliasOutbound: the first Topic Alias Maximum topics a
// subscriber receives get aliases for the connection; later messages on
// them carry only the alias; paho's router resolves them.
func TestTopicAliasOutbound(t *testing.T) {
	b := startBroker(t, broker.Options{})
	cp := &packet.Connect{ClientID: "tao-raw", CleanStart: true, KeepAlive: 30}
	cp.Properties.SetUint16(packet.PropTopicAliasMaximum, 2)
	raw, _ := mqtttest.ConnectRaw(t, b.Addr, cp)
	raw.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "oa/#"}}})
	raw.Expect(t, packet.SUBACK)

	type routed struct{ route, payload string }
	got := make(chan routed, 100)
	router := paho.NewStandardRouter()
	for _, r := range []string{"oa/1", "oa/2", "oa/3"} {
		router.RegisterHandler(r, func(p *paho.Publish) { got <- routed{r, string(p.Payload)} })
	}
	ph := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "tao-paho", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{TopicAliasMaximum: paho.Uint16(2)}},
		func(cfg *paho.ClientConfig) { cfg.Router = router })
	ph.MustSubscribe(t, paho.SubscribeOptions{Topic: "oa/#"})

	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("tao-pub"))
	steps := []struct {
		topic     string
		wireTopic string
		alias     uint16 // 0: none
	}{
		{"oa/1", "oa/1", 1}, {"oa/1", "", 1}, {"oa/2", "oa/2", 2},
		{"oa/3", "oa/3", 0}, {"oa/3", "oa/3", 0}, // over the maximum: no alias
		{"oa/1", "", 1}, {"oa/2", "", 2},
	}
	for i, s := range steps {
		pub.MustPublish(t, &paho.Publish{Topic: s.topic, QoS: 1, Payload: []byte{byte('a' + i)}})
	}
	for i, s := range steps {
		p := raw.Expect(t, packet.PUBLISH).(*packet.Publish)
		alias := uint16(0)
		if p.Properties.Has(packet.PropTopicAlias) {
			alias = p.Properties.TopicAlias
		}
		if p.Topic != s.wireTopic || alias != s.alias || p.Payload[0] != byte('a'+i) {
			t.Fatalf("message %d: raw client got topic %q alias %d payload %q, want topic %q alias %d",
				i, p.Topic, alias, p.Payload, s.wireTopic, s.alias)
		}
		select {
		case r := <-got:
			if r.route != s.topic || r.payload != string([]byte{byte('a' + i)}) {
				t.Fatalf("message %d: paho routed %q to %s, want %s", i, r.payload, r.route, s.topic)
			}
		case <-time.After(waitFor):
			t.Fatalf("message %d: paho did not route it", i)
		}
	}
}

// TestPropertiesPassThrough: the v5 publish properties reach the
// subscriber intact, message expiry counts down while a message waits in
// an offline session, and a message that expires there is dropped.
func TestPropertiesPassThrough(t *testing.T) {
	clock := testkit.NewClock(time.Now())
	b := startBroker(t, broker.Options{Now: clock.Now})
	persistent := &paho.Connect{ClientID: "pp-sub", KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: paho.Uint32(300)}}
	sub := mqtttest.DialV5(t, b.Addr, persistent)
	sub.MustSubscribe(t, paho.SubscribeOptions{Topic: "pp/#", QoS: 1})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pp-pub"))

	props := func(expiry uint32) *paho.PublishProperties {
		return &paho.PublishProperties{
			ResponseTopic:   "pp/reply",
			CorrelationData: []byte{0, 1, 2, 0xff},
			ContentType:     "application/json",
			PayloadFormat:   paho.Byte(1),
			MessageExpiry:   paho.Uint32(expiry),
			User:            paho.UserProperties{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}, {Key: "b", Value: ""}},
		}
	}
	check := func(m *paho.Publish, expiry uint32) {
		t.Helper()
		p := m.Properties
		if p == nil || p.ResponseTopic != "pp/reply" || !bytes.Equal(p.CorrelationData, []byte{0, 1, 2, 0xff}) ||
			p.ContentType != "application/json" || p.PayloadFormat == nil || *p.PayloadFormat != 1 {
			t.Fatalf("properties not intact: %+v", p)
		}
		want := paho.UserProperties{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}, {Key: "b", Value: ""}}
		if len(p.User) != len(want) {
			t.Fatalf("user properties %v, want %v", p.User, want)
		}
		for i := range want {
			if p.User[i] != want[i] {
				t.Fatalf("user properties %v, want %v", p.User, want)
			}
		}
		if p.MessageExpiry == nil || *p.MessageExpiry != expiry {
			t.Fatalf("message expiry %v, want %d", p.MessageExpiry, expiry)
		}
	}
	pub.MustPublish(t, &paho.Publish{Topic: "pp/live", QoS: 1, Payload: []byte(`{"n":1}`), Properties: props(100)})
	check(sub.Next(t), 100)
	// paho answers PUBACK after handing the message over: the broker must
	// have it before the client goes, or the message is (rightly) resent
	// on resume.
	eventually(t, "the subscriber's PUBACK", func() bool { return b.Stats().Inflight == 0 })

	// Offline: one message expires while queued, the other counts down.
	sub.Disconnect(&paho.Disconnect{})
	hAConns(t, b, 1)
	pub.MustPublish(t, &paho.Publish{Topic: "pp/short", QoS: 1, Payload: []byte("short"), Properties: props(30)})
	pub.MustPublish(t, &paho.Publish{Topic: "pp/long", QoS: 1, Payload: []byte("long"), Properties: props(100)})
	clock.Add(40 * time.Second)
	sub = mqtttest.DialV5(t, b.Addr, persistent)
	m := sub.Expect(t, "long")[0]
	check(m, 60)
	if n := hADrops(t, b, "expired"); n != 1 {
		t.Fatalf("expired drops %d, want 1", n)
	}

	// A request/response round trip uses the properties as sent.
	responder := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("pp-responder"))
	responder.MustSubscribe(t, paho.SubscribeOptions{Topic: "svc/req", QoS: 1})
	requester := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "pp-req", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{RequestResponseInfo: true}})
	info := requester.Connack.Properties.ResponseInfo
	if info == "" {
		t.Fatal("no Response Information for a client that requested it")
	}
	if sub.Connack.Properties.ResponseInfo != "" {
		t.Fatalf("Response Information %q sent unrequested", sub.Connack.Properties.ResponseInfo)
	}
	requester.MustSubscribe(t, paho.SubscribeOptions{Topic: info + "/#", QoS: 1})
	requester.MustPublish(t, &paho.Publish{Topic: "svc/req", QoS: 1, Payload: []byte("ping"),
		Properties: &paho.PublishProperties{ResponseTopic: info + "/1", CorrelationData: []byte("c-42")}})
	req := responder.Next(t)
	responder.MustPublish(t, &paho.Publish{Topic: req.Properties.ResponseTopic, QoS: 1, Payload: []byte("pong"),
		Properties: &paho.PublishProperties{CorrelationData: req.Properties.CorrelationData}})
	resp := requester.Next(t)
	if string(resp.Payload) != "pong" || resp.Topic != info+"/1" || string(resp.Properties.CorrelationData) != "c-42" {
		t.Fatalf("response %q on %s correlation %q", resp.Payload, resp.Topic, resp.Properties.CorrelationData)
	}
}
