package app_test

import (
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestProblemsOfEveryKind: besides refusals, the server's own closes and
// the messages a client did not get are recorded for the client's account
// owner, with the reason: a PUBLISH above the client's maximum QoS
// (qos_not_allowed), a silent connection (keepalive_timeout), a
// subscriber whose connection ended with messages in flight and queued
// (dropped, connection_closed, also counted in the day's drops the
// Overview shows), QoS 0 for an offline persistent session
// (offline_qos0). The other account has none of them.
func TestProblemsOfEveryKind(t *testing.T) {
	p := startPlatform(t)
	a := p.newTenant(t, "acme", "starter", false, "pump-17")
	p.addClient(t, a, "valve-0", 0)
	b := p.newTenant(t, "beta", "starter", false, "pump-17")
	p.synced(t)

	// A PUBLISH above max_publish_qos 0, from a 3.1.1 client.
	valve := dialV3(t, p.MQTTAddr, "valve-0", a.PubUser, a.PubPass)
	valve.Publish(a.topic("valve-0", "state/open"), 1, false, "1")

	// A subscriber that takes 20 messages and acknowledges none, so 5 more
	// wait in its queue; then its connection drops.
	slow := mqtttest.DialV5(t, p.MQTTAddr, mqtttest.Login("slow-dash", a.SubUser, a.SubPass),
		func(cfg *paho.ClientConfig) { cfg.EnableManualAcknowledgment = true })
	slow.MustSubscribe(t, paho.SubscribeOptions{Topic: a.all(), QoS: 1})
	// A persistent subscriber (a session expiry) that goes away.
	p.offlineSubscriber(t, a, "night-dash", a.topic("pump-17", "telemetry/#"))

	dev := dialV5(t, p.MQTTAddr, "pump-17", a.PubUser, a.PubPass)
	for i := range 25 {
		dev.Pub(t, a.topic("pump-17", "state/level"), 1, string(rune('a'+i)))
	}
	for i := range 20 {
		select {
		case <-slow.Msgs:
		case <-time.After(waitFor):
			t.Fatalf("the slow subscriber got %d of its 20 in-flight messages", i)
		}
	}
	slow.Conn.Close()
	// QoS 0 for night-dash once its session is offline (its DISCONNECT is
	// processed on its own goroutine: publish until one is dropped).
	eventually(t, "QoS 0 dropped for the offline session", func() bool {
		dev.Pub(t, a.topic("pump-17", "telemetry/temp"), 0, "21")
		return p.Broker.Stats().Drops[broker.DropOffline] > 0
	})

	// A connection that goes silent: keep alive 1 s, no PINGREQ.
	silent, _ := mqtttest.ConnectRaw(t, p.MQTTAddr, &packet.Connect{ClientID: "pump-17", KeepAlive: 1, CleanStart: true,
		Username: a.PubUser, HasUsername: true, Password: []byte(a.PubPass), HasPassword: true})
	defer silent.Conn.Close()

	want := []struct{ client, kind, reason string }{
		{"valve-0", fleetmq.ProblemDisconnected, "qos_not_allowed"},
		{"pump-17", fleetmq.ProblemDisconnected, "session_taken_over"}, // by the silent connection
		{"pump-17", fleetmq.ProblemDisconnected, "keepalive_timeout"},
		{"slow-dash", fleetmq.ProblemDropped, "connection_closed"},
		{"night-dash", fleetmq.ProblemDropped, "offline_qos0"},
	}
	var ps []fleetmq.ClientProblem
	missing := func() []string {
		var out []string
		for _, w := range want {
			if !slices.ContainsFunc(ps, func(pr fleetmq.ClientProblem) bool {
				return pr.ClientID == w.client && pr.Kind == w.kind && pr.Reason == w.reason
			}) {
				out = append(out, w.client+" "+w.kind+" "+w.reason)
			}
		}
		return out
	}
	if !testkit.Within(waitFor, func() bool {
		var err error
		if ps, err = p.Store.Problems(p.ctx, a.ID, "", time.Time{}, 100); err != nil {
			t.Fatal(err)
		}
		return len(missing()) == 0
	}) {
		for _, pr := range ps {
			t.Logf("recorded: %s %s %s x%d %q", pr.ClientID, pr.Kind, pr.Reason, pr.Count, pr.Detail)
		}
		t.Fatalf("missing %v", missing())
	}
	queued := false
	for _, pr := range ps {
		if !slices.ContainsFunc(want, func(w struct{ client, kind, reason string }) bool {
			return w.client == pr.ClientID && w.kind == pr.Kind
		}) {
			t.Errorf("unexpected problem %+v", pr)
		}
		switch pr.Reason {
		case "qos_not_allowed":
			if pr.Code != int(packet.QoSNotSupported) || pr.Detail == "" {
				t.Errorf("qos_not_allowed: %+v", pr)
			}
		case "keepalive_timeout":
			if pr.Code != int(packet.KeepAliveTimeout) {
				t.Errorf("keepalive_timeout: %+v", pr)
			}
		case "connection_closed":
			// (The QoS 0 telemetry published meanwhile may be lost with
			// the connection too: one more problem.)
			if pr.Topic == a.topic("pump-17", "state/level") {
				queued = true
			}
			if pr.Topic == a.topic("pump-17", "state/level") && (pr.Count < 5 || pr.QoS != 1) {
				t.Errorf("connection_closed: %+v, want at least the 5 queued messages", pr)
			}
		case "offline_qos0":
			if pr.Count < 1 || pr.Topic != a.topic("pump-17", "telemetry/temp") || pr.QoS != 0 {
				t.Errorf("offline_qos0: %+v", pr)
			}
		}
	}
	if !queued {
		t.Error("the slow subscriber's undelivered state/level messages were not recorded with their topic")
	}
	day := p.day()
	u := p.usage(t, a.ID, day, "connection_closed drops", func(u fleetmq.DailyUsage) bool { return u.Drops["connection_closed"] >= 5 })
	if u.Drops["offline_qos0"] < 1 {
		t.Errorf("today's drops: %v", u.Drops)
	}
	if ps, err := p.Store.Problems(p.ctx, b.ID, "", time.Time{}, 100); err != nil || len(ps) != 0 {
		t.Fatalf("B's problems: %+v %v", ps, err)
	}
}
