package app_test

// The platform end-to-end harness: an in-process App on a temp data
// directory with an injectable clock, accounts created through the control
// service, and real MQTT clients (paho.golang for v5, paho.mqtt.golang for
// 3.1.1) on 127.0.0.1.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/apptest"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// waitFor bounds every wait for something expected to happen.
const waitFor = 10 * time.Second

// platform is a running App under test.
type platform struct {
	*app.App
	clock *testkit.Clock
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

// startOnDir starts an App on the data directory dir, as startPlatform
// does, for a test that closes it itself to start another on dir (Close
// again at cleanup returns the first call's result).
func startOnDir(t *testing.T, dir string) *platform {
	t.Helper()
	clk := testkit.NewClock(time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC))
	cfg := apptest.Config(t, clk.Now)
	cfg.HTTPListen = ""
	cfg.DataDir = dir
	a, err := app.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		a.Close(ctx)
	})
	return &platform{App: a, clock: clk, ctx: context.Background()}
}

// offlineSubscriber leaves a persistent session (expiry 1 h) of tn's
// subscriber password, as clientID, subscribed to filter at QoS 0 and
// disconnected.
func (p *platform) offlineSubscriber(t *testing.T, tn *tenant, clientID, filter string) {
	t.Helper()
	var expiry packet.Properties
	expiry.SetSessionExpiry(3600)
	c, _ := mqtttest.ConnectRaw(t, p.MQTTAddr, &packet.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true,
		Username: tn.SubUser, HasUsername: true, Password: []byte(tn.SubPass), HasPassword: true, Properties: expiry})
	c.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: 0}}})
	c.Expect(t, packet.SUBACK)
	c.Must(t, &packet.Disconnect{})
	c.Conn.Close()
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
	testkit.CheckFor(t, waitFor, func() error {
		u, err := p.Store.Usage(p.ctx, accountID, day, day)
		if err != nil {
			t.Fatal(err)
		}
		last = fleetmq.DailyUsage{}
		if len(u) == 1 {
			last = u[0]
		}
		if !match(last) {
			return fmt.Errorf("usage of %s on %s: want %s, have %+v", accountID, day, what, last)
		}
		return nil
	})
	return last
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// dialV5 connects an MQTT 5 client (clean start) as clientID with a
// username and password, and fails unless the server accepts.
func dialV5(t *testing.T, addr, clientID, user, pass string) *mqtttest.V5 {
	t.Helper()
	return mqtttest.DialV5(t, addr, mqtttest.Login(clientID, user, pass))
}

// refusedV5 connects and returns the CONNACK reason code of a refusal.
func refusedV5(t *testing.T, addr, clientID, user, pass string) byte {
	t.Helper()
	return mqtttest.RefusedV5(t, addr, mqtttest.Login(clientID, user, pass))
}

// refusedPub publishes at QoS 1 and returns the PUBACK reason code,
// failing unless it is a refusal.
func refusedPub(t *testing.T, c *mqtttest.V5, topic string) byte {
	t.Helper()
	r, _ := c.TryPublish(&paho.Publish{Topic: topic, QoS: 1, Payload: []byte("escape")})
	if r == nil {
		t.Fatalf("%s: publish %s: no PUBACK", c.Name, topic)
	}
	if r.ReasonCode < 0x80 {
		t.Fatalf("%s: publish %s accepted (0x%02x), want a refusal", c.Name, topic, r.ReasonCode)
	}
	return r.ReasonCode
}

// dialV3 connects a 3.1.1 client (clean session, unless an option says
// otherwise) with a username and password, and fails unless accepted.
func dialV3(t *testing.T, addr, clientID, user, pass string, opts ...func(*mqtt3.ClientOptions)) *mqtttest.V3 {
	t.Helper()
	return mqtttest.DialV3(t, addr, clientID, append([]func(*mqtt3.ClientOptions){mqtttest.Credentials(user, pass)}, opts...)...)
}

// refusedV3 connects a 3.1.1 client and returns the CONNACK return code of
// a refusal.
func refusedV3(t *testing.T, addr, clientID, user, pass string) byte {
	t.Helper()
	return mqtttest.RefusedV3(t, addr, clientID, mqtttest.Credentials(user, pass))
}

// isDomainCode reports whether err carries the domain error code.
func isDomainCode(err error, code string) bool {
	var e *fleetmq.Error
	return errors.As(err, &e) && e.Code == code
}
