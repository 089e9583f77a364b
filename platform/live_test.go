package platform

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// livePublish publishes on the policy as the broker would and fails unless
// it is accepted.
func livePublish(t *testing.T, p *Policy, id *broker.Identity, topic string, qos byte) {
	t.Helper()
	pk := &packet.Publish{Topic: topic, QoS: qos, Payload: []byte("x")}
	m := &broker.Message{Topic: topic, QoS: qos, PublishedQoS: qos, Payload: pk.Payload}
	if err := p.Publish(id, pk, m); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

func mustLive(t *testing.T, p *Policy, account, client string, now time.Time) PublisherLive {
	t.Helper()
	pl, ok := p.LivePublisher(account, client, now)
	if !ok {
		t.Fatalf("LivePublisher(%s, %s): not found", account, client)
	}
	return pl
}

func tcpAddr(s string) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		panic(err)
	}
	return a
}

// TestLivePublishers: every registered client is listed (sorted, never
// connected ones with zero times); a connection shows protocol, transport,
// address and since; publishes count today's QoS mix by effective QoS (a
// demotion counts as 1) and set the last publish; the same client id in
// account B is a different client; a taken-over connection ending late
// does not mark the client offline, the latest one's end does (last seen);
// the day rolls over at UTC midnight; flushing the meter keeps Today;
// subscribers are not listed.
func TestLivePublishers(t *testing.T) {
	p, clk := newTestPolicy(t, "")
	snap := testSnapshot(t)
	snap.Accounts[accA].Clients["dev1"].Label = "pump 1"
	p.SetSnapshot(snap)
	t0 := clk.Now()

	all := p.LivePublishers(accA, t0)
	if len(all) != 2 || all[0].ClientID != "dev0" || all[1].ClientID != "dev1" {
		t.Fatalf("clients %+v, want dev0 and dev1 in order", all)
	}
	never := PublisherLive{ClientID: "dev0", MaxPublishQoS: 0}
	if fmt.Sprint(all[0]) != fmt.Sprint(never) {
		t.Fatalf("never connected: %+v, want %+v", all[0], never)
	}
	if all[1].Label != "pump 1" || all[1].MaxPublishQoS != 2 || all[1].Connected || !all[1].LastSeen.IsZero() || all[1].Protocol != "" {
		t.Fatalf("dev1 before connecting: %+v", all[1])
	}
	if got := p.LivePublishers("no-such-account", t0); got != nil {
		t.Fatalf("unknown account: %+v", got)
	}
	if _, ok := p.LivePublisher(accA, "devX", t0); ok {
		t.Fatal("an unregistered client is found")
	}
	if _, ok := p.LivePublisher(accB, "dev0", t0); ok {
		t.Fatal("a client registered only in A is found in B")
	}

	// Connect dev1 in both accounts.
	a1 := connect(t, p, "pub-a", "dev1")
	p.Connected(a1, &broker.Connection{Seq: 1, ProtocolLevel: packet.Version5, RemoteAddr: tcpAddr("10.0.0.1:5000")})
	b1 := connect(t, p, "pub-b", "dev1")
	p.Connected(b1, &broker.Connection{Seq: 2, ProtocolLevel: packet.Version5, RemoteAddr: tcpAddr("10.0.0.2:6000"), TLS: true})
	p.Connected(connect(t, p, "sub-a", "dev0"), &broker.Connection{Seq: 3, ProtocolLevel: packet.Version5})

	pl := mustLive(t, p, accA, "dev1", t0)
	if !pl.Connected || !pl.ConnectedSince.Equal(t0) || !pl.LastSeen.Equal(t0) || pl.Protocol != "MQTT 5.0" ||
		pl.Transport != TransportTCP || pl.RemoteAddr != "10.0.0.1:5000" {
		t.Fatalf("A dev1 connected: %+v", pl)
	}
	if pl := mustLive(t, p, accA, "dev0", t0); pl.Connected || pl.Protocol != "" {
		t.Fatalf("a subscriber using dev0's id shows as dev0: %+v", pl)
	}
	if pl := mustLive(t, p, accB, "dev1", t0); !pl.Connected || pl.Transport != TransportTLS || pl.RemoteAddr != "10.0.0.2:6000" {
		t.Fatalf("B dev1 connected: %+v", pl)
	}

	// Publishes: A's pool of 2 demotes the third QoS 2 state message.
	clk.Set(t0.Add(10 * time.Second))
	livePublish(t, p, a1, accA+"/dev1/telemetry/t", 0)
	livePublish(t, p, a1, accA+"/dev1/telemetry/t", 1)
	for range 3 {
		livePublish(t, p, a1, accA+"/dev1/state/s", 2)
	}
	livePublish(t, p, b1, accB+"/dev1/state/s", 1)
	now := clk.Now()
	pl = mustLive(t, p, accA, "dev1", now)
	if pl.Today != [3]int64{1, 2, 2} || !pl.LastPublish.Equal(now) {
		t.Fatalf("A dev1 after publishing: today %v last publish %v, want [1 2 2] at %v", pl.Today, pl.LastPublish, now)
	}
	if pl := mustLive(t, p, accB, "dev1", now); pl.Today != [3]int64{0, 1, 0} {
		t.Fatalf("B dev1: today %v, want [0 1 0]", pl.Today)
	}
	// Flushing usage to the store does not reset the live view.
	p.Meter().Collect(broker.DropNames())
	if pl := mustLive(t, p, accA, "dev1", now); pl.Today != [3]int64{1, 2, 2} {
		t.Fatalf("after a flush: today %v", pl.Today)
	}

	// Takeovers: connection 5 (3.1.1) takes over; connection 4 reports
	// attaching late (it lost the race) and then ends; connection 1 ends.
	// The client stays connected on 5 until 5 ends.
	a5 := connect(t, p, "pub-a", "dev1")
	clk.Set(t0.Add(20 * time.Second))
	p.Connected(a5, &broker.Connection{Seq: 5, ProtocolLevel: packet.Version311, RemoteAddr: tcpAddr("10.0.0.5:5005")})
	a4 := connect(t, p, "pub-a", "dev1")
	p.Connected(a4, &broker.Connection{Seq: 4, ProtocolLevel: packet.Version5, WebSocket: true})
	p.Disconnected(a4, broker.Disconnection{})
	p.Disconnected(a1, broker.Disconnection{})
	pl = mustLive(t, p, accA, "dev1", clk.Now())
	if !pl.Connected || pl.Protocol != "MQTT 3.1.1" || pl.RemoteAddr != "10.0.0.5:5005" || !pl.ConnectedSince.Equal(clk.Now()) {
		t.Fatalf("after the takeover: %+v, want connection 5", pl)
	}
	clk.Set(t0.Add(30 * time.Second))
	p.Disconnected(a5, broker.Disconnection{})
	pl = mustLive(t, p, accA, "dev1", clk.Now())
	if pl.Connected || !pl.ConnectedSince.IsZero() || pl.RemoteAddr != "" || !pl.LastSeen.Equal(clk.Now()) ||
		pl.Protocol != "MQTT 3.1.1" || pl.Transport != TransportTCP || !pl.LastPublish.Equal(now) {
		t.Fatalf("after disconnecting: %+v", pl)
	}
	if pl := mustLive(t, p, accB, "dev1", clk.Now()); !pl.Connected {
		t.Fatalf("B dev1 disconnected by A's disconnect: %+v", pl)
	}

	// UTC midnight (the clock started at 23:59): a new day's mix.
	next := time.Date(2026, 11, 23, 0, 0, 1, 0, time.UTC)
	if pl := mustLive(t, p, accA, "dev1", next); pl.Today != [3]int64{} {
		t.Fatalf("the next day before any publish: today %v", pl.Today)
	}
	clk.Set(next)
	livePublish(t, p, b1, accB+"/dev1/state/s", 1)
	if pl := mustLive(t, p, accB, "dev1", next); pl.Today != [3]int64{0, 1, 0} {
		t.Fatalf("B on the next day: today %v", pl.Today)
	}

	// The stored usage of the day carries over a restart.
	p.RestoreToday(next, []fleetmq.ClientUsage{{AccountID: accA, ClientID: "dev0", Messages: [3]int64{5, 6, 0}}})
	if pl := mustLive(t, p, accA, "dev0", next); pl.Today != [3]int64{5, 6, 0} || pl.Connected {
		t.Fatalf("restored dev0: %+v", pl)
	}
	if pl := mustLive(t, p, accB, "dev1", next); pl.Today != [3]int64{0, 1, 0} {
		t.Fatalf("B after restoring A: today %v", pl.Today)
	}
}

// TestLivePublishersRetained: a client's live retained state/ messages come
// from the broker (its own only: not another client's, not another
// account's same client id, not telemetry/), expired ones (by the view's
// clock) are left out, and at most MaxRetainedPerClient are returned, the
// first by topic.
func TestLivePublishersRetained(t *testing.T) {
	p, clk := newTestPolicy(t, "")
	now := clk.Now()
	if pl := mustLive(t, p, accA, "dev1", now); pl.Retained != nil {
		t.Fatalf("no broker yet: %+v", pl.Retained)
	}
	srv, err := broker.New(broker.Options{Policy: p, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	p.SetBroker(srv)
	retain := func(topic, payload string, expiry time.Time) {
		srv.Publish(&broker.Message{Topic: topic, Payload: []byte(payload), QoS: 1, PublishedQoS: 2, Retain: true, Expiry: expiry})
	}
	retain(accA+"/dev1/state/b", "A b", time.Time{})
	retain(accA+"/dev1/state/a/x", "A a/x", now.Add(time.Hour))
	retain(accA+"/dev1/state/soon", "A soon", now.Add(time.Minute))
	retain(accA+"/dev1/telemetry/t", "A telemetry", time.Time{})
	retain(accA+"/dev0/state/b", "A dev0", time.Time{})
	retain(accB+"/dev1/state/b", "B b", time.Time{})

	got := mustLive(t, p, accA, "dev1", now).Retained
	want := []RetainedState{
		{Topic: accA + "/dev1/state/a/x", Payload: []byte("A a/x"), QoS: 1, Received: now, Expires: now.Add(time.Hour)},
		{Topic: accA + "/dev1/state/b", Payload: []byte("A b"), QoS: 1, Received: now},
		{Topic: accA + "/dev1/state/soon", Payload: []byte("A soon"), QoS: 1, Received: now, Expires: now.Add(time.Minute)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("A dev1 retained:\n got %+v\nwant %+v", got, want)
	}
	if got := mustLive(t, p, accB, "dev1", now).Retained; len(got) != 1 || string(got[0].Payload) != "B b" {
		t.Fatalf("B dev1 retained: %+v", got)
	}
	// Expired by the view's clock (the broker's has not moved).
	if got := mustLive(t, p, accA, "dev1", now.Add(2*time.Minute)).Retained; len(got) != 2 || string(got[1].Payload) != "A b" {
		t.Fatalf("a minute later: %+v", got)
	}
	// And by the broker's.
	clk.Set(now.Add(2 * time.Minute))
	if got := mustLive(t, p, accA, "dev1", now).Retained; len(got) != 2 {
		t.Fatalf("broker clock past the expiry: %+v", got)
	}

	// The bound.
	for i := range MaxRetainedPerClient + 5 {
		retain(fmt.Sprintf("%s/dev0/state/n/%03d", accA, i), "n", time.Time{})
	}
	all := p.LivePublishers(accA, clk.Now())
	if r := all[0].Retained; len(r) != MaxRetainedPerClient || r[0].Topic != accA+"/dev0/state/b" || r[1].Topic != accA+"/dev0/state/n/000" ||
		r[len(r)-1].Topic != fmt.Sprintf("%s/dev0/state/n/%03d", accA, MaxRetainedPerClient-2) {
		t.Fatalf("dev0: %d retained, first %s, last %s", len(r), r[0].Topic, r[len(r)-1].Topic)
	}
	if len(all[1].Retained) != 2 {
		t.Fatalf("dev1 in the list: %+v", all[1].Retained)
	}
}
