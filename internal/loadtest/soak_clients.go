package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
)

// The soak's fleet speaks MQTT 5 through paho.golang and MQTT 3.1.1
// through paho.mqtt.golang, the libraries devices and applications use;
// the slow reader and the canaries use the harness's own client (client.go),
// which gives control over every read.

// soakTimeout bounds one connect, subscribe or acknowledged publish: far
// longer than anything takes on a healthy broker, so a loaded machine
// never turns into a failure, yet every wait ends.
const soakTimeout = 30 * time.Second

// errRefused is a publish or subscribe the broker answered with a reason
// code of 0x80 or more.
var errRefused = errors.New("refused by the broker")

// soakConn is one connection of a fleet member.
type soakConn interface {
	// publish returns after the PUBACK/PUBCOMP for QoS 1/2 (after the
	// write for QoS 0).
	publish(ctx context.Context, topic string, qos byte, payload []byte) error
	subscribe(ctx context.Context, filter string, qos byte) error
	// disconnect sends DISCONNECT and closes the connection.
	disconnect()
	// drop closes the socket without DISCONNECT.
	drop()
	// done is closed when the connection has ended.
	done() <-chan struct{}
}

// dialSpec is what a fleet member connects with.
type dialSpec struct {
	addr               string
	clientID           string
	username, password string
	version            byte // 4 or 5
	keepAlive          uint16
	clean              bool
	expiry             uint32 // v5 session expiry (s)
	// onMessage receives every PUBLISH (nil for devices).
	onMessage func(payload []byte, qos byte, dup bool)
	rec       *connRecord
}

// dialSoak connects spec's client and reports whether the broker had a
// session for it. v5 persistent sessions pass the paho.golang session
// state they keep across connections (nil otherwise); v3 ones the
// paho.mqtt.golang store.
func dialSoak(ctx context.Context, s dialSpec, v5state *state.State, v3store mqtt3.Store) (soakConn, bool, error) {
	if s.version == 4 {
		return dialV3Soak(ctx, s, v3store)
	}
	return dialV5Soak(ctx, s, v5state)
}

// v5Soak is a paho.golang connection.
type v5Soak struct {
	c   *paho.Client
	nc  net.Conn
	rec *connRecord
}

func dialV5Soak(ctx context.Context, s dialSpec, st *state.State) (*v5Soak, bool, error) {
	d := net.Dialer{Timeout: soakTimeout}
	nc, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, false, err
	}
	s.rec.setLocal(nc.LocalAddr().String())
	rec := s.rec
	cfg := paho.ClientConfig{
		ClientID: s.clientID,
		Conn:     nc,
		OnServerDisconnect: func(d *paho.Disconnect) {
			detail := ""
			if d.Properties != nil {
				detail = d.Properties.ReasonString
			}
			rec.finish(endServerMsg, d.ReasonCode, detail)
		},
		OnClientError: func(err error) { rec.finish(endLost, 0, err.Error()) },
		PacketTimeout: soakTimeout,
	}
	if st != nil {
		cfg.Session = st
	}
	if s.onMessage != nil {
		on := s.onMessage
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				on(pr.Packet.Payload, pr.Packet.QoS, pr.Packet.Duplicate())
				return true, nil
			},
		}
	}
	c := paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: s.clientID, CleanStart: s.clean, KeepAlive: s.keepAlive}
	withLogin(cp, s.username, s.password)
	if s.expiry > 0 {
		e := s.expiry
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &e}
	}
	cctx, cancel := context.WithTimeout(ctx, soakTimeout)
	defer cancel()
	ack, err := c.Connect(cctx, cp)
	if err != nil {
		nc.Close()
		if ack != nil {
			return nil, false, fmt.Errorf("connect %s: refused 0x%02X: %w", s.clientID, ack.ReasonCode, err)
		}
		return nil, false, fmt.Errorf("connect %s: %w", s.clientID, err)
	}
	return &v5Soak{c: c, nc: nc, rec: rec}, ack.SessionPresent, nil
}

func (v *v5Soak) publish(ctx context.Context, topic string, qos byte, payload []byte) error {
	ctx, cancel := context.WithTimeout(ctx, soakTimeout)
	defer cancel()
	r, err := v.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Payload: payload})
	if r != nil && r.ReasonCode >= 0x80 {
		return fmt.Errorf("publish %s: 0x%02X: %w", topic, r.ReasonCode, errRefused)
	}
	return err
}

func (v *v5Soak) subscribe(ctx context.Context, filter string, qos byte) error {
	ctx, cancel := context.WithTimeout(ctx, soakTimeout)
	defer cancel()
	sa, err := v.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		return err
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
		return fmt.Errorf("subscribe %s: %v: %w", filter, sa.Reasons, errRefused)
	}
	return nil
}

func (v *v5Soak) disconnect() {
	v.rec.harnessCloses()
	v.c.Disconnect(&paho.Disconnect{})
	v.rec.finish(endHarness, 0, "")
}

func (v *v5Soak) drop() {
	v.rec.harnessCloses()
	v.nc.Close()
	<-v.c.Done()
	v.rec.finish(endHarness, 0, "dropped")
}

func (v *v5Soak) done() <-chan struct{} { return v.c.Done() }

// v3Soak is a paho.mqtt.golang connection.
type v3Soak struct {
	c      mqtt3.Client
	rec    *connRecord
	nc     net.Conn
	ended  chan struct{}
	finish sync.Once
}

func dialV3Soak(ctx context.Context, s dialSpec, store mqtt3.Store) (*v3Soak, bool, error) {
	v := &v3Soak{rec: s.rec, ended: make(chan struct{})}
	var ncMu sync.Mutex
	o := mqtt3.NewClientOptions().
		AddBroker("tcp://" + s.addr).
		SetClientID(s.clientID).
		SetUsername(s.username).
		SetPassword(s.password).
		SetProtocolVersion(4).
		SetCleanSession(s.clean).
		SetKeepAlive(time.Duration(s.keepAlive) * time.Second).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(soakTimeout).
		SetOrderMatters(true)
	if store != nil {
		o.SetStore(store)
	}
	o.SetCustomOpenConnectionFn(func(u *url.URL, _ mqtt3.ClientOptions) (net.Conn, error) {
		d := net.Dialer{Timeout: soakTimeout}
		nc, err := d.DialContext(ctx, "tcp", u.Host)
		if err == nil {
			ncMu.Lock()
			v.nc = nc
			s.rec.setLocal(nc.LocalAddr().String())
			ncMu.Unlock()
		}
		return nc, err
	})
	o.SetConnectionLostHandler(func(_ mqtt3.Client, err error) {
		s.rec.finish(endLost, 0, err.Error())
		v.finish.Do(func() { close(v.ended) })
	})
	if s.onMessage != nil {
		on := s.onMessage
		o.SetDefaultPublishHandler(func(_ mqtt3.Client, m mqtt3.Message) { on(m.Payload(), m.Qos(), m.Duplicate()) })
	}
	v.c = mqtt3.NewClient(o)
	tok := v.c.Connect()
	if !tok.WaitTimeout(soakTimeout) {
		v.c.Disconnect(0)
		return nil, false, fmt.Errorf("connect %s: timed out", s.clientID)
	}
	if err := tok.Error(); err != nil {
		return nil, false, fmt.Errorf("connect %s: %w", s.clientID, err)
	}
	ncMu.Lock()
	defer ncMu.Unlock()
	return v, tok.(*mqtt3.ConnectToken).SessionPresent(), nil
}

// wait waits for a paho.mqtt.golang token.
func (v *v3Soak) wait(ctx context.Context, what string, tok mqtt3.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case <-time.After(soakTimeout):
		return fmt.Errorf("%s: no acknowledgement in %v", what, soakTimeout)
	}
}

func (v *v3Soak) publish(ctx context.Context, topic string, qos byte, payload []byte) error {
	return v.wait(ctx, "publish "+topic, v.c.Publish(topic, qos, false, payload))
}

func (v *v3Soak) subscribe(ctx context.Context, filter string, qos byte) error {
	tok := v.c.Subscribe(filter, qos, nil)
	if err := v.wait(ctx, "subscribe "+filter, tok); err != nil {
		return err
	}
	if r := tok.(*mqtt3.SubscribeToken).Result()[filter]; r >= 0x80 {
		return fmt.Errorf("subscribe %s: 0x%02X: %w", filter, r, errRefused)
	}
	return nil
}

func (v *v3Soak) disconnect() {
	v.rec.harnessCloses()
	v.c.Disconnect(250)
	v.rec.finish(endHarness, 0, "")
	v.finish.Do(func() { close(v.ended) })
}

func (v *v3Soak) drop() {
	v.rec.harnessCloses()
	v.nc.Close()
	select {
	case <-v.ended:
	case <-time.After(soakTimeout):
	}
	v.c.Disconnect(0)
	v.rec.finish(endHarness, 0, "dropped")
	v.finish.Do(func() { close(v.ended) })
}

func (v *v3Soak) done() <-chan struct{} { return v.ended }
