package platform

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The policy-level rule tables: each rule of the platform applied to a
// snapshot with two accounts, without a network. The end-to-end tests in
// internal/app prove the same rules through real clients.

const (
	accA = "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a"
	accB = "9e1d2c3b-4a59-4687-8f6e-5d4c3b2a1908"
)

func testSnapshot(t *testing.T) *Snapshot {
	t.Helper()
	acme, err := fleetmq.CompileLayout(&fleetmq.Layout{Name: "acme", WireRoot: "acme", Fanout: true, Rules: []string{"acme/{client_id}/status=state/summary"}})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := fleetmq.CompileLayout(&fleetmq.Layout{Name: "quiet", WireRoot: "quiet", Rules: []string{"quiet/{client_id}/t/+=telemetry/{1}"}})
	if err != nil {
		t.Fatal(err)
	}
	cred := func(user, acc, kind string, filters ...string) *Credential {
		return &Credential{ID: "id-" + user, AccountID: acc, Kind: kind, Username: user, SecretHash: hashSecret([]byte("pw-" + user)), Filters: filters}
	}
	expired := cred("sub-old", accA, fleetmq.KindSubscriber)
	expired.ExpiresAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &Snapshot{
		Version: 1,
		Accounts: map[string]*Account{
			accA: {ID: accA, HasPlan: true, PlanName: "small", MaxPublisherClients: 2, QoS2DailyPool: 2, QoS2AddOn: true,
				Clients: map[string]*Client{"dev1": {ClientID: "dev1", MaxPublishQoS: 2}, "dev0": {ClientID: "dev0", MaxPublishQoS: 0}}},
			accB: {ID: accB, HasPlan: true, PlanName: "small", MaxPublisherClients: 10, QoS2DailyPool: 100,
				Clients: map[string]*Client{"dev1": {ClientID: "dev1", MaxPublishQoS: 2}}},
		},
		Creds: map[string]*Credential{
			"pub-a":   cred("pub-a", accA, fleetmq.KindPublisher),
			"sub-a":   cred("sub-a", accA, fleetmq.KindSubscriber),
			"sub-a1":  cred("sub-a1", accA, fleetmq.KindSubscriber, accA+"/dev1/#"),
			"pub-b":   cred("pub-b", accB, fleetmq.KindPublisher),
			"sub-b":   cred("sub-b", accB, fleetmq.KindSubscriber),
			"sub-old": expired,
		},
		Layouts: fleetmq.LayoutIndex{"acme": {acme}, "quiet": {quiet}},
	}
}

func newTestPolicy(t *testing.T, prefix string) (*Policy, *testkit.Clock) {
	c := testkit.NewClock(time.Date(2026, 11, 22, 23, 59, 0, 0, time.UTC))
	return NewPolicy(Options{TopicPrefix: prefix, Now: c.Now}, testSnapshot(t)), c
}

func connect(t *testing.T, p *Policy, user, clientID string) *broker.Identity {
	t.Helper()
	id, err := p.Authenticate(context.Background(), &broker.ConnectRequest{Connect: &packet.Connect{
		ClientID: clientID, HasUsername: true, Username: user, HasPassword: true, Password: []byte("pw-" + user)}})
	if err != nil {
		t.Fatalf("connect %s/%s: %v", user, clientID, err)
	}
	return id
}

// refusal splits a policy's answer into its reason code (Success for nil)
// and reason.
func refusal(err error) (packet.ReasonCode, string) {
	if err == nil {
		return packet.Success, ""
	}
	if pe, ok := err.(*packet.Error); ok {
		return pe.Code, pe.Reason
	}
	return packet.UnspecifiedError, err.Error()
}

func TestPolicyAuthenticate(t *testing.T) {
	p, _ := newTestPolicy(t, "")
	tests := []struct {
		name, user, pass, client string
		noUser                   bool
		want                     packet.ReasonCode
		namespace                string
		maxQoS                   byte
		reason                   string // the logged reason (contains)
	}{
		{"publisher with a registered client", "pub-a", "pw-pub-a", "dev1", false, packet.Success, accA, 2, ""},
		{"publisher capped at QoS 0", "pub-a", "pw-pub-a", "dev0", false, packet.Success, accA, 0, ""},
		{"same client id in another account", "pub-b", "pw-pub-b", "dev1", false, packet.Success, accB, 2, ""},
		{"client registered only in the other account", "pub-b", "pw-pub-b", "dev0", false, packet.ClientIdentifierNotValid, "", 0, `client id "dev0" is not registered in account ` + accB},
		{"unregistered client id", "pub-a", "pw-pub-a", "devX", false, packet.ClientIdentifierNotValid, "", 0, `client id "devX" is not registered`},
		{"wrong password", "pub-a", "pw-pub-b", "dev1", false, packet.BadUserNameOrPassword, "", 0, "wrong password"},
		{"unknown username", "pub-z", "pw-pub-z", "dev1", false, packet.BadUserNameOrPassword, "", 0, "unknown username"},
		{"no username", "", "", "dev1", true, packet.BadUserNameOrPassword, "", 0, "no username or password"},
		{"subscriber with any client id, in its credential's namespace", "sub-a", "pw-sub-a", "dashboard-1", false, packet.Success, accA + "/id-sub-a", 0, ""},
		{"expired subscriber password", "sub-old", "pw-sub-old", "x", false, packet.BadUserNameOrPassword, "", 0, "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &packet.Connect{ClientID: tt.client, HasUsername: !tt.noUser, Username: tt.user, HasPassword: !tt.noUser, Password: []byte(tt.pass)}
			id, err := p.Authenticate(context.Background(), &broker.ConnectRequest{Connect: c})
			code, reason := refusal(err)
			if code != tt.want || !strings.Contains(reason, tt.reason) {
				t.Fatalf("code %v %q, want %v %q", code, reason, tt.want, tt.reason)
			}
			if code != packet.Success {
				return
			}
			if id.Namespace != tt.namespace || id.Limits.MaxInflight != Inflight {
				t.Fatalf("identity %+v", id)
			}
			if SessionOf(id).Kind == fleetmq.KindPublisher && (!id.Limits.CapQoS || id.Limits.MaxQoS != tt.maxQoS) {
				t.Fatalf("publisher limits %+v, want max QoS %d", id.Limits, tt.maxQoS)
			}
		})
	}
	// A suspended account is refused.
	snap := testSnapshot(t)
	snap.Accounts[accA].Suspended = true
	p.SetSnapshot(snap)
	_, err := p.Authenticate(context.Background(), &broker.ConnectRequest{Connect: &packet.Connect{ClientID: "dev1", HasUsername: true, Username: "pub-a", HasPassword: true, Password: []byte("pw-pub-a")}})
	if code, reason := refusal(err); code != packet.NotAuthorized || !strings.Contains(reason, "suspended") {
		t.Fatalf("suspended account: %v %q", code, reason)
	}
}

func TestPolicySubscribeConfinement(t *testing.T) {
	for _, prefix := range []string{"", "fleet"} {
		p, _ := newTestPolicy(t, prefix)
		pre := ""
		if prefix != "" {
			pre = prefix + "/"
		}
		pubA, subA, subA1 := connect(t, p, "pub-a", "dev1"), connect(t, p, "sub-a", "s"), connect(t, p, "sub-a1", "s1")
		tests := []struct {
			id       *broker.Identity
			name     string
			filter   string
			internal string // "" when refused
		}{
			{subA, "subscriber: own account", pre + accA + "/#", accA + "/#"},
			{subA, "subscriber: one class of all clients", pre + accA + "/+/state/#", accA + "/+/state/#"},
			{subA, "subscriber: everything", pre + "#", ""},
			{subA, "subscriber: any account", pre + "+/#", ""},
			{subA, "subscriber: shared everything", "$share/g/" + pre + "#", ""},
			{subA, "subscriber: $SYS", "$SYS/#", ""},
			{subA, "subscriber: other account", pre + accB + "/#", ""},
			{subA1, "narrow password: its client", pre + accA + "/dev1/state/#", accA + "/dev1/state/#"},
			{subA1, "narrow password: another client", pre + accA + "/dev2/#", ""},
			{subA1, "narrow password: the account", pre + accA + "/#", ""},
			{pubA, "publisher: own prefix", pre + accA + "/dev1/#", accA + "/dev1/#"},
			{pubA, "publisher: another client", pre + accA + "/dev2/#", ""},
			{pubA, "publisher: wildcard client", pre + accA + "/+/state/#", ""},
		}
		if prefix != "" {
			tests = append(tests, struct {
				id                     *broker.Identity
				name, filter, internal string
			}{subA, "without the prefix", accA + "/#", ""})
		}
		for _, tt := range tests {
			f, _, _ := stripShare(tt.filter)
			got, qos, err := p.Subscribe(tt.id, "", &packet.Subscription{Filter: f, QoS: 1})
			if tt.internal == "" {
				if code, reason := refusal(err); code != packet.NotAuthorized || reason == "" {
					t.Errorf("prefix %q, %s (%s): code %v %q, want refused with a reason", prefix, tt.name, tt.filter, code, reason)
				}
				continue
			}
			if err != nil || qos != 1 || got != tt.internal {
				t.Errorf("prefix %q, %s (%s): got %q %v %v, want %q granted QoS 1", prefix, tt.name, tt.filter, got, qos, err, tt.internal)
			}
		}
	}
}

// stripShare gives the filter the broker hands the policy for a $share
// subscription (the broker strips the group; "$share/g/#" becomes "#").
func stripShare(f string) (string, string, bool) {
	const p = "$share/"
	if len(f) > len(p) && f[:len(p)] == p {
		rest := f[len(p):]
		for i := 0; i < len(rest); i++ {
			if rest[i] == '/' {
				return rest[i+1:], rest[:i], true
			}
		}
	}
	return f, "", false
}

// publishReasons are what TestPolicyPublish's refusals must say (the
// reason a tenant sees for their device).
var publishReasons = map[string]string{
	"unknown class":                           `topic class "other/" is not one of state, event, telemetry, sample`,
	"another client's prefix":                 `topic is under client "dev0": devices publish only under their own prefix ` + accA + "/dev1/",
	"another account":                         "devices publish only under their own account " + accA + "/dev1/",
	"subscribers never publish":               "subscriber credentials are read-only",
	"above the client's max QoS":              "QoS 1 above this client's Max QoS 0",
	"vendor topic naming another client":      `layout acme maps this topic to client "dev0", not to this client "dev1"`,
	"vendor root registered, no rule matches": "matches no rule of the vendor layouts",
	"unregistered vendor root":                `wire root "vendorx" is neither this client's prefix`,
}

func TestPolicyPublish(t *testing.T) {
	p, _ := newTestPolicy(t, "")
	pubA, pubA0, pubB, subA := connect(t, p, "pub-a", "dev1"), connect(t, p, "pub-a", "dev0"), connect(t, p, "pub-b", "dev1"), connect(t, p, "sub-a", "s")
	tests := []struct {
		name      string
		id        *broker.Identity
		topic     string
		qos       byte
		payload   string
		want      packet.ReasonCode
		internal  string
		effective byte
		class     string
		noDeliver bool
		station   string
	}{
		{"own telemetry", pubA, accA + "/dev1/telemetry/temp", 0, "21.5", packet.Success, accA + "/dev1/telemetry/temp", 0, "telemetry", false, ""},
		{"QoS 2 on telemetry is effective 1", pubA, accA + "/dev1/telemetry/temp", 2, "1", packet.Success, accA + "/dev1/telemetry/temp", 1, "telemetry", false, ""},
		{"station controller id (string)", pubA, accA + "/dev1/state/sc", 1, `{"station_controller_device_id":"sc-7","v":1}`, packet.Success, accA + "/dev1/state/sc", 1, "state", false, "sc-7"},
		{"station controller id (number)", pubA, accA + "/dev1/telemetry/sc", 1, `{"v":2,"station_controller_device_id":42}`, packet.Success, accA + "/dev1/telemetry/sc", 1, "telemetry", false, "42"},
		{"station controller id absent or not JSON", pubA, accA + "/dev1/telemetry/sc", 1, `station_controller_device_id`, packet.Success, accA + "/dev1/telemetry/sc", 1, "telemetry", false, ""},
		{"unknown class", pubA, accA + "/dev1/other/x", 1, "x", packet.TopicNameInvalid, "", 0, "", false, ""},
		{"another client's prefix", pubA, accA + "/dev0/state/x", 1, "x", packet.NotAuthorized, "", 0, "", false, ""},
		{"another account", pubA, accB + "/dev1/state/x", 1, "x", packet.NotAuthorized, "", 0, "", false, ""},
		{"subscribers never publish", subA, accA + "/s/state/x", 0, "x", packet.NotAuthorized, "", 0, "", false, ""},
		{"above the client's max QoS", pubA0, accA + "/dev0/state/x", 1, "x", packet.QoSNotSupported, "", 0, "", false, ""},
		{"vendor layout with fanout", pubA, "acme/dev1/status", 1, "{}", packet.Success, accA + "/dev1/state/summary", 1, "state", false, ""},
		{"same vendor topic, other account", pubB, "acme/dev1/status", 1, "{}", packet.Success, accB + "/dev1/state/summary", 1, "state", false, ""},
		{"vendor layout without fanout", pubA, "quiet/dev1/t/temp", 0, "1", packet.Success, accA + "/dev1/telemetry/temp", 0, "telemetry", true, ""},
		{"vendor topic naming another client", pubA, "acme/dev0/status", 1, "{}", packet.NotAuthorized, "", 0, "", false, ""},
		{"vendor root registered, no rule matches", pubA, "acme/dev1/other", 1, "{}", packet.NotAuthorized, "", 0, "", false, ""},
		{"unregistered vendor root", pubA, "vendorx/dev1/status", 1, "{}", packet.NotAuthorized, "", 0, "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pk := &packet.Publish{Topic: tt.topic, QoS: tt.qos, Payload: []byte(tt.payload)}
			m := &broker.Message{Topic: tt.topic, QoS: tt.qos, PublishedQoS: tt.qos, Payload: pk.Payload}
			code, reason := refusal(p.Publish(tt.id, pk, m))
			if code != tt.want {
				t.Fatalf("code %v (%s), want %v", code, reason, tt.want)
			}
			if code != packet.Success {
				if want := publishReasons[tt.name]; !strings.Contains(reason, want) || want == "" {
					t.Fatalf("reason %q, want it to contain %q", reason, want)
				}
				return
			}
			info, _ := m.Data.(*MessageInfo)
			if m.Topic != tt.internal || m.QoS != tt.effective || info == nil || info.Class != tt.class || m.NoDeliver != tt.noDeliver || NewRecord(m, info).StationControllerDeviceID != tt.station {
				t.Fatalf("got topic %q qos %d info %+v noDeliver %v", m.Topic, m.QoS, info, m.NoDeliver)
			}
			if info.AccountID != tt.id.Namespace || info.WireTopic != tt.topic {
				t.Fatalf("info %+v: account or wire topic wrong", info)
			}
		})
	}
}

// TestPolicyPoolAcrossMidnight: account A's pool of 2 makes the third QoS 2
// state publish effective QoS 1 (a demotion), B is unaffected, and the pool
// is full again after UTC midnight.
func TestPolicyPoolAcrossMidnight(t *testing.T) {
	p, clk := newTestPolicy(t, "")
	pubA, pubB := connect(t, p, "pub-a", "dev1"), connect(t, p, "pub-b", "dev1")
	publish := func(id *broker.Identity, topic string) byte {
		pk := &packet.Publish{Topic: topic, QoS: 2, Payload: []byte("x")}
		m := &broker.Message{Topic: topic, QoS: 2, PublishedQoS: 2, Payload: pk.Payload}
		if err := p.Publish(id, pk, m); err != nil {
			t.Fatalf("publish %s: %v", topic, err)
		}
		return m.QoS
	}
	var got []byte
	for range 3 {
		got = append(got, publish(pubA, accA+"/dev1/state/s"))
	}
	got = append(got, publish(pubA, accA+"/dev1/event/e"))
	if want := []byte{2, 2, 1, 1}; string(got) != string(want) {
		t.Fatalf("effective QoS %v, want %v", got, want)
	}
	if q := publish(pubB, accB+"/dev1/state/s"); q != 1 {
		t.Fatalf("B has no add-on: effective %d, want 1", q)
	}
	st := p.Pool(accA).State(clk.Now(), 2)
	if st.Used != 2 || st.Demotions != 2 || !st.Demoted {
		t.Fatalf("pool state %+v", st)
	}
	clk.Set(time.Date(2026, 11, 23, 0, 0, 1, 0, time.UTC))
	if q := publish(pubA, accA+"/dev1/state/s"); q != 2 {
		t.Fatalf("after midnight: effective %d, want 2", q)
	}
	daily, clients := p.Meter().Collect(broker.DropNames())
	var a22, a23 *DailyDelta
	for i := range daily {
		if daily[i].AccountID == accA && daily[i].Day == "2026-11-22" {
			a22 = &daily[i]
		}
		if daily[i].AccountID == accA && daily[i].Day == "2026-11-23" {
			a23 = &daily[i]
		}
	}
	if a22 == nil || a22.Messages != [3]int64{0, 2, 2} || a22.PoolUsed != 2 || a22.Demotions != 2 {
		t.Fatalf("A on the 22nd: %+v", a22)
	}
	if a23 == nil || a23.Messages != [3]int64{0, 0, 1} || a23.PoolUsed != 1 {
		t.Fatalf("A on the 23rd: %+v", a23)
	}
	if len(clients) == 0 {
		t.Fatal("no per-client QoS mix collected")
	}
}

// TestPublishRatesFromThePlan: a publisher's identity carries its plan's
// per-client rates and its account's limiter, one per account, shared by
// the account's publishers and not by another account's; a subscriber
// gets the per-client rates only. A new snapshot changes the limiter's
// rates in place (connected clients follow), and forgets a deleted
// account's.
func TestPublishRatesFromThePlan(t *testing.T) {
	snap := testSnapshot(t)
	a, b := snap.Accounts[accA], snap.Accounts[accB]
	a.PublishRate, a.PublishBytesRate, a.AccountPublishRate, a.AccountPublishBytesRate = 10, 4096, 15, 8192
	b.PublishRate, b.AccountPublishRate = 100, 1000
	p := NewPolicy(Options{}, snap)

	dev1 := connect(t, p, "pub-a", "dev1")
	dev0 := connect(t, p, "pub-a", "dev0")
	if l := dev1.Limits; l.PublishRate != 10 || l.PublishBytesRate != 4096 {
		t.Fatalf("publisher limits %+v, want 10 msg/s and 4096 bytes/s", l)
	}
	if dev1.GroupLimiter == nil || dev1.GroupLimiter != dev0.GroupLimiter {
		t.Fatal("two publishers of one account do not share one limiter")
	}
	if m, by := dev1.GroupLimiter.Rates(); m != 15 || by != 8192 {
		t.Fatalf("account limiter at %v msg/s, %v bytes/s; want 15 and 8192", m, by)
	}
	other := connect(t, p, "pub-b", "dev1")
	if other.GroupLimiter == dev1.GroupLimiter {
		t.Fatal("two accounts share a limiter")
	}
	if m, _ := other.GroupLimiter.Rates(); m != 1000 {
		t.Fatalf("account B's limiter at %v msg/s, want 1000", m)
	}
	if sub := connect(t, p, "sub-a", "s1"); sub.GroupLimiter != nil || sub.Limits.PublishRate != 10 {
		t.Fatalf("subscriber: limiter %v, rate %v; want none and 10", sub.GroupLimiter, sub.Limits.PublishRate)
	}

	next := testSnapshot(t)
	next.Version = 2
	next.Accounts[accA].AccountPublishRate = 3 // a plan change
	delete(next.Accounts, accB)
	p.SetSnapshot(next)
	if m, by := dev1.GroupLimiter.Rates(); m != 3 || by != 0 {
		t.Fatalf("after the plan change the account limiter is at %v msg/s, %v bytes/s; want 3 and unlimited", m, by)
	}
	if got := p.AccountLimiter(accA); got != dev1.GroupLimiter {
		t.Fatal("the plan change replaced the account's limiter instead of changing it")
	}
	next.Accounts[accB] = snap.Accounts[accB]
	if got := p.AccountLimiter(accB); got == other.GroupLimiter {
		t.Fatal("a deleted account's limiter was kept")
	}
}
