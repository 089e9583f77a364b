package app_test

// The platform end-to-end harness: an in-process App on a temp data
// directory with an injectable clock, accounts created through the control
// service, and real MQTT clients (paho.golang for v5, paho.mqtt.golang for
// 3.1.1) on 127.0.0.1. Ideas taken from mqtt/broker/harness_test.go.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/apptest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// waitFor bounds every wait for something expected to happen.
const waitFor = 10 * time.Second

// testClock is a settable clock passed as Config.Now.
type testClock = testkit.Clock

// platform is a running App under test.
type platform struct {
	*app.App
	clock *testClock
	ctx   context.Context
}

// startPlatform starts an App on a temp data directory with a fast reload
// interval, a long sweep interval (tests call Sweep) and a test clock at
// 2030-03-10 12:00 UTC.
func startPlatform(t *testing.T, edit ...func(*app.Config)) *platform {
	t.Helper()
	clk := testkit.NewClock(time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC))
	cfg := apptest.Config(t, clk.Now)
	cfg.HTTPListen = ""
	for _, e := range edit {
		e(&cfg)
	}
	return &platform{App: apptest.Start(t, cfg), clock: clk, ctx: context.Background()}
}

// synced waits until the policy's snapshot is the store's current version,
// so control-plane changes made so far are in force.
func (p *platform) synced(t *testing.T) {
	t.Helper()
	apptest.Synced(t, p.App)
}

// tenant is an account with a publisher credential and a subscriber
// password (default filters: the whole account).
type tenant struct {
	ID                string
	PubUser, PubPass  string
	PubCredID         string
	SubUser, SubPass  string
	SubCredID         string
	registeredClients []string
}

// topic returns the platform topic {account}/{client}/{subpath}.
func (tn *tenant) topic(client, subpath string) string { return tn.ID + "/" + client + "/" + subpath }

// all is the filter for the whole account.
func (tn *tenant) all() string { return tn.ID + "/#" }

// newTenant creates an account on plan with the QoS 2 add-on when qos2 is
// set, registers clients (max_publish_qos 1) and creates one publisher
// credential and one subscriber password.
func (p *platform) newTenant(t *testing.T, name, plan string, qos2 bool, clients ...string) *tenant {
	t.Helper()
	ctx := p.ctx
	acc, _, err := p.Service.CreateAccount(ctx, control.NewAccount{Name: name, OwnerEmail: name + "@example.com", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	if qos2 {
		if err := p.Service.SetAddOn(ctx, acc.ID, fleetmq.AddOnQoS2, true); err != nil {
			t.Fatal(err)
		}
	}
	tn := &tenant{ID: acc.ID}
	for _, c := range clients {
		p.addClient(t, tn, c, 1)
	}
	pub, sub := apptest.Credentials(t, p.App, acc.ID)
	tn.PubUser, tn.PubPass, tn.PubCredID = pub.Username, pub.Password, pub.ID
	tn.SubUser, tn.SubPass, tn.SubCredID = sub.Username, sub.Password, sub.ID
	return tn
}

// addClient registers a client with max_publish_qos max.
func (p *platform) addClient(t *testing.T, tn *tenant, id string, max int) {
	t.Helper()
	if _, err := p.Service.CreateClient(p.ctx, tn.ID, control.ClientInput{ClientID: id, MaxPublishQoS: &max}); err != nil {
		t.Fatalf("register client %s: %v", id, err)
	}
	tn.registeredClients = append(tn.registeredClients, id)
}

// credential creates another credential and returns its username, password
// and id.
func (p *platform) credential(t *testing.T, tn *tenant, in control.NewCredential) (user, pass, id string) {
	t.Helper()
	c, pw, err := p.Service.CreateCredential(p.ctx, tn.ID, in)
	if err != nil {
		t.Fatal(err)
	}
	return c.Username, pw, c.ID
}

// plan puts a small plan into the catalog, without publish rates.
func (p *platform) plan(t *testing.T, name string, maxClients int, pool int64) {
	t.Helper()
	if err := p.Store.PutPlan(p.ctx, fleetmq.Plan{Name: name, MaxPublisherClients: maxClients, QoS2DailyPool: pool, HistoryRetentionDays: 1}); err != nil {
		t.Fatal(err)
	}
}

// day is the UTC day of the clock.
func (p *platform) day() string { return p.clock.Now().UTC().Format(time.DateOnly) }

// usage polls the stored usage of an account on day until match accepts it.
func (p *platform) usage(t *testing.T, accountID, day string, what string, match func(fleetmq.DailyUsage) bool) fleetmq.DailyUsage {
	t.Helper()
	var last fleetmq.DailyUsage
	deadline := time.Now().Add(waitFor)
	for {
		u, err := p.Store.Usage(p.ctx, accountID, day, day)
		if err != nil {
			t.Fatal(err)
		}
		last = fleetmq.DailyUsage{}
		if len(u) == 1 {
			last = u[0]
		}
		if match(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage of %s on %s: want %s, have %+v", accountID, day, what, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// v5 is a paho.golang client whose messages and server DISCONNECTs land in
// channels.
type v5 struct {
	*paho.Client
	name string
	Msgs chan *paho.Publish
	Disc chan *paho.Disconnect
	Errs chan error
	Conn net.Conn
	Ack  *paho.Connack
}

// tryV5 connects (clean start) as clientID with a username and password and
// returns the CONNACK and the error instead of failing.
func tryV5(t *testing.T, addr, clientID, user, pass string) (*v5, *paho.Connack, error) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &v5{
		name: clientID,
		Msgs: make(chan *paho.Publish, 1000),
		Disc: make(chan *paho.Disconnect, 4),
		Errs: make(chan error, 16),
		Conn: nc,
	}
	c.Client = paho.NewClient(paho.ClientConfig{
		ClientID: clientID,
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
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := c.Connect(ctx, &paho.Connect{
		ClientID: clientID, CleanStart: true, KeepAlive: 30,
		Username: user, UsernameFlag: true, Password: []byte(pass), PasswordFlag: true,
	})
	c.Ack = ack
	if err == nil {
		t.Cleanup(func() { c.Disconnect(&paho.Disconnect{}) })
	}
	return c, ack, err
}

// dialV5 connects and fails the test unless the server accepts.
func dialV5(t *testing.T, addr, clientID, user, pass string) *v5 {
	t.Helper()
	c, ack, err := tryV5(t, addr, clientID, user, pass)
	if err != nil {
		t.Fatalf("connect %s: %v (connack %+v)", clientID, err, ack)
	}
	return c
}

// refusedV5 connects and returns the CONNACK reason code of a refusal.
func refusedV5(t *testing.T, addr, clientID, user, pass string) byte {
	t.Helper()
	_, ack, err := tryV5(t, addr, clientID, user, pass)
	if err == nil {
		t.Fatalf("connect %s as %q: accepted, want a refusal", clientID, user)
	}
	if ack == nil {
		t.Fatalf("connect %s as %q: no CONNACK: %v", clientID, user, err)
	}
	return ack.ReasonCode
}

// subCode subscribes to one filter and returns the SUBACK reason code.
func (c *v5) subCode(t *testing.T, filter string, qos byte) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if sa == nil {
		t.Fatalf("%s: subscribe %q: no SUBACK: %v", c.name, filter, err)
	}
	if len(sa.Reasons) != 1 {
		t.Fatalf("%s: subscribe %q: %d reason codes", c.name, filter, len(sa.Reasons))
	}
	return sa.Reasons[0]
}

// sub subscribes and fails unless the filter is granted at qos.
func (c *v5) sub(t *testing.T, filter string, qos byte) {
	t.Helper()
	if rc := c.subCode(t, filter, qos); rc != qos {
		t.Fatalf("%s: subscribe %q at QoS %d: got 0x%02x", c.name, filter, qos, rc)
	}
}

// publishResp publishes and returns the response and error as they are.
func (c *v5) publishResp(t *testing.T, p *paho.Publish) (*paho.PublishResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return c.Publish(ctx, p)
}

// pub publishes and fails unless the flow completes with success.
func (c *v5) pub(t *testing.T, topic string, qos byte, payload string) {
	t.Helper()
	c.pubMsg(t, &paho.Publish{Topic: topic, QoS: qos, Payload: []byte(payload)})
}

// pubMsg publishes p and fails unless the flow completes with success.
func (c *v5) pubMsg(t *testing.T, p *paho.Publish) {
	t.Helper()
	r, err := c.publishResp(t, p)
	if err != nil {
		t.Fatalf("%s: publish %s: %v", c.name, p.Topic, err)
	}
	if p.QoS > 0 && (r == nil || r.ReasonCode >= 0x80) {
		t.Fatalf("%s: publish %s: response %+v", c.name, p.Topic, r)
	}
}

// refusedPub publishes at QoS 1 and returns the PUBACK reason code, failing
// unless it is a refusal.
func (c *v5) refusedPub(t *testing.T, topic string) byte {
	t.Helper()
	r, _ := c.publishResp(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("escape")})
	if r == nil {
		t.Fatalf("%s: publish %s: no PUBACK", c.name, topic)
	}
	if r.ReasonCode < 0x80 {
		t.Fatalf("%s: publish %s accepted (0x%02x), want a refusal", c.name, topic, r.ReasonCode)
	}
	return r.ReasonCode
}

// next returns the next message c receives.
func (c *v5) next(t *testing.T) *paho.Publish {
	t.Helper()
	select {
	case m := <-c.Msgs:
		return m
	case <-time.After(waitFor):
		t.Fatalf("%s: no message arrived", c.name)
		return nil
	}
}

// expect receives the next message and checks its topic and payload.
func (c *v5) expect(t *testing.T, topic, payload string) *paho.Publish {
	t.Helper()
	m := c.next(t)
	if m.Topic != topic || string(m.Payload) != payload {
		t.Fatalf("%s: got %q on %s, want %q on %s", c.name, m.Payload, m.Topic, payload, topic)
	}
	return m
}

// disconnected waits at most within for a server DISCONNECT and returns
// its reason code.
func (c *v5) disconnected(t *testing.T, within time.Duration) byte {
	t.Helper()
	select {
	case d := <-c.Disc:
		return d.ReasonCode
	case <-time.After(within):
		t.Fatalf("%s: no DISCONNECT within %v", c.name, within)
		return 0
	}
}

// notDisconnected fails if the server has sent c a DISCONNECT.
func (c *v5) notDisconnected(t *testing.T) {
	t.Helper()
	select {
	case d := <-c.Disc:
		t.Fatalf("%s: server sent DISCONNECT 0x%02x", c.name, d.ReasonCode)
	default:
	}
}

var markers atomic.Int64

// barrier proves the subscribers subs have received nothing since their
// last expected message: pub publishes a marker (QoS 1) on topic, which
// every one of subs matches, and the marker must be the next message each
// receives. Per-session ordering makes this a sound absence check.
func barrier(t *testing.T, pub *v5, topic string, subs ...*v5) {
	t.Helper()
	marker := fmt.Sprintf("barrier-%d", markers.Add(1))
	pub.pub(t, topic, 1, marker)
	for _, s := range subs {
		m := s.next(t)
		if string(m.Payload) != marker {
			t.Fatalf("%s: unexpected message %q on %s (retain %v) before the barrier", s.name, m.Payload, m.Topic, m.Retain)
		}
	}
}

// v3 is a paho.mqtt.golang (3.1.1) client.
type v3 struct {
	mqtt3.Client
	name           string
	Msgs           chan mqtt3.Message
	Lost           chan error
	SessionPresent bool // the CONNACK's
}

// tryV3 connects a 3.1.1 client (clean session, unless an option says
// otherwise) and returns the CONNACK return code.
func tryV3(t *testing.T, addr, clientID, user, pass string, opts ...func(*mqtt3.ClientOptions)) (*v3, byte, error) {
	t.Helper()
	c := &v3{name: clientID, Msgs: make(chan mqtt3.Message, 1000), Lost: make(chan error, 1)}
	o := mqtt3.NewClientOptions().
		AddBroker("tcp://" + addr).
		SetClientID(clientID).
		SetUsername(user).
		SetPassword(pass).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(waitFor).
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
	if !tok.WaitTimeout(waitFor) {
		t.Fatalf("connect %s: timed out", clientID)
	}
	rc := tok.(*mqtt3.ConnectToken).ReturnCode()
	c.SessionPresent = tok.(*mqtt3.ConnectToken).SessionPresent()
	if err := tok.Error(); err != nil {
		return c, rc, err
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c, rc, nil
}

// dialV3 connects a 3.1.1 client and fails unless accepted.
func dialV3(t *testing.T, addr, clientID, user, pass string, opts ...func(*mqtt3.ClientOptions)) *v3 {
	t.Helper()
	c, rc, err := tryV3(t, addr, clientID, user, pass, opts...)
	if err != nil {
		t.Fatalf("connect %s (3.1.1): %v (return code %d)", clientID, err, rc)
	}
	return c
}

// refusedV3 connects a 3.1.1 client and returns the CONNACK return code of
// a refusal.
func refusedV3(t *testing.T, addr, clientID, user, pass string) byte {
	t.Helper()
	_, rc, err := tryV3(t, addr, clientID, user, pass)
	if err == nil {
		t.Fatalf("connect %s (3.1.1) as %q: accepted, want a refusal", clientID, user)
	}
	return rc
}

// next returns the next message the 3.1.1 client receives.
func (c *v3) next(t *testing.T) mqtt3.Message {
	t.Helper()
	select {
	case m := <-c.Msgs:
		return m
	case <-time.After(waitFor):
		t.Fatalf("%s: no message within %v", c.name, waitFor)
		return nil
	}
}

// pub publishes and waits for the flow to complete.
func (c *v3) pub(t *testing.T, topic string, qos byte, retain bool, payload string) {
	t.Helper()
	waitToken(t, c.name+": publish "+topic, c.Publish(topic, qos, retain, payload))
}

// waitToken waits for a paho.mqtt.golang token and fails on error.
func waitToken(t *testing.T, what string, tok mqtt3.Token) {
	t.Helper()
	if !tok.WaitTimeout(waitFor) {
		t.Fatalf("%s: timed out", what)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// isDomainCode reports whether err carries the domain error code.
func isDomainCode(err error, code string) bool {
	var e *fleetmq.Error
	return errors.As(err, &e) && e.Code == code
}
