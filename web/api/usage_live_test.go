package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// qosMix is a QoSMix as a client decodes it.
type qosMix struct {
	Q0    int64   `json:"q0"`
	Q1    int64   `json:"q1"`
	Q2    int64   `json:"q2"`
	Total int64   `json:"total"`
	Q0Pct float64 `json:"q0_pct"`
	Q1Pct float64 `json:"q1_pct"`
	Q2Pct float64 `json:"q2_pct"`
}

type usage struct {
	AccountID string `json:"account_id"`
	Plan      string `json:"plan"`
	Pool      struct {
		AddOnActive  bool       `json:"addon_active"`
		Size         int64      `json:"size"`
		UsedToday    int64      `json:"used_today"`
		Remaining    int64      `json:"remaining"`
		Demoted      bool       `json:"demoted"`
		DemotedSince *time.Time `json:"demoted_since"`
		ResetsAt     time.Time  `json:"resets_at"`
	} `json:"qos2_pool"`
	Total qosMix `json:"total"`
	Days  []struct {
		Day       string           `json:"day"`
		Messages  qosMix           `json:"messages"`
		PoolUsed  int64            `json:"qos2_pool_used"`
		Demotions int64            `json:"demotions"`
		Refused   int64            `json:"refused"`
		Drops     map[string]int64 `json:"drops"`
	} `json:"days"`
}

// usageUntil polls GET /usage (metering reaches the store every reload
// interval) until ok accepts it.
func (e *env) usageUntil(t *testing.T, token, query, what string, ok func(usage) bool) usage {
	t.Helper()
	var u usage
	testkit.CheckFor(t, waitFor, func() error {
		u = usage{}
		e.get(t, token, "/usage"+query).ok(t, http.StatusOK, &u)
		if !ok(u) {
			return fmt.Errorf("GET /usage%s: want %s, have %+v", query, what, u)
		}
		return nil
	})
	return u
}

// TestUsage: GET /usage reports the messages a device published over MQTT
// by effective QoS (QoS 2 on state/ with the add-on and the pool is 2, on
// telemetry/ it is 1; once the daily pool of 3 is used up the account is
// demoted and further QoS 2 counts as 1), the pool's state now, demotions
// and refusals per day, the range given by from/to, and a fresh pool
// after UTC midnight.
func TestUsage(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.plan(t, "pool3", 5, 3)
	A := e.tenant(t, "A", "pool3", allAddOns, "dev1")
	e.synced(t)

	u := e.usageUntil(t, A.Token, "", "a fresh account", func(usage) bool { return true })
	midnight := time.Date(2030, 3, 11, 0, 0, 0, 0, time.UTC)
	if u.AccountID != A.ID || u.Plan != "pool3" || !u.Pool.AddOnActive || u.Pool.Size != 3 || u.Pool.UsedToday != 0 || u.Pool.Remaining != 3 ||
		u.Pool.Demoted || u.Pool.DemotedSince != nil || !u.Pool.ResetsAt.Equal(midnight) || u.Total != (qosMix{}) || len(u.Days) != 0 {
		t.Fatalf("fresh account: %+v", u)
	}

	dev := e.dial(t, "dev1", A.PubUser, A.PubPass)
	for i := 0; i < 2; i++ {
		dev.Pub(t, A.topic("dev1", "telemetry/t"), 0, "q0")
	}
	for i := 0; i < 3; i++ {
		dev.Pub(t, A.topic("dev1", "telemetry/t"), 1, "q1")
	}
	e.clock.Add(time.Minute)
	demotedAt := e.clock.Now()
	for i := 0; i < 4; i++ { // 3 from the pool, the 4th demoted
		dev.Pub(t, A.topic("dev1", "state/s"), 2, "q2")
	}
	dev.Pub(t, A.topic("dev1", "telemetry/t"), 2, "q2 on telemetry") // effective 1 by class
	r, _ := dev.TryPublish(&paho.Publish{Topic: A.topic("dev2", "state/s"), QoS: 1, Payload: []byte("another client's topic")})
	if r == nil || r.ReasonCode < 0x80 {
		t.Fatalf("publish on another client's topic: %+v", r)
	}

	u = e.usageUntil(t, A.Token, "", "10 messages and a refusal", func(u usage) bool {
		return len(u.Days) == 1 && u.Days[0].Messages.Total == 10 && u.Days[0].Refused == 1
	})
	mix := qosMix{Q0: 2, Q1: 5, Q2: 3, Total: 10, Q0Pct: 20, Q1Pct: 50, Q2Pct: 30}
	d := u.Days[0]
	if d.Day != "2030-03-10" || d.Messages != mix || d.PoolUsed != 3 || d.Demotions != 1 || u.Total != mix {
		t.Fatalf("usage after publishing: %+v", u)
	}
	if !u.Pool.Demoted || u.Pool.UsedToday != 3 || u.Pool.Remaining != 0 || u.Pool.DemotedSince == nil || !u.Pool.DemotedSince.Equal(demotedAt) {
		t.Fatalf("pool after publishing: %+v (demoted at %v)", u.Pool, demotedAt)
	}

	// Ranges.
	var other usage
	e.get(t, A.Token, "/usage?from=2030-03-11&to=2030-03-12").ok(t, http.StatusOK, &other)
	if len(other.Days) != 0 || other.Total != (qosMix{}) {
		t.Fatalf("a range without traffic: %+v", other)
	}
	e.get(t, A.Token, "/usage?from=2030-03-10&to=2030-03-10").ok(t, http.StatusOK, &other)
	if len(other.Days) != 1 || other.Total != mix {
		t.Fatalf("the day itself: %+v", other)
	}
	e.get(t, A.Token, "/usage?to=2030-04-08").ok(t, http.StatusOK, &other) // 29 days before is 03-10
	if len(other.Days) != 1 {
		t.Fatalf("to 2030-04-08: %+v", other)
	}
	e.get(t, A.Token, "/usage?to=2030-04-09").ok(t, http.StatusOK, &other)
	if len(other.Days) != 0 {
		t.Fatalf("to 2030-04-09 (from 03-11): %+v", other)
	}

	// A new UTC day: a fresh pool, QoS 2 on state/ is 2 again.
	e.clock.Set(midnight.Add(time.Second))
	u = e.usageUntil(t, A.Token, "", "a fresh pool", func(u usage) bool { return true })
	if u.Pool.Demoted || u.Pool.UsedToday != 0 || u.Pool.Remaining != 3 || u.Pool.DemotedSince != nil || !u.Pool.ResetsAt.Equal(midnight.AddDate(0, 0, 1)) {
		t.Fatalf("pool after midnight: %+v", u.Pool)
	}
	dev.Pub(t, A.topic("dev1", "state/s"), 2, "q2 next day")
	u = e.usageUntil(t, A.Token, "", "the next day's QoS 2", func(u usage) bool { return len(u.Days) == 2 && u.Days[1].Messages.Q2 == 1 })
	if u.Days[0].Day != "2030-03-10" || u.Days[1].Day != "2030-03-11" || u.Days[1].PoolUsed != 1 || u.Pool.UsedToday != 1 {
		t.Fatalf("usage on the next day: %+v", u)
	}

	// Without the QoS 2 add-on the pool is not in use and nothing is demoted.
	if err := e.Service.SetAddOn(e.ctx, A.ID, fleetmq.AddOnQoS2, false); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.ctx) // as the portal does after a change
	e.get(t, A.Token, "/usage").ok(t, http.StatusOK, &u)
	if u.Pool.AddOnActive || u.Pool.Demoted {
		t.Fatalf("pool without the add-on: %+v", u.Pool)
	}
}

// TestUsageDemotedSinceAfterDowngradeAndRestart: an account whose plan is
// lowered below the QoS 2 messages it already sent today is demoted from
// the change on, and GET /usage says since when; a restart keeps that
// time (the pool's use is brought back from the stored usage). The other
// account, on the larger plan, is not demoted.
func TestUsageDemotedSinceAfterDowngradeAndRestart(t *testing.T) {
	e := start(t, func(c *app.Config) { c.DataDir = t.TempDir() })
	e.plan(t, "pool5", 5, 5)
	e.plan(t, "pool2", 5, 2)
	A := e.tenant(t, "A", "pool5", allAddOns, "dev1")
	B := e.tenant(t, "B", "pool5", allAddOns, "dev1")
	e.synced(t)
	devA := e.dial(t, "dev1", A.PubUser, A.PubPass)
	devB := e.dial(t, "dev1", B.PubUser, B.PubPass)
	for range 3 {
		devA.Pub(t, A.topic("dev1", "state/s"), 2, "q2")
		devB.Pub(t, B.topic("dev1", "state/s"), 2, "q2")
	}
	e.usageUntil(t, A.Token, "", "3 of 5 used, not demoted", func(u usage) bool {
		return u.Pool.UsedToday == 3 && !u.Pool.Demoted && u.Pool.DemotedSince == nil
	})

	e.clock.Add(time.Minute)
	downgradedAt := e.clock.Now()
	if err := e.Service.SetPlan(e.ctx, A.ID, "pool2"); err != nil {
		t.Fatal(err)
	}
	e.synced(t)
	e.clock.Add(time.Minute)
	demoted := func(u usage) bool {
		return u.Pool.Size == 2 && u.Pool.UsedToday == 3 && u.Pool.Demoted && u.Pool.DemotedSince != nil && u.Pool.DemotedSince.Equal(downgradedAt)
	}
	u := e.usageUntil(t, A.Token, "", "demoted since the downgrade", func(usage) bool { return true })
	if !demoted(u) {
		t.Fatalf("pool after the plan went down to 2 with 3 used: %+v, want demoted since %v", u.Pool, downgradedAt)
	}
	devA.Pub(t, A.topic("dev1", "state/s"), 2, "demoted")
	e.usageUntil(t, A.Token, "", "the demotion stored", func(u usage) bool { return len(u.Days) == 1 && u.Days[0].Demotions == 1 })

	e.clock.Add(time.Minute)
	e.restart(t)
	e.synced(t)
	u = e.usageUntil(t, A.Token, "", "still demoted after the restart", func(usage) bool { return true })
	if !demoted(u) {
		t.Fatalf("pool after a restart: %+v, want demoted since %v", u.Pool, downgradedAt)
	}
	ub := e.usageUntil(t, B.Token, "", "B's pool", func(usage) bool { return true })
	if ub.Pool.Demoted || ub.Pool.DemotedSince != nil || ub.Pool.UsedToday != 3 {
		t.Fatalf("B's pool: %+v, want 3 of 5 used, not demoted", ub.Pool)
	}
}

// TestUsageDemotedSinceSurvivesRestart: the time an account's pool ran
// out, shown by GET /usage, is the same after a restart.
func TestUsageDemotedSinceSurvivesRestart(t *testing.T) {
	e := start(t, func(c *app.Config) { c.DataDir = t.TempDir() })
	e.plan(t, "pool2", 5, 2)
	A := e.tenant(t, "A", "pool2", allAddOns, "dev1")
	B := e.tenant(t, "B", "pool2", allAddOns, "dev1")
	e.synced(t)
	devA := e.dial(t, "dev1", A.PubUser, A.PubPass)
	devB := e.dial(t, "dev1", B.PubUser, B.PubPass)
	devB.Pub(t, B.topic("dev1", "state/s"), 2, "q2")
	devA.Pub(t, A.topic("dev1", "state/s"), 2, "q2")
	e.clock.Add(time.Minute)
	ranOut := e.clock.Now()
	devA.Pub(t, A.topic("dev1", "state/s"), 2, "q2, the last of the pool")
	e.clock.Add(time.Minute)
	devA.Pub(t, A.topic("dev1", "state/s"), 2, "demoted")
	u := e.usageUntil(t, A.Token, "", "demoted", func(u usage) bool { return u.Pool.Demoted && len(u.Days) == 1 && u.Days[0].Demotions == 1 })
	if u.Pool.DemotedSince == nil || !u.Pool.DemotedSince.Equal(ranOut) {
		t.Fatalf("pool: %+v, want demoted since %v", u.Pool, ranOut)
	}

	e.clock.Add(time.Minute)
	e.restart(t)
	e.synced(t)
	u = e.usageUntil(t, A.Token, "", "still demoted after the restart", func(usage) bool { return true })
	if !u.Pool.Demoted || u.Pool.UsedToday != 2 || u.Pool.DemotedSince == nil || !u.Pool.DemotedSince.Equal(ranOut) {
		t.Fatalf("pool after a restart: %+v, want demoted since %v", u.Pool, ranOut)
	}
	ub := e.usageUntil(t, B.Token, "", "B's pool", func(usage) bool { return true })
	if ub.Pool.Demoted || ub.Pool.DemotedSince != nil || ub.Pool.UsedToday != 1 {
		t.Fatalf("B's pool: %+v, want 1 of 2 used, not demoted", ub.Pool)
	}
}

// livePublisher is a LivePublisher as a client decodes it.
type livePublisher struct {
	ClientID       string     `json:"client_id"`
	Label          string     `json:"label"`
	MaxPublishQoS  int        `json:"max_publish_qos"`
	Connected      bool       `json:"connected"`
	ConnectedSince *time.Time `json:"connected_since"`
	LastSeen       *time.Time `json:"last_seen"`
	Protocol       string     `json:"protocol"`
	Transport      string     `json:"transport"`
	RemoteAddr     string     `json:"remote_addr"`
	LastPublish    *time.Time `json:"last_publish"`
	QoSMixToday    qosMix     `json:"qos_mix_today"`
	Retained       []struct {
		Topic           string          `json:"topic"`
		QoS             int             `json:"qos"`
		ReceivedAt      time.Time       `json:"received_at"`
		ExpiresAt       *time.Time      `json:"expires_at"`
		PayloadEncoding string          `json:"payload_encoding"`
		Payload         json.RawMessage `json:"payload"`
	} `json:"retained"`
}

type liveView struct {
	Publishers []livePublisher `json:"publishers"`
	At         time.Time       `json:"at"`
}

// live returns GET /publishers/live as a map by client id, checking the
// order and the view's time.
func (e *env) live(t *testing.T, token string) map[string]livePublisher {
	t.Helper()
	var v liveView
	e.get(t, token, "/publishers/live").ok(t, http.StatusOK, &v)
	if !v.At.Equal(e.clock.Now()) {
		t.Fatalf("live view at %v, clock %v", v.At, e.clock.Now())
	}
	out := map[string]livePublisher{}
	for i, p := range v.Publishers {
		if i > 0 && v.Publishers[i-1].ClientID >= p.ClientID {
			t.Fatalf("live view not ordered by client id: %+v", v.Publishers)
		}
		out[p.ClientID] = p
	}
	return out
}

func at(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// TestLivePublishers: GET /publishers/live lists every registered client:
// never connected ones as such; a v5 device as connected since it came,
// over tcp from its address; a 3.1.1 device with its protocol; today's QoS
// mix and last publish after publishing; its retained state messages (a
// JSON payload as JSON, others base64); a disconnected device with its
// last seen time. client_id selects one device (404 for an unknown one).
func TestLivePublishers(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns, "dev1", "dev2", "dev3")
	e.synced(t)

	v := e.live(t, A.Token)
	if len(v) != 3 {
		t.Fatalf("live view of 3 clients: %+v", v)
	}
	for id, p := range v {
		if p.Connected || p.ConnectedSince != nil || p.LastSeen != nil || p.Protocol != "" || p.Transport != "" || p.LastPublish != nil ||
			p.QoSMixToday != (qosMix{}) || p.Retained == nil || len(p.Retained) != 0 || p.MaxPublishQoS != 2 {
			t.Fatalf("%s never connected: %+v", id, p)
		}
	}

	e.clock.Add(time.Minute)
	came := e.clock.Now()
	dev1 := e.dial(t, "dev1", A.PubUser, A.PubPass)
	mqtttest.DialV3(t, e.MQTTAddr, "dev2", mqtttest.Credentials(A.PubUser, A.PubPass))

	e.clock.Add(time.Minute)
	published := e.clock.Now()
	dev1.Pub(t, A.topic("dev1", "telemetry/t"), 0, "0")
	dev1.Pub(t, A.topic("dev1", "telemetry/t"), 1, "1")
	dev1.Pub(t, A.topic("dev1", "state/mode"), 2, "2")
	if _, err := dev1.TryPublish(&paho.Publish{Topic: A.topic("dev1", "state/power"), QoS: 1, Retain: true, Payload: []byte(`{"on": true}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := dev1.TryPublish(&paho.Publish{Topic: A.topic("dev1", "state/raw"), QoS: 1, Retain: true, Payload: []byte{0xde, 0xad}}); err != nil {
		t.Fatal(err)
	}

	v = e.live(t, A.Token)
	p := v["dev1"]
	if !p.Connected || at(p.ConnectedSince) != at(&came) || p.Protocol != "MQTT 5.0" || p.Transport != "tcp" ||
		p.RemoteAddr != dev1.Conn.LocalAddr().String() || at(p.LastPublish) != at(&published) || at(p.LastSeen) != at(&published) {
		t.Fatalf("dev1 connected and published: %+v (since %s, last publish %s, want %v, %v)", p, at(p.ConnectedSince), at(p.LastPublish), came, published)
	}
	if want := (qosMix{Q0: 1, Q1: 3, Q2: 1, Total: 5, Q0Pct: 20, Q1Pct: 60, Q2Pct: 20}); p.QoSMixToday != want {
		t.Fatalf("dev1 QoS mix %+v, want %+v", p.QoSMixToday, want)
	}
	got := fmt.Sprint(len(p.Retained))
	if len(p.Retained) == 2 {
		r0, r1 := p.Retained[0], p.Retained[1]
		got = fmt.Sprintf("%s %s %s %d | %s %s %s", r0.Topic, r0.PayloadEncoding, r0.Payload, r0.QoS, r1.Topic, r1.PayloadEncoding, r1.Payload)
	}
	if want := fmt.Sprintf(`%s json {"on":true} 1 | %s base64 "3q0="`, A.topic("dev1", "state/power"), A.topic("dev1", "state/raw")); got != want {
		t.Fatalf("dev1 retained: %s, want %s", got, want)
	}
	if q := v["dev2"]; !q.Connected || q.Protocol != "MQTT 3.1.1" || q.Transport != "tcp" || q.QoSMixToday.Total != 0 {
		t.Fatalf("dev2 over 3.1.1: %+v", q)
	}
	if q := v["dev3"]; q.Connected || q.LastSeen != nil {
		t.Fatalf("dev3: %+v", q)
	}

	// One device.
	var one liveView
	e.get(t, A.Token, "/publishers/live?client_id=dev2").ok(t, http.StatusOK, &one)
	if len(one.Publishers) != 1 || one.Publishers[0].ClientID != "dev2" || !one.Publishers[0].Connected {
		t.Fatalf("client_id=dev2: %+v", one)
	}
	e.get(t, A.Token, "/publishers/live?client_id=dev4").problem(t, http.StatusNotFound, fleetmq.CodeNotFound)

	// Disconnected: last seen is when it left.
	e.clock.Add(time.Minute)
	left := e.clock.Now()
	if err := dev1.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "dev1 to show as disconnected", func() bool { return !e.live(t, A.Token)["dev1"].Connected })
	p = e.live(t, A.Token)["dev1"]
	if p.ConnectedSince != nil || p.RemoteAddr != "" || at(p.LastSeen) != at(&left) || p.Protocol != "MQTT 5.0" || at(p.LastPublish) != at(&published) || p.QoSMixToday.Total != 5 {
		t.Fatalf("dev1 after leaving: %+v (last seen %s, want %v)", p, at(p.LastSeen), left)
	}
}

// TestLivePublisherMQTT31: a device on legacy MQTT 3.1 firmware ("MQIsdp",
// level 3) connects with its account's publisher credential, publishes
// into its account like a 3.1.1 device (a subscriber of the account gets
// the message, today's QoS mix counts it), shows as "MQTT 3.1" in the live
// view, and is refused a client id over 3.1's 23 characters (0x02).
func TestLivePublisherMQTT31(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns, "old1", "legacy-device-0123456789")
	e.synced(t)
	sub := e.dial(t, "watcher", A.SubUser, A.SubPass)
	if code := sub.SubCode(t, A.topic("old1", "#"), 1); code > 2 {
		t.Fatalf("subscribe: 0x%02x", code)
	}

	v31 := func(id string) (*mqtttest.V3, byte, error) {
		return mqtttest.TryV3(t, e.MQTTAddr, id, mqtttest.Credentials(A.PubUser, A.PubPass),
			func(o *mqtt3.ClientOptions) { o.SetProtocolVersion(3) })
	}
	old, _, err := v31("old1")
	if err != nil {
		t.Fatalf("connect old1 over 3.1: %v", err)
	}
	old.Pub(t, A.topic("old1", "telemetry/t"), 1, false, "from 3.1")
	if m := sub.Next(t); m.Topic != A.topic("old1", "telemetry/t") || string(m.Payload) != "from 3.1" {
		t.Fatalf("subscriber got %s %q", m.Topic, m.Payload)
	}
	if q := e.live(t, A.Token)["old1"]; !q.Connected || q.Protocol != "MQTT 3.1" || q.QoSMixToday.Q1 != 1 {
		t.Fatalf("old1 over 3.1: %+v", q)
	}
	// 24 characters: registered, but over what 3.1 allows.
	if _, _, err := v31("legacy-device-0123456789"); err == nil || !strings.Contains(err.Error(), "identifier rejected") {
		t.Fatalf("3.1 client id of 24 characters: %v, want identifier rejected", err)
	}
}
