package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// startCluster runs n "fleetmq serve" processes on one PostgreSQL
// database, each with NATS embedded, the others routed to the first.
func startCluster(t *testing.T, dsn string, n int) []*serveProcess {
	t.Helper()
	var nodes []*serveProcess
	for i := range n {
		args := []string{"-database", dsn, "-node-id", fmt.Sprintf("n%d", i+1), "-cluster-listen", "127.0.0.1:0"}
		if i > 0 {
			args = append(args, "-cluster-routes", nodes[0].route)
		}
		p := startServe(t, t.TempDir(), args...)
		if p.route == "" {
			t.Fatalf("node %d printed no nats-route:// address", i+1)
		}
		nodes = append(nodes, p)
	}
	return nodes
}

// clusterAccount makes an account on the starter plan in the database,
// registers its clients, and creates a publisher credential and a
// subscriber password.
func clusterAccount(t *testing.T, dir, dsn, name string, clients ...string) (id string, pub, sub credential) {
	t.Helper()
	id = createAccount(t, dir, name, strings.ToLower(name)+"@example.com", "-database", dsn, "-plan", "starter").ID
	for _, c := range clients {
		mustCLI(t, dir, "client", "add", id, c, "-database", dsn)
	}
	return id, createCredential(t, dir, id, "-kind", "publisher", "-database", dsn), createCredential(t, dir, id, "-kind", "subscriber", "-database", dsn)
}

// crossed publishes probes on topic from pub until one reaches ch: the
// subscription's interest has reached the publisher's node.
func crossed(t *testing.T, pub *mqtttest.V3, topic string, ch chan mqtt3.Message) {
	t.Helper()
	eventually(t, "a subscription on another node to hear "+topic, func() bool {
		pub.Pub(t, topic, 0, false, "probe")
		select {
		case <-ch:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	deadline := time.After(200 * time.Millisecond) // probes still on their way
	for {
		select {
		case <-ch:
		case <-deadline:
			return
		}
	}
}

// TestClusterDelivery: three serve processes on one PostgreSQL form a
// cluster. A device's messages published on one node reach its account's
// subscribers on the other two at every QoS (capped by what the
// subscription granted), over MQTT 3.1.1 and 5, each once and in order;
// another account's subscribers on the same nodes get none of them, and
// its own device's messages cross as well.
func TestClusterDelivery(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	A := createAccount(t, dir, "Acme", "owner@acme.example", "-database", dsn, "-plan", "starter")
	B := createAccount(t, dir, "Beta", "owner@beta.example", "-database", dsn, "-plan", "starter")
	mustCLI(t, dir, "account", "addon", A.ID, "qos2", "on", "-database", dsn)
	mustCLI(t, dir, "client", "add", A.ID, "dev1", "-max-qos", "2", "-database", dsn)
	mustCLI(t, dir, "client", "add", B.ID, "dev1", "-database", dsn)
	pubA := createCredential(t, dir, A.ID, "-kind", "publisher", "-database", dsn)
	subA := createCredential(t, dir, A.ID, "-kind", "subscriber", "-database", dsn)
	pubB := createCredential(t, dir, B.ID, "-kind", "publisher", "-database", dsn)
	subB := createCredential(t, dir, B.ID, "-kind", "subscriber", "-database", dsn)

	nodes := startCluster(t, dsn, 3)

	// A's subscribers: 3.1.1 on node 2, MQTT 5 on node 3; B's on both.
	a2 := connectV3(t, nodes[1].addr, "sub-a-2", subA.Username, subA.Password)
	got2 := a2.Subscription(t, A.ID+"/#", 2)
	a3 := connectV5(t, nodes[2].addr, "sub-a-3", subA.Username, subA.Password, true)
	a3.MustSubscribe(t, paho.SubscribeOptions{Topic: A.ID + "/+/state/#", QoS: 1})
	b2 := connectV3(t, nodes[1].addr, "sub-b-2", subB.Username, subB.Password)
	gotB2 := b2.Subscription(t, B.ID+"/#", 1)
	b3 := connectV3(t, nodes[2].addr, "sub-b-3", subB.Username, subB.Password)
	gotB3 := b3.Subscription(t, B.ID+"/#", 1)

	devA := connectV3(t, nodes[0].addr, "dev1", pubA.Username, pubA.Password)
	devB := connectV3(t, nodes[0].addr, "dev1", pubB.Username, pubB.Password) // the same client id in another account
	crossed(t, devA, A.ID+"/dev1/event/probe", got2)
	crossed(t, devB, B.ID+"/dev1/event/probe", gotB2)
	crossed(t, devB, B.ID+"/dev1/event/probe", gotB3)
	eventually(t, "A's MQTT 5 subscriber on node 3 to hear node 1", func() bool {
		devA.Pub(t, A.ID+"/dev1/state/probe", 0, false, "probe")
		select {
		case m := <-a3.Msgs:
			return m.Topic == A.ID+"/dev1/state/probe"
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	// Probes still on their way.
	for drained := false; !drained; {
		select {
		case <-a3.Msgs:
		case <-got2:
		case <-gotB2:
		case <-gotB3:
		case <-time.After(300 * time.Millisecond):
			drained = true
		}
	}

	const n = 30
	for i := range n {
		devA.Pub(t, fmt.Sprintf("%s/dev1/state/n", A.ID), byte(i%3), false, fmt.Sprint(i))
		devB.Pub(t, fmt.Sprintf("%s/dev1/state/n", B.ID), byte(i%2), false, "b"+fmt.Sprint(i))
	}
	for i := range n {
		m := mqtttest.NextV3(t, got2)
		if m.Topic() != A.ID+"/dev1/state/n" || string(m.Payload()) != fmt.Sprint(i) || m.Qos() != byte(i%3) {
			t.Fatalf("A's 3.1.1 subscriber on node 2, message %d: got %q on %s at QoS %d, want %q at QoS %d",
				i, m.Payload(), m.Topic(), m.Qos(), fmt.Sprint(i), i%3)
		}
		v5 := a3.Next(t)
		if v5.Topic != A.ID+"/dev1/state/n" || string(v5.Payload) != fmt.Sprint(i) || v5.QoS != min(byte(i%3), 1) {
			t.Fatalf("A's MQTT 5 subscriber on node 3, message %d: got %q on %s at QoS %d, want %q at QoS %d",
				i, v5.Payload, v5.Topic, v5.QoS, fmt.Sprint(i), min(i%3, 1))
		}
		for _, ch := range []chan mqtt3.Message{gotB2, gotB3} {
			if m := mqtttest.NextV3(t, ch); string(m.Payload()) != "b"+fmt.Sprint(i) || !strings.HasPrefix(m.Topic(), B.ID+"/") {
				t.Fatalf("B's subscriber, message %d: got %q on %s, want B's own b%d", i, m.Payload(), m.Topic(), i)
			}
		}
	}
	// Nothing more: no copy twice, nothing of the other account.
	devA.Pub(t, A.ID+"/dev1/state/end", 1, false, "end")
	devB.Pub(t, B.ID+"/dev1/state/end", 1, false, "end")
	for what, ch := range map[string]chan mqtt3.Message{"A's subscriber on node 2": got2, "B's on node 2": gotB2, "B's on node 3": gotB3} {
		if m := mqtttest.NextV3(t, ch); string(m.Payload()) != "end" {
			t.Fatalf("%s: after every message, got %q on %s; want the end marker", what, m.Payload(), m.Topic())
		}
	}
	if v5 := a3.Next(t); string(v5.Payload) != "end" {
		t.Fatalf("A's MQTT 5 subscriber: after every message, got %q on %s", v5.Payload, v5.Topic)
	}

	// The operator's view: three live nodes, two sessions on each.
	out := mustCLI(t, dir, "node", "list", "-database", dsn)
	for _, id := range []string{"n1", "n2", "n3"} {
		r := row(out, id)
		if len(r) < 8 || r[len(r)-3] != "live" || r[len(r)-1] != "2" {
			t.Fatalf("node list, %s: %q; want live with 2 sessions:\n%s", id, r, out)
		}
	}
}

// TestClusterQoS2Pool: an account's devices publish QoS 2 on all three
// nodes at once; the daily QoS 2 pool, kept in PostgreSQL and taken in
// blocks by each node, is never exceeded: at most the pool's size of
// messages goes out at QoS 2, the rest is demoted to QoS 1, and nearly
// the whole pool is used (a node may keep units of its last block).
func TestClusterQoS2Pool(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	const pool = 60
	mustCLI(t, dir, "plan", "set", "tiny", "-max-clients", "10", "-qos2-pool", fmt.Sprint(pool), "-retention-days", "7", "-database", dsn)
	A := createAccount(t, dir, "Acme", "owner@acme.example", "-database", dsn, "-plan", "tiny")
	mustCLI(t, dir, "account", "addon", A.ID, "qos2", "on", "-database", dsn)
	pubA := createCredential(t, dir, A.ID, "-kind", "publisher", "-database", dsn)
	subA := createCredential(t, dir, A.ID, "-kind", "subscriber", "-database", dsn)
	nodes := startCluster(t, dsn, 3)
	var devs []*mqtttest.V3
	for i, nd := range nodes {
		id := fmt.Sprintf("dev%d", i)
		mustCLI(t, dir, "client", "add", A.ID, id, "-max-qos", "2", "-database", dsn)
		devs = append(devs, connectV3(t, nd.addr, id, pubA.Username, pubA.Password))
	}
	sub := connectV3(t, nodes[0].addr, "sub", subA.Username, subA.Password)
	got := sub.Subscription(t, A.ID+"/+/event/#", 2)
	// The subscriber hears every node (QoS 0 probes use no pool).
	for i := range devs {
		crossed(t, devs[i], fmt.Sprintf("%s/dev%d/event/probe", A.ID, i), got)
	}

	const each = 40 // 120 QoS 2 messages for a pool of 60
	done := make(chan struct{})
	for i, d := range devs {
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range each {
				tok := d.Publish(fmt.Sprintf("%s/dev%d/event/n", A.ID, i), 2, false, fmt.Sprint(k))
				if !tok.WaitTimeout(waitFor) || tok.Error() != nil {
					t.Errorf("dev%d: publish %d: %v", i, k, tok.Error())
					return
				}
			}
		}()
	}
	for range devs {
		<-done
	}
	atQoS := [3]int{}
	for range len(devs) * each {
		atQoS[mqtttest.NextV3(t, got).Qos()]++
	}
	if atQoS[2] > pool {
		t.Fatalf("%d messages went out at QoS 2 with a daily pool of %d", atQoS[2], pool)
	}
	if slack := 3 * platform.DefaultBlock * 3 / 2; atQoS[2] < pool-slack {
		t.Fatalf("only %d of the pool's %d went out at QoS 2 (a node may keep %d at most)", atQoS[2], pool, slack)
	}
	if atQoS[1] != len(devs)*each-atQoS[2] {
		t.Fatalf("QoS mix %v: the rest should be demoted to QoS 1", atQoS)
	}
	t.Logf("QoS 2: %d, demoted to QoS 1: %d (pool %d)", atQoS[2], atQoS[1], pool)
}

// TestClusterRetained: a state retained through one node is delivered to
// a subscriber that subscribes on another, and on a node started after it
// was retained (loaded from PostgreSQL); a clear through the first node
// reaches them all.
func TestClusterRetained(t *testing.T) {
	dsn, dir := pgtest.DSN(t), t.TempDir()
	acc, pubA, subA := clusterAccount(t, dir, dsn, "Acme", "dev1")
	nodes := startCluster(t, dsn, 2)
	dev := connectV3(t, nodes[0].addr, "dev1", pubA.Username, pubA.Password)
	topic := acc + "/dev1/state/door"
	dev.Pub(t, topic, 1, true, "open")

	retainedOn := func(addr, id string) (string, bool) {
		s := connectV3(t, addr, id, subA.Username, subA.Password)
		defer s.Disconnect(0)
		ch := s.Subscription(t, topic, 1)
		select {
		case m := <-ch:
			return string(m.Payload()), m.Retained()
		case <-time.After(300 * time.Millisecond):
			return "", false
		}
	}
	eventually(t, "node 2 to hold the state retained through node 1", func() bool {
		p, retained := retainedOn(nodes[1].addr, "sub-2")
		return p == "open" && retained
	})
	late := startServe(t, t.TempDir(), "-database", dsn, "-node-id", "late", "-cluster-listen", "127.0.0.1:0", "-cluster-routes", nodes[0].route)
	// From PostgreSQL: at its start, or (the row written by node 1's
	// store goroutine after that) at its next load, when its route comes
	// up or a few seconds later.
	eventually(t, "a node started after the state was retained to deliver it retained", func() bool {
		p, retained := retainedOn(late.addr, "sub-late")
		return p == "open" && retained
	})
	dev.Pub(t, topic, 1, true, "") // clear
	for _, addr := range []string{nodes[1].addr, late.addr} {
		eventually(t, "the clear to reach "+addr, func() bool {
			p, _ := retainedOn(addr, "sub-after-clear")
			return p == ""
		})
	}
}

// TestClusterTakeover: a device connected to one node that connects again
// through another takes its session over: the first node closes the old
// connection (MQTT 5: DISCONNECT 0x8E Session taken over) within a
// second, and the device publishes on through the new one.
func TestClusterTakeover(t *testing.T) {
	dsn, dir := pgtest.DSN(t), t.TempDir()
	acc, pubA, subA := clusterAccount(t, dir, dsn, "Acme", "dev1")
	nodes := startCluster(t, dsn, 2)
	sub := connectV3(t, nodes[0].addr, "sub", subA.Username, subA.Password)
	got := sub.Subscription(t, acc+"/#", 1)

	old := connectV5(t, nodes[0].addr, "dev1", pubA.Username, pubA.Password, true)
	start := time.Now()
	fresh := connectV5(t, nodes[1].addr, "dev1", pubA.Username, pubA.Password, true)
	select {
	case d := <-old.Disc:
		if d.ReasonCode != 0x8E {
			t.Fatalf("the old connection was closed with reason 0x%02X, want 0x8E Session taken over", d.ReasonCode)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("the takeover across nodes took %v, want under a second", took)
		}
	case <-time.After(waitFor):
		t.Fatal("the old connection on node 1 was not closed after the client connected to node 2")
	}
	eventually(t, "the device's messages through node 2 to reach node 1's subscriber", func() bool {
		fresh.Pub(t, acc+"/dev1/event/after", 1, "moved")
		select {
		case m := <-got:
			return string(m.Payload()) == "moved"
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
}

// TestClusterSessionMoves: a persistent session follows its client from
// node to node. Taken over from a live node, it keeps its subscriptions
// and the QoS 1 messages queued for it while it was offline (CONNACK
// session present, no SUBSCRIBE again). Resumed on a third node after its
// node was SIGKILLed, it keeps its subscriptions and gets every
// acknowledged QoS 1 message published for it: those its dead node had
// queued and those published while no node held it (and, at least once,
// maybe again some its dead node sent after it last saved the session).
func TestClusterSessionMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir := pgtest.DSN(t), t.TempDir()
	acc, pubA, subA := clusterAccount(t, dir, dsn, "Acme", "dev1")
	nodes := startCluster(t, dsn, 3)
	dev := connectV3(t, nodes[2].addr, "dev1", pubA.Username, pubA.Password)
	follow := func(node int) *mqtttest.V5 {
		c := connectV5(t, nodes[node].addr, "follower", subA.Username, subA.Password, false)
		t.Cleanup(func() { c.Disconnect(&paho.Disconnect{}) })
		return c
	}
	// expect receives want's payloads in order, skipping probes. With
	// repeats, it also takes again messages delivered before (a node's
	// death: at least once since its last save of the session).
	delivered := map[string]bool{}
	expect := func(c *mqtttest.V5, repeats bool, want ...string) {
		t.Helper()
		for _, w := range want {
			for {
				m := c.Next(t)
				p := string(m.Payload)
				if p == "probe" || repeats && delivered[p] && p != w {
					continue
				}
				if p != w {
					t.Fatalf("the moved session got %q, want %q", p, w)
				}
				delivered[p] = true
				break
			}
		}
	}
	publish := func(format string, n int) []string {
		var sent []string
		for i := range n {
			p := fmt.Sprintf(format, i)
			dev.Pub(t, acc+"/dev1/event/moves", 1, false, p) // acknowledged: stored
			sent = append(sent, p)
		}
		return sent
	}

	sub := follow(0)
	sub.Sub(t, acc+"/#", 1)
	eventually(t, "node 3 to hear node 1's subscription", func() bool {
		dev.Pub(t, acc+"/dev1/event/probe", 0, false, "probe")
		select {
		case <-sub.Msgs:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	sub.Disconnect(&paho.Disconnect{})
	queued := publish("queued on node 1: %d", 5)

	// Node 1 is alive: it hands the session over to node 2.
	moved := follow(1)
	if !moved.Connack.SessionPresent {
		t.Fatal("resuming on node 2: CONNACK session present 0, want 1 (the session was node 1's)")
	}
	expect(moved, false, queued...)
	expect(moved, false, publish("live on node 2: %d", 3)...)

	// Node 2 dies with the session offline and messages queued in it;
	// more are published while no node holds it.
	moved.Disconnect(&paho.Disconnect{})
	queued = publish("queued on node 2: %d", 5)
	nodes[1].kill(t)
	orphaned := publish("published while no node held it: %d", 5)
	again := follow(0)
	if !again.Connack.SessionPresent {
		t.Fatal("resuming on node 1 after node 2 died: CONNACK session present 0, want 1")
	}
	expect(again, true, append(queued, orphaned...)...)
	expect(again, true, publish("live on node 1: %d", 3)...)
}

// TestClusterNATSOutage: nodes on a NATS the operator runs (-nats-url)
// keep accepting while it is down: a device's QoS 1 messages are
// acknowledged only once stored, /readyz says the node lost NATS, and
// when NATS is back the nodes reconnect by themselves, say they are
// ready, and messages cross between them again.
func TestClusterNATSOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir := pgtest.DSN(t), t.TempDir()
	acc, pubA, subA := clusterAccount(t, dir, dsn, "Acme", "dev1")
	ns := startTestNATS(t, 0)
	port := ns.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nodes []*serveProcess
	for i := range 2 {
		nodes = append(nodes, startServe(t, t.TempDir(), "-database", dsn, "-node-id", fmt.Sprintf("x%d", i+1), "-nats-url", url,
			"-http-listen", "127.0.0.1:0"))
	}
	ready := func(p *serveProcess) (int, string) { return httpGet(t, "http://"+p.http+"/readyz") }
	sub := connectV3(t, nodes[1].addr, "sub", subA.Username, subA.Password)
	got := sub.Subscription(t, acc+"/#", 1)
	dev := connectV3(t, nodes[0].addr, "dev1", pubA.Username, pubA.Password)
	crossed(t, dev, acc+"/dev1/event/probe", got)

	ns.Shutdown()
	ns.WaitForShutdown()
	for _, p := range nodes {
		eventually(t, "a node to say it lost NATS", func() bool {
			code, body := ready(p)
			return code == 503 && strings.Contains(body, "cluster: not connected to NATS")
		})
	}
	const n = 20
	for i := range n {
		dev.Pub(t, acc+"/dev1/event/outage", 1, false, fmt.Sprintf("during the outage %d", i)) // waits for the PUBACK
	}
	if out := mustCLI(t, dir, "history", "export", acc, "-topic", acc+"/dev1/event/outage", "-format", "ndjson", "-database", dsn); strings.Count(out, "\n") != n {
		t.Fatalf("history holds %d of the %d messages acknowledged during the outage:\n%s", strings.Count(out, "\n"), n, out)
	}

	startTestNATS(t, port)
	for _, p := range nodes {
		eventually(t, "a node to be ready once NATS is back", func() bool {
			code, _ := ready(p)
			return code == 200
		})
	}
	crossed(t, dev, acc+"/dev1/event/probe", got)
	dev.Pub(t, acc+"/dev1/event/after", 1, false, "after the outage")
	eventually(t, "a message to cross after the outage", func() bool {
		select {
		case m := <-got:
			return string(m.Payload()) == "after the outage"
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
}

// TestClusterDatabaseOutage: PostgreSQL out of reach of a cluster node
// whose devices publish QoS 1 hard: the node acknowledges nothing it has
// not stored (no acknowledgement while the database is away), says so on
// /readyz, and once the database is reachable again stores and
// acknowledges what waited; every acknowledged message is in history
// once.
func TestClusterDatabaseOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir, acc, pub := stormAccount(t)
	u, err := neturl.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := startCutProxy(t, u.Host)
	via := *u
	via.Host = px.addr
	node := startServe(t, t.TempDir(), "-database", via.String(), "-node-id", "p1", "-cluster-listen", "127.0.0.1:0",
		"-http-listen", "127.0.0.1:0")
	startServe(t, t.TempDir(), "-database", dsn, "-node-id", "p2", "-cluster-listen", "127.0.0.1:0", "-cluster-routes", node.route)
	storeErrors := func() float64 {
		_, body := httpGet(t, "http://"+node.http+"/metrics")
		v, _ := metric(body, "fleetmq_ingest_store_errors_total")
		return v
	}

	s := startStorm(t, node.addr, acc, pub, 0, 500)
	px.cut()
	eventually(t, "the node to say its store refuses writes", func() bool {
		code, body := httpGet(t, "http://"+node.http+"/readyz")
		return code == 503 && strings.Contains(body, "store refuses writes")
	})
	// Acknowledgements written before the cut may still be on their
	// way; between two later failed commits none may arrive.
	base := storeErrors()
	eventually(t, "two more failed commits", func() bool { return storeErrors() >= base+2 })
	during := s.acked()
	eventually(t, "two more failed commits", func() bool { return storeErrors() >= base+4 })
	if now := s.acked(); now != during {
		t.Fatalf("%d messages were acknowledged while the database was out of reach", now-during)
	}

	px.restore()
	eventually(t, "the node to be ready again", func() bool {
		code, _ := httpGet(t, "http://"+node.http+"/readyz")
		return code == 200
	})
	eventually(t, "the waiting messages to be acknowledged and more after them", func() bool { return s.acked() >= during+500 })
	s.end()
	checkStored(t, dir, dsn, acc, s)
}

// TestClusterBehindHAProxy runs the HAProxy configuration of
// docs/cluster.md (loopback addresses in place of the machines') in front
// of two nodes started with -proxy-protocol-from: devices connect through
// it, their messages reach a subscriber that also came through it, and
// the node a device is on reports the device's own address (the PROXY
// header's), not HAProxy's.
func TestClusterBehindHAProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if bin = "/usr/sbin/haproxy"; !fileExists(bin) { // Debian's, off a user's PATH
			t.Skip("haproxy is not installed (scripts/test.sh installs it)")
		}
	}
	dsn, dir := pgtest.DSN(t), t.TempDir()
	acc, pubA, subA := clusterAccount(t, dir, dsn, "Acme", "dev1", "dev2")
	mustCLI(t, dir, "account", "addon", acc, "live_rest_api", "on", "-database", dsn)
	token := restToken(t, dsn, acc)
	var nodes []*serveProcess
	for i := range 2 {
		args := []string{"-database", dsn, "-node-id", fmt.Sprintf("h%d", i+1), "-cluster-listen", "127.0.0.1:0",
			"-http-listen", "127.0.0.1:0", "-proxy-protocol-from", "127.0.0.1"}
		if i > 0 {
			args = append(args, "-cluster-routes", nodes[0].route)
		}
		nodes = append(nodes, startServe(t, t.TempDir(), args...))
	}

	// The documented configuration, on this machine's addresses.
	cfg := fencedBlock(t, "../../docs/cluster.md", "```haproxy")
	front := freeAddr(t)
	cfg = strings.Replace(cfg, "bind :1883", "bind "+front, 1)
	for i, machine := range []string{"10.0.0.11:1883", "10.0.0.12:1883"} {
		cfg = strings.Replace(cfg, machine, nodes[i].addr, 1)
	}
	cfg = regexp.MustCompile(`(?m)^.*10\.0\.0\.13:1883.*\n`).ReplaceAllString(cfg, "") // two nodes here
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	hp := exec.Command(bin, "-db", "-f", path)
	hp.Stdout, hp.Stderr = os.Stderr, os.Stderr
	if err := hp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hp.Process.Kill()
		hp.Wait()
	})
	eventually(t, "HAProxy to listen", func() bool {
		c, err := net.Dial("tcp", front)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	sub := connectV5(t, front, "follower", subA.Username, subA.Password, true)
	sub.Sub(t, acc+"/#", 1)
	for _, id := range []string{"dev1", "dev2"} {
		dev := connectV5(t, front, id, pubA.Username, pubA.Password, true)
		eventually(t, id+"'s messages to reach the subscriber through HAProxy", func() bool {
			dev.Pub(t, acc+"/"+id+"/event/hello", 1, "through haproxy")
			select {
			case m := <-sub.Msgs:
				return m.Topic == acc+"/"+id+"/event/hello"
			case <-time.After(50 * time.Millisecond):
				return false
			}
		})
		// The node that has the device says where it is: the device's
		// address, port included, not HAProxy's side of the connection.
		want := dev.Conn.LocalAddr().String()
		var seen []string
		for _, node := range nodes {
			var live struct {
				Publishers []struct {
					Connected  bool   `json:"connected"`
					RemoteAddr string `json:"remote_addr"`
				} `json:"publishers"`
			}
			restJSON(t, "http://"+node.http+"/api/v1/subscriber/publishers/live?client_id="+id, token, &live)
			for _, p := range live.Publishers {
				if p.Connected {
					seen = append(seen, p.RemoteAddr)
				}
			}
		}
		if len(seen) != 1 || seen[0] != want {
			t.Fatalf("%s: the nodes report it connected from %q, want once from %s (its own address)", id, seen, want)
		}
	}
}

// restToken creates a REST API token of the account in the database.
func restToken(t *testing.T, dsn, acc string) string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, token, err := (&control.Service{Store: st, Now: time.Now}).CreateRESTToken(ctx, acc, control.NewRESTToken{Label: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// restJSON GETs url with the token and decodes the 200 response into v.
func restJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: waitFor}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

// fencedBlock returns the first fenced block of the markdown file at
// path that opens with the line fence (a configuration file, not a
// command: docBlock is for those).
func fencedBlock(t *testing.T, path, fence string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), fence+"\n")
	if !ok {
		t.Fatalf("%s has no %s block", path, fence)
	}
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("%s: the %s block does not end", path, fence)
	}
	return block + "\n"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// freeAddr returns a loopback address with a port free at the moment.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cutProxy forwards TCP connections to a server until cut: then it
// closes them and every new one, until restored.
type cutProxy struct {
	addr  string
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			wg.Go(func() { pipe(up, c) })
			wg.Go(func() { pipe(c, up) })
		}
	})
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// startTestNATS runs a NATS server on 127.0.0.1:port (0: any) in the test
// process, shut down when the test ends.
func startTestNATS(t *testing.T, port int) *natsserver.Server {
	t.Helper()
	if port == 0 {
		port = natsserver.RANDOM_PORT
	}
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(waitFor) {
		t.Fatal("the test's NATS server did not start")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// TestClusterReadiness: a node whose embedded NATS has no route while the
// database lists another live node answers /readyz with 503 and says so;
// once the nodes are routed together, both answer 200.
func TestClusterReadiness(t *testing.T) {
	dsn := pgtest.DSN(t)
	// A port nothing listens on: the second node's route goes nowhere.
	nowhere := startServe(t, t.TempDir(), "-database", dsn, "-node-id", "nowhere", "-cluster-listen", "127.0.0.1:0")
	deadRoute := nowhere.route
	nowhere.kill(t)
	first := startServe(t, t.TempDir(), "-database", dsn, "-node-id", "r1", "-cluster-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0")
	cut := startServe(t, t.TempDir(), "-database", dsn, "-node-id", "r2", "-cluster-listen", "127.0.0.1:0", "-cluster-routes", deadRoute,
		"-http-listen", "127.0.0.1:0")
	eventually(t, "the node without a route to say it is not ready", func() bool {
		// The other live nodes: r1, and the killed one until its
		// heartbeat is stale.
		code, body := httpGet(t, "http://"+cut.http+"/readyz")
		return code == 503 && strings.Contains(body, "cluster: no NATS route to the other")
	})
	late := startServe(t, t.TempDir(), "-database", dsn, "-node-id", "r3", "-cluster-listen", "127.0.0.1:0",
		"-cluster-routes", first.route+","+cut.route, "-http-listen", "127.0.0.1:0")
	for _, p := range []*serveProcess{first, cut, late} {
		eventually(t, "every routed node to be ready", func() bool {
			code, _ := httpGet(t, "http://"+p.http+"/readyz")
			return code == 200
		})
	}
}

// TestClusterNodeKill: SIGKILL of a node while its devices publish QoS 1
// hard loses no acknowledged message (PostgreSQL history holds each once);
// the devices connect again through another node and publish on at once.
// Run it many times with:
//
//	go test -count=20 -run TestClusterNodeKill ./cmd/fleetmq/
func TestClusterNodeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir, acc, pub := stormAccount(t)
	nodes := startCluster(t, dsn, 3)

	before := startStorm(t, nodes[1].addr, acc, pub, 0, 2000)
	nodes[1].kill(t)
	before.end()
	start := time.Now()
	after := startStorm(t, nodes[2].addr, acc, pub, 1_000_000, 500) // the devices come back through node 3
	t.Logf("the devices published 500 acknowledged messages through node 3 %v after the kill", time.Since(start).Round(time.Millisecond))
	after.end()
	checkStored(t, dir, dsn, acc, before, after)
}

// stormAccount makes, on a fresh PostgreSQL database, an account with the
// storm's devices registered and a publisher credential.
func stormAccount(t *testing.T) (dsn, dir, acc string, pub credential) {
	t.Helper()
	dsn, dir = pgtest.DSN(t), t.TempDir()
	acc = createAccount(t, dir, "Storm", "storm@example.com", "-database", dsn, "-plan", "growth").ID
	for i := range stormDevices {
		mustCLI(t, dir, "client", "add", acc, fmt.Sprintf("dev-%d", i), "-database", dsn)
	}
	return dsn, dir, acc, createCredential(t, dir, acc, "-kind", "publisher", "-database", dsn)
}

// storm is QoS 1 publishers running (crashPublisher), one per device.
type storm struct {
	pubs []*crashPublisher
	stop chan struct{}
	wg   sync.WaitGroup
}

const stormDevices = 4

// startStorm connects the devices dev-0... to addr and publishes numbered
// QoS 1 messages from number from, until until of them are acknowledged
// in all; they go on until end.
func startStorm(t *testing.T, addr, acc string, pub credential, from, until int) *storm {
	t.Helper()
	s := &storm{stop: make(chan struct{})}
	for i := range stormDevices {
		id := fmt.Sprintf("dev-%d", i)
		p := &crashPublisher{client: connectV3(t, addr, id, pub.Username, pub.Password), id: id, acked: map[int]bool{}, first: from}
		s.pubs = append(s.pubs, p)
		s.wg.Go(func() { p.run(acc+"/"+p.id+"/telemetry/seq", 50, s.stop) })
	}
	eventually(t, "publishers acknowledged", func() bool { return s.acked() >= until })
	return s
}

func (s *storm) acked() int {
	n := 0
	for _, p := range s.pubs {
		n += p.ackedCount()
	}
	return n
}

// end stops the publishers and disconnects them. The disconnection ends
// the wait for acknowledgements that cannot come (their node stopped),
// which would otherwise last waitFor.
func (s *storm) end() {
	close(s.stop)
	for _, p := range s.pubs {
		p.client.Disconnect(0)
	}
	s.wg.Wait()
}

// checkStored fails unless every message the storms' publishers had
// acknowledged is in the account's history exactly once.
func checkStored(t *testing.T, dir, dsn, acc string, storms ...*storm) {
	t.Helper()
	acked := map[string]map[int]bool{}
	total := 0
	var pubs []*crashPublisher
	for _, s := range storms {
		pubs = append(pubs, s.pubs...)
	}
	for _, p := range pubs {
		p.mu.Lock()
		if acked[p.id] == nil {
			acked[p.id] = map[int]bool{}
		}
		for seq := range p.acked {
			acked[p.id][seq] = true
		}
		total += len(p.acked)
		p.mu.Unlock()
	}
	stored := storedSeqs(t, mustCLI(t, dir, "history", "export", acc, "-topic", acc+"/+/telemetry/seq", "-format", "ndjson", "-database", dsn))
	missing := 0
	for id, seqs := range acked {
		for seq := range seqs {
			if n := stored[id][seq]; n != 1 {
				missing++
				if missing <= 5 {
					t.Errorf("%s seq %d was acknowledged and is in history %d times", id, seq, n)
				}
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged messages not in history exactly once (of %d)", missing, total)
	}
	t.Logf("all %d acknowledged messages are in history once", total)
}

// TestClusterRollingRestart: the nodes are restarted one after the other
// (SIGTERM, then started again on their data directories) while devices
// publish QoS 1 through the node being restarted, then through the next:
// no acknowledged message is lost.
func TestClusterRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir, acc, pub := stormAccount(t)
	nodes := startCluster(t, dsn, 3)
	var storms []*storm
	for i := range nodes {
		s := startStorm(t, nodes[i].addr, acc, pub, i*1_000_000, 500)
		nodes[i].stop(t) // a clean shutdown while the storm runs
		s.end()
		storms = append(storms, s)
		other := nodes[(i+1)%len(nodes)]
		nodes[i] = startServe(t, nodes[i].dir, "-database", dsn, "-node-id", fmt.Sprintf("n%d", i+1), "-cluster-listen", "127.0.0.1:0",
			"-cluster-routes", other.route)
	}
	last := startStorm(t, nodes[0].addr, acc, pub, 9_000_000, 200)
	last.end()
	checkStored(t, dir, dsn, acc, append(storms, last)...)
}

// TestClusterRESTLimit: a REST API token's hourly limit holds across the
// nodes: requests spread over two nodes are reserved in PostgreSQL before
// they are allowed, so the token gets the limit in all, exactly, not the
// limit from each node.
func TestClusterRESTLimit(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	acc := createAccount(t, dir, "Acme", "owner@acme.example", "-database", dsn, "-plan", "starter").ID
	mustCLI(t, dir, "account", "addon", acc, "mgmt_rest_api", "on", "-database", dsn) // /usage is a Mgmt REST API route
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, token, err := (&control.Service{Store: st, Now: time.Now}).CreateRESTToken(ctx, acc, control.NewRESTToken{Label: "cluster"})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 40
	var nodes []*serveProcess
	for i := range 2 {
		args := []string{"-database", dsn, "-node-id", fmt.Sprintf("n%d", i+1), "-cluster-listen", "127.0.0.1:0",
			"-http-listen", "127.0.0.1:0", "-rest-rate-limit", fmt.Sprint(limit), "-reload-interval", "100ms", "-rest-refusal-pause", "1ms"}
		if i > 0 {
			args = append(args, "-cluster-routes", nodes[0].route)
		}
		nodes = append(nodes, startServe(t, t.TempDir(), args...))
	}
	get := func(node *serveProcess) int {
		req, _ := http.NewRequest("GET", "http://"+node.http+"/api/v1/subscriber/usage", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Alternate between the nodes: each reserves requests in the
	// database before it allows them, so together they never pass the
	// limit; near it they reserve one at a time, so at most one reserved
	// request is left unused on each.
	ok := 0
	count := func(code int, i int) {
		switch code {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("request %d: status %d", i, code)
		}
	}
	for i := range 3 * limit {
		count(get(nodes[i%2]), i)
	}
	if ok > limit || ok < limit-2 {
		t.Fatalf("the token got %d requests through two nodes with a limit of %d an hour; want the limit (less one held unused on each node at most)", ok, limit)
	}
	// Node 2 idle: what it held goes back at its flushes, and node 1
	// gets it: the limit exactly, never more.
	eventually(t, "node 1 to get the requests node 2 gave back", func() bool {
		count(get(nodes[0]), -1)
		return ok >= limit
	})
	for range 5 {
		count(get(nodes[0]), -1)
		count(get(nodes[1]), -1)
	}
	if ok != limit {
		t.Fatalf("the token got %d requests through two nodes with a limit of %d an hour", ok, limit)
	}
}

// TestClusterAccountRate: an account's plan publish rate (all its devices
// together) holds over the cluster, not on each node: with devices
// publishing as fast as they may through two nodes, the nodes split the
// account's rate between them (cluster.Rates), so the account gets about
// its plan's rate in all, and each node part of it.
func TestClusterAccountRate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	const plan = 200 // messages per second, all the account's devices
	dsn, dir := pgtest.DSN(t), t.TempDir()
	mustCLI(t, dir, "plan", "set", "metered", "-max-clients", "20", "-qos2-pool", "100", "-retention-days", "7",
		"-publish-rate", "0", "-publish-bytes-rate", "0", "-account-publish-rate", fmt.Sprint(plan), "-account-publish-bytes-rate", "0",
		"-database", dsn)
	acc := createAccount(t, dir, "Metered", "metered@example.com", "-database", dsn, "-plan", "metered").ID
	pub := createCredential(t, dir, acc, "-kind", "publisher", "-database", dsn)
	nodes := startCluster(t, dsn, 2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var pubs [2][]*crashPublisher
	for n, node := range nodes {
		for i := range 4 {
			id := fmt.Sprintf("dev-%d-%d", n, i)
			mustCLI(t, dir, "client", "add", acc, id, "-database", dsn)
			p := &crashPublisher{client: connectV3(t, node.addr, id, pub.Username, pub.Password), id: id, acked: map[int]bool{}}
			pubs[n] = append(pubs[n], p)
			wg.Go(func() { p.run(acc+"/"+id+"/telemetry/seq", 20, stop) })
		}
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	acked := func(n int) int {
		total := 0
		for _, p := range pubs[n] {
			total += p.ackedCount()
		}
		return total
	}
	// rate measures the messages per second acknowledged through each
	// node over d.
	rate := func(d time.Duration) (per [2]float64) {
		a0, a1, start := acked(0), acked(1), time.Now()
		for time.Since(start) < d {
			time.Sleep(50 * time.Millisecond) // the window being measured, not a wait for an event
		}
		secs := time.Since(start).Seconds()
		return [2]float64{float64(acked(0)-a0) / secs, float64(acked(1)-a1) / secs}
	}
	// Unshared, each node would let the account publish at its plan's
	// rate: twice the plan in all. The nodes report every second and
	// settle on a split.
	eventually(t, "the account's rate over both nodes to come down to its plan's", func() bool {
		r := rate(time.Second)
		return r[0]+r[1] <= plan*1.3
	})
	r := rate(3 * time.Second)
	t.Logf("through node 1 %.0f msg/s, node 2 %.0f msg/s: %.0f in all for a plan of %d", r[0], r[1], r[0]+r[1], plan)
	if r[0]+r[1] > plan*1.3 {
		t.Fatalf("the account published %.0f msg/s through two nodes, for a plan of %d msg/s", r[0]+r[1], plan)
	}
	for n := range r {
		if r[n] < plan*0.2 {
			t.Fatalf("node %d let the account publish %.0f msg/s: both nodes' devices wait for the rate, each should get a part", n+1, r[n])
		}
	}
}

// TestClusterVendorLayout: a device publishing on its vendor's wire topic
// through one node reaches its account's subscriber on another, on the
// platform path (the layout's fan-out), and no other account's.
func TestClusterVendorLayout(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	A := createAccount(t, dir, "Acme", "owner@acme.example", "-database", dsn, "-plan", "starter")
	B := createAccount(t, dir, "Beta", "owner@beta.example", "-database", dsn, "-plan", "starter")
	mustCLI(t, dir, "layout", "add", "acme", "-root", "acme", "-fanout", "-rule", "acme/{client_id}/sensor/+=telemetry/{1}", "-database", dsn)
	for _, acc := range []string{A.ID, B.ID} {
		mustCLI(t, dir, "client", "add", acc, "pump-17", "-database", dsn)
	}
	pubA := createCredential(t, dir, A.ID, "-kind", "publisher", "-database", dsn)
	subA := createCredential(t, dir, A.ID, "-kind", "subscriber", "-database", dsn)
	subB := createCredential(t, dir, B.ID, "-kind", "subscriber", "-database", dsn)
	nodes := startCluster(t, dsn, 2)
	got := connectV3(t, nodes[1].addr, "sub-a", subA.Username, subA.Password).Subscription(t, A.ID+"/#", 1)
	gotB := connectV3(t, nodes[1].addr, "sub-b", subB.Username, subB.Password).Subscription(t, B.ID+"/#", 1)
	dev := connectV3(t, nodes[0].addr, "pump-17", pubA.Username, pubA.Password)
	eventually(t, "the vendor topic's message to reach node 2 on the platform path", func() bool {
		dev.Pub(t, "acme/pump-17/sensor/temp", 1, false, "21.5")
		select {
		case m := <-got:
			return m.Topic() == A.ID+"/pump-17/telemetry/temp" && string(m.Payload()) == "21.5"
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	dev.Pub(t, A.ID+"/pump-17/event/end", 1, false, "end") // a barrier on the platform path
	for {
		if m := mqtttest.NextV3(t, got); string(m.Payload()) == "end" {
			break
		}
	}
	select {
	case m := <-gotB:
		t.Fatalf("the other account's subscriber got %q on %s", m.Payload(), m.Topic())
	default:
	}
}

// TestClusterRouteTLS: nodes whose routes are TLS both ways (each
// presents its certificate and requires one signed by the authority)
// carry messages between them; a node without the certificate never
// joins: it stays unrouted and says so on /readyz.
func TestClusterRouteTLS(t *testing.T) {
	dsn, dir := pgtest.DSN(t), t.TempDir()
	acc, pub, sub := clusterAccount(t, dir, dsn, "Acme", "dev1")
	cert, key := testkit.SelfSignedFiles(t) // its own authority
	tlsFlags := []string{"-cluster-tls-cert", cert, "-cluster-tls-key", key, "-cluster-tls-ca", cert}
	first := startServe(t, t.TempDir(), append([]string{"-database", dsn, "-node-id", "t1", "-cluster-listen", "127.0.0.1:0"}, tlsFlags...)...)
	second := startServe(t, t.TempDir(), append([]string{"-database", dsn, "-node-id", "t2", "-cluster-listen", "127.0.0.1:0",
		"-cluster-routes", first.route}, tlsFlags...)...)
	got := connectV3(t, second.addr, "sub", sub.Username, sub.Password).Subscription(t, acc+"/#", 1)
	crossed(t, connectV3(t, first.addr, "dev1", pub.Username, pub.Password), acc+"/dev1/event/probe", got)

	plain := startServe(t, t.TempDir(), "-database", dsn, "-node-id", "t3", "-cluster-listen", "127.0.0.1:0",
		"-cluster-routes", first.route, "-http-listen", "127.0.0.1:0")
	eventually(t, "the node without the certificate to stay out", func() bool {
		code, body := httpGet(t, "http://"+plain.http+"/readyz")
		return code == 503 && strings.Contains(body, "no NATS route")
	})
}

// TestClusterShared: an account's shared subscription with a member on
// each of two nodes gets each of a device's messages once in all.
func TestClusterShared(t *testing.T) {
	dsn, dir := pgtest.DSN(t), t.TempDir()
	acc, pub, sub := clusterAccount(t, dir, dsn, "Acme", "dev1")
	nodes := startCluster(t, dsn, 2)
	filter := "$share/workers/" + acc + "/+/event/#"
	var members []chan mqtt3.Message
	for i, nd := range nodes {
		members = append(members, connectV3(t, nd.addr, fmt.Sprintf("worker-%d", i), sub.Username, sub.Password).Subscription(t, filter, 1))
	}
	dev := connectV3(t, nodes[0].addr, "dev1", pub.Username, pub.Password)
	eventually(t, "both members to get messages", func() bool {
		dev.Pub(t, acc+"/dev1/event/probe", 1, false, "probe")
		return len(members[0]) > 0 && len(members[1]) > 0
	})
	for drained := false; !drained; { // probes on their way
		select {
		case <-members[0]:
		case <-members[1]:
		case <-time.After(300 * time.Millisecond):
			drained = true
		}
	}
	const n = 60
	for i := range n {
		dev.Pub(t, acc+"/dev1/event/n", 1, false, fmt.Sprint(i))
	}
	dev.Pub(t, acc+"/dev1/event/n", 1, false, "end")
	// Every number and the end, then until nothing came for 300 ms: a
	// copy too many would come by then.
	got := map[string]int{}
	for quiet := false; !quiet; {
		wait := waitFor
		if len(got) == n+1 {
			wait = 300 * time.Millisecond
		}
		select {
		case m := <-members[0]:
			got[string(m.Payload())]++
		case m := <-members[1]:
			got[string(m.Payload())]++
		case <-time.After(wait):
			if len(got) < n+1 {
				t.Fatalf("the group got %d of the %d messages and the end", len(got), n)
			}
			quiet = true
		}
	}
	for i := range n {
		if c := got[fmt.Sprint(i)]; c != 1 {
			t.Fatalf("message %d reached the group %d times, want once", i, c)
		}
	}
}

// TestClusterDocsEnvironment: every FLEETMQ_* variable the systemd unit
// of docs/cluster.md sets is one fleetmq serve reads (its -h names it).
func TestClusterDocsEnvironment(t *testing.T) {
	data, err := os.ReadFile("../../docs/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut lockedBuffer
	run(context.Background(), []string{"serve", "-h"}, &out, &errOut)
	help := errOut.String()
	vars := regexp.MustCompile(`Environment=(FLEETMQ_[A-Z_]+)=`).FindAllStringSubmatch(string(data), -1)
	if len(vars) < 5 {
		t.Fatalf("docs/cluster.md sets %d FLEETMQ_ variables; the systemd unit is gone?", len(vars))
	}
	for _, v := range vars {
		if !strings.Contains(help, "["+v[1]+"]") {
			t.Errorf("docs/cluster.md sets %s, which fleetmq serve does not read", v[1])
		}
	}
}

// TestClusterNoisyNeighbour: one account floods the cluster (devices
// publishing QoS 0 telemetry as fast as its plan allows through node 1,
// to a subscriber on node 2 that stops reading) while another account's
// device sends QoS 1 messages through node 1 to its subscriber on node 2.
// The quiet account loses nothing and no message of it waits 2 s, as in
// the single-node abuse suite; its latencies before and during the flood
// are logged (the machine is shared: they are not asserted).
func TestClusterNoisyNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir := pgtest.DSN(t), t.TempDir()
	victim, vPub, vSub := clusterAccount(t, dir, dsn, "Victim", "dev1")
	attacker := createAccount(t, dir, "Attacker", "attacker@example.com", "-database", dsn, "-plan", "scale").ID
	const flooders = 4
	for i := range flooders {
		mustCLI(t, dir, "client", "add", attacker, fmt.Sprintf("flood-%d", i), "-database", dsn)
	}
	aPub := createCredential(t, dir, attacker, "-kind", "publisher", "-database", dsn)
	aSub := createCredential(t, dir, attacker, "-kind", "subscriber", "-database", dsn)
	nodes := startCluster(t, dsn, 2)

	got := connectV3(t, nodes[1].addr, "follower", vSub.Username, vSub.Password).Subscription(t, victim+"/#", 1)
	dev := connectV3(t, nodes[0].addr, "dev1", vPub.Username, vPub.Password)
	crossed(t, dev, victim+"/dev1/event/probe", got)
	// phase sends n QoS 1 messages, one every 20 ms, and returns each
	// one's latency from publish to delivery on the other node.
	phase := func(name string, n int) []time.Duration {
		var lats []time.Duration
		for i := range n {
			sent := time.Now()
			dev.Pub(t, victim+"/dev1/event/quiet", 1, false, fmt.Sprintf("%s %d %d", name, i, sent.UnixNano()))
			select {
			case m := <-got:
				if want := fmt.Sprintf("%s %d %d", name, i, sent.UnixNano()); string(m.Payload()) != want {
					t.Fatalf("%s: got %q, want %q", name, m.Payload(), want)
				}
				lats = append(lats, time.Since(sent))
			case <-time.After(2 * time.Second):
				t.Fatalf("%s: message %d of the quiet account did not cross within 2 s", name, i)
			}
			time.Sleep(20 * time.Millisecond) // the quiet device's pace, not a wait for an event
		}
		return lats
	}
	base := phase("baseline", 50)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()
	stuck := connectV3(t, nodes[1].addr, "stuck", aSub.Username, aSub.Password)
	mqtttest.Await(t, "the attacker's subscription", stuck.Subscribe(attacker+"/#", 1, func(mqtt3.Client, mqtt3.Message) { <-stop }))
	var flooded atomic.Int64
	for i := range flooders {
		id := fmt.Sprintf("flood-%d", i)
		c := connectV3(t, nodes[0].addr, id, aPub.Username, aPub.Password)
		wg.Go(func() {
			payload := strings.Repeat("x", 200)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.Publish(attacker+"/"+id+"/telemetry/flood", 0, false, payload).WaitTimeout(waitFor)
				flooded.Add(1)
			}
		})
	}
	eventually(t, "the flood to be under way", func() bool { return flooded.Load() > 2000 })
	during := phase("flood", 50)
	t.Logf("quiet account across nodes: p50 %v / max %v before, p50 %v / max %v during a flood (%d messages sent by the flooders)",
		percentile(base, 50), percentile(base, 100), percentile(during, 50), percentile(during, 100), flooded.Load())
}

// percentile returns the p-th percentile of ds (100: the largest).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*p/100)]
}
