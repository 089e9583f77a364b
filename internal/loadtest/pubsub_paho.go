package loadtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"
)

// paho3Publisher publishes with paho.mqtt.golang over MQTT 3.1.1, as most
// devices do: every PUBLISH is its own write, and the client answers the
// broker's acknowledgements itself. The window bounds its messages not yet
// completed (written, for QoS 0; acknowledged, for QoS 1 and 2), and a
// goroutine completes them in order.
type paho3Publisher struct {
	idx       int
	c         mqtt3.Client
	window    chan struct{}
	tokens    chan mqtt3.Token
	sent      atomic.Int64
	acked     atomic.Int64
	stopped   chan struct{} // closed by close: acks stops waiting
	closeOnce sync.Once
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

func dialPaho3Publisher(ctx context.Context, cfg *PubSubConfig, i int, timeout time.Duration) (*paho3Publisher, error) {
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
	w := cfg.Window
	return &paho3Publisher{idx: i, c: c, window: make(chan struct{}, w), tokens: make(chan mqtt3.Token, w), stopped: make(chan struct{})}, nil
}

func (p *paho3Publisher) counts() (sent, acked int64) { return p.sent.Load(), p.acked.Load() }

func (p *paho3Publisher) close() {
	p.closeOnce.Do(func() {
		close(p.stopped)
		p.c.Disconnect(0)
	})
}

// acks completes the publisher's messages in the order they were sent,
// until close.
func (p *paho3Publisher) acks() error {
	for {
		var tok mqtt3.Token
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

func (p *paho3Publisher) run(ctx context.Context, cfg *PubSubConfig, rate float64) error {
	topic := expand(cfg.PubTopic, p.idx)
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	start := time.Now()
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
		tok := p.c.Publish(topic, cfg.QoS, false, payload)
		p.sent.Add(1)
		p.tokens <- tok // never blocks: each queued token holds one of the window's slots
		if !p.c.IsConnectionOpen() {
			return fmt.Errorf("publisher %d: connection lost", p.idx)
		}
	}
}

// dialPaho3Subscriber connects subscriber i with paho.mqtt.golang over MQTT
// 3.1.1 and subscribes it, recording what it receives in s.
func dialPaho3Subscriber(ctx context.Context, cfg *PubSubConfig, i int, timeout time.Duration, s *subscriber) (mqtt3.Client, error) {
	id := expand(cfg.SubClientID, i)
	o := paho3Options(cfg.Addr, id, cfg.SubUsername, cfg.SubPassword, timeout).SetOrderMatters(true)
	o.SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) {
		s.mu.Lock()
		s.record(m.Payload(), time.Now())
		s.mu.Unlock()
	})
	c := mqtt3.NewClient(o)
	wait := func(what string, tok mqtt3.Token) error {
		select {
		case <-tok.Done():
			return tok.Error()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(timeout):
			return fmt.Errorf("%s %s: no answer in %v", what, id, timeout)
		}
	}
	if err := wait("connect", c.Connect()); err != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("connect %s: %w", id, err)
	}
	tok := c.Subscribe(cfg.SubFilter, cfg.QoS, nil)
	if err := wait("subscribe", tok); err != nil {
		c.Disconnect(0)
		return nil, err
	}
	if r := tok.(*mqtt3.SubscribeToken).Result()[cfg.SubFilter]; r >= 0x80 {
		c.Disconnect(0)
		return nil, fmt.Errorf("subscribe %q refused: 0x%02X", cfg.SubFilter, r)
	}
	return c, nil
}
