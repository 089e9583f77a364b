package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/contract"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

var quiet = slog.New(slog.DiscardHandler)

// TestRouterContract: on one node (its embedded NATS alone) the cluster
// router meets the contract of every router.
func TestRouterContract(t *testing.T) {
	contract.Router(t, func(t *testing.T) broker.Router {
		n := startNATS(t, "solo")
		r, err := NewRouter(n, "solo", quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	})
}

func startNATS(t *testing.T, name string, routes ...string) *NATS {
	t.Helper()
	n, err := StartNATS(NATSOptions{Name: name, ClusterListen: "127.0.0.1:0", Routes: routes, MaxPayload: 2 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// node is one broker server of a test cluster.
type node struct {
	name   string
	nats   *NATS
	router *Router
	srv    *broker.Server
	addr   string
}

// startCluster starts n nodes in this process: embedded NATS servers
// routed to the first, a broker server with a cluster router on each.
func startCluster(t *testing.T, n int) []*node {
	t.Helper()
	var nodes []*node
	for i := range n {
		name := fmt.Sprintf("node%d", i+1)
		var routes []string
		if i > 0 {
			routes = []string{nodes[0].nats.ClusterAddr()}
		}
		nn := &node{name: name, nats: startNATS(t, name, routes...)}
		r, err := NewRouter(nn.nats, name, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		srv, err := broker.New(broker.Options{Router: r, Node: name, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		r.Attach(srv)
		t.Cleanup(func() { srv.Close(context.Background()) })
		ln, err := srv.ListenTCP("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nn.router, nn.srv, nn.addr = r, srv, ln.Addr().String()
		nodes = append(nodes, nn)
	}
	testkit.Eventually(t, 10*time.Second, "the NATS routes between the nodes", func() bool {
		for _, nn := range nodes {
			if nn.nats.Routes() < n-1 {
				return false
			}
		}
		return true
	})
	return nodes
}

// reaches publishes probes from pub until sub receives one: the
// subscription's interest has reached the publisher's node. The probes
// are on topic, which the test's other messages do not use.
func reaches(t *testing.T, pub *mqtttest.V3, topic string, sub chan mqtt3.Message) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the subscription's interest to reach the publisher's node", func() bool {
		pub.Pub(t, topic, 0, false, "probe")
		select {
		case <-sub:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
	drain(sub)
}

// drain empties the channels of messages still on their way (probes):
// it returns once none has come for 300 ms.
func drain(chs ...chan mqtt3.Message) {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv}}
	for _, ch := range chs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for {
		cases[0].Chan = reflect.ValueOf(time.After(300 * time.Millisecond))
		if i, _, _ := reflect.Select(cases); i == 0 {
			return
		}
	}
}

// TestAcrossNodes: a message published on one node reaches the matching
// subscribers on every node at the QoS it should, each once and in the
// order sent, also when a node's filters overlap; a node whose sessions
// subscribe to nothing matching receives nothing.
func TestAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	a, b := nodes[0], nodes[1]
	sub := mqtttest.DialV3(t, b.addr, "sub-b")
	all := sub.Subscription(t, "acct/+/state/#", 2)
	overlap := sub.Subscription(t, "acct/dev1/state/x", 1) // the same session, a second matching filter
	local := mqtttest.DialV3(t, a.addr, "sub-a")
	here := local.Subscription(t, "acct/#", 1)
	pub := mqtttest.DialV3(t, a.addr, "dev1")
	reaches(t, pub, "acct/dev1/state/probe", all)
	drain(all, here, overlap)

	const n = 50
	for i := range n {
		pub.Pub(t, "acct/dev1/state/x", byte(i%3), false, fmt.Sprint(i))
	}
	pub.Pub(t, "acct/dev1/event/other", 1, false, "not for b") // matches only node a's subscriber
	// paho hands a message matching two of a session's subscriptions to
	// each handler; the broker sends it once, at the higher QoS.
	for i := range n {
		m := mqtttest.NextV3(t, all)
		want := min(byte(i%3), 2)
		if string(m.Payload()) != fmt.Sprint(i) || m.Qos() != want {
			t.Fatalf("node b, message %d: got %q at QoS %d, want %q at QoS %d (lost, repeated or reordered)", i, m.Payload(), m.Qos(), fmt.Sprint(i), want)
		}
		if o := mqtttest.NextV3(t, overlap); string(o.Payload()) != fmt.Sprint(i) {
			t.Fatalf("node b, overlapping filter, message %d: got %q", i, o.Payload())
		}
	}
	for i := range n {
		if m := mqtttest.NextV3(t, here); string(m.Payload()) != fmt.Sprint(i) || m.Qos() != min(byte(i%3), 1) {
			t.Fatalf("node a, message %d: got %q at QoS %d", i, m.Payload(), m.Qos())
		}
	}
	if m := mqtttest.NextV3(t, here); string(m.Payload()) != "not for b" {
		t.Fatalf("node a: got %q, want the event", m.Payload())
	}
	pub.Pub(t, "acct/dev1/state/x", 1, false, "end")
	if m := mqtttest.NextV3(t, all); string(m.Payload()) != "end" {
		t.Fatalf("node b after the batch: got %q, want end (a message came twice)", m.Payload())
	}
	if d := b.router.Stats().Duplicates.Load(); d == 0 {
		t.Errorf("node b counted no duplicate copies, though two of its filters match every message")
	}
	if got := nodes[2].router.Stats().Received.Load(); got != 0 {
		t.Errorf("node c, with no subscriber, received %d messages; want 0 (interest decides)", got)
	}
}

// TestSharedAcrossNodes: a shared subscription whose members are on
// different nodes gets each message once in all, wherever it was
// published, while a plain subscriber gets every one.
func TestSharedAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	var members []chan mqtt3.Message
	for i, nn := range nodes[:2] {
		c := mqtttest.DialV3(t, nn.addr, fmt.Sprintf("member-%d", i))
		members = append(members, c.Subscription(t, "$share/workers/jobs/#", 1))
	}
	watcher := mqtttest.DialV3(t, nodes[2].addr, "watcher")
	everything := watcher.Subscription(t, "jobs/#", 1)
	pubs := []*mqtttest.V3{mqtttest.DialV3(t, nodes[0].addr, "pub-0"), mqtttest.DialV3(t, nodes[2].addr, "pub-2")}
	reaches(t, pubs[0], "jobs/probe", everything)
	// Both members' queue subscriptions reach both publishers' nodes.
	testkit.Eventually(t, 10*time.Second, "both members to get messages from both publishers' nodes", func() bool {
		for _, p := range pubs {
			p.Pub(t, "jobs/probe", 1, false, "probe")
		}
		return nodes[0].router.Stats().SharedReceived.Load() > 0 && nodes[1].router.Stats().SharedReceived.Load() > 0
	})
	drain := func() {
		deadline := time.After(300 * time.Millisecond) // probes still on their way
		for {
			select {
			case <-members[0]:
			case <-members[1]:
			case <-everything:
			case <-deadline:
				return
			}
		}
	}
	drain()

	const n = 200
	for i := range n {
		pubs[i%2].Pub(t, "jobs/"+fmt.Sprint(i%5), 1, false, fmt.Sprint(i))
	}
	seen := map[string]int{}
	for range n {
		seen[string(mqtttest.NextV3(t, everything).Payload())]++
	}
	got := map[string]int{}
	perMember := make([]int, 2)
	testkit.Eventually(t, 10*time.Second, "every message to reach one member", func() bool {
		for i, ch := range members {
			for len(ch) > 0 {
				got[string((<-ch).Payload())]++
				perMember[i]++
			}
		}
		return len(got) == n
	})
	for i := range n {
		if got[fmt.Sprint(i)] != 1 || seen[fmt.Sprint(i)] != 1 {
			t.Fatalf("message %d: %d copies to the group, %d to the plain subscriber; want 1 and 1", i, got[fmt.Sprint(i)], seen[fmt.Sprint(i)])
		}
	}
	if perMember[0] == 0 || perMember[1] == 0 {
		t.Errorf("members got %v: the group's messages should be spread over both nodes", perMember)
	}
	pubs[0].Pub(t, "jobs/end", 1, false, "end")
	testkit.Eventually(t, 10*time.Second, "the barrier to reach a member", func() bool {
		for _, ch := range members {
			if len(ch) > 0 {
				if p := string((<-ch).Payload()); p != "end" {
					t.Fatalf("after every message was counted, a member got %q again", p)
				}
				return true
			}
		}
		return false
	})
}

// TestV5AcrossNodes: MQTT 5 properties and No Local hold across nodes.
func TestV5AcrossNodes(t *testing.T) {
	nodes := startCluster(t, 2)
	got := make(chan *paho.Publish, 100)
	sub := mqtttest.DialV5(t, nodes[1].addr, mqtttest.Clean("v5-sub"), func(c *paho.ClientConfig) {
		c.OnPublishReceived = append(c.OnPublishReceived, func(p paho.PublishReceived) (bool, error) { got <- p.Packet; return true, nil })
	})
	sub.MustSubscribe(t, paho.SubscribeOptions{Topic: "v5/#", QoS: 1})
	// The same client id's session cannot be on two nodes; No Local is
	// about the publisher's own session: a client subscribed with No
	// Local on node b whose messages published on node b come back.
	self := mqtttest.DialV5(t, nodes[1].addr, mqtttest.Clean("v5-self"), func(c *paho.ClientConfig) {
		c.OnPublishReceived = append(c.OnPublishReceived, func(p paho.PublishReceived) (bool, error) { got <- p.Packet; return true, nil })
	})
	self.MustSubscribe(t, paho.SubscribeOptions{Topic: "v5/self", QoS: 1, NoLocal: true})
	pub := mqtttest.DialV5(t, nodes[0].addr, mqtttest.Clean("v5-pub"))
	expiry := uint32(3600)
	testkit.Eventually(t, 10*time.Second, "interest to reach node a", func() bool {
		if _, err := pub.TryPublish(&paho.Publish{Topic: "v5/probe", QoS: 0, Payload: []byte("probe")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
	for len(got) > 0 {
		<-got
	}
	if _, err := pub.TryPublish(&paho.Publish{Topic: "v5/props", QoS: 1, Payload: []byte("p"), Properties: &paho.PublishProperties{
		ContentType: "application/json", ResponseTopic: "v5/reply", CorrelationData: []byte{1, 2, 3},
		MessageExpiry: &expiry, User: paho.UserProperties{{Key: "k", Value: "v"}}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		pp := p.Properties
		if string(p.Payload) != "p" || pp == nil || pp.ContentType != "application/json" || pp.ResponseTopic != "v5/reply" ||
			string(pp.CorrelationData) != "\x01\x02\x03" || pp.MessageExpiry == nil || *pp.MessageExpiry > expiry || *pp.MessageExpiry < expiry-60 ||
			len(pp.User) != 1 || pp.User[0].Key != "k" || pp.User[0].Value != "v" {
			t.Fatalf("across nodes the message became %q with %+v", p.Payload, pp)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the MQTT 5 message did not cross")
	}
	if _, err := self.TryPublish(&paho.Publish{Topic: "v5/self", QoS: 1, Payload: []byte("mine")}); err != nil {
		t.Fatal(err)
	}
	// v5-sub gets it (v5/#); v5-self, subscribed with No Local, does not.
	p := <-got
	if string(p.Payload) != "mine" {
		t.Fatalf("got %q", p.Payload)
	}
	if _, err := pub.TryPublish(&paho.Publish{Topic: "v5/self", QoS: 1, Payload: []byte("from a")}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // both get node a's message
		if p := <-got; string(p.Payload) != "from a" {
			t.Fatalf("got %q, want node a's message (No Local let the session's own message through?)", p.Payload)
		}
	}
}

// TestLongTopicsCross: a topic whose subject would pass NATS's protocol
// line limit crosses like any other (on the long-topic subject), and
// leaves the node's NATS connections up for the messages after it.
func TestLongTopicsCross(t *testing.T) {
	nodes := startCluster(t, 2)
	sub := mqtttest.DialV3(t, nodes[1].addr, "sub")
	got := sub.Subscription(t, "acct/#", 1)
	longFilter := "acct/" + strings.Repeat("x", 4000) + "/#" // its subject is long too
	gotLong := sub.Subscription(t, longFilter, 1)
	pub := mqtttest.DialV3(t, nodes[0].addr, "pub")
	reaches(t, pub, "acct/probe", got)
	long := "acct/" + strings.Repeat(".", 30000)
	pub.Pub(t, long, 1, false, "long")
	pub.Pub(t, "acct/"+strings.Repeat("x", 4000)+"/y", 1, false, "long filter")
	// A short filter with a wildcard gets a long topic too (sub2 on node
	// 2, and a shared group with its member on node 2).
	sub2 := mqtttest.DialV3(t, nodes[1].addr, "sub2")
	gotPlus := sub2.Subscription(t, "acct2/+", 1)
	gotShared := mqtttest.DialV3(t, nodes[1].addr, "member").Subscription(t, "$share/g/acct2/+", 1)
	reaches(t, pub, "acct2/probe", gotPlus)
	testkit.Eventually(t, 10*time.Second, "the shared group to hear node 1", func() bool {
		pub.Pub(t, "acct2/probe", 1, false, "probe")
		return len(gotShared) > 0
	})
	drain(gotShared, gotPlus)
	longLevel := "acct2/" + strings.Repeat("z", 5000)
	pub.Pub(t, longLevel, 1, false, "long level")
	if m := mqtttest.NextV3(t, gotPlus); string(m.Payload()) != "long level" {
		t.Fatalf("acct2/+ got %q, want the long level's message", m.Payload())
	}
	if m := mqtttest.NextV3(t, gotShared); string(m.Payload()) != "long level" {
		t.Fatalf("$share/g/acct2/+ got %q, want the long level's message", m.Payload())
	}
	for i := range 10 {
		pub.Pub(t, "acct/n", 1, false, fmt.Sprint(i))
	}
	if m := mqtttest.NextV3(t, got); m.Topic() != long || string(m.Payload()) != "long" {
		t.Fatalf("got %q on a topic of %d bytes, want the long topic's message", m.Payload(), len(m.Topic()))
	}
	if m := mqtttest.NextV3(t, got); string(m.Payload()) != "long filter" {
		t.Fatalf("got %q, want the message for the long filter", m.Payload())
	}
	if m := mqtttest.NextV3(t, gotLong); string(m.Payload()) != "long filter" {
		t.Fatalf("the long filter got %q", m.Payload())
	}
	for i := range 10 {
		if m := mqtttest.NextV3(t, got); string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("after the long topics, message %d: got %q", i, m.Payload())
		}
	}
	if !nodes[0].router.Connected() || nodes[0].router.Stats().SendErrors.Load() != 0 {
		t.Fatalf("node 1's router: connected %v, %d send errors", nodes[0].router.Connected(), nodes[0].router.Stats().SendErrors.Load())
	}
}

// TestSharedOverlappingGroups: two shared subscriptions of one group
// whose filters overlap ("a" and "a/#") are two subscriptions: each gets
// every matching message, as on one node.
func TestSharedOverlappingGroups(t *testing.T) {
	nodes := startCluster(t, 2)
	x := mqtttest.DialV3(t, nodes[1].addr, "x").Subscription(t, "$share/g/acct/a", 1)
	y := mqtttest.DialV3(t, nodes[1].addr, "y").Subscription(t, "$share/g/acct/a/#", 1)
	pub := mqtttest.DialV3(t, nodes[0].addr, "pub")
	testkit.Eventually(t, 10*time.Second, "both groups to hear node 1", func() bool {
		pub.Pub(t, "acct/a", 1, false, "probe")
		return len(x) > 0 && len(y) > 0
	})
	deadline := time.After(300 * time.Millisecond)
	for drained := false; !drained; {
		select {
		case <-x:
		case <-y:
		case <-deadline:
			drained = true
		}
	}
	for i := range 20 {
		pub.Pub(t, "acct/a", 1, false, fmt.Sprint(i))
	}
	for name, ch := range map[string]chan mqtt3.Message{"$share/g/acct/a": x, "$share/g/acct/a/#": y} {
		for i := range 20 {
			if m := mqtttest.NextV3(t, ch); string(m.Payload()) != fmt.Sprint(i) {
				t.Fatalf("%s, message %d: got %q", name, i, m.Payload())
			}
		}
	}
}

// TestRouteSecret: nodes sharing a route secret form a full mesh (the
// routes NATS finds by gossip present it too); a node with another secret
// is refused and routed to no one.
func TestRouteSecret(t *testing.T) {
	start := func(name, secret string, log *slog.Logger, routes ...string) *NATS {
		n, err := StartNATS(NATSOptions{Name: name, ClusterListen: "127.0.0.1:0", Routes: routes, RouteSecret: secret, MaxPayload: 2 << 20, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	a := start("s1", "right", quiet)
	b := start("s2", "right", quiet, a.ClusterAddr())
	c := start("s3", "right", quiet, a.ClusterAddr()) // finds s2 through s1
	testkit.Eventually(t, 10*time.Second, "a full mesh of the three", func() bool {
		return a.Routes() == 2 && b.Routes() == 2 && c.Routes() == 2
	})
	log, logged := testkit.NewLog()
	bad := start("s4", "wrong", log, a.ClusterAddr())
	testkit.Eventually(t, 10*time.Second, "the node with another secret to be refused", func() bool {
		return strings.Contains(strings.ToLower(logged.String()), "authorization")
	})
	if bad.Routes() != 0 || a.Routes() != 2 {
		t.Fatalf("after the refusal: the outsider has %d routes, s1 %d; want 0 and 2", bad.Routes(), a.Routes())
	}
}

// TestDollarTopicKeepsTheShare: a message on a topic starting with '$'
// reaches the NATS queue subscription of "$share/g/#" (NATS's ">" matches
// it) but no member (MQTT's leading wildcards do not [MQTT-4.7.2-1]): it
// is not the group's, so the node neither hands it back nor leaves the
// group, and its member gets the next message.
func TestDollarTopicKeepsTheShare(t *testing.T) {
	nodes := startCluster(t, 2)
	a, b := nodes[0], nodes[1]
	member := mqtttest.DialV3(t, b.addr, "member")
	got := member.Subscription(t, "$share/g/#", 1)
	pub := mqtttest.DialV3(t, a.addr, "pub")
	testkit.Eventually(t, 10*time.Second, "the member's queue subscription to be heard", func() bool {
		pub.Pub(t, "probe", 1, false, "probe")
		select {
		case <-got:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	drain(got)
	st := b.router.Stats()
	before := st.SharedReceived.Load()
	pub.Pub(t, "$app/status", 1, false, "dollar")
	testkit.Eventually(t, 5*time.Second, "the '$' message at b's queue subscription", func() bool { return st.SharedReceived.Load() > before })
	if n := st.SharedRerouted.Load(); n != 0 {
		t.Fatalf("b handed %d messages back to the group", n)
	}
	pub.Pub(t, "jobs/1", 1, false, "after")
	select {
	case m := <-got:
		if string(m.Payload()) != "after" {
			t.Fatalf("member got %q", m.Payload())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the member, still subscribed, gets nothing after a '$' topic was published: its node left the group")
	}
}
