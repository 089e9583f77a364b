package app_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestProblemsOfEveryKind: besides refusals, the server's own closes and
// the messages a client did not get are recorded for the client's account
// owner, with the reason: a PUBLISH above the client's maximum QoS
// (qos_not_allowed), a silent connection (keepalive_timeout), a
// subscriber whose connection ended with messages in flight and queued
// (dropped, connection_closed, also counted in the day's drops the
// Overview shows), QoS 0 for an offline persistent session
// (offline_qos0). The other account has none of them.
func TestProblemsOfEveryKind(t *testing.T) {
	p := startPlatform(t)
	a := p.newTenant(t, "acme", "starter", false, "pump-17")
	p.addClient(t, a, "valve-0", 0)
	b := p.newTenant(t, "beta", "starter", false, "pump-17")
	p.synced(t)

	// A PUBLISH above max_publish_qos 0, from a 3.1.1 client.
	valve := dialV3(t, p.MQTTAddr, "valve-0", a.PubUser, a.PubPass)
	valve.Publish(a.topic("valve-0", "state/open"), 1, false, "1")

	// A subscriber that takes 20 messages and acknowledges none, so 5 more
	// wait in its queue; then its connection drops.
	nc, err := net.Dial("tcp", p.MQTTAddr)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 100)
	slow := paho.NewClient(paho.ClientConfig{ClientID: "slow-dash", Conn: nc, EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { got <- struct{}{}; return true, nil }}})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := slow.Connect(ctx, &paho.Connect{ClientID: "slow-dash", CleanStart: true, KeepAlive: 30,
		Username: a.SubUser, UsernameFlag: true, Password: []byte(a.SubPass), PasswordFlag: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: a.all(), QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	// A persistent subscriber (a session expiry) that goes away.
	persistent := rawConnect(t, p.MQTTAddr, &packet.Connect{ClientID: "night-dash", KeepAlive: 30, CleanStart: true,
		Username: a.SubUser, HasUsername: true, Password: []byte(a.SubPass), HasPassword: true,
		Properties: packet.Properties{SessionExpiry: 3600}}, packet.PropSessionExpiry)
	persistent.send(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: a.topic("pump-17", "telemetry/#"), QoS: 0}}})
	persistent.read(t) // SUBACK
	persistent.send(t, &packet.Disconnect{})
	persistent.nc.Close()

	dev := dialV5(t, p.MQTTAddr, "pump-17", a.PubUser, a.PubPass)
	for i := range 25 {
		dev.pub(t, a.topic("pump-17", "state/level"), 1, string(rune('a'+i)))
	}
	for i := range 20 {
		select {
		case <-got:
		case <-time.After(waitFor):
			t.Fatalf("the slow subscriber got %d of its 20 in-flight messages", i)
		}
	}
	nc.Close()
	// QoS 0 for night-dash once its session is offline (its DISCONNECT is
	// processed on its own goroutine: publish until one is dropped).
	eventually(t, "QoS 0 dropped for the offline session", func() bool {
		dev.pub(t, a.topic("pump-17", "telemetry/temp"), 0, "21")
		return p.Broker.Stats().Drops[broker.DropOffline] > 0
	})

	// A connection that goes silent: keep alive 1 s, no PINGREQ.
	silent := rawConnect(t, p.MQTTAddr, &packet.Connect{ClientID: "pump-17", KeepAlive: 1, CleanStart: true,
		Username: a.PubUser, HasUsername: true, Password: []byte(a.PubPass), HasPassword: true})
	defer silent.nc.Close()

	want := []struct{ client, kind, reason string }{
		{"valve-0", fleetmq.ProblemDisconnected, "qos_not_allowed"},
		{"pump-17", fleetmq.ProblemDisconnected, "session_taken_over"}, // by the silent connection
		{"pump-17", fleetmq.ProblemDisconnected, "keepalive_timeout"},
		{"slow-dash", fleetmq.ProblemDropped, "connection_closed"},
		{"night-dash", fleetmq.ProblemDropped, "offline_qos0"},
	}
	var ps []fleetmq.ClientProblem
	missing := func() []string {
		var out []string
		for _, w := range want {
			if !slices.ContainsFunc(ps, func(pr fleetmq.ClientProblem) bool {
				return pr.ClientID == w.client && pr.Kind == w.kind && pr.Reason == w.reason
			}) {
				out = append(out, w.client+" "+w.kind+" "+w.reason)
			}
		}
		return out
	}
	for deadline := time.Now().Add(waitFor); ; time.Sleep(10 * time.Millisecond) {
		if ps, err = p.Store.Problems(p.ctx, a.ID, "", time.Time{}, 100); err != nil {
			t.Fatal(err)
		}
		if len(missing()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, pr := range ps {
				t.Logf("recorded: %s %s %s x%d %q", pr.ClientID, pr.Kind, pr.Reason, pr.Count, pr.Detail)
			}
			t.Fatalf("missing %v", missing())
		}
	}
	queued := false
	for _, pr := range ps {
		if !slices.ContainsFunc(want, func(w struct{ client, kind, reason string }) bool {
			return w.client == pr.ClientID && w.kind == pr.Kind
		}) {
			t.Errorf("unexpected problem %+v", pr)
		}
		switch pr.Reason {
		case "qos_not_allowed":
			if pr.Code != int(packet.QoSNotSupported) || pr.Detail == "" {
				t.Errorf("qos_not_allowed: %+v", pr)
			}
		case "keepalive_timeout":
			if pr.Code != int(packet.KeepAliveTimeout) {
				t.Errorf("keepalive_timeout: %+v", pr)
			}
		case "connection_closed":
			// (The QoS 0 telemetry published meanwhile may be lost with
			// the connection too: one more problem.)
			if pr.Topic == a.topic("pump-17", "state/level") {
				queued = true
			}
			if pr.Topic == a.topic("pump-17", "state/level") && (pr.Count < 5 || pr.QoS != 1) {
				t.Errorf("connection_closed: %+v, want at least the 5 queued messages", pr)
			}
		case "offline_qos0":
			if pr.Count < 1 || pr.Topic != a.topic("pump-17", "telemetry/temp") || pr.QoS != 0 {
				t.Errorf("offline_qos0: %+v", pr)
			}
		}
	}
	if !queued {
		t.Error("the slow subscriber's undelivered state/level messages were not recorded with their topic")
	}
	day := p.day()
	u := p.usage(t, a.ID, day, "connection_closed drops", func(u fleetmq.DailyUsage) bool { return u.Drops["connection_closed"] >= 5 })
	if u.Drops["offline_qos0"] < 1 {
		t.Errorf("today's drops: %v", u.Drops)
	}
	if ps, err := p.Store.Problems(p.ctx, b.ID, "", time.Time{}, 100); err != nil || len(ps) != 0 {
		t.Fatalf("B's problems: %+v %v", ps, err)
	}
}

// rawConn is an MQTT 5 connection through fleetmq's own codec, for what
// a library client will not do (stay silent past its keep alive).
type rawConn struct {
	nc  net.Conn
	buf []byte
	r   *bufio.Reader
}

func rawConnect(t *testing.T, addr string, c *packet.Connect, props ...packet.PropID) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c.ProtocolName, c.ProtocolLevel = "MQTT", packet.Version5
	for _, id := range props {
		c.Properties.Mark(id)
	}
	rc := &rawConn{nc: nc, r: bufio.NewReader(nc)}
	rc.send(t, c)
	if ack, ok := rc.read(t).(*packet.Connack); !ok || ack.ReasonCode != packet.Success {
		t.Fatalf("connect %s: %+v", c.ClientID, ack)
	}
	return rc
}

func (rc *rawConn) send(t *testing.T, p packet.Packet) {
	t.Helper()
	var err error
	if rc.buf, err = packet.Encode(rc.buf[:0], p, packet.Version5); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.nc.Write(rc.buf); err != nil {
		t.Fatal(err)
	}
}

// read reads one packet: the fixed header, the remaining length, the body.
func (rc *rawConn) read(t *testing.T) packet.Packet {
	t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(waitFor))
	header, err := rc.r.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	n, shift := 0, 0
	for {
		b, err := rc.r.ReadByte()
		if err != nil {
			t.Fatal(err)
		}
		n |= int(b&0x7f) << shift
		if b < 0x80 {
			break
		}
		shift += 7
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rc.r, body); err != nil {
		t.Fatal(err)
	}
	p, err := packet.Decode(header, body, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
