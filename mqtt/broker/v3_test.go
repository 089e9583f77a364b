package broker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestV3QoSFlows sends QoS 0, 1 and 2 between paho.mqtt.golang (3.1.1)
// clients subscribed at each QoS, and across versions (3.1.1 to 5 and 5 to
// 3.1.1): delivery is at min(published, granted) and every outbound
// handshake completes (nothing is left in flight).
func TestV3QoSFlows(t *testing.T) {
	b := startBroker(t, broker.Options{})
	pub3 := mqtttest.DialV3(t, b.Addr, "v3-pub")
	pub5 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("v5-pub"))
	for sq := byte(0); sq <= 2; sq++ {
		s := string('0' + sq)
		sub3 := mqtttest.DialV3(t, b.Addr, "v3-sub"+s)
		in := sub3.Subscription(t, "v3q/"+s+"/#", sq)
		sub5 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("v5-sub"+s))
		sub5.MustSubscribe(t, paho.SubscribeOptions{Topic: "v3q/" + s + "/#", QoS: sq})
		for pq := byte(0); pq <= 2; pq++ {
			p := string('0' + pq)
			tp := "v3q/" + s + "/" + p
			mqtttest.Await(t, "publish", pub3.Publish(tp, pq, false, "from3-"+p))
			mqtttest.ExpectV3(t, in, tp, "from3-"+p, min(pq, sq))
			hdExpectV5(t, sub5, tp, "from3-"+p, min(pq, sq))
			pub5.MustPublish(t, &paho.Publish{Topic: tp, QoS: pq, Payload: []byte("from5-" + p)})
			mqtttest.ExpectV3(t, in, tp, "from5-"+p, min(pq, sq))
			hdExpectV5(t, sub5, tp, "from5-"+p, min(pq, sq))
		}
	}
	eventually(t, "outbound handshakes complete", func() bool { return b.Stats().Inflight == 0 })
	st := b.Stats()
	for q := range 3 {
		if st.PublishIn[q] != 6 {
			t.Fatalf("PublishIn[%d] = %d, want 6", q, st.PublishIn[q])
		}
	}
}

// TestV3PersistentSession: a 3.1.1 client with CleanSession false gets the
// QoS 1 messages published while it was offline after reconnecting (with
// Session Present), but not the QoS 0 one; a clean reconnect discards the
// session.
func TestV3PersistentSession(t *testing.T) {
	b := startBroker(t, broker.Options{})
	// Messages of the stored subscription arrive before any Subscribe
	// call of the new client: the default handler puts them in Msgs.
	persistent := func(o *mqtt3.ClientOptions) { o.SetCleanSession(false) }
	sub := mqtttest.DialV3(t, b.Addr, "v3-persist", persistent)
	mqtttest.Await(t, "subscribe", sub.Subscribe("persist/#", 1, nil))
	sub.Disconnect(250)
	eventually(t, "the subscriber is offline", func() bool { return b.Stats().Connections == 0 })

	pub := mqtttest.DialV3(t, b.Addr, "v3-persist-pub")
	pub.Pub(t, "persist/a", 1, false, "one")
	pub.Pub(t, "persist/b", 0, false, "qos0 while offline")
	pub.Pub(t, "persist/c", 1, false, "two")
	pub.Pub(t, "persist/a", 1, false, "three")
	eventually(t, "three messages queued", func() bool { return b.Stats().Queued == 3 })

	sub2 := mqtttest.DialV3(t, b.Addr, "v3-persist", persistent)
	if !sub2.SessionPresent {
		t.Fatal("reconnect: Session Present is 0")
	}
	mqtttest.ExpectV3(t, sub2.Msgs, "persist/a", "one", 1)
	mqtttest.ExpectV3(t, sub2.Msgs, "persist/c", "two", 1)
	mqtttest.ExpectV3(t, sub2.Msgs, "persist/a", "three", 1)
	// The QoS 0 message was not queued: the next message is a live one.
	pub.Pub(t, "persist/live", 1, false, "live")
	mqtttest.ExpectV3(t, sub2.Msgs, "persist/live", "live", 1)
	if d := b.Stats().Drops[broker.DropOffline]; d != 1 {
		t.Fatalf("offline_qos0 drops = %d, want 1", d)
	}
	if len(sub.Msgs) != 0 {
		t.Fatalf("the first connection received %d messages", len(sub.Msgs))
	}

	// A clean reconnect finds no session, and the subscription is gone.
	sub2.Disconnect(250)
	eventually(t, "the subscriber is offline", func() bool { return b.Stats().Connections == 1 })
	if c3 := mqtttest.DialV3(t, b.Addr, "v3-persist"); c3.SessionPresent {
		t.Fatal("clean reconnect: Session Present is 1")
	}
	if n := b.Stats().Subscriptions; n != 0 {
		t.Fatalf("%d subscriptions left after a clean reconnect", n)
	}
}

// TestV3Will: a 3.1.1 client whose TCP connection drops without DISCONNECT
// has its will published; one that sends DISCONNECT does not.
func TestV3Will(t *testing.T) {
	b := startBroker(t, broker.Options{})
	watch := mqtttest.DialV3(t, b.Addr, "will-watcher")
	wills := watch.Subscription(t, "will/#", 1)

	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{
		ProtocolLevel: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: "will-raw",
		Will: &packet.Will{Topic: "will/raw", Payload: []byte("raw gone"), QoS: 1},
	})
	rc.Conn.Close() // abnormal: no DISCONNECT
	mqtttest.ExpectV3(t, wills, "will/raw", "raw gone", 1)
	// Only the watcher is left (the count drops after the will is out).
	eventually(t, "the raw client is gone", func() bool { return b.Stats().Connections == 1 })

	// paho.mqtt.golang with a will, disconnecting cleanly: no will.
	polite := mqtttest.DialV3(t, b.Addr, "will-polite", func(o *mqtt3.ClientOptions) {
		o.SetWill("will/polite", "polite gone", 1, false)
	})
	polite.Disconnect(250)
	eventually(t, "the polite client is gone", func() bool { return b.Stats().Connections == 1 })
	// A raw client with a will that sends DISCONNECT: no will either.
	rc2, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{
		ProtocolLevel: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: "will-raw2",
		Will: &packet.Will{Topic: "will/raw2", Payload: []byte("raw2 gone"), QoS: 1},
	})
	rc2.Must(t, &packet.Disconnect{})
	if got := rc2.Closed(t); len(got) != 0 {
		t.Fatalf("got %v before the close", got)
	}
	eventually(t, "the second raw client is gone", func() bool { return b.Stats().Connections == 1 })

	mqtttest.Await(t, "marker", watch.Publish("will/marker", 1, false, "marker"))
	mqtttest.ExpectV3(t, wills, "will/marker", "marker", 1)
	if n := b.Stats().WillsPublished; n != 1 {
		t.Fatalf("WillsPublished = %d, want 1", n)
	}
}

// TestV3KeepAliveTimeout: a 3.1.1 connection silent for 1.5 times its keep
// alive is closed by the broker (3.1.1 has no server DISCONNECT) and its
// will is published; PINGREQ keeps a connection alive.
func TestV3KeepAliveTimeout(t *testing.T) {
	b := startBroker(t, broker.Options{})
	watch := mqtttest.DialV3(t, b.Addr, "ka-watcher")
	wills := watch.Subscription(t, "ka/#", 1)

	pinger, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, CleanStart: true, KeepAlive: 1, ClientID: "ka-pinger"})
	start := time.Now()
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{
		ProtocolLevel: packet.Version311, CleanStart: true, KeepAlive: 1, ClientID: "ka-silent",
		Will: &packet.Will{Topic: "ka/silent", Payload: []byte("timed out"), QoS: 1},
	})
	// The pinger pings every 500ms until the silent client is closed.
	closed := make(chan []packet.Packet, 1)
	go func() {
		rc.Conn.SetReadDeadline(time.Now().Add(waitFor))
		var got []packet.Packet
		for {
			p, err := rc.ReadPacket()
			if err != nil {
				closed <- got
				return
			}
			got = append(got, p)
		}
	}()
	var got []packet.Packet
	ping := time.NewTicker(500 * time.Millisecond)
	defer ping.Stop()
wait:
	for {
		select {
		case got = <-closed:
			break wait
		case <-ping.C:
			pinger.Must(t, &packet.Pingreq{})
			pinger.Expect(t, packet.PINGRESP)
		}
	}
	elapsed := time.Since(start)
	if len(got) != 0 {
		t.Fatalf("silent client got %v", got)
	}
	if elapsed < time.Second || elapsed >= waitFor {
		t.Fatalf("silent client closed after %v, want about 1.5s", elapsed)
	}
	mqtttest.ExpectV3(t, wills, "ka/silent", "timed out", 1)
	// The pinger is still connected.
	pinger.Must(t, &packet.Pingreq{})
	pinger.Expect(t, packet.PINGRESP)
}

// hdCapPolicy caps clients whose id starts with "capped" at QoS 1.
type hdCapPolicy struct{ broker.OpenPolicy }

func (p hdCapPolicy) Authenticate(ctx context.Context, req *broker.ConnectRequest) (*broker.Identity, error) {
	id, err := p.OpenPolicy.Authenticate(ctx, req)
	if id != nil && strings.HasPrefix(req.Connect.ClientID, "capped") {
		id.Limits.CapQoS, id.Limits.MaxQoS = true, 1
	}
	return id, err
}

// TestV3PublishViolationsClose: a 3.1.1 PUBLISH above the client's maximum
// QoS, or to a topic name with a wildcard, closes the connection without an
// acknowledgement and is not delivered.
func TestV3PublishViolationsClose(t *testing.T) {
	b := startBroker(t, broker.Options{Policy: hdCapPolicy{}})
	watch := mqtttest.DialV3(t, b.Addr, "viol-watcher")
	in := watch.Subscription(t, "#", 2)

	cases := []struct {
		name string
		id   string
		p    *packet.Publish
	}{
		{"qos2 over max 1", "capped-1", &packet.Publish{QoS: 2, PacketID: 1, Topic: "viol/qos", Payload: []byte("x")}},
		{"plus in topic", "free-1", &packet.Publish{QoS: 1, PacketID: 1, Topic: "viol/+/x", Payload: []byte("x")}},
		{"hash in topic", "free-2", &packet.Publish{QoS: 0, Topic: "viol/#", Payload: []byte("x")}},
		{"empty topic", "free-3", &packet.Publish{QoS: 1, PacketID: 1, Topic: "", Payload: []byte("x")}},
	}
	for i, tc := range cases {
		rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ProtocolLevel: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: tc.id})
		// A valid publish first: the connection works until the violation.
		ok := fmt.Sprintf("ok-%d", i)
		rc.Must(t, &packet.Publish{QoS: 1, PacketID: 7, Topic: "viol/ok", Payload: []byte(ok)})
		rc.Expect(t, packet.PUBACK)
		mqtttest.ExpectV3(t, in, "viol/ok", ok, 1)
		errsBefore := b.Stats().ProtocolErrors
		rc.Must(t, tc.p)
		if got := rc.Closed(t); len(got) != 0 {
			t.Fatalf("%s: got %v before the close, want nothing", tc.name, got)
		}
		eventually(t, tc.name+": protocol error counted", func() bool { return b.Stats().ProtocolErrors == errsBefore+1 })
	}
	// A capped client may still publish at its maximum.
	capped := mqtttest.DialV3(t, b.Addr, "capped-2")
	mqtttest.Await(t, "capped publish", capped.Publish("viol/capped", 1, false, "at max"))
	mqtttest.ExpectV3(t, in, "viol/capped", "at max", 1)
	// Nothing of the refused publishes was delivered.
	mqtttest.Await(t, "marker", watch.Publish("viol/marker", 1, false, "marker"))
	mqtttest.ExpectV3(t, in, "viol/marker", "marker", 1)
}
