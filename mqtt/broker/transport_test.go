package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// hdTransportPolicy is the open policy that records, per client id, which
// listener kind the broker reported to Authenticate.
type hdTransportPolicy struct {
	broker.OpenPolicy
	mu   sync.Mutex
	seen map[string][2]bool // client id -> {TLS, WebSocket}
}

func (p *hdTransportPolicy) Authenticate(ctx context.Context, req *broker.ConnectRequest) (*broker.Identity, error) {
	p.mu.Lock()
	if p.seen == nil {
		p.seen = make(map[string][2]bool)
	}
	p.seen[req.Connect.ClientID] = [2]bool{req.TLS, req.WebSocket}
	p.mu.Unlock()
	return p.OpenPolicy.Authenticate(ctx, req)
}

// check fails unless client id was authenticated with the given kind.
func (p *hdTransportPolicy) check(tb testing.TB, id string, tlsWant, wsWant bool) {
	tb.Helper()
	p.mu.Lock()
	got, ok := p.seen[id]
	p.mu.Unlock()
	if !ok || got != [2]bool{tlsWant, wsWant} {
		tb.Fatalf("%s: policy saw (TLS, WebSocket) = %v (seen %v), want (%v, %v)", id, got, ok, tlsWant, wsWant)
	}
}

// hdExpectV5 checks the next message c receives.
func hdExpectV5(tb testing.TB, c *mqtttest.V5, topic, payload string, qos byte) {
	tb.Helper()
	m := c.Next(tb)
	if m.Topic != topic || string(m.Payload) != payload || m.QoS != qos {
		tb.Fatalf("got %q on %s at QoS %d, want %q on %s at QoS %d", m.Payload, m.Topic, m.QoS, payload, topic, qos)
	}
}

// hdCrossTraffic checks that a v5 and a v3 client exchange messages both
// ways at QoS 0, 1 and 2 (each subscribed at QoS 2).
func hdCrossTraffic(tb testing.TB, v5 *mqtttest.V5, v3 *mqtttest.V3, prefix string) {
	tb.Helper()
	v5.MustSubscribe(tb, paho.SubscribeOptions{Topic: prefix + "/to5/#", QoS: 2})
	in3 := v3.Subscription(tb, prefix+"/to3/#", 2)
	for q := byte(0); q <= 2; q++ {
		p := string('0' + q)
		mqtttest.Await(tb, "v3 publish", v3.Publish(prefix+"/to5/"+p, q, false, "from3-"+p))
		hdExpectV5(tb, v5, prefix+"/to5/"+p, "from3-"+p, q)
		v5.MustPublish(tb, &paho.Publish{Topic: prefix + "/to3/" + p, QoS: q, Payload: []byte("from5-" + p)})
		mqtttest.ExpectV3(tb, in3, prefix+"/to3/"+p, "from5-"+p, q)
	}
}

// TestTLSListener serves paho.golang and paho.mqtt.golang over TLS with a
// self-signed certificate, and shows that a plain-TCP client on the TLS port
// (one sending MQTT in clear, one sending nothing) is dropped without
// disturbing the TLS clients.
func TestTLSListener(t *testing.T) {
	cert, pool := testkit.SelfSigned(t)
	pol := &hdTransportPolicy{}
	b := startBroker(t, broker.Options{Policy: pol, ConnectTimeout: 1500 * time.Millisecond})
	ln, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()

	// A plain client that says nothing holds a handshake open: it must not
	// block the listener.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	// A plain client speaking MQTT in clear gets no CONNACK: the
	// connection is closed.
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	connect, err := packet.Encode(nil, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: "plain"}, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Write(connect); err != nil {
		t.Fatal(err)
	}
	plain.SetReadDeadline(time.Now().Add(waitFor))
	got, err := io.ReadAll(plain)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("plain client on the TLS port was not disconnected")
	}
	if len(got) > 0 && got[0] == byte(packet.CONNACK)<<4 {
		t.Fatalf("plain client on the TLS port got a CONNACK: % x", got)
	}

	// TLS clients of both libraries work meanwhile.
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	v5 := mqtttest.DialV5Over(t, tc, mqtttest.Clean("tls-v5"))
	v3 := mqtttest.DialV3(t, "ssl://"+addr, "tls-v3", func(o *mqtt3.ClientOptions) {
		o.SetTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	})
	hdCrossTraffic(t, v5, v3, "tls")
	pol.check(t, "tls-v5", true, false)
	pol.check(t, "tls-v3", true, false)
	pol.mu.Lock()
	_, leaked := pol.seen["plain"]
	pol.mu.Unlock()
	if leaked {
		t.Fatal("the plain client's CONNECT reached the policy")
	}

	// The silent client is closed at ConnectTimeout; the TLS clients stay.
	silent.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("silent client read data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("silent plain client on the TLS port was never closed")
	}
	eventually(t, "only the two TLS clients connected", func() bool { return b.Stats().Connections == 2 })
	mqtttest.Await(t, "v3 publish", v3.Publish("tls/to5/after", 1, false, "still here"))
	if m := v5.Next(t); string(m.Payload) != "still here" {
		t.Fatalf("after the plain clients: got %q", m.Payload)
	}
}

// TestWebSocketListener serves paho.mqtt.golang (gorilla) and paho.golang
// over coder/websocket on ListenWebSocket's /mqtt path.
func TestWebSocketListener(t *testing.T) {
	pol := &hdTransportPolicy{}
	b := startBroker(t, broker.Options{Policy: pol})
	ln, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := wsURL(ln.Addr().String())

	v3 := mqtttest.DialV3(t, url, "ws-v3")
	v5 := mqtttest.DialV5Over(t, hdDialWS(t, url, "mqtt"), mqtttest.Clean("ws-v5"))
	hdCrossTraffic(t, v5, v3, "ws")
	pol.check(t, "ws-v3", false, true)
	pol.check(t, "ws-v5", false, true)

	// A TCP client on the same broker sees WebSocket traffic too.
	tcp := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("tcp-v5"))
	tcp.MustSubscribe(t, paho.SubscribeOptions{Topic: "ws/to5/#", QoS: 1})
	mqtttest.Await(t, "v3 publish", v3.Publish("ws/to5/x", 1, false, "over ws"))
	hdExpectV5(t, tcp, "ws/to5/x", "over ws", 1)
	hdExpectV5(t, v5, "ws/to5/x", "over ws", 1)
}

// hdDialWS opens a coder/websocket connection offering subprotocol sp and
// returns it as a binary net.Conn.
func hdDialWS(tb testing.TB, url, sp string) net.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{sp}})
	if err != nil {
		tb.Fatalf("websocket dial %s: %v", url, err)
	}
	if ws.Subprotocol() != sp {
		tb.Fatalf("negotiated subprotocol %q, want %q", ws.Subprotocol(), sp)
	}
	nctx, ncancel := context.WithCancel(context.Background())
	tb.Cleanup(ncancel)
	return websocket.NetConn(nctx, ws, websocket.MessageBinary)
}

// TestWebSocketSubprotocolRequired: the upgrade succeeds without an MQTT
// subprotocol (the handshake cannot refuse it), but the broker closes the
// WebSocket at once with 1008 Policy Violation before any MQTT is served. A
// request that is not a WebSocket upgrade gets 426 Upgrade Required. Both
// names clients send, "mqtt" and the older "mqttv3.1", are served.
func TestWebSocketSubprotocolRequired(t *testing.T) {
	b := startBroker(t, broker.Options{})
	ln, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := wsURL(ln.Addr().String())
	before := b.Stats().ConnectionsTotal
	for _, offered := range [][]string{nil, {"chat"}, {"mqttv5"}} {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: offered})
		if err != nil {
			cancel()
			t.Fatalf("offering %q: dial: %v", offered, err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || ws.Subprotocol() != "" {
			t.Fatalf("offering %q: status %d, subprotocol %q", offered, resp.StatusCode, ws.Subprotocol())
		}
		_, _, err = ws.Read(ctx)
		cancel()
		if st := websocket.CloseStatus(err); st != websocket.StatusPolicyViolation {
			t.Fatalf("offering %q: read ended with %v (status %v), want close 1008", offered, err, st)
		}
		ws.CloseNow()
	}
	if got := b.Stats().ConnectionsTotal; got != before {
		t.Fatalf("refused WebSockets became MQTT connections: total %d -> %d", before, got)
	}

	resp, err := http.Get("http" + strings.TrimPrefix(url, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("plain GET: status %d, want 426", resp.StatusCode)
	}

	// The listener still serves MQTT afterwards, under either name.
	for _, sp := range []string{"mqtt", "mqttv3.1"} {
		v5 := mqtttest.DialV5Over(t, hdDialWS(t, url, sp), mqtttest.Clean("ws-after-"+sp))
		v5.MustSubscribe(t, paho.SubscribeOptions{Topic: "after/" + sp, QoS: 1})
		v5.MustPublish(t, &paho.Publish{Topic: "after/" + sp, QoS: 1, Payload: []byte("ok")})
		hdExpectV5(t, v5, "after/"+sp, "ok", 1)
	}
}

// TestWebSocketPacketsAcrossFrames: MQTT packets are not aligned on
// WebSocket frames [MQTT-6.0.0-2]: a CONNECT split over two messages, the
// rest of it and a SUBSCRIBE in one message of continuation frames, and
// one message of many PUBLISHes, larger together than MaxPacketSize (which
// bounds a packet, not a message), are all served; a text message is
// refused with 1003.
func TestWebSocketPacketsAcrossFrames(t *testing.T) {
	b := startBroker(t, broker.Options{MaxPacketSize: 1024})
	ln, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	dial := func() *websocket.Conn {
		ws, _, err := websocket.Dial(ctx, wsURL(ln.Addr().String()), &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		return ws
	}
	enc := func(p packet.Packet) []byte {
		b, err := packet.Encode(nil, p, packet.Version311)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// read returns the packets of the broker's next messages until n came.
	read := func(ws *websocket.Conn, n int) []packet.Packet {
		var got []packet.Packet
		var buf []byte
		for len(got) < n {
			_, m, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("after %d packets: %v", len(got), err)
			}
			buf = append(buf, m...)
			for {
				h, rem, hn, err := packet.ParseHeader(buf)
				if err != nil || len(buf) < hn+rem {
					break
				}
				p, err := packet.Decode(h, buf[hn:hn+rem], packet.Version311)
				if err != nil {
					t.Fatal(err)
				}
				got, buf = append(got, p), buf[hn+rem:]
			}
		}
		return got
	}

	ws := dial()
	connect := enc(&packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version311, ClientID: "frames", CleanStart: true, KeepAlive: 30})
	sub := enc(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "frames/#", QoS: 0}}})
	if err := ws.Write(ctx, websocket.MessageBinary, connect[:3]); err != nil {
		t.Fatal(err)
	}
	w, err := ws.Writer(ctx, websocket.MessageBinary)
	if err != nil {
		t.Fatal(err)
	}
	rest := append(connect[3:], sub...)
	for i := 0; i < len(rest); i += 5 { // a frame each
		if _, err := w.Write(rest[i:min(len(rest), i+5)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := read(ws, 2); got[0].Type() != packet.CONNACK || got[1].Type() != packet.SUBACK {
		t.Fatalf("got %v, want CONNACK and SUBACK", got)
	}
	var batch []byte
	const n = 20
	for range n {
		batch = append(batch, enc(&packet.Publish{Topic: "frames/x", Payload: make([]byte, 100)})...)
	}
	if len(batch) <= 1024 {
		t.Fatalf("the batch of %d bytes is not over MaxPacketSize", len(batch))
	}
	if err := ws.Write(ctx, websocket.MessageBinary, batch); err != nil {
		t.Fatal(err)
	}
	for i, p := range read(ws, n) {
		if pub, ok := p.(*packet.Publish); !ok || pub.Topic != "frames/x" || len(pub.Payload) != 100 {
			t.Fatalf("message %d: %v", i, p)
		}
	}

	text := dial()
	if err := text.Write(ctx, websocket.MessageText, connect); err != nil {
		t.Fatal(err)
	}
	if _, _, err := text.Read(ctx); websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
		t.Fatalf("a text message: read ended with %v, want close 1003", err)
	}
}

// TestWebSocketListenerHoldsNoIdleHTTP: the WebSocket listener's HTTP
// connections that are not (yet) MQTT connections are bounded like a
// stranger: one that sends no request, and one left idle after a request
// that was not an upgrade (an HTTP keep-alive connection, once held for
// ever), are closed within the connect timeout, and the server's Close
// ends those it still has.
func TestWebSocketListenerHoldsNoIdleHTTP(t *testing.T) {
	// idleHTTP opens a connection to addr, sends a GET that is not an
	// upgrade (unless silent) and reads its answer.
	idleHTTP := func(t *testing.T, addr string, silent bool) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		br := bufio.NewReader(c)
		if silent {
			return c, br
		}
		io.WriteString(c, "GET /mqtt HTTP/1.1\r\nHost: broker\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUpgradeRequired || resp.Close {
			t.Fatalf("plain GET: status %d, close %v; want 426 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		return c, br
	}
	// closedWithin fails unless the server closes c within d.
	closedWithin := func(t *testing.T, what string, c net.Conn, br *bufio.Reader, d time.Duration) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(d))
		if _, err := br.ReadByte(); err == nil {
			t.Fatalf("%s: read data", what)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: still open after %v", what, d)
		}
	}

	t.Run("connect timeout", func(t *testing.T) {
		b := startBroker(t, broker.Options{ConnectTimeout: 300 * time.Millisecond})
		ln, err := b.ListenWebSocket("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		silent, sbr := idleHTTP(t, ln.Addr().String(), true)
		idle, ibr := idleHTTP(t, ln.Addr().String(), false)
		closedWithin(t, "a connection that sent nothing", silent, sbr, 3*time.Second)
		closedWithin(t, "an idle connection after a plain GET", idle, ibr, 3*time.Second)
	})
	t.Run("server close", func(t *testing.T) {
		b := startBroker(t, broker.Options{ConnectTimeout: time.Minute})
		ln, err := b.ListenWebSocket("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		idle, ibr := idleHTTP(t, ln.Addr().String(), false)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, "an idle connection after the server's Close", idle, ibr, 3*time.Second)
	})
}

// TestWebSocketHandlerMounted mounts Server.WebSocketHandler on a path of
// the caller's own HTTP servers (plain and TLS) and exchanges messages with
// a TCP client; the policy learns TLS from the HTTP request.
func TestWebSocketHandlerMounted(t *testing.T) {
	pol := &hdTransportPolicy{}
	b := startBroker(t, broker.Options{Policy: pol})
	mux := http.NewServeMux()
	mux.Handle("/custom/mqtt", b.WebSocketHandler())
	mux.HandleFunc("/other", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "other") })
	hs := httptest.NewServer(mux)
	defer hs.Close()
	hts := httptest.NewTLSServer(mux)
	defer hts.Close()
	if !strings.HasPrefix(hs.URL, "http://127.0.0.1:") || !strings.HasPrefix(hts.URL, "https://127.0.0.1:") {
		t.Fatalf("test servers not on loopback: %s %s", hs.URL, hts.URL)
	}

	tcp := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("mounted-tcp"))
	tcp.MustSubscribe(t, paho.SubscribeOptions{Topic: "mounted/up/#", QoS: 2})

	ws := mqtttest.DialV3(t, "ws"+strings.TrimPrefix(hs.URL, "http")+"/custom/mqtt", "mounted-ws")
	pool := x509.NewCertPool()
	pool.AddCert(hts.Certificate())
	wss := mqtttest.DialV3(t, "wss"+strings.TrimPrefix(hts.URL, "https")+"/custom/mqtt", "mounted-wss", func(o *mqtt3.ClientOptions) {
		o.SetTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	})
	pol.check(t, "mounted-ws", false, true)
	pol.check(t, "mounted-wss", true, true)

	wsIn := ws.Subscription(t, "mounted/down/#", 2)
	wssIn := wss.Subscription(t, "mounted/down/#", 1)
	for q := byte(0); q <= 2; q++ {
		p := string('0' + q)
		mqtttest.Await(t, "ws publish", ws.Publish("mounted/up/ws", q, false, "ws-"+p))
		hdExpectV5(t, tcp, "mounted/up/ws", "ws-"+p, q)
		mqtttest.Await(t, "wss publish", wss.Publish("mounted/up/wss", q, false, "wss-"+p))
		hdExpectV5(t, tcp, "mounted/up/wss", "wss-"+p, q)
		tcp.MustPublish(t, &paho.Publish{Topic: "mounted/down/" + p, QoS: q, Payload: []byte("down-" + p)})
		mqtttest.ExpectV3(t, wsIn, "mounted/down/"+p, "down-"+p, q)
		mqtttest.ExpectV3(t, wssIn, "mounted/down/"+p, "down-"+p, min(q, 1))
	}

	// The rest of the caller's mux is untouched.
	resp, err := http.Get(hs.URL + "/other")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "other" {
		t.Fatalf("/other served %q", body)
	}
}
