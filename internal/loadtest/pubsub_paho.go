package loadtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// pahoToken is a publish in flight in a paho client: paho.mqtt.golang's
// own token, or pahov5Token for paho.golang, whose Publish blocks.
type pahoToken interface {
	Done() <-chan struct{}
	Error() error
}

// pahoPublisher publishes with a paho library (paho.mqtt.golang over MQTT
// 3.1.1, or paho.golang over MQTT 5), as most devices do: every PUBLISH is
// its own write, and the library answers the broker's acknowledgements
// itself. The window bounds its messages not yet completed (written, for
// QoS 0; acknowledged, for QoS 1 and 2), and a goroutine completes them in
// order.
type pahoPublisher struct {
	idx int
	// publish hands one message to the library; connected reports whether
	// its connection is still open; disconnect closes it.
	publish    func(topic string, qos byte, payload []byte) pahoToken
	connected  func() bool
	disconnect func()

	window    chan struct{}
	tokens    chan pahoToken
	sent      atomic.Int64
	acked     atomic.Int64
	stopped   chan struct{} // closed by close: acks stops waiting
	closeOnce sync.Once
}

func newPahoPublisher(i, window int) *pahoPublisher {
	return &pahoPublisher{idx: i, window: make(chan struct{}, window), tokens: make(chan pahoToken, window), stopped: make(chan struct{})}
}

// paho3Options are a load client's paho.mqtt.golang options: MQTT 3.1.1,
// a clean session, no reconnecting (a lost connection fails the run).
func paho3Options(addr, clientID, username, password string, timeout time.Duration) *mqtt3.ClientOptions {
	return mqtt3.NewClientOptions().
		AddBroker("tcp://" + addr).
		SetClientID(clientID).
		SetUsername(username).
		SetPassword(password).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetKeepAlive(300 * time.Second).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(timeout).
		SetWriteTimeout(timeout)
}

func dialPaho3Publisher(ctx context.Context, cfg *PubSubConfig, i int, timeout time.Duration) (*pahoPublisher, error) {
	id := expand(cfg.PubClientID, i)
	c := mqtt3.NewClient(paho3Options(cfg.Addr, id, cfg.PubUsername, cfg.PubPassword, timeout))
	tok := c.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		c.Disconnect(0)
		return nil, ctx.Err()
	}
	if err := tok.Error(); err != nil {
		return nil, fmt.Errorf("connect %s: %w", id, err)
	}
	p := newPahoPublisher(i, cfg.Window)
	p.publish = func(topic string, qos byte, payload []byte) pahoToken { return c.Publish(topic, qos, false, payload) }
	p.connected = c.IsConnectionOpen
	p.disconnect = func() { c.Disconnect(0) }
	return p, nil
}

func (p *pahoPublisher) counts() (sent, acked int64) { return p.sent.Load(), p.acked.Load() }

func (p *pahoPublisher) close() {
	p.closeOnce.Do(func() {
		close(p.stopped)
		p.disconnect()
	})
}

// acks completes the publisher's messages in the order they were sent,
// until close.
func (p *pahoPublisher) acks() error {
	for {
		var tok pahoToken
		select {
		case tok = <-p.tokens:
		case <-p.stopped:
			return nil
		}
		select {
		case <-tok.Done():
		case <-p.stopped:
			return nil
		}
		if err := tok.Error(); err != nil {
			select {
			case <-p.stopped:
				return nil // closed at the end of the run
			default:
			}
			return fmt.Errorf("publisher %d: %w", p.idx, err)
		}
		p.acked.Add(1)
		<-p.window
	}
}

func (p *pahoPublisher) run(ctx context.Context, cfg *PubSubConfig, rate float64) error {
	topic := expand(cfg.PubTopic, p.idx)
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	start := cfg.firstSend(p.idx, interval)
	for seq := uint64(0); ; seq++ {
		if interval > 0 {
			if d := time.Until(start.Add(time.Duration(seq) * interval)); d > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(d):
				}
			}
		}
		select {
		case p.window <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if ctx.Err() != nil {
			<-p.window
			return nil
		}
		// paho keeps the payload until it is written: one per message.
		payload := make([]byte, cfg.Size)
		for i := headerSize; i < len(payload); i++ {
			payload[i] = 'x'
		}
		binary.BigEndian.PutUint32(payload, uint32(p.idx))
		binary.BigEndian.PutUint64(payload[4:], seq)
		binary.BigEndian.PutUint64(payload[12:], uint64(time.Now().UnixNano()))
		tok := p.publish(topic, cfg.QoS, payload)
		p.sent.Add(1)
		p.tokens <- tok // never blocks: each queued token holds one of the window's slots
		if !p.connected() {
			return fmt.Errorf("publisher %d: connection lost", p.idx)
		}
	}
}

// subDial is what a load's subscriber connects and subscribes with.
type subDial struct {
	addr               string
	clientID           string
	username, password string
	filter             string
	qos                byte
	timeout            time.Duration
}

func (c *PubSubConfig) subDial(i int, timeout time.Duration) subDial {
	addr := c.Addr
	if c.SubAddr != "" {
		addr = c.SubAddr
	}
	return subDial{addr: addr, clientID: expand(c.SubClientID, i), username: c.SubUsername, password: c.SubPassword,
		filter: c.SubFilter, qos: c.QoS, timeout: timeout}
}

// dialPaho3Subscriber connects a subscriber with paho.mqtt.golang over MQTT
// 3.1.1 and subscribes it; on receives every message's payload, on paho's
// handler goroutine, one at a time.
func dialPaho3Subscriber(ctx context.Context, sd subDial, on func(payload []byte)) (mqtt3.Client, error) {
	o := paho3Options(sd.addr, sd.clientID, sd.username, sd.password, sd.timeout).SetOrderMatters(true)
	o.SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) { on(m.Payload()) })
	c := mqtt3.NewClient(o)
	wait := func(what string, tok mqtt3.Token) error {
		select {
		case <-tok.Done():
			return tok.Error()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sd.timeout):
			return fmt.Errorf("%s %s: no answer in %v", what, sd.clientID, sd.timeout)
		}
	}
	if err := wait("connect", c.Connect()); err != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("connect %s: %w", sd.clientID, err)
	}
	tok := c.Subscribe(sd.filter, sd.qos, nil)
	if err := wait("subscribe", tok); err != nil {
		c.Disconnect(0)
		return nil, err
	}
	if r := tok.(*mqtt3.SubscribeToken).Result()[sd.filter]; r >= 0x80 {
		c.Disconnect(0)
		return nil, fmt.Errorf("subscribe %q refused: 0x%02X", sd.filter, r)
	}
	return c, nil
}

// dialLeanSubscriber connects a subscriber with the harness's own client
// and subscribes it; leanSubscriberLoop then reads its messages.
func dialLeanSubscriber(ctx context.Context, sd subDial, version byte) (*conn, error) {
	d := dialer{addr: sd.addr, version: version, timeout: sd.timeout}
	c, _, err := d.connect(ctx, connectPacket(sd.clientID, sd.username, sd.password), 64<<10)
	if err != nil {
		return nil, err
	}
	if err := c.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: sd.filter, QoS: sd.qos}}}, true); err != nil {
		c.close()
		return nil, err
	}
	c.nc.SetReadDeadline(time.Now().Add(d.timeout))
	p, err := c.read()
	c.nc.SetReadDeadline(time.Time{})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	if sa, ok := p.(*packet.Suback); !ok || len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] >= 0x80 {
		c.close()
		return nil, fmt.Errorf("subscribe %q refused: %+v", sd.filter, p)
	}
	return c, nil
}

// dialBenchSubscriber connects and subscribes a subscriber with the load's
// client (lean, paho3 or pahov5). on receives every message's payload, one
// at a time. stop closes the connection; run, for the lean client, reads
// until then (nil for the paho clients, which read on their own
// goroutines). stop may be called more than once.
func dialBenchSubscriber(ctx context.Context, client string, version byte, sd subDial, on func(payload []byte)) (stop func(), run func() error, err error) {
	switch client {
	case ClientPaho3:
		c, err := dialPaho3Subscriber(ctx, sd, on)
		if err != nil {
			return nil, nil, err
		}
		return sync.OnceFunc(func() { c.Disconnect(0) }), nil, nil
	case ClientPahoV5:
		c, err := dialPahoV5Subscriber(ctx, sd, on)
		if err != nil {
			return nil, nil, err
		}
		return sync.OnceFunc(c.disconnect), nil, nil
	}
	c, err := dialLeanSubscriber(ctx, sd, version)
	if err != nil {
		return nil, nil, err
	}
	return sync.OnceFunc(c.close), func() error { return leanSubscriberLoop(c, on) }, nil
}

// sourceDialer is a net.Dialer from a given source address (nil: any).
func sourceDialer(source net.IP, timeout time.Duration) *net.Dialer {
	d := &net.Dialer{Timeout: timeout}
	if source != nil {
		d.LocalAddr = &net.TCPAddr{IP: source}
	}
	return d
}
