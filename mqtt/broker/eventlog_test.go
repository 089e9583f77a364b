package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// denyPolicy refuses publishes on topics under deny/ and subscriptions to
// filters under deny/, saying why.
type denyPolicy struct{ broker.OpenPolicy }

func (denyPolicy) Publish(_ *broker.Identity, p *packet.Publish, _ *broker.Message) error {
	if strings.HasPrefix(p.Topic, "deny/") {
		return packet.Errorf(packet.NotAuthorized, "nothing may be published under deny/")
	}
	return nil
}

func (denyPolicy) Subscribe(_ *broker.Identity, _ string, sub *packet.Subscription) (string, byte, error) {
	if strings.HasPrefix(sub.Filter, "deny/") {
		return "", 0, packet.Errorf(packet.NotAuthorized, "deny/ is closed to subscribers")
	}
	return sub.Filter, sub.QoS, nil
}

// TestEventLogRefusals: a refused PUBLISH and a refused SUBSCRIBE filter
// each give one log line with the client, the topic, the reason code and
// the policy's reason, and are counted by reason code.
func TestEventLogRefusals(t *testing.T) {
	log, sink := testkit.NewLog()
	b := startBroker(t, broker.Options{Policy: denyPolicy{}, Logger: log})
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "refused-1", CleanStart: true, KeepAlive: 30})
	rc.Must(t, &packet.Publish{Topic: "deny/x", QoS: 1, PacketID: 1, Payload: []byte("no")})
	if ack := rc.Expect(t, packet.PUBACK).(*packet.Ack); ack.ReasonCode != packet.NotAuthorized {
		t.Fatalf("PUBACK %v, want Not authorized", ack.ReasonCode)
	}
	rc.Must(t, &packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: "deny/#", QoS: 1}, {Filter: "ok/#", QoS: 1}}})
	if sa := rc.Expect(t, packet.SUBACK).(*packet.Suback); sa.ReasonCodes[0] != packet.NotAuthorized || sa.ReasonCodes[1] != packet.GrantedQoS1 {
		t.Fatalf("SUBACK %v", sa.ReasonCodes)
	}
	pub := sink.Lines("publish refused", "client_id", "refused-1", "topic", "deny/x", "code", "0x87 Not authorized", "detail", "nothing may be published under deny/")
	sub := sink.Lines("subscribe refused", "client_id", "refused-1", "filter", "deny/#", "detail", "deny/ is closed to subscribers")
	if len(pub) != 1 || len(sub) != 1 {
		t.Fatalf("got %d publish and %d subscribe refusal lines, want 1 each:\n%s", len(pub), len(sub), sink.String())
	}
	st := b.Stats()
	if st.PublishRefusedBy[packet.NotAuthorized] != 1 || st.SubscribesRefusedBy[packet.NotAuthorized] != 1 {
		t.Fatalf("refusals by code: publish %v subscribe %v", st.PublishRefusedBy, st.SubscribesRefusedBy)
	}
}

// TestEventLogRateLimit: a device that misbehaves in a loop gets a burst
// of lines, then the rest are suppressed and counted; once the interval
// has passed, the next line says how many were suppressed before it. A
// second client's lines, and the first client's other kinds of line (the
// one saying why it was disconnected), are not affected by the limit.
func TestEventLogRateLimit(t *testing.T) {
	log, sink := testkit.NewLog()
	const burst, interval = 3, time.Second
	b := startBroker(t, broker.Options{Policy: denyPolicy{}, Logger: log, LogBurst: burst, LogInterval: interval})
	noisy, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "noisy", CleanStart: true, KeepAlive: 30})
	const n = 20
	start := time.Now()
	for i := range n {
		noisy.Must(t, &packet.Publish{Topic: "deny/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte("x")})
		noisy.Expect(t, packet.PUBACK)
	}
	if time.Since(start) > interval {
		t.Skip("the machine is too slow to publish 20 messages within the interval")
	}
	if got := len(sink.Lines("publish refused", "client_id", "noisy")); got != burst {
		t.Fatalf("%d lines for %d refusals, want the burst of %d", got, n, burst)
	}
	const suppressed = n - burst
	if got := b.Stats().LogSuppressed; got != suppressed {
		t.Fatalf("suppressed %d, want %d", got, suppressed)
	}
	// Another client is logged although the first is over its limit.
	quiet, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "quiet", CleanStart: true, KeepAlive: 30})
	quiet.Must(t, &packet.Publish{Topic: "deny/y", QoS: 1, PacketID: 1, Payload: []byte("y")})
	quiet.Expect(t, packet.PUBACK)
	if got := len(sink.Lines("publish refused", "client_id", "quiet")); got != 1 {
		t.Fatalf("the other client's refusal: %d lines, want 1", got)
	}
	// After the interval, one more line gets through, counting the others.
	time.Sleep(interval) // the time that passes is the input under test
	noisy.Must(t, &packet.Publish{Topic: "deny/x", QoS: 1, PacketID: 99, Payload: []byte("x")})
	noisy.Expect(t, packet.PUBACK)
	lines := sink.Lines("publish refused", "client_id", "noisy")
	if len(lines) != burst+1 || lines[burst]["suppressed_before"] != float64(suppressed) {
		t.Fatalf("after the interval: %d lines, last %v; want %d with suppressed_before=%d", len(lines), lines[len(lines)-1], burst+1, suppressed)
	}
	// Its disconnect is logged although its refusals are over the limit.
	noisy.Must(t, &packet.Disconnect{})
	noisy.Closed(t)
	eventually(t, "the disconnect logged", func() bool {
		return len(sink.Lines("client disconnected", "client_id", "noisy", "reason", "client_disconnect")) == 1
	})
}

// refusalSpy is denyPolicy that also watches every refusal, and refuses
// CONNECTs with the password "wrong" (returning an identity that says who
// it was, as the platform does for a known credential).
type refusalSpy struct {
	denyPolicy
	mu   sync.Mutex
	seen []string
}

func (p *refusalSpy) Authenticate(_ context.Context, req *broker.ConnectRequest) (*broker.Identity, error) {
	if string(req.Connect.Password) == "wrong" {
		return &broker.Identity{Namespace: "known"}, packet.Errorf(packet.BadUserNameOrPassword, "wrong password")
	}
	return &broker.Identity{ClientID: req.Connect.ClientID}, nil
}

func (p *refusalSpy) Refused(id *broker.Identity, r broker.Refusal) {
	who := "nobody"
	if id != nil {
		who = id.Namespace + ":" + id.ClientID
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, fmt.Sprintf("%s %s %s q%d %s: %s", who, r.What, r.Topic, r.QoS, r.Code.Name(), r.Detail))
}

func (p *refusalSpy) refusals() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

// TestRefusalObserver: a policy that implements RefusalObserver is told of
// every refusal once, whoever decided it: the policy's own (a CONNECT with
// the identity it returned, a PUBLISH, a SUBSCRIBE filter) and the
// broker's (an invalid filter, an unsupported authentication method).
func TestRefusalObserver(t *testing.T) {
	spy := &refusalSpy{}
	b := startBroker(t, broker.Options{Policy: spy})
	for _, cp := range []*packet.Connect{
		{ClientID: "dev-1", Username: "u", HasUsername: true, Password: []byte("wrong"), HasPassword: true},
		{ClientID: "dev-2", Properties: packet.Properties{AuthMethod: "SCRAM-SHA-1"}},
	} {
		cp.ProtocolName, cp.ProtocolLevel, cp.CleanStart, cp.KeepAlive = "MQTT", packet.Version5, true, 30
		if cp.Properties.AuthMethod != "" {
			cp.Properties.Mark(packet.PropAuthMethod)
		}
		rc := mqtttest.DialRaw(t, b.Addr, packet.Version5)
		rc.Must(t, cp)
		if ack := rc.Expect(t, packet.CONNACK).(*packet.Connack); ack.ReasonCode < 0x80 {
			t.Fatalf("%s: CONNACK %v, want a refusal", cp.ClientID, ack.ReasonCode)
		}
	}
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "dev-3", CleanStart: true, KeepAlive: 30})
	rc.Must(t, &packet.Publish{Topic: "deny/x", QoS: 1, PacketID: 1, Payload: []byte("no")})
	rc.Expect(t, packet.PUBACK)
	rc.Must(t, &packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: "deny/#", QoS: 1}, {Filter: "a/#/b", QoS: 0}, {Filter: "ok/#", QoS: 1}}})
	rc.Expect(t, packet.SUBACK)
	want := []string{
		"known:dev-1 connect  q0 bad_user_name_or_password: wrong password",
		"nobody connect  q0 bad_authentication_method: enhanced authentication is not supported",
		":dev-3 publish deny/x q1 not_authorized: nothing may be published under deny/",
		":dev-3 subscribe deny/# q1 not_authorized: deny/ is closed to subscribers",
	}
	got := spy.refusals()
	if len(got) != 5 || !slices.Equal(got[:4], want) || !strings.HasPrefix(got[4], ":dev-3 subscribe a/#/b q0 topic_filter_invalid: ") {
		t.Fatalf("refusals seen:\n%s\nwant:\n%s\n(and the invalid filter a/#/b)", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
