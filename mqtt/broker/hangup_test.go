package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// How connections the server ends are closed (hangup.go): the last packet
// is written, the write side half-closed, what the client still sends
// drained within Options.CloseDrainTimeout and CloseDrainBytes, then the
// socket closed. A client still writing when it is disconnected reads why.

// hgBurst is how much a flooding client writes after the packet that ends
// its connection: far more than the socket buffers between it and the
// server take without the server reading (so the client blocks in write
// unless the server drains), and less than the default CloseDrainBytes.
const hgBurst = 512 << 10

// hgFlood writes pkts and then QoS 0 PUBLISHes until hgBurst bytes are
// written or a write fails, without reading, within 5 s. It returns the
// bytes written and the error that stopped it.
func hgFlood(rc *mqtttest.Raw, pkts ...packet.Packet) (int, error) {
	return hgFloodN(rc, hgBurst, pkts...)
}

// hgFloodN is hgFlood writing up to total bytes.
func hgFloodN(rc *mqtttest.Raw, total int, pkts ...packet.Packet) (int, error) {
	rc.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	defer rc.Conn.SetWriteDeadline(time.Time{})
	filler := &packet.Publish{Topic: "flood/more", Payload: bytes.Repeat([]byte("x"), 100)}
	var buf []byte
	n := 0
	for n < total {
		p := packet.Packet(filler)
		if len(pkts) > 0 {
			p, pkts = pkts[0], pkts[1:]
		}
		b, err := packet.Encode(buf[:0], p, rc.Version)
		buf = b
		if err == nil {
			_, err = rc.Conn.Write(b)
		}
		if err != nil {
			return n, err
		}
		n += len(b)
	}
	return n, nil
}

// hgReadToEnd reads packets until the stream ends, returning them and how
// it ended (io.EOF for the server's FIN).
func hgReadToEnd(rc *mqtttest.Raw) ([]packet.Packet, error) {
	rc.Conn.SetReadDeadline(time.Now().Add(waitFor))
	var got []packet.Packet
	for {
		p, err := rc.ReadPacket()
		if err != nil {
			return got, err
		}
		got = append(got, p)
	}
}

// hgFillPolicy holds the acknowledgement of QoS 1/2 PUBLISHes on "held/"
// (they count against Receive Maximum until the connection ends) and
// acknowledges the rest at once.
type hgFillPolicy struct{ broker.OpenPolicy }

func (hgFillPolicy) Accepted(_ *broker.Identity, m *broker.Message) bool {
	return len(m.Topic) > 5 && m.Topic[:5] == "held/"
}

// TestDisconnectReachesWritingClient: a v5 client that exceeds Receive
// Maximum with QoS 1 PUBLISHes and goes on writing a burst without reading
// still reads the DISCONNECT 0x93, then the end of the stream (a FIN, not
// a reset). "full window" is the case the drain is there for on Linux: the
// client had stopped reading while messages were delivered to it, so the
// DISCONNECT waits behind them in the server's send queue; without the
// drain, the close (with the client's bytes unread) resets the connection
// and throws the unsent DISCONNECT away: run it with CloseDrainTimeout -1
// and it fails ("connection reset by peer", no DISCONNECT). "plain" passes
// on Linux either way (a DISCONNECT already in the client's socket
// survives the reset there), and stands for the systems where it does not.
func TestDisconnectReachesWritingClient(t *testing.T) {
	violation := []packet.Packet{
		&packet.Publish{Topic: "held/x", QoS: 1, PacketID: 1, Payload: []byte("1")},
		&packet.Publish{Topic: "held/x", QoS: 1, PacketID: 2, Payload: []byte("2")},
		&packet.Publish{Topic: "held/x", QoS: 1, PacketID: 3, Payload: []byte("3")}, // over Receive Maximum 2
	}
	run := func(t *testing.T, drain time.Duration, fill bool) ([]packet.Packet, error) {
		b := startBroker(t, broker.Options{ReceiveMaximum: 2, Policy: hgFillPolicy{}, CloseDrainTimeout: drain})
		var rc *mqtttest.Raw
		if !fill {
			rc, _ = mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "flooder", CleanStart: true, KeepAlive: 60})
		} else {
			// A small receive buffer: the window closes after a few
			// KiB of deliveries, whatever the kernel's autotuning.
			d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
				return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8192) })
			}}
			nc, err := d.Dial("tcp", b.Addr)
			if err != nil {
				t.Fatal(err)
			}
			rc = mqtttest.RawOver(t, nc, packet.Version5)
			rc.Connect(t, &packet.Connect{ClientID: "flooder", CleanStart: true, KeepAlive: 60})
		}
		if fill {
			// Messages delivered to the flooder, which does not read,
			// until the broker has to queue them: its socket buffers
			// and the server's write buffer are full.
			rc.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "fill/#"}}})
			rc.Expect(t, packet.SUBACK)
			filler := v5Pub(t, b.Addr, "filler")
			payload := bytes.Repeat([]byte("f"), 1024)
			for i := 0; b.Stats().Queued == 0; i++ {
				if i == 20000 {
					t.Fatal("the flooder's queue never filled")
				}
				filler.Must(t, &packet.Publish{Topic: "fill/x", Payload: payload})
				if i%100 == 99 { // let the routing catch up
					filler.Must(t, &packet.Pingreq{})
					filler.Expect(t, packet.PINGRESP)
				}
			}
		}
		n, werr := hgFlood(rc, violation...)
		t.Logf("wrote %d bytes after CONNACK (%v)", n, werr)
		got, err := hgReadToEnd(rc)
		rc.Conn.Close()
		return got, err
	}
	for _, fill := range []bool{false, true} {
		name := "plain"
		if fill {
			name = "full window"
		}
		t.Run(name, func(t *testing.T) {
			got, err := run(t, time.Second, fill)
			code, ok := lastDisconnect(got)
			if !ok || code != packet.ReceiveMaximumExceeded {
				t.Fatalf("read %d packets, then %v; want DISCONNECT 0x93 last", len(got), err)
			}
			if _, last := got[len(got)-1].(*packet.Disconnect); !last || !errors.Is(err, io.EOF) {
				t.Fatalf("after the DISCONNECT: %v, want the end of the stream (EOF)", err)
			}
		})
	}
}

// hgRefusePolicy refuses every CONNECT: not authorized.
type hgRefusePolicy struct{ broker.OpenPolicy }

func (hgRefusePolicy) Authenticate(context.Context, *broker.ConnectRequest) (*broker.Identity, error) {
	return nil, packet.Errorf(packet.NotAuthorized, "no entry")
}

// TestRefusedConnackReachesWritingClient: a client that writes its first
// packets right behind its CONNECT, without waiting for the CONNACK, and
// goes on writing, still reads the refusing CONNACK, byte for byte, then
// the end of the stream. (On Linux a CONNACK already in the client's
// socket survives a reset, so this passes there without the drain too;
// other systems, Windows among them, discard it.)
func TestRefusedConnackReachesWritingClient(t *testing.T) {
	b := startBroker(t, broker.Options{Policy: hgRefusePolicy{}, CloseDrainTimeout: time.Second})
	for _, tc := range []struct {
		name  string
		level byte
		want  []byte
	}{
		{"3.1.1", packet.Version311, []byte{0x20, 0x02, 0x00, 0x05}},
		{"5", packet.Version5, []byte{0x20, 0x03, 0x00, 0x87, 0x00}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := mqtttest.DialRaw(t, b.Addr, tc.level)
			n, werr := hgFlood(rc, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: tc.level, CleanStart: true, ClientID: "refused", KeepAlive: 30})
			t.Logf("wrote %d bytes (%v)", n, werr)
			rc.Conn.SetReadDeadline(time.Now().Add(waitFor))
			got, err := io.ReadAll(rc)
			if !bytes.Equal(got, tc.want) || err != nil {
				t.Fatalf("read % x then %v, want % x then the end of the stream", got, err, tc.want)
			}
		})
	}
}

// TestCloseDrainBounded: the drain holds a socket no longer than its
// bounds, whatever the client does: a client that keeps writing is cut off
// at CloseDrainBytes, one that trickles or says nothing and never closes
// at CloseDrainTimeout, and Server.Close waits for no more than that.
func TestCloseDrainBounded(t *testing.T) {
	refused := func(t *testing.T, b *testBroker) *mqtttest.Raw {
		rc := mqtttest.DialRaw(t, b.Addr, packet.Version311)
		rc.Must(t, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version311, CleanStart: true, ClientID: "x", KeepAlive: 30})
		if ack := rc.Expect(t, packet.CONNACK).(*packet.Connack); ack.ReasonCode != packet.NotAuthorized {
			t.Fatalf("CONNACK %v", ack.ReasonCode)
		}
		return rc
	}
	gone := func(t *testing.T, b *testBroker, start time.Time, least, most time.Duration) {
		t.Helper()
		eventually(t, "the socket closed", func() bool { return b.Stats().Connections == 0 })
		if took := time.Since(start); took < least || took > most {
			t.Fatalf("closed after %v, want %v to %v", took, least, most)
		}
	}

	t.Run("bytes", func(t *testing.T) {
		b := startBroker(t, broker.Options{Policy: hgRefusePolicy{}, CloseDrainTimeout: waitFor, CloseDrainBytes: 64 << 10})
		rc := refused(t, b)
		start := time.Now()
		// Writes until the server resets the connection (at 64 KiB
		// drained, plus what the socket buffers hold), within 5 s.
		n, err := hgFloodN(rc, 16<<20)
		if err == nil {
			t.Fatalf("wrote %d bytes: the drain did not stop at its bound", n)
		}
		gone(t, b, start, 0, 3*time.Second)
	})
	t.Run("time", func(t *testing.T) {
		const bound = 300 * time.Millisecond
		b := startBroker(t, broker.Options{Policy: hgRefusePolicy{}, CloseDrainTimeout: bound})
		// One client says nothing more, one trickles a byte every 20 ms:
		// neither closes its side.
		silent := refused(t, b)
		start := time.Now()
		trickler := refused(t, b)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
					if _, err := trickler.Conn.Write([]byte{0xC0}); err != nil {
						return
					}
				}
			}
		}()
		// Both read the end of the stream at once (the half-close).
		for _, rc := range []*mqtttest.Raw{silent, trickler} {
			if got, err := hgReadToEnd(rc); len(got) != 0 || !errors.Is(err, io.EOF) {
				t.Fatalf("after the CONNACK: %v then %v, want the end of the stream", got, err)
			}
		}
		gone(t, b, start, bound, bound+2*time.Second)
	})
	t.Run("shutdown", func(t *testing.T) {
		const bound = 300 * time.Millisecond
		b := startBroker(t, broker.Options{CloseDrainTimeout: bound})
		rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "stays", CleanStart: true, KeepAlive: 60})
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > bound+2*time.Second {
			t.Fatalf("Close took %v with a client that does not close, drain bound %v", took, bound)
		}
		got, err := hgReadToEnd(rc)
		if code, ok := lastDisconnect(got); !ok || code != packet.ServerShuttingDown {
			t.Fatalf("got %v then %v, want DISCONNECT 0x8B", got, err)
		}
	})
}

// TestDisconnectThenEndOverTLSAndWebSocket: the half-close on the other
// transports: after its DISCONNECT a TLS client reads the end of the
// stream (close_notify), a WebSocket client the close frame (io.EOF), and
// neither connection waits for the drain's bound when the client closes.
func TestDisconnectThenEndOverTLSAndWebSocket(t *testing.T) {
	// Exercised by TestKeepAliveTimeoutOverTLSAndWebSocket for the
	// packets; here, the ends of the streams.
	b := startBroker(t, broker.Options{CloseDrainTimeout: waitFor})
	tlsConn, wsConn := hgTLSAndWS(t, b)
	eventually(t, "both connections accepted", func() bool { return b.Stats().Connections == 2 })
	for name, nc := range map[string]net.Conn{"tls": tlsConn, "ws": wsConn} {
		t.Run(name, func(t *testing.T) {
			rc := mqtttest.RawOver(t, nc, packet.Version5)
			rc.Connect(t, &packet.Connect{ClientID: "end-" + name, CleanStart: true, KeepAlive: 60})
			before := b.Stats().Connections
			start := time.Now()
			if n := b.Disconnect(func(id *broker.Identity) string {
				if id.ClientID == "end-"+name {
					return "revoked"
				}
				return ""
			}, packet.NotAuthorized); n != 1 {
				t.Fatalf("ended %d", n)
			}
			got, err := hgReadToEnd(rc)
			if code, ok := lastDisconnect(got); !ok || code != packet.NotAuthorized || !errors.Is(err, io.EOF) {
				t.Fatalf("got %v then %v, want DISCONNECT 0x87 then EOF", got, err)
			}
			rc.Conn.Close()
			eventually(t, "the connection closed", func() bool { return b.Stats().Connections == before-1 })
			if took := time.Since(start); took > waitFor/2 {
				t.Fatalf("closed after %v: the server waited for the drain's bound", took)
			}
		})
	}
}

// hgTLSAndWS opens a TLS and a WebSocket listener on b and dials one
// client connection to each.
func hgTLSAndWS(t *testing.T, b *testBroker) (net.Conn, net.Conn) {
	t.Helper()
	cert, pool := testkit.SelfSigned(t)
	tln, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	wln, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.Dial("tcp", tln.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	return tc, hdDialWS(t, wsURL(wln.Addr().String()), "mqtt")
}
