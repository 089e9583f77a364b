package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// connectHeader is a CONNECT fixed header declaring remaining bytes.
func connectHeader(remaining int) []byte {
	return packet.AppendVarint([]byte{byte(packet.CONNECT) << 4}, remaining)
}

// TestStrangersGetMemoryForWhatTheySend: before a connection has
// authenticated, the broker's memory for it grows with the bytes it sent,
// not with what its CONNECT header declares; a CONNECT declared over
// MaxConnectSize, or a first packet other than CONNECT, is refused at its
// header.
func TestStrangersGetMemoryForWhatTheySend(t *testing.T) {
	b := startBroker(t, broker.Options{ConnectTimeout: time.Minute})

	for _, first := range [][]byte{connectHeader(broker.DefaultMaxConnectSize), {byte(packet.PUBLISH) << 4, 0xff, 0xff, 0x3f}} {
		nc, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(first)
		nc.SetReadDeadline(time.Now().Add(waitFor))
		if _, err := io.ReadAll(nc); err != nil {
			t.Fatalf("% x: the connection was not closed at once: %v", first, err)
		}
		nc.Close()
	}

	const socks = 200
	declared := broker.DefaultMaxConnectSize - 100 // allowed: the body may still come
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	in0 := b.Stats().BytesIn
	sent := 0
	for range socks {
		nc, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		msg := append(connectHeader(declared), "\x00\x04MQTT\x05"...) // then silence
		if _, err := nc.Write(msg); err != nil {
			t.Fatal(err)
		}
		sent += len(msg)
	}
	eventually(t, "the broker to read every stranger's first bytes", func() bool { return b.Stats().BytesIn-in0 >= int64(sent) })
	if runtime.GOOS == "linux" { // after their grace, silent strangers park
		eventually(t, "every silent stranger parked", func() bool { return b.Stats().StrangersWaiting == socks })
	}
	// Two collections: the stacks of the goroutines that waited out their
	// grace are freed by the first and their spans released by the second.
	runtime.GC()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perSocket := (int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)) / socks
	t.Logf("heap and stacks in use per silent stranger that declared %d bytes: %d bytes (stacks %d), with the test's own end of each socket",
		declared, perSocket, (int64(after.StackInuse)-int64(before.StackInuse))/socks)
	if runtime.GOOS == "linux" {
		// No goroutine waits for a stranger: its connection and the
		// bytes it sent, on the heap, are all it holds. (The stacks in
		// use move with the runtime's stack caches, by up to 3 KiB per
		// socket from run to run: the goroutine count is the check.)
		if g := runtime.NumGoroutine() - g0; g > socks/10 {
			t.Errorf("%d more goroutines with %d silent strangers; want none per stranger", g, socks)
		}
		if w := b.Stats().StrangersWaiting; w != socks {
			t.Errorf("Stats().StrangersWaiting = %d with %d silent strangers", w, socks)
		}
		if heap := (int64(after.HeapInuse) - int64(before.HeapInuse)) / socks; heap > 4<<10 {
			t.Errorf("%d bytes of heap per silent stranger; want at most 4 KiB", heap)
		}
	}
	const limit = 8 << 10
	if perSocket > limit {
		t.Fatalf("%d bytes of heap per stranger that sent %d bytes and declared %d; want at most %d", perSocket, len(connectHeader(declared))+7, declared, limit)
	}
}

// TestParkedStrangers: a connection whose CONNECT has not fully arrived
// waits with no goroutine (on Linux) and behaves as one that has a
// goroutine: a CONNECT completed after a pause is answered, a TLS client
// that waited before its handshake connects, the connect timeout and the
// server's shutdown end silent strangers, and every ended stranger is
// forgotten.
func TestParkedStrangers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("strangers wait in goroutines on", runtime.GOOS)
	}
	const connectTimeout = 400 * time.Millisecond
	b := startBroker(t, broker.Options{ConnectTimeout: connectTimeout})
	cert, _ := testkit.SelfSigned(t)
	tln, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(n int64) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d strangers waiting", n), func() bool { return b.Stats().StrangersWaiting == n })
	}
	connack := func(nc net.Conn, what string) {
		t.Helper()
		nc.SetReadDeadline(time.Now().Add(waitFor))
		h := make([]byte, 4)
		if _, err := io.ReadFull(nc, h); err != nil || packet.Type(h[0]>>4) != packet.CONNACK || h[3] != 0 {
			t.Fatalf("%s: read % x, %v; want a CONNACK accepting it", what, h, err)
		}
	}
	msg, err := packet.Encode(nil, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version311, ClientID: "parked",
		CleanStart: true, KeepAlive: 60}, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}

	// Half a CONNECT, a pause in the parker, the rest.
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	half := len(msg) / 2
	nc.Write(msg[:half])
	waiting(1)
	nc.Write(msg[half:])
	connack(nc, "a CONNECT completed after its stranger waited")
	waiting(0)

	// A TLS client silent before its handshake waits too, then connects.
	raw, err := net.Dial("tcp", tln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	waiting(1)
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(waitFor))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake after waiting: %v", err)
	}
	msg2 := slices.Clone(msg)
	msg2[len(msg2)-1] = 't' // another client id
	tc.Write(msg2)
	connack(tc, "a TLS client that waited before its handshake")
	waiting(0)

	// The connect timeout ends silent strangers, parked from the start or
	// mid-CONNECT, and they are forgotten.
	closes0 := b.Stats().Closes[broker.CloseConnectTimeout]
	conns0 := b.Stats().Connections
	var silent []net.Conn
	for i := range 4 {
		s, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if i%2 == 1 {
			s.Write(msg[:half])
		}
		silent = append(silent, s)
	}
	waiting(4)
	for _, s := range silent {
		s.SetReadDeadline(time.Now().Add(waitFor))
		if _, err := io.ReadAll(s); err != nil {
			t.Fatalf("a silent stranger was not closed by the connect timeout: %v", err)
		}
	}
	eventually(t, "4 connect timeouts counted and the strangers forgotten", func() bool {
		st := b.Stats()
		return st.Closes[broker.CloseConnectTimeout]-closes0 == 4 && st.Connections == conns0 && st.StrangersWaiting == 0
	})

	// The server's shutdown ends parked strangers and does not wait for
	// them (the connected clients leave first: the shutdown would drain
	// theirs for a while).
	nc.Close()
	tc.Close()
	eventually(t, "the connected clients gone", func() bool { return b.Stats().Connections == 0 })
	for range 3 {
		s, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		silent = append(silent[:0], s)
	}
	waiting(3)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	start := time.Now()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close with parked strangers: %v", err)
	}
	if d := time.Since(start); d > connectTimeout {
		t.Errorf("Close took %v with 3 parked strangers; they should end at once", d)
	}
	if st := b.Stats(); st.Connections != 0 || st.StrangersWaiting != 0 {
		t.Errorf("after Close: %d connections, %d strangers waiting", st.Connections, st.StrangersWaiting)
	}
}

// TestConnectionsBoundedPerListener: a listener keeps at most MaxConns
// connections open and at most MaxConnsPerAddr from one address; the one
// over is closed at once (before TLS, for the TLS listener) and counted,
// and a freed place is free again.
func TestConnectionsBoundedPerListener(t *testing.T) {
	b := startBroker(t, broker.Options{MaxConns: 4, MaxConnsPerAddr: 3, ConnectTimeout: time.Minute})
	cert, _ := testkit.SelfSigned(t)
	tln, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) net.Conn {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	closedAtOnce := func(nc net.Conn, what string) {
		nc.SetReadDeadline(time.Now().Add(waitFor))
		if _, err := io.ReadAll(nc); err != nil {
			t.Fatalf("%s was not closed: %v", what, err)
		}
	}
	var held []net.Conn
	for range 3 {
		held = append(held, dial(b.Addr))
	}
	closedAtOnce(dial(b.Addr), "a fourth TCP connection from one address")
	eventually(t, "the per-address refusal counted", func() bool { return b.Stats().ConnsRefusedAtAccept == [3]int64{0, 1, 0} })

	// From another address the TCP listener takes one more, then is full.
	other := func() net.Conn {
		nc, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).Dial("tcp", b.Addr)
		if err != nil {
			t.Skipf("no second loopback address: %v", err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	other()
	closedAtOnce(other(), "a fifth TCP connection")
	eventually(t, "the listener-full refusal counted", func() bool { return b.Stats().ConnsRefusedAtAccept == [3]int64{1, 1, 0} })

	// The TLS listener has its own bounds, applied below TLS.
	for range 3 {
		dial(tln.Addr().String())
	}
	closedAtOnce(dial(tln.Addr().String()), "a fourth TLS connection from one address")

	held[0].Close()
	eventually(t, "a client to connect once a place is free", func() bool {
		_, _, err := mqtttest.TryV5(t, b.Addr, mqtttest.Clean("after"))
		return err == nil
	})
}

// TestStuckSubscriberSlowsNobody: a subscriber that stopped reading loses
// its own messages (dropped from its full queue, counted) but does not
// make its publisher pause: pausing only helps a subscriber still taking
// what it is sent, and with one that never reads it slowed the publisher
// about a hundredfold.
func TestStuckSubscriberSlowsNobody(t *testing.T) {
	b := startBroker(t, broker.Options{MaxQueued: 10})
	stuck, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "stuck", CleanStart: true, KeepAlive: 600})
	stuck.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "flood/#", QoS: 0}}})
	stuck.Expect(t, packet.SUBACK)
	// ... and it reads nothing more.

	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "pub", CleanStart: true, KeepAlive: 600})
	payload := make([]byte, 1024)
	const n = 30_000 // 30 MB: far more than the sockets buffer
	for i := range n {
		if err := pub.Send(&packet.Publish{Topic: "flood/x", Payload: payload}, i%100 == 99); err != nil {
			t.Fatal(err)
		}
	}
	pub.Must(t, &packet.Pingreq{})
	pub.Expect(t, packet.PINGRESP) // the broker has read every publish
	st := b.Stats()
	if st.Drops[broker.DropQueueFull] == 0 {
		t.Fatalf("no message dropped for the stuck subscriber: %+v", st.Drops)
	}
	// A few pauses may come before the stuck subscriber's writer blocks
	// (its socket still taking bytes); before this rule every read of the
	// publisher paused: about 26,000 times here, 30 s.
	if st.PublisherPauses > 100 {
		t.Fatalf("the publisher paused %d times for a subscriber that does not read", st.PublisherPauses)
	}
}

// TestSlowSubscriberCostsPublishersLittle: a QoS 1 subscriber that reads
// everything it is sent but acknowledges slowly (one PUBACK a
// millisecond: a long round trip) overflows its queue behind its inflight
// window. Its publisher's reader then pauses (so the runtime polls the
// network for the subscriber's acknowledgements) at most once per 10 ms: a
// tenth of the publisher's time, not a pause per message.
func TestSlowSubscriberCostsPublishersLittle(t *testing.T) {
	b := startBroker(t, broker.Options{MaxQueued: 10})
	slow, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "slow", CleanStart: true, KeepAlive: 600})
	slow.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "flood/#", QoS: 1}}})
	slow.Expect(t, packet.SUBACK)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			slow.Conn.SetReadDeadline(time.Now().Add(waitFor))
			p, err := slow.ReadPacket()
			if err != nil {
				return
			}
			pp, ok := p.(*packet.Publish)
			if !ok || pp.QoS == 0 {
				continue
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if slow.Send(&packet.Ack{Kind: packet.PUBACK, PacketID: pp.PacketID}, true) != nil {
				return
			}
		}
	}()

	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "pub", CleanStart: true, KeepAlive: 600})
	payload := make([]byte, 100)
	start := time.Now()
	const n = 20_000
	for i := range n {
		if err := pub.Send(&packet.Publish{Topic: "flood/x", QoS: 1, PacketID: uint16(i%60000 + 1), Payload: payload}, i%50 == 49); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	for got := 0; got < n; { // the broker has handled every publish
		if p := pub.Next(t); p.Type() == packet.PUBACK {
			got++
		}
	}
	took := time.Since(start)
	st := b.Stats()
	if st.Drops[broker.DropQueueFull] == 0 {
		t.Fatalf("the slow subscriber lost nothing: it kept up, the test proves nothing (%+v)", st.Drops)
	}
	if most := int64(took/(10*time.Millisecond)) + 2; st.PublisherPauses > most {
		t.Fatalf("the publisher paused %d times in %v for a slow subscriber, want at most one per 10 ms (%d)", st.PublisherPauses, took, most)
	}
	t.Logf("%d publishes in %v, %d pauses, %d dropped for the slow subscriber", n, took, st.PublisherPauses, st.Drops[broker.DropQueueFull])
}

// TestConnectInPieces: a CONNECT that arrives in pieces (a slow link, a
// large will) is put together as its bytes come and answered like any
// other.
func TestConnectInPieces(t *testing.T) {
	b := startBroker(t, broker.Options{})
	payload := strings.Repeat("w", 3000) // a will larger than one read's worth
	msg, err := packet.Encode(nil, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version5, ClientID: "pieces",
		CleanStart: true, KeepAlive: 60, Will: &packet.Will{Topic: "will/t", Payload: []byte(payload)}}, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	in0 := b.Stats().BytesIn
	for off := 0; off < len(msg); off += 700 {
		part := msg[off:min(off+700, len(msg))]
		if _, err := nc.Write(part); err != nil {
			t.Fatal(err)
		}
		want := int64(off + len(part))
		eventually(t, "the broker to read the piece", func() bool { return b.Stats().BytesIn-in0 >= want })
	}
	nc.SetReadDeadline(time.Now().Add(waitFor))
	r := bufio.NewReader(nc)
	h, err := r.ReadByte()
	if err != nil || packet.Type(h>>4) != packet.CONNACK {
		t.Fatalf("after a CONNECT in pieces: first byte %#x, %v; want a CONNACK", h, err)
	}
}
