package broker_test

import (
	"bytes"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// obsPolicy is the open policy that records Connected and Disconnected
// calls as a ConnectObserver.
type obsPolicy struct {
	broker.OpenPolicy
	mu     sync.Mutex
	conns  map[*broker.Identity]*broker.Connection
	events []obsEvent
}

type obsEvent struct {
	connected bool // false: Disconnected
	clientID  string
	conn      *broker.Connection
	end       broker.Disconnection
}

func (p *obsPolicy) Connected(id *broker.Identity, c *broker.Connection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = make(map[*broker.Identity]*broker.Connection)
	}
	p.conns[id] = c
	p.events = append(p.events, obsEvent{connected: true, clientID: id.ClientID, conn: c})
}

func (p *obsPolicy) Disconnected(id *broker.Identity, d broker.Disconnection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, obsEvent{clientID: id.ClientID, conn: p.conns[id], end: d})
}

// of returns the events of a client id so far.
func (p *obsPolicy) of(clientID string) []obsEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []obsEvent
	for _, e := range p.events {
		if e.clientID == clientID {
			out = append(out, e)
		}
	}
	return out
}

// TestConnectObserver: a policy that is a ConnectObserver learns of every
// attached connection before its CONNACK (protocol level, peer address,
// transport, a Seq that orders takeovers), sees its last-received time move
// with every packet read (PINGREQ included, by the broker's clock), and
// gets a Disconnected for every connection it saw attach, including one
// taken over by a newer connection of the same client id.
func TestConnectObserver(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	pol := &obsPolicy{}
	b := startBroker(t, broker.Options{Policy: pol, Now: clk.Now})

	// v5 over TCP: Connected ran before the CONNACK the client waited for.
	c1 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("obs1"))
	ev := pol.of("obs1")
	if len(ev) != 1 || !ev[0].connected {
		t.Fatalf("after CONNACK: events %+v, want one Connected", ev)
	}
	first := ev[0].conn
	if first.ProtocolLevel != packet.Version5 || first.TLS || first.WebSocket || first.Seq == 0 {
		t.Fatalf("connection %+v: want MQTT 5 over plain TCP with a Seq", first)
	}
	if got, want := first.RemoteAddr.String(), c1.Conn.LocalAddr().String(); got != want {
		t.Fatalf("remote address %s, want the client's %s", got, want)
	}
	if got := first.LastReceived(); !got.Equal(clk.Now()) {
		t.Fatalf("last received %v, want the CONNECT's time %v", got, clk.Now())
	}
	// A PUBLISH read later moves it.
	clk.Add(5 * time.Second)
	c1.MustPublish(t, &paho.Publish{Topic: "obs/x", QoS: 1, Payload: []byte("x")})
	if got := first.LastReceived(); !got.Equal(clk.Now()) {
		t.Fatalf("last received %v after a PUBLISH, want %v", got, clk.Now())
	}

	// A PINGREQ moves it too (raw client, v3.1.1).
	raw, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, ClientID: "obsraw", CleanStart: true, KeepAlive: 60})
	ev = pol.of("obsraw")
	if len(ev) != 1 || ev[0].conn.ProtocolLevel != packet.Version311 {
		t.Fatalf("3.1.1 client: events %+v", ev)
	}
	clk.Add(7 * time.Second)
	raw.Must(t, &packet.Pingreq{})
	raw.Expect(t, packet.PINGRESP)
	if got := ev[0].conn.LastReceived(); !got.Equal(clk.Now()) {
		t.Fatalf("last received %v after a PINGREQ, want %v", got, clk.Now())
	}

	// A second connection with the same client id takes the session over:
	// it is reported first, with the higher Seq, then the first one's end.
	c2 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("obs1"))
	eventually(t, "the taken-over connection's Disconnected", func() bool { return len(pol.of("obs1")) == 3 })
	ev = pol.of("obs1")
	second := ev[1].conn
	if !ev[1].connected || ev[2].connected || ev[2].conn != first {
		t.Fatalf("takeover: events %+v, want Connected of the second, then Disconnected of the first", ev)
	}
	if second.Seq <= first.Seq {
		t.Fatalf("takeover: second Seq %d, first %d", second.Seq, first.Seq)
	}
	if got, want := second.RemoteAddr.String(), c2.Conn.LocalAddr().String(); got != want {
		t.Fatalf("second remote address %s, want %s", got, want)
	}

	// A normal DISCONNECT is reported as the client's, for that connection.
	if err := c2.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second connection's Disconnected", func() bool { return len(pol.of("obs1")) == 4 })
	if last := pol.of("obs1")[3]; last.connected || last.conn != second || last.end.Reason != broker.CloseClientDisconnect {
		t.Fatalf("last event %+v, want a clean Disconnected of the second connection", last)
	}

	// Over WebSocket.
	ln, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mqtttest.DialV5Over(t, hdDialWS(t, wsURL(ln.Addr().String()), "mqtt"), mqtttest.Clean("obsws"))
	ev = pol.of("obsws")
	if len(ev) != 1 || !ev[0].conn.WebSocket || ev[0].conn.TLS || ev[0].conn.ProtocolLevel != packet.Version5 || ev[0].conn.RemoteAddr == nil {
		t.Fatalf("WebSocket client: events %+v", ev)
	}
}

// TestRetainedLookup: Server.Retained returns copies of the unexpired
// retained messages matching a filter, sorted by topic and bounded by
// limit; expired ones are skipped but not removed; shared and invalid
// filters are errors.
func TestRetainedLookup(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := startBroker(t, broker.Options{Now: clk.Now})
	pub := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("rlpub"))
	t0 := clk.Now()
	hbRetain(t, pub, "rl/a/2", "a2")
	hbRetain(t, pub, "rl/a/1", "a1")
	hbRetain(t, pub, "rl/a", "a")
	hbRetain(t, pub, "rl/b/1", "b1")
	hbRetain(t, pub, "rl/a/3", "a3", 10)
	pub.MustPublish(t, &paho.Publish{Topic: "rl/a/live", QoS: 1, Payload: []byte("not retained")})

	topics := func(ms []broker.RetainedMessage) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Topic+"="+string(m.Payload))
		}
		return out
	}
	look := func(filter string, limit int) []broker.RetainedMessage {
		t.Helper()
		ms, err := b.Retained(filter, limit)
		if err != nil {
			t.Fatalf("Retained(%q): %v", filter, err)
		}
		return ms
	}
	check := func(filter string, limit int, want ...string) []broker.RetainedMessage {
		t.Helper()
		ms := look(filter, limit)
		if got := topics(ms); !slices.Equal(got, want) {
			t.Fatalf("Retained(%q, %d) = %v, want %v", filter, limit, got, want)
		}
		return ms
	}
	ms := check("rl/a/#", 0, "rl/a=a", "rl/a/1=a1", "rl/a/2=a2", "rl/a/3=a3")
	for _, m := range ms {
		if m.QoS != 1 || !m.Created.Equal(t0) {
			t.Fatalf("%s: QoS %d created %v, want 1 at %v", m.Topic, m.QoS, m.Created, t0)
		}
		wantExp := time.Time{}
		if m.Topic == "rl/a/3" {
			wantExp = t0.Add(10 * time.Second)
		}
		if !m.Expiry.Equal(wantExp) {
			t.Fatalf("%s: expiry %v, want %v", m.Topic, m.Expiry, wantExp)
		}
	}
	check("rl/a/#", 2, "rl/a=a", "rl/a/1=a1")
	check("rl/+/1", 0, "rl/a/1=a1", "rl/b/1=b1")
	check("rl/c/#", 0)

	// The payload is a copy.
	ms[1].Payload[0] = 'X'
	if got := look("rl/a/1", 0); len(got) != 1 || !bytes.Equal(got[0].Payload, []byte("a1")) {
		t.Fatalf("stored payload changed through a returned copy: %v", topics(got))
	}

	// Expired: skipped, still stored until the sweep.
	clk.Add(10 * time.Second)
	check("rl/a/#", 0, "rl/a=a", "rl/a/1=a1", "rl/a/2=a2")
	if n := b.Stats().Retained; n != 5 {
		t.Fatalf("retained count %d after a lookup, want 5 (lookups do not remove)", n)
	}
	b.Sweep()
	if n := b.Stats().Retained; n != 4 {
		t.Fatalf("retained count %d after the sweep, want 4", n)
	}

	for _, bad := range []string{"$share/g/rl/#", "rl/#/x", "rl/a+", ""} {
		if _, err := b.Retained(bad, 0); err == nil {
			t.Errorf("Retained(%q): no error", bad)
		}
	}
}
