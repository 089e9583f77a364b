package mqtttest

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// V5 is a paho.golang (MQTT 5) client whose received messages, server
// DISCONNECTs and client errors land in channels.
type V5 struct {
	*paho.Client
	Name    string // the client id, for failure messages
	Conn    net.Conn
	Connack *paho.Connack
	Msgs    chan *paho.Publish
	Disc    chan *paho.Disconnect
	Errs    chan error
}

// Clean is a CONNECT for a clean session with client id id and keep alive
// 30 seconds.
func Clean(id string) *paho.Connect {
	return &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}
}

// Login is Clean with a username and password.
func Login(id, user, pass string) *paho.Connect {
	cp := Clean(id)
	cp.Username, cp.UsernameFlag = user, true
	cp.Password, cp.PasswordFlag = []byte(pass), true
	return cp
}

// DialV5 connects to addr over TCP with cp as the CONNECT and fails the
// test unless the server accepts. edit may change the client's config.
func DialV5(tb testing.TB, addr string, cp *paho.Connect, edit ...func(*paho.ClientConfig)) *V5 {
	tb.Helper()
	c, ack, err := TryV5(tb, addr, cp, edit...)
	if err != nil {
		tb.Fatalf("connect %s: %v (connack %+v)", cp.ClientID, err, ack)
	}
	return c
}

// TryV5 is DialV5 returning the CONNACK (if any) and the error of a
// refusal instead of failing.
func TryV5(tb testing.TB, addr string, cp *paho.Connect, edit ...func(*paho.ClientConfig)) (*V5, *paho.Connack, error) {
	tb.Helper()
	return TryV5Over(tb, dial(tb, addr), cp, edit...)
}

// DialV5Over is DialV5 over a connection already open (TLS, WebSocket).
func DialV5Over(tb testing.TB, nc net.Conn, cp *paho.Connect, edit ...func(*paho.ClientConfig)) *V5 {
	tb.Helper()
	c, ack, err := TryV5Over(tb, nc, cp, edit...)
	if err != nil {
		tb.Fatalf("connect %s: %v (connack %+v)", cp.ClientID, err, ack)
	}
	return c
}

// TryV5Over is TryV5 over a connection already open. The connection is
// closed when the test ends.
func TryV5Over(tb testing.TB, nc net.Conn, cp *paho.Connect, edit ...func(*paho.ClientConfig)) (*V5, *paho.Connack, error) {
	tb.Helper()
	tb.Cleanup(func() { nc.Close() })
	c := &V5{
		Name: cp.ClientID,
		Conn: nc,
		Msgs: make(chan *paho.Publish, 10000),
		Disc: make(chan *paho.Disconnect, 4),
		Errs: make(chan error, 16),
	}
	cfg := paho.ClientConfig{
		ClientID: cp.ClientID,
		Conn:     packets.NewThreadSafeConn(nc),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				c.Msgs <- pr.Packet
				return true, nil
			},
		},
		OnServerDisconnect: func(d *paho.Disconnect) { c.Disc <- d },
		OnClientError: func(err error) {
			select {
			case c.Errs <- err:
			default:
			}
		},
		PacketTimeout: Timeout,
	}
	for _, e := range edit {
		e(&cfg)
	}
	c.Client = paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	ack, err := c.Connect(ctx, cp)
	c.Connack = ack
	if err == nil {
		tb.Cleanup(func() { c.Disconnect(&paho.Disconnect{}) })
	}
	return c, ack, err
}

// MustSubscribe subscribes and fails the test unless every filter is
// granted (at any QoS).
func (c *V5) MustSubscribe(tb testing.TB, opts ...paho.SubscribeOptions) *paho.Suback {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts})
	if err != nil {
		tb.Fatalf("%s: subscribe: %v", c.Name, err)
	}
	if len(sa.Reasons) != len(opts) {
		tb.Fatalf("%s: subscribe: %d reason codes for %d filters", c.Name, len(sa.Reasons), len(opts))
	}
	for i, rc := range sa.Reasons {
		if rc >= 0x80 {
			tb.Fatalf("%s: subscribe %q refused: 0x%02x", c.Name, opts[i].Topic, rc)
		}
	}
	return sa
}

// SubCode subscribes to one filter and returns the SUBACK reason code.
func (c *V5) SubCode(tb testing.TB, filter string, qos byte) byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if sa == nil || len(sa.Reasons) != 1 {
		tb.Fatalf("%s: subscribe %q: no SUBACK with one reason code: %v", c.Name, filter, err)
	}
	return sa.Reasons[0]
}

// Sub subscribes to one filter and fails unless it is granted at qos.
func (c *V5) Sub(tb testing.TB, filter string, qos byte) {
	tb.Helper()
	if rc := c.SubCode(tb, filter, qos); rc != qos {
		tb.Fatalf("%s: subscribe %q at QoS %d: got 0x%02x", c.Name, filter, qos, rc)
	}
}

// TryPublish publishes and returns the response and error as they are.
func (c *V5) TryPublish(p *paho.Publish) (*paho.PublishResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return c.Publish(ctx, p)
}

// MustPublish publishes and fails unless the flow completes with success
// (for QoS 1 and 2 it has completed when MustPublish returns).
func (c *V5) MustPublish(tb testing.TB, p *paho.Publish) *paho.PublishResponse {
	tb.Helper()
	r, err := c.TryPublish(p)
	if err != nil {
		tb.Fatalf("%s: publish %s: %v", c.Name, p.Topic, err)
	}
	if p.QoS > 0 && (r == nil || r.ReasonCode >= 0x80) {
		tb.Fatalf("%s: publish %s: response %+v", c.Name, p.Topic, r)
	}
	return r
}

// Pub is MustPublish of a string payload.
func (c *V5) Pub(tb testing.TB, topic string, qos byte, payload string) {
	tb.Helper()
	c.MustPublish(tb, &paho.Publish{Topic: topic, QoS: qos, Payload: []byte(payload)})
}

// Next returns the next message c receives.
func (c *V5) Next(tb testing.TB) *paho.Publish {
	tb.Helper()
	select {
	case m := <-c.Msgs:
		return m
	case <-time.After(Timeout):
		tb.Fatalf("%s: no message arrived", c.Name)
		return nil
	}
}

// Expect receives len(payloads) messages and checks their payloads in
// order.
func (c *V5) Expect(tb testing.TB, payloads ...string) []*paho.Publish {
	tb.Helper()
	got := make([]*paho.Publish, 0, len(payloads))
	for _, want := range payloads {
		m := c.Next(tb)
		if string(m.Payload) != want {
			tb.Fatalf("%s: message %d: got %q on %s, want %q", c.Name, len(got), m.Payload, m.Topic, want)
		}
		got = append(got, m)
	}
	return got
}

// ExpectOn receives the next message and checks its topic and payload.
func (c *V5) ExpectOn(tb testing.TB, topic, payload string) *paho.Publish {
	tb.Helper()
	m := c.Next(tb)
	if m.Topic != topic || string(m.Payload) != payload {
		tb.Fatalf("%s: got %q on %s, want %q on %s", c.Name, m.Payload, m.Topic, payload, topic)
	}
	return m
}

// Disconnected waits at most within for the server to end the connection
// (a DISCONNECT, or the connection closed) and returns the DISCONNECT's
// reason code (0 when there was none).
func (c *V5) Disconnected(tb testing.TB, within time.Duration) byte {
	tb.Helper()
	select {
	case d := <-c.Disc:
		return d.ReasonCode
	case <-c.Done():
		// paho reports a server DISCONNECT after it stopped the client.
		select {
		case d := <-c.Disc:
			return d.ReasonCode
		case <-time.After(time.Second):
			return 0
		}
	case <-time.After(within):
		tb.Fatalf("%s: still connected after %v", c.Name, within)
		return 0
	}
}

// StillConnected fails if the server has ended c's connection.
func (c *V5) StillConnected(tb testing.TB) {
	tb.Helper()
	select {
	case d := <-c.Disc:
		tb.Fatalf("%s: server sent DISCONNECT 0x%02x", c.Name, d.ReasonCode)
	case <-c.Done():
		tb.Fatalf("%s: connection ended", c.Name)
	default:
	}
}

var markers atomic.Int64

// Barrier proves subs have received nothing since their last expected
// message: pub publishes a marker (QoS 1) on topic, which every one of subs
// matches, and the marker must be the next message each receives. Ordering
// on one session makes this a sound "nothing arrived" check without
// sleeping.
func Barrier(tb testing.TB, pub *V5, topic string, subs ...*V5) {
	tb.Helper()
	marker := fmt.Sprintf("barrier-%d", markers.Add(1))
	pub.Pub(tb, topic, 1, marker)
	for _, s := range subs {
		m := s.Next(tb)
		if string(m.Payload) != marker {
			tb.Fatalf("%s: unexpected message %q on %s (retain %v) before the barrier", s.Name, m.Payload, m.Topic, m.Retain)
		}
	}
}

// RefusedV5 connects with cp and returns the CONNACK reason code of the
// server's refusal, failing if it accepts or sends no CONNACK.
func RefusedV5(tb testing.TB, addr string, cp *paho.Connect) byte {
	tb.Helper()
	_, ack, err := TryV5(tb, addr, cp)
	if err == nil {
		tb.Fatalf("connect %s as %q: accepted, want a refusal", cp.ClientID, cp.Username)
	}
	if ack == nil {
		tb.Fatalf("connect %s as %q: no CONNACK: %v", cp.ClientID, cp.Username, err)
	}
	return ack.ReasonCode
}
