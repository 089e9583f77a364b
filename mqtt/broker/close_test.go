package broker_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The connection audit: every way a connection ends has one stated reason,
// which is counted in Stats().Closes, logged once, and (where the protocol
// allows one) sent to a v5 client as a DISCONNECT reason code. Timeouts
// are shortened through Options so the tests stay fast.

// lastDisconnect returns the reason code of the DISCONNECT among pkts, and
// whether there was one.
func lastDisconnect(pkts []packet.Packet) (packet.ReasonCode, bool) {
	for i := len(pkts) - 1; i >= 0; i-- {
		if d, ok := pkts[i].(*packet.Disconnect); ok {
			return d.ReasonCode, true
		}
	}
	return 0, false
}

// expectClose checks that the broker counted exactly one close, with
// reason want, and logged it once under msg with that reason.
func expectClose(t *testing.T, b *testBroker, sink *testkit.LogSink, want broker.CloseReason, msg string) map[string]any {
	t.Helper()
	eventually(t, "close counted as "+want.String(), func() bool { return b.Stats().Closes[want] == 1 })
	by := "client"
	if want.ByServer() {
		by = "server"
	}
	var lines []map[string]any
	eventually(t, "close logged", func() bool {
		lines = sink.Lines(msg, "reason", want.String(), "by", by)
		return len(lines) > 0
	})
	st := b.Stats()
	for r, n := range st.Closes {
		if broker.CloseReason(r) != want && n != 0 && broker.CloseReason(r) != broker.CloseShutdown {
			t.Fatalf("also counted %d closes as %v", n, broker.CloseReason(r))
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d %q lines with reason %s, want 1", len(lines), msg, want)
	}
	return lines[0]
}

// TestCloseReasons ends a connection in every way the broker knows and
// checks what the client, the counters and the log say about it.
func TestCloseReasons(t *testing.T) {
	v5 := func(t *testing.T, b *testBroker, id string, ka uint16) *mqtttest.Raw {
		rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: id, CleanStart: true, KeepAlive: ka})
		return rc
	}
	cases := []struct {
		name   string
		opts   broker.Options
		reason broker.CloseReason
		code   packet.ReasonCode // the DISCONNECT a v5 client gets; 0: none
		msg    string            // the log line
		detail string            // in the logged detail
		run    func(t *testing.T, b *testBroker) *mqtttest.Raw
	}{
		{"the client's DISCONNECT", broker.Options{}, broker.CloseClientDisconnect, 0, "client disconnected", "",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-disc", 30)
				rc.Must(t, &packet.Disconnect{})
				return rc
			}},
		{"the client closes the socket", broker.Options{}, broker.CloseConnectionLost, 0, "client disconnected", "without DISCONNECT",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-lost", 30)
				rc.Conn.(*net.TCPConn).CloseWrite()
				return rc
			}},
		{"no CONNECT in time", broker.Options{ConnectTimeout: 200 * time.Millisecond}, broker.CloseConnectTimeout, 0, "connection closed before CONNECT", "no CONNECT within 200ms",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := mqtttest.DialRaw(t, b.Addr, packet.Version5)
				rc.Conn.Write([]byte{0x10, 0x20}) // a CONNECT that never completes
				return rc
			}},
		{"CONNECT refused", broker.Options{Policy: hdCapPolicy{}}, broker.CloseConnectRefused, 0, "connect refused", "",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := mqtttest.DialRaw(t, b.Addr, packet.Version5)
				c := &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version5, ClientID: "c-refused"}
				c.Properties.SetString(packet.PropAuthMethod, "SCRAM")
				rc.Must(t, c)
				if ack := rc.Expect(t, packet.CONNACK).(*packet.Connack); ack.ReasonCode != packet.BadAuthenticationMethod {
					t.Fatalf("CONNACK %v", ack.ReasonCode)
				}
				return rc
			}},
		{"keep alive timeout", broker.Options{}, broker.CloseKeepAliveTimeout, packet.KeepAliveTimeout, "client disconnected", "keep alive 1s",
			func(t *testing.T, b *testBroker) *mqtttest.Raw { return v5(t, b, "c-ka", 1) }},
		{"malformed packet", broker.Options{}, broker.CloseMalformedPacket, packet.MalformedPacket, "client disconnected", "",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-malformed", 30)
				// PUBLISH QoS 0, topic of length 1 holding 0xFF (not UTF-8).
				rc.Conn.Write([]byte{0x30, 0x04, 0x00, 0x01, 0xFF, 0x00})
				return rc
			}},
		{"packet too large", broker.Options{MaxPacketSize: 256}, broker.ClosePacketTooLarge, packet.PacketTooLarge, "client disconnected", "over the maximum of 256",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-large", 30)
				rc.Must(t, &packet.Publish{Topic: "big", Payload: make([]byte, 1000)})
				return rc
			}},
		{"a second CONNECT", broker.Options{}, broker.CloseProtocolError, packet.ProtocolError, "client disconnected", "second CONNECT",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-twice", 30)
				rc.Must(t, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version5, ClientID: "c-twice"})
				return rc
			}},
		{"Receive Maximum exceeded", broker.Options{ReceiveMaximum: 2, Policy: holdPolicy{}}, broker.CloseProtocolError, packet.ReceiveMaximumExceeded, "client disconnected", "Receive Maximum",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-recvmax", 30)
				for i := range 3 {
					rc.Must(t, &packet.Publish{Topic: "held/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte("x")})
				}
				return rc
			}},
		{"QoS above the client's maximum", broker.Options{Policy: hdCapPolicy{}}, broker.CloseQoSNotAllowed, packet.QoSNotSupported, "client disconnected", "above this client's maximum QoS 1",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "capped-close", 30)
				rc.Must(t, &packet.Publish{Topic: "q/x", QoS: 2, PacketID: 1, Payload: []byte("x")})
				return rc
			}},
		{"session taken over", broker.Options{}, broker.CloseTakenOver, packet.SessionTakenOver, "client disconnected", "took over the session",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-twin", 30)
				v5(t, b, "c-twin", 30)
				return rc
			}},
		{"not authorized any more", broker.Options{}, broker.CloseNotAuthorized, packet.NotAuthorized, "client disconnected", "credential revoked",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-revoked", 30)
				other := v5(t, b, "c-kept", 30)
				n := b.Disconnect(func(id *broker.Identity) string {
					if id.ClientID == "c-revoked" {
						return "credential revoked"
					}
					return ""
				}, packet.NotAuthorized)
				if n != 1 {
					t.Fatalf("Disconnect ended %d connections, want 1", n)
				}
				other.Must(t, &packet.Pingreq{})
				other.Expect(t, packet.PINGRESP)
				return rc
			}},
		{"server shutdown", broker.Options{}, broker.CloseShutdown, packet.ServerShuttingDown, "client disconnected", "shutting down",
			func(t *testing.T, b *testBroker) *mqtttest.Raw {
				rc := v5(t, b, "c-shutdown", 30)
				go b.Close(context.Background())
				return rc
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log, sink := testkit.NewLog()
			tc.opts.Logger = log
			b := startBroker(t, tc.opts)
			rc := tc.run(t, b)
			pkts := rc.Closed(t)
			code, got := lastDisconnect(pkts)
			if tc.code != 0 && (!got || code != tc.code) {
				t.Fatalf("client got %v before the close, want DISCONNECT %v", pkts, tc.code)
			}
			if tc.code == 0 && got {
				t.Fatalf("client got DISCONNECT %v, want none", code)
			}
			line := expectClose(t, b, sink, tc.reason, tc.msg)
			if tc.reason == broker.CloseConnectRefused {
				return // "connect refused" carries the policy's reason instead
			}
			if d, _ := line["detail"].(string); !strings.Contains(d, tc.detail) {
				t.Fatalf("logged detail %q, want it to contain %q", d, tc.detail)
			}
		})
	}
}

// holdPolicy defers every acknowledgement forever (a store that does not
// answer), so inbound QoS 1 publishes stay unacknowledged.
type holdPolicy struct{ broker.OpenPolicy }

func (holdPolicy) Accepted(*broker.Identity, *broker.Message) bool { return true }

// TestWriteTimeout: a subscriber that stops reading while messages keep
// coming is disconnected once a write to it has waited Options.WriteTimeout
// (write_timeout), while the publisher and another subscriber carry on.
func TestWriteTimeout(t *testing.T) {
	log, sink := testkit.NewLog()
	b := startBroker(t, broker.Options{Logger: log, WriteTimeout: 300 * time.Millisecond})
	// The stuck subscriber: a tiny receive buffer, and it never reads.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	nc, err := d.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	stuck := mqtttest.RawOver(t, nc, packet.Version5)
	stuck.Connect(t, &packet.Connect{ClientID: "stuck", CleanStart: true, KeepAlive: 60})
	stuck.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "flood/#"}}})
	stuck.Expect(t, packet.SUBACK)
	reader := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("reader"))
	reader.MustSubscribe(t, paho.SubscribeOptions{Topic: "flood/#"})

	pub := v5Pub(t, b.Addr, "flooder")
	payload := make([]byte, 32<<10)
	eventually(t, "the stuck subscriber to be disconnected", func() bool {
		if b.Stats().Closes[broker.CloseWriteTimeout] != 0 {
			return true
		}
		pub.Must(t, &packet.Publish{Topic: "flood/x", Payload: payload})
		pub.Must(t, &packet.Pingreq{}) // paced by the broker's answers
		pub.Expect(t, packet.PINGRESP)
		return false
	})
	if t.Failed() {
		return
	}
	defer func() {
		if t.Failed() {
			t.Log(sink.String())
		}
	}()
	expectClose(t, b, sink, broker.CloseWriteTimeout, "client disconnected")
	// The others were not affected.
	pub.Must(t, &packet.Publish{Topic: "flood/end", QoS: 1, PacketID: 1, Payload: []byte("end")})
	pub.Expect(t, packet.PUBACK)
	for m := reader.Next(t); m.Topic != "flood/end"; m = reader.Next(t) {
	}
}

// v5Pub is a raw v5 client that publishes.
func v5Pub(tb testing.TB, addr, id string) *mqtttest.Raw {
	rc, _ := mqtttest.ConnectRaw(tb, addr, &packet.Connect{ClientID: id, CleanStart: true, KeepAlive: 60})
	return rc
}

// TestKeepAliveTimeoutOverTLSAndWebSocket: the keep alive is enforced the
// same way on every listener, with the v5 DISCONNECT 0x8D before the close.
func TestKeepAliveTimeoutOverTLSAndWebSocket(t *testing.T) {
	log, sink := testkit.NewLog()
	b := startBroker(t, broker.Options{Logger: log})
	tc, wc := hgTLSAndWS(t, b)
	for _, rc := range []*mqtttest.Raw{mqtttest.RawOver(t, tc, packet.Version5), mqtttest.RawOver(t, wc, packet.Version5)} {
		rc.Connect(t, &packet.Connect{ClientID: "ka-" + rc.Conn.LocalAddr().String(), CleanStart: true, KeepAlive: 1})
		if code, ok := lastDisconnect(rc.Closed(t)); !ok || code != packet.KeepAliveTimeout {
			t.Fatalf("got DISCONNECT %v (%v), want 0x8D", code, ok)
		}
	}
	eventually(t, "two keep-alive closes, logged", func() bool {
		return b.Stats().Closes[broker.CloseKeepAliveTimeout] == 2 && len(sink.Lines("client disconnected", "reason", "keepalive_timeout")) == 2
	})
	for _, tr := range []string{"tls", "ws"} {
		if len(sink.Lines("client disconnected", "reason", "keepalive_timeout", "transport", tr)) != 1 {
			t.Fatalf("no keep-alive close logged for transport %s", tr)
		}
	}
}

// TestWebSocketCloseDoesNotBlock: ending a WebSocket client that does not
// answer the close handshake returns at once: the server's callers (the
// policy's disconnects, the watchdog, Close) are never held by one client.
func TestWebSocketCloseDoesNotBlock(t *testing.T) {
	b := startBroker(t, broker.Options{})
	wln, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// 3.1.1 (no DISCONNECT from the server: the socket is closed at once)
	// and 5; the clients read nothing more, so they never answer a close
	// frame.
	for _, v := range []byte{packet.Version311, packet.Version5} {
		rc := mqtttest.RawOver(t, hdDialWS(t, wsURL(wln.Addr().String()), "mqtt"), v)
		rc.Connect(t, &packet.Connect{ClientID: fmt.Sprintf("ws-silent-%d", v), CleanStart: true, KeepAlive: 60})
	}
	start := time.Now()
	if n := b.Disconnect(func(id *broker.Identity) string { return "revoked" }, packet.NotAuthorized); n != 2 {
		t.Fatalf("ended %d", n)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Disconnect took %v: it waited for the clients' close handshake", took)
	}
	eventually(t, "the connections ended", func() bool { return b.Stats().Closes[broker.CloseNotAuthorized] == 2 })
}
