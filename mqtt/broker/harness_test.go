package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// waitFor is how long a test waits for something it expects to happen.
const waitFor = 10 * time.Second

// testBroker is an in-process broker on a loopback port.
type testBroker struct {
	*broker.Server
	Addr string
}

// startBroker starts a broker with opts on 127.0.0.1 and closes it when the
// test ends.
func startBroker(tb testing.TB, opts broker.Options) *testBroker {
	tb.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler) // tests that read the log set their own
	}
	srv, err := broker.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		srv.Close(ctx)
	})
	return &testBroker{Server: srv, Addr: ln.Addr().String()}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// v5Client is a paho.golang (MQTT 5) client whose received messages and
// server DISCONNECTs land in channels.
type v5Client struct {
	*paho.Client
	Msgs  chan *paho.Publish
	Disc  chan *paho.Disconnect
	Errs  chan error
	Conn  net.Conn
	Props *paho.Connack
}

// dialV5 connects a paho.golang client. A nil cp means a clean session
// with client id id and keep alive 30. edit may change the client config.
func dialV5(tb testing.TB, addr string, cp *paho.Connect, edit ...func(*paho.ClientConfig)) *v5Client {
	tb.Helper()
	c, ack, err := tryV5(tb, addr, cp, edit...)
	if err != nil {
		tb.Fatalf("connect %s: %v (connack %+v)", cp.ClientID, err, ack)
	}
	return c
}

// tryV5 is dialV5 that returns the CONNACK and error instead of failing.
func tryV5(tb testing.TB, addr string, cp *paho.Connect, edit ...func(*paho.ClientConfig)) (*v5Client, *paho.Connack, error) {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	c := &v5Client{
		Msgs: make(chan *paho.Publish, 10000),
		Disc: make(chan *paho.Disconnect, 4),
		Errs: make(chan error, 16),
		Conn: nc,
	}
	cfg := paho.ClientConfig{
		ClientID: cp.ClientID,
		Conn:     nc,
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
		PacketTimeout: waitFor,
	}
	for _, e := range edit {
		e(&cfg)
	}
	c.Client = paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := c.Connect(ctx, cp)
	c.Props = ack
	if err == nil {
		tb.Cleanup(func() { c.Disconnect(&paho.Disconnect{}) })
	}
	return c, ack, err
}

// clean returns a CONNECT for a clean session with the given client id.
func clean(id string) *paho.Connect {
	return &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}
}

// subscribe subscribes c and fails the test unless every filter is granted.
func (c *v5Client) subscribe(tb testing.TB, opts ...paho.SubscribeOptions) *paho.Suback {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts})
	if err != nil {
		tb.Fatalf("subscribe: %v", err)
	}
	for i, rc := range sa.Reasons {
		if rc >= 0x80 {
			tb.Fatalf("subscribe %q refused: 0x%02x", opts[i].Topic, rc)
		}
	}
	return sa
}

// publish publishes and fails the test on error (for QoS 1/2 the flow has
// completed when it returns).
func (c *v5Client) publish(tb testing.TB, p *paho.Publish) *paho.PublishResponse {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	r, err := c.Publish(ctx, p)
	if err != nil {
		tb.Fatalf("publish %s: %v", p.Topic, err)
	}
	return r
}

// next returns the next message c receives.
func (c *v5Client) next(tb testing.TB) *paho.Publish {
	tb.Helper()
	select {
	case m := <-c.Msgs:
		return m
	case <-time.After(waitFor):
		tb.Fatal("no message arrived")
		return nil
	}
}

// expect receives len(payloads) messages and checks their payloads in order.
func (c *v5Client) expect(tb testing.TB, payloads ...string) []*paho.Publish {
	tb.Helper()
	got := make([]*paho.Publish, 0, len(payloads))
	for _, want := range payloads {
		m := c.next(tb)
		if string(m.Payload) != want {
			tb.Fatalf("message %d: got %q on %s, want %q", len(got), m.Payload, m.Topic, want)
		}
		got = append(got, m)
	}
	return got
}

// barrier proves c has received nothing else: it publishes a marker on a
// topic only c is subscribed to (through pub) and checks the marker is the
// next message. Ordering on one session makes this a sound "nothing arrived"
// test without sleeping.
func (c *v5Client) barrier(tb testing.TB, pub *v5Client, topic string) {
	tb.Helper()
	marker := fmt.Sprintf("barrier-%d", time.Now().UnixNano())
	pub.publish(tb, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(marker)})
	m := c.next(tb)
	if string(m.Payload) != marker {
		tb.Fatalf("unexpected message %q on %s before the barrier", m.Payload, m.Topic)
	}
}

// dialV3 connects a paho.mqtt.golang (MQTT 3.1.1) client.
func dialV3(tb testing.TB, addr, id string, edit ...func(*mqtt3.ClientOptions)) mqtt3.Client {
	tb.Helper()
	c, err := tryV3(tb, addr, id, edit...)
	if err != nil {
		tb.Fatalf("connect %s: %v", id, err)
	}
	return c
}

// tryV3 is dialV3 that returns the connect error instead of failing.
func tryV3(tb testing.TB, addr, id string, edit ...func(*mqtt3.ClientOptions)) (mqtt3.Client, error) {
	tb.Helper()
	o := mqtt3.NewClientOptions().
		AddBroker("tcp://" + addr).
		SetClientID(id).
		SetProtocolVersion(4).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(waitFor).
		SetKeepAlive(30 * time.Second).
		SetOrderMatters(true)
	for _, e := range edit {
		e(o)
	}
	c := mqtt3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(waitFor) {
		return c, fmt.Errorf("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return c, err
	}
	tb.Cleanup(func() { c.Disconnect(0) })
	return c, nil
}

// wait waits for a paho.mqtt.golang token and fails on error or timeout.
func wait(tb testing.TB, what string, tok mqtt3.Token) {
	tb.Helper()
	if !tok.WaitTimeout(waitFor) {
		tb.Fatalf("%s: timed out", what)
	}
	if err := tok.Error(); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// rawClient speaks MQTT with fleetmq's own codec, for tests that need
// control over every packet (retransmission, windows, malformed input) and
// for benchmarks, where it costs far less than a client library.
type rawClient struct {
	nc      net.Conn
	version byte
	r       *bufio.Reader
	mu      sync.Mutex // guards w and buf
	w       *bufio.Writer
	buf     []byte
}

// dialRaw opens a TCP connection without sending anything.
func dialRaw(tb testing.TB, addr string, version byte) *rawClient {
	tb.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	return &rawClient{nc: nc, version: version, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10)}
}

// connectRaw dials and completes CONNECT/CONNACK with c as the CONNECT.
func connectRaw(tb testing.TB, addr string, c *packet.Connect) (*rawClient, *packet.Connack) {
	tb.Helper()
	if c.ProtocolName == "" {
		c.ProtocolName = "MQTT"
	}
	if c.ProtocolLevel == 0 {
		c.ProtocolLevel = packet.Version5
	}
	rc := dialRaw(tb, addr, c.ProtocolLevel)
	if err := rc.send(c, true); err != nil {
		tb.Fatal(err)
	}
	p := rc.expect(tb, packet.CONNACK)
	ack := p.(*packet.Connack)
	if ack.ReasonCode != packet.Success {
		tb.Fatalf("connect %s refused: %v", c.ClientID, ack.ReasonCode)
	}
	return rc, ack
}

func (c *rawClient) send(p packet.Packet, flush bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = packet.Encode(c.buf[:0], p, c.version); err != nil {
		return err
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return err
	}
	if flush {
		return c.w.Flush()
	}
	return nil
}

// must sends p and flushes, failing the test on error.
func (c *rawClient) must(tb testing.TB, p packet.Packet) {
	tb.Helper()
	if err := c.send(p, true); err != nil {
		tb.Fatalf("send %v: %v", p.Type(), err)
	}
}

func (c *rawClient) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Flush()
}

func (c *rawClient) read() (packet.Packet, error) {
	var hdr [5]byte
	n := 0
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			return nil, err
		}
		hdr[n] = b
		n++
		if n >= 2 && b < 0x80 || n == 5 {
			break
		}
	}
	h, rem, _, err := packet.ParseHeader(hdr[:n])
	if err != nil {
		return nil, err
	}
	body := make([]byte, rem)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, err
	}
	return packet.Decode(h, body, c.version)
}

// next reads one packet with a deadline.
func (c *rawClient) next(tb testing.TB) packet.Packet {
	tb.Helper()
	c.nc.SetReadDeadline(time.Now().Add(waitFor))
	defer c.nc.SetReadDeadline(time.Time{})
	p, err := c.read()
	if err != nil {
		tb.Fatalf("read: %v", err)
	}
	return p
}

// expect reads one packet and checks its type.
func (c *rawClient) expect(tb testing.TB, t packet.Type) packet.Packet {
	tb.Helper()
	p := c.next(tb)
	if p.Type() != t {
		tb.Fatalf("got %v (%+v), want %v", p.Type(), p, t)
	}
	return p
}

// closed waits until the server closes the connection, returning the
// packets (such as a DISCONNECT) that came before.
func (c *rawClient) closed(tb testing.TB) []packet.Packet {
	tb.Helper()
	c.nc.SetReadDeadline(time.Now().Add(waitFor))
	var got []packet.Packet
	for {
		p, err := c.read()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				tb.Fatalf("connection still open after %v (got %v)", waitFor, got)
			}
			return got
		}
		got = append(got, p)
	}
}

// wsURL turns a listener address into the broker's WebSocket URL.
func wsURL(addr string) string {
	u := url.URL{Scheme: "ws", Host: addr, Path: "/mqtt"}
	return u.String()
}
