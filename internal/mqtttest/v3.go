package mqtttest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"
)

// V3 is a paho.mqtt.golang (MQTT 3.1.1, or 3.1 with ProtocolVersion(3))
// client. Messages no subscription handler takes land in Msgs.
type V3 struct {
	mqtt3.Client
	Name           string // the client id, for failure messages
	Msgs           chan mqtt3.Message
	Lost           chan error
	SessionPresent bool // the CONNACK's
}

// Credentials sets a 3.1.1 client's username and password.
func Credentials(user, pass string) func(*mqtt3.ClientOptions) {
	return func(o *mqtt3.ClientOptions) { o.SetUsername(user).SetPassword(pass) }
}

// DialV3 connects a 3.1.1 client with a clean session and keep alive 30
// seconds, and fails the test unless the server accepts. server is a
// host:port for plain TCP or a URL (ssl://, ws://, wss://). opts may change
// the client's options.
func DialV3(tb testing.TB, server, id string, opts ...func(*mqtt3.ClientOptions)) *V3 {
	tb.Helper()
	c, rc, err := TryV3(tb, server, id, opts...)
	if err != nil {
		tb.Fatalf("connect %s: %v (return code %d)", id, err, rc)
	}
	return c
}

// TryV3 is DialV3 returning the CONNACK return code and the error of a
// refusal (or a timeout) instead of failing.
func TryV3(tb testing.TB, server, id string, opts ...func(*mqtt3.ClientOptions)) (*V3, byte, error) {
	tb.Helper()
	if !strings.Contains(server, "://") {
		server = "tcp://" + server
	}
	c := &V3{Name: id, Msgs: make(chan mqtt3.Message, 10000), Lost: make(chan error, 1)}
	o := mqtt3.NewClientOptions().
		AddBroker(server).
		SetClientID(id).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(Timeout).
		SetKeepAlive(30 * time.Second).
		SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) { c.Msgs <- m }).
		SetConnectionLostHandler(func(_ mqtt3.Client, err error) {
			select {
			case c.Lost <- err:
			default:
			}
		})
	for _, opt := range opts {
		opt(o)
	}
	c.Client = mqtt3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(Timeout) {
		return c, 0, fmt.Errorf("connect %s: timed out", id)
	}
	ct := tok.(*mqtt3.ConnectToken)
	c.SessionPresent = ct.SessionPresent()
	if err := tok.Error(); err != nil {
		return c, ct.ReturnCode(), err
	}
	tb.Cleanup(func() { c.Disconnect(0) })
	return c, ct.ReturnCode(), nil
}

// RefusedV3 connects a 3.1.1 client and returns the CONNACK return code of
// the server's refusal, failing if it accepts.
func RefusedV3(tb testing.TB, server, id string, opts ...func(*mqtt3.ClientOptions)) byte {
	tb.Helper()
	_, rc, err := TryV3(tb, server, id, opts...)
	if err == nil {
		tb.Fatalf("connect %s (3.1.1): accepted, want a refusal", id)
	}
	return rc
}

// Await waits for a paho.mqtt.golang token and fails on an error or after
// Timeout.
func Await(tb testing.TB, what string, tok mqtt3.Token) {
	tb.Helper()
	if !tok.WaitTimeout(Timeout) {
		tb.Fatalf("%s: timed out", what)
	}
	if err := tok.Error(); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// Pub publishes and waits for the flow to complete.
func (c *V3) Pub(tb testing.TB, topic string, qos byte, retain bool, payload string) {
	tb.Helper()
	Await(tb, c.Name+": publish "+topic, c.Publish(topic, qos, retain, payload))
}

// Subscription subscribes to filter with a handler of its own and returns
// the channel its messages arrive on.
func (c *V3) Subscription(tb testing.TB, filter string, qos byte) chan mqtt3.Message {
	tb.Helper()
	ch := make(chan mqtt3.Message, 10000)
	Await(tb, c.Name+": subscribe "+filter, c.Subscribe(filter, qos, func(_ mqtt3.Client, m mqtt3.Message) { ch <- m }))
	return ch
}

// Next returns the next message that no subscription handler took.
func (c *V3) Next(tb testing.TB) mqtt3.Message {
	tb.Helper()
	return NextV3(tb, c.Msgs)
}

// NextV3 returns the next message on ch.
func NextV3(tb testing.TB, ch chan mqtt3.Message) mqtt3.Message {
	tb.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(Timeout):
		tb.Fatalf("no message within %v", Timeout)
		return nil
	}
}

// ExpectV3 checks that the next message on ch has this topic, payload and
// QoS.
func ExpectV3(tb testing.TB, ch chan mqtt3.Message, topic, payload string, qos byte) {
	tb.Helper()
	m := NextV3(tb, ch)
	if m.Topic() != topic || string(m.Payload()) != payload || m.Qos() != qos {
		tb.Fatalf("got %q on %s at QoS %d, want %q on %s at QoS %d", m.Payload(), m.Topic(), m.Qos(), payload, topic, qos)
	}
}
