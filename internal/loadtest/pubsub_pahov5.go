package loadtest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// pahoV5Dial is what a paho.golang (MQTT 5) load client connects with.
type pahoV5Dial struct {
	addr               string
	source             net.IP // nil: any
	clientID           string
	username, password string
	keepAlive          uint16
	// receiveMax, when not 0, is the Receive Maximum the client announces.
	// paho.golang sizes a channel of each client by it: 512 KiB at the
	// protocol's default of 65,535.
	receiveMax uint16
	timeout    time.Duration
	// onMessage receives every PUBLISH's payload, one at a time (nil for
	// publishers); paho.golang acknowledges after it returns.
	onMessage func(payload []byte)
}

// pahoV5Conn is one paho.golang client connection: a clean session, no
// reconnecting (a lost connection fails or shows in the run).
type pahoV5Conn struct {
	c       *paho.Client
	nc      net.Conn
	timeout time.Duration
}

func dialPahoV5(ctx context.Context, d pahoV5Dial) (*pahoV5Conn, error) {
	nc, err := sourceDialer(d.source, d.timeout).DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, err
	}
	cfg := paho.ClientConfig{ClientID: d.clientID, Conn: nc, PacketTimeout: d.timeout}
	if d.onMessage != nil {
		on := d.onMessage
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				on(pr.Packet.Payload)
				return true, nil
			},
		}
	}
	c := paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: d.clientID, CleanStart: true, KeepAlive: d.keepAlive}
	withLogin(cp, d.username, d.password)
	if d.receiveMax > 0 {
		rm := d.receiveMax
		cp.Properties = &paho.ConnectProperties{ReceiveMaximum: &rm}
	}
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	ack, err := c.Connect(cctx, cp)
	if err != nil {
		nc.Close()
		if ack != nil {
			return nil, fmt.Errorf("connect %s: refused 0x%02X: %w", d.clientID, ack.ReasonCode, err)
		}
		return nil, fmt.Errorf("connect %s: %w", d.clientID, err)
	}
	return &pahoV5Conn{c: c, nc: nc, timeout: d.timeout}, nil
}

// publish returns after the write (QoS 0) or the PUBACK/PUBCOMP (QoS 1/2).
func (v *pahoV5Conn) publish(ctx context.Context, topic string, qos byte, payload []byte) error {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	r, err := v.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Payload: payload})
	if err == nil && r != nil && r.ReasonCode >= 0x80 {
		err = fmt.Errorf("publish %s refused: 0x%02X", topic, r.ReasonCode)
	}
	return err
}

// connected reports whether the connection is still open.
func (v *pahoV5Conn) connected() bool {
	select {
	case <-v.c.Done():
		return false
	default:
		return true
	}
}

// disconnect sends DISCONNECT and closes the connection.
func (v *pahoV5Conn) disconnect() {
	v.c.Disconnect(&paho.Disconnect{})
	v.nc.Close()
}

// pahoV5Token is a paho.golang publish in flight: paho.golang's Publish
// blocks until the flow completes, so each QoS 1/2 publish runs on its own
// goroutine, as an application publishing concurrently does.
type pahoV5Token struct {
	done chan struct{}
	err  error
}

func (t *pahoV5Token) Done() <-chan struct{} { return t.done }

// Error is the publish's outcome, once Done is closed.
func (t *pahoV5Token) Error() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// publishAsync starts a publish: QoS 0 is written before it returns (as
// paho.golang does on the caller's goroutine), QoS 1/2 complete later.
func (v *pahoV5Conn) publishAsync(topic string, qos byte, payload []byte) pahoToken {
	t := &pahoV5Token{done: make(chan struct{})}
	if qos == 0 {
		t.err = v.publish(context.Background(), topic, qos, payload)
		close(t.done)
		return t
	}
	go func() {
		t.err = v.publish(context.Background(), topic, qos, payload)
		close(t.done)
	}()
	return t
}

func dialPahoV5Publisher(ctx context.Context, cfg *PubSubConfig, i int, timeout time.Duration) (*pahoPublisher, error) {
	v, err := dialPahoV5(ctx, pahoV5Dial{addr: cfg.Addr, clientID: expand(cfg.PubClientID, i),
		username: cfg.PubUsername, password: cfg.PubPassword, keepAlive: 300, timeout: timeout})
	if err != nil {
		return nil, err
	}
	p := newPahoPublisher(i, cfg.Window)
	p.publish, p.connected, p.disconnect = v.publishAsync, v.connected, v.disconnect
	return p, nil
}

// dialPahoPublisher connects publisher i with the load's paho client.
func dialPahoPublisher(ctx context.Context, cfg *PubSubConfig, i int, timeout time.Duration) (*pahoPublisher, error) {
	if cfg.Client == ClientPahoV5 {
		return dialPahoV5Publisher(ctx, cfg, i, timeout)
	}
	return dialPaho3Publisher(ctx, cfg, i, timeout)
}

// dialPahoV5Subscriber connects a subscriber with paho.golang over MQTT 5
// and subscribes it; on receives every message's payload, one at a time.
func dialPahoV5Subscriber(ctx context.Context, sd subDial, on func(payload []byte)) (*pahoV5Conn, error) {
	v, err := dialPahoV5(ctx, pahoV5Dial{addr: sd.addr, clientID: sd.clientID, username: sd.username, password: sd.password,
		keepAlive: 300, timeout: sd.timeout, onMessage: on})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, sd.timeout)
	defer cancel()
	sa, err := v.c.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: sd.filter, QoS: sd.qos}}})
	if err == nil && (len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80) {
		err = fmt.Errorf("subscribe %q refused: %v", sd.filter, sa.Reasons)
	}
	if err != nil {
		v.disconnect()
		return nil, err
	}
	return v, nil
}

// withLogin sets a paho.golang CONNECT's user name and password, each only
// when given.
func withLogin(cp *paho.Connect, username, password string) {
	if username != "" {
		cp.UsernameFlag, cp.Username = true, username
	}
	if password != "" {
		cp.PasswordFlag, cp.Password = true, []byte(password)
	}
}
