package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Connections that stay up: quiet periods longer than every timeout the
// broker has are normal for IoT fleets. The timeouts are shortened through
// Options; the idle periods the tests wait through are the input under
// test, not synchronisation.

// idle lets d pass: the quiet period a test is about.
func idle(d time.Duration) { time.Sleep(d) }

// TestIdleSubscribersKeepReceiving: paho.mqtt.golang (3.1.1) and
// paho.golang (v5) subscribers over TCP, TLS and WebSocket, and
// mosquitto_sub (3.1.1 and 5), idle for twice the write timeout and the
// connect timeout, then receive the next message on the same connection:
// no connection is closed and none reconnects.
func TestIdleSubscribersKeepReceiving(t *testing.T) {
	testkit.NeedTools(t, "mosquitto_sub")
	// The connect timeout also bounds the TLS and WebSocket handshakes,
	// which under -race on a busy machine can take most of a second: it is
	// shortened less than the write timeout.
	const writeTimeout, connectTimeout = 300 * time.Millisecond, time.Second
	b := startBroker(t, broker.Options{WriteTimeout: writeTimeout, ConnectTimeout: connectTimeout})
	cert, pool := testkit.SelfSigned(t)
	tln, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	wln, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsDial := func() *tls.Conn {
		c, err := tls.Dial("tcp", tln.Addr().String(), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	noPings := func(o *mqtt3.ClientOptions) { o.SetKeepAlive(time.Hour) }

	// The subscribers, each with a way to take its next message.
	type sub struct {
		name string
		next func() string
	}
	var subs []sub
	v5sub := func(name string, c *mqtttest.V5) {
		c.MustSubscribe(t, paho.SubscribeOptions{Topic: "idle/#", QoS: 1})
		subs = append(subs, sub{name, func() string { return string(c.Next(t).Payload) }})
	}
	v5sub("paho.golang tcp", mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "i-v5", CleanStart: true, KeepAlive: 3600}))
	v5sub("paho.golang tls", mqtttest.DialV5Over(t, tlsDial(), mqtttest.Clean("i-v5-tls")))
	v5sub("paho.golang ws", mqtttest.DialV5Over(t, hdDialWS(t, wsURL(wln.Addr().String()), "mqtt"), mqtttest.Clean("i-v5-ws")))
	v3sub := func(name string, c *mqtttest.V3) {
		ch := c.Subscription(t, "idle/#", 1)
		subs = append(subs, sub{name, func() string { return string(mqtttest.NextV3(t, ch).Payload()) }})
	}
	v3sub("paho.mqtt.golang tcp", mqtttest.DialV3(t, b.Addr, "i-v3", noPings))
	v3sub("paho.mqtt.golang tls", mqtttest.DialV3(t, "ssl://"+tln.Addr().String(), "i-v3-tls", noPings, func(o *mqtt3.ClientOptions) {
		o.SetTLSConfig(&tls.Config{RootCAs: pool})
	}))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var mosq []*syncBuffer
	for _, v := range []string{"mqttv311", "mqttv5"} {
		cmd := hdMosquittoCmd(ctx, b.Addr, "mosquitto_sub", "-V", v, "-i", "i-mosq-"+v, "-k", "3600", "-t", "idle/#", "-q", "1")
		out := &syncBuffer{}
		cmd.Stdout = out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		mosq = append(mosq, out)
	}
	eventually(t, "every subscriber subscribed", func() bool { return b.Stats().Subscriptions == int64(len(subs)+len(mosq)) })

	pub := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "i-pub", CleanStart: true, KeepAlive: 0})
	send := func(payload string) {
		pub.MustPublish(t, &paho.Publish{Topic: "idle/x", QoS: 1, Payload: []byte(payload)})
		for _, s := range subs {
			if got := s.next(); got != payload {
				t.Fatalf("%s got %q, want %q", s.name, got, payload)
			}
		}
	}
	send("before the quiet period")
	before := b.Stats()
	idle(2*max(writeTimeout, connectTimeout) + 100*time.Millisecond)
	send("after the quiet period")
	for _, out := range mosq {
		eventually(t, "mosquitto_sub printed both messages", func() bool {
			return strings.Count(out.String(), "quiet period\n") == 2
		})
	}
	after := b.Stats()
	if after.ConnectionsTotal != before.ConnectionsTotal || after.Closes != before.Closes {
		t.Fatalf("connections were closed or reopened in the quiet period: total %d -> %d, closes %v -> %v",
			before.ConnectionsTotal, after.ConnectionsTotal, before.Closes, after.Closes)
	}
}

// TestKeepAliveZero: "keep alive off" is legal in both protocol versions:
// such clients stay connected through quiet periods longer than every
// timeout, and while they publish.
func TestKeepAliveZero(t *testing.T) {
	// Every quiet period below is longer than both timeouts; the connect
	// timeout is shortened less, as it bounds the handshake of a busy test.
	const writeTimeout, connectTimeout = 200 * time.Millisecond, time.Second
	const timeout = connectTimeout
	b := startBroker(t, broker.Options{WriteTimeout: writeTimeout, ConnectTimeout: connectTimeout})
	v5 := mqtttest.DialV5(t, b.Addr, &paho.Connect{ClientID: "ka0-v5", CleanStart: true, KeepAlive: 0})
	v3 := mqtttest.DialV3(t, b.Addr, "ka0-v3", func(o *mqtt3.ClientOptions) { o.SetKeepAlive(0) })
	v5.MustSubscribe(t, paho.SubscribeOptions{Topic: "ka0/#", QoS: 1})
	in3 := v3.Subscription(t, "ka0/#", 1)

	// Quiet, then a message each way.
	idle(timeout + timeout/5)
	v5.MustPublish(t, &paho.Publish{Topic: "ka0/from5", QoS: 1, Payload: []byte("5")})
	mqtttest.Await(t, "v3 publish", v3.Publish("ka0/from3", 1, false, "3"))
	for range 2 {
		if m := v5.Next(t); m.Topic != "ka0/from5" && m.Topic != "ka0/from3" {
			t.Fatalf("v5 got %s", m.Topic)
		}
	}
	for range 2 {
		mqtttest.NextV3(t, in3)
	}
	// Publishing for longer than the connect timeout.
	for end := time.Now().Add(timeout + timeout/5); time.Now().Before(end); {
		v5.MustPublish(t, &paho.Publish{Topic: "ka0/tick", QoS: 1, Payload: []byte("t")})
		mqtttest.Await(t, "v3 publish", v3.Publish("ka0/tick", 1, false, "t"))
		idle(timeout / 4)
	}
	if st := b.Stats(); st.Connections != 2 || st.Closes != [len(st.Closes)]int64{} {
		t.Fatalf("connections %d, closes %v: a keep-alive-0 client was disconnected", st.Connections, st.Closes)
	}
	if !v3.IsConnectionOpen() {
		t.Fatal("the 3.1.1 client lost its connection")
	}
}

// TestDirectFlushAfterQuiet: the exact path of the lost-message defect: a
// plain TCP subscriber whose last write from the server (its SUBACK) is
// older than the write timeout receives a routed message, written directly
// by the publisher's reader, on the same connection.
func TestDirectFlushAfterQuiet(t *testing.T) {
	const timeout = 200 * time.Millisecond
	b := startBroker(t, broker.Options{WriteTimeout: timeout})
	sub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "direct-sub", CleanStart: true, KeepAlive: 0})
	sub.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "direct/#"}}})
	sub.Expect(t, packet.SUBACK)
	pub, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "direct-pub", CleanStart: true, KeepAlive: 0})
	idle(2 * timeout)
	for i := range 3 {
		pub.Must(t, &packet.Publish{Topic: "direct/x", Payload: []byte{byte('0' + i)}})
		if p := sub.Expect(t, packet.PUBLISH).(*packet.Publish); string(p.Payload) != string(rune('0'+i)) {
			t.Fatalf("got %q", p.Payload)
		}
		idle(2 * timeout)
	}
	if st := b.Stats(); st.Closes != [len(st.Closes)]int64{} {
		t.Fatalf("closes %v", st.Closes)
	}
}

// syncBuffer is a bytes.Buffer a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
