package broker_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Acknowledgements of the wrong kind, and QoS 2 retransmitted on a new
// connection (docs/broker.md, "Acknowledgements of the wrong kind"). Helpers
// are prefixed ak.

// akCommitPolicy stands in for the platform's "acked means stored" policy:
// every accepted message is counted (by payload) as handed to the store;
// those on a topic with a /held/ level are acknowledged only when the test
// says so (Ack or Refuse on the message it takes from held), the others at
// once.
type akCommitPolicy struct {
	broker.OpenPolicy
	mu       sync.Mutex
	accepted map[string]int
	held     chan *broker.Message
}

func newAkCommitPolicy() *akCommitPolicy {
	return &akCommitPolicy{accepted: make(map[string]int), held: make(chan *broker.Message, 64)}
}

func (p *akCommitPolicy) Accepted(_ *broker.Identity, m *broker.Message) bool {
	p.mu.Lock()
	p.accepted[string(m.Payload)]++
	p.mu.Unlock()
	if !strings.Contains(m.Topic, "/held/") {
		return false
	}
	p.held <- m
	return true
}

// stored is how many times the message with payload was handed to the store.
func (p *akCommitPolicy) stored(payload string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted[payload]
}

// take returns the next held message and checks its payload.
func (p *akCommitPolicy) take(tb testing.TB, payload string) *broker.Message {
	tb.Helper()
	select {
	case m := <-p.held:
		if string(m.Payload) != payload {
			tb.Fatalf("held %q, want %q", m.Payload, payload)
		}
		return m
	case <-time.After(waitFor):
		tb.Fatalf("%q was not handed to the store", payload)
		return nil
	}
}

// akVersions names the protocol versions the tests run for.
var akVersions = []struct {
	name    string
	version byte
}{{"3.1.1", packet.Version311}, {"5", packet.Version5}}

// akUsable checks that rc is still served and that nothing came before
// the answer: a PINGREQ gets PINGRESP as the next packet.
func akUsable(tb testing.TB, rc *mqtttest.Raw) {
	tb.Helper()
	rc.Must(tb, &packet.Pingreq{})
	rc.Expect(tb, packet.PINGRESP)
}

// akExpectAck reads an acknowledgement of kind for pid with reason code
// code (v5; a 3.1.1 acknowledgement carries none and reads as Success).
func akExpectAck(tb testing.TB, rc *mqtttest.Raw, kind packet.Type, pid uint16, code packet.ReasonCode) {
	tb.Helper()
	a := hcExpectAck(tb, rc, kind, pid)
	if rc.Version != packet.Version5 {
		code = packet.Success
	}
	if a.ReasonCode != code {
		tb.Fatalf("%v %d with reason code 0x%02x, want 0x%02x", kind, pid, byte(a.ReasonCode), byte(code))
	}
}

// akEndedByProtocolError checks that the server ended rc for a protocol
// error: a 3.1.1 connection is closed with nothing before, a v5 client gets
// DISCONNECT 0x82 first.
func akEndedByProtocolError(tb testing.TB, rc *mqtttest.Raw) {
	tb.Helper()
	got := rc.Closed(tb)
	if rc.Version != packet.Version5 {
		if len(got) != 0 {
			tb.Fatalf("got %+v before the close, want nothing", got)
		}
		return
	}
	if len(got) != 1 {
		tb.Fatalf("got %+v before the close, want one DISCONNECT 0x82", got)
	}
	if d, ok := got[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.ProtocolError {
		tb.Fatalf("got %+v before the close, want DISCONNECT 0x82", got[0])
	}
}

// akDeliver sends a message at qos to rc (subscribed to ak/#) and returns
// the PUBLISH it received.
func akDeliver(tb testing.TB, b *testBroker, rc *mqtttest.Raw, qos byte, payload string) *packet.Publish {
	tb.Helper()
	b.Publish(&broker.Message{Topic: "ak/x", QoS: qos, Payload: []byte(payload)})
	return hcExpectPub(tb, rc, payload, qos, false)
}

// TestAcknowledgementsOfTheWrongKind runs every row of docs/broker.md's
// table "Acknowledgements of the wrong kind" for MQTT 3.1.1 and 5: what the
// client observes (the answer, a DISCONNECT, the close, or the connection
// staying usable) and the close counted when the server ends it.
func TestAcknowledgementsOfTheWrongKind(t *testing.T) {
	const unknown = 4242 // a packet id the server is not using
	ack := func(rc *mqtttest.Raw, kind packet.Type, pid uint16) {
		rc.Must(t, &packet.Ack{Kind: kind, PacketID: pid})
	}
	cases := []struct {
		name  string
		ends  bool // the server ends the connection (protocol error)
		drive func(t *testing.T, b *testBroker, rc *mqtttest.Raw)
	}{
		{"PUBREC for a QoS 1 PUBLISH", true, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			p := akDeliver(t, b, rc, 1, "q1")
			ack(rc, packet.PUBREC, p.PacketID)
		}},
		{"PUBCOMP for a QoS 1 PUBLISH", true, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			p := akDeliver(t, b, rc, 1, "q1")
			ack(rc, packet.PUBCOMP, p.PacketID)
		}},
		{"PUBACK for a QoS 2 PUBLISH awaiting PUBREC", true, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			p := akDeliver(t, b, rc, 2, "q2")
			ack(rc, packet.PUBACK, p.PacketID)
		}},
		{"PUBACK for a QoS 2 PUBLISH awaiting PUBCOMP", true, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			p := akDeliver(t, b, rc, 2, "q2")
			ack(rc, packet.PUBREC, p.PacketID)
			akExpectAck(t, rc, packet.PUBREL, p.PacketID, packet.Success)
			ack(rc, packet.PUBACK, p.PacketID)
		}},
		{"PUBCOMP when waiting for PUBREC", true, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			p := akDeliver(t, b, rc, 2, "q2")
			ack(rc, packet.PUBCOMP, p.PacketID)
		}},
		{"PUBREC when waiting for PUBCOMP", false, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			p := akDeliver(t, b, rc, 2, "q2")
			ack(rc, packet.PUBREC, p.PacketID)
			akExpectAck(t, rc, packet.PUBREL, p.PacketID, packet.Success)
			ack(rc, packet.PUBREC, p.PacketID) // a repeated PUBREC: PUBREL again
			akExpectAck(t, rc, packet.PUBREL, p.PacketID, packet.Success)
			// v5: whatever its reason code (3.1.1 sends none).
			rc.Must(t, &packet.Ack{Kind: packet.PUBREC, PacketID: p.PacketID, ReasonCode: packet.UnspecifiedError})
			akExpectAck(t, rc, packet.PUBREL, p.PacketID, packet.Success)
			akUsable(t, rc)
			ack(rc, packet.PUBCOMP, p.PacketID) // and the flow completes
			hcQueues(t, b, 0, 0)
		}},
		{"PUBACK for an unknown packet id", false, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			ack(rc, packet.PUBACK, unknown)
			akUsable(t, rc) // nothing answered
		}},
		{"PUBACK again after the flow completed", false, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			p := akDeliver(t, b, rc, 1, "q1")
			ack(rc, packet.PUBACK, p.PacketID)
			ack(rc, packet.PUBACK, p.PacketID)
			akUsable(t, rc)
			hcQueues(t, b, 0, 0)
		}},
		{"PUBREC for an unknown packet id", false, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			ack(rc, packet.PUBREC, unknown)
			akExpectAck(t, rc, packet.PUBREL, unknown, packet.PacketIdentifierNotFound)
			akUsable(t, rc)
		}},
		{"PUBCOMP for an unknown packet id", false, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			ack(rc, packet.PUBCOMP, unknown)
			akUsable(t, rc) // nothing answered
		}},
		{"PUBREL for an unknown packet id", false, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			ack(rc, packet.PUBREL, unknown)
			akExpectAck(t, rc, packet.PUBCOMP, unknown, packet.PacketIdentifierNotFound)
			akUsable(t, rc)
		}},
		{"PUBREL before the server's PUBREC", true, func(t *testing.T, b *testBroker, rc *mqtttest.Raw) {
			// The policy has not acknowledged (stored) the message yet.
			rc.Must(t, &packet.Publish{Topic: "ak/held/x", QoS: 2, PacketID: 9, Payload: []byte("held")})
			hcExpectPub(t, rc, "held", 2, false) // routed to the subscription: delivered before it is stored
			ack(rc, packet.PUBREL, 9)
		}},
	}
	for _, v := range akVersions {
		t.Run(v.name, func(t *testing.T) {
			policy := newAkCommitPolicy()
			b := startBroker(t, broker.Options{Policy: policy})
			var ended, left int64 // closes counted as protocol_error and client_disconnect
			for _, tc := range cases {
				rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "ak-wrong", CleanStart: true, KeepAlive: 30, ProtocolLevel: v.version})
				hcSubscribe(t, rc, "ak/#", 2, 0)
				tc.drive(t, b, rc)
				if tc.ends {
					akEndedByProtocolError(t, rc)
					ended++
				} else {
					rc.Must(t, &packet.Disconnect{})
					rc.Closed(t)
					left++
				}
				eventually(t, tc.name+": closes counted", func() bool {
					st := b.Stats()
					return st.Closes[broker.CloseProtocolError] == ended && st.Closes[broker.CloseClientDisconnect] == left
				})
			}
		})
	}
}

// TestAcknowledgementsOnResumedSession: a resumed session's new connection
// acknowledges what its previous connection was sent (PUBACK and PUBREC
// for the PUBLISHes resent with DUP, PUBCOMP for the PUBREL resent, a
// PUBREC repeated from before), and that is no protocol error, under MQTT
// 3.1.1 and 5.
func TestAcknowledgementsOnResumedSession(t *testing.T) {
	for _, v := range akVersions {
		t.Run(v.name, func(t *testing.T) {
			b := startBroker(t, broker.Options{})
			cp := func(clean bool) *packet.Connect {
				c := &packet.Connect{ClientID: "ak-resume", CleanStart: clean, KeepAlive: 30, ProtocolLevel: v.version}
				if v.version == packet.Version5 {
					c.Properties.SetSessionExpiry(300)
				} else {
					c.CleanStart = false // a persistent 3.1.1 session
				}
				return c
			}
			rc, _ := mqtttest.ConnectRaw(t, b.Addr, cp(true))
			hcSubscribe(t, rc, "ak/#", 2, 0)
			p1 := akDeliver(t, b, rc, 1, "one")
			p2 := akDeliver(t, b, rc, 2, "two")
			p3 := akDeliver(t, b, rc, 2, "three")
			rc.Must(t, &packet.Ack{Kind: packet.PUBREC, PacketID: p3.PacketID})
			akExpectAck(t, rc, packet.PUBREL, p3.PacketID, packet.Success)
			rc.Conn.Close()
			hcConns(t, b, 0)

			rc, ack := mqtttest.ConnectRaw(t, b.Addr, cp(false))
			if !ack.SessionPresent {
				t.Fatal("session not present")
			}
			hcExpectPub(t, rc, "one", 1, true)
			hcExpectPub(t, rc, "two", 2, true)
			akExpectAck(t, rc, packet.PUBREL, p3.PacketID, packet.Success)
			for _, a := range []packet.Ack{
				{Kind: packet.PUBACK, PacketID: p1.PacketID},
				{Kind: packet.PUBREC, PacketID: p3.PacketID}, // repeated from the first connection
				{Kind: packet.PUBREC, PacketID: p2.PacketID},
			} {
				rc.Must(t, &a)
			}
			akExpectAck(t, rc, packet.PUBREL, p3.PacketID, packet.Success)
			akExpectAck(t, rc, packet.PUBREL, p2.PacketID, packet.Success)
			rc.Must(t, &packet.Ack{Kind: packet.PUBCOMP, PacketID: p3.PacketID})
			rc.Must(t, &packet.Ack{Kind: packet.PUBCOMP, PacketID: p2.PacketID})
			akUsable(t, rc)
			hcQueues(t, b, 0, 0)
			if n := b.Stats().Closes[broker.CloseProtocolError]; n != 0 {
				t.Fatalf("%d protocol_error closes", n)
			}
		})
	}
}

// akSub is a paho subscriber to rt/# at QoS 2 (paho.golang for MQTT 5,
// paho.mqtt.golang for 3.1.1) that gives its messages in arrival order.
type akSub struct {
	Next func(tb testing.TB) string
}

func dialAkSub(tb testing.TB, b *testBroker, version byte) *akSub {
	tb.Helper()
	if version == packet.Version5 {
		c := mqtttest.DialV5(tb, b.Addr, mqtttest.Clean("rt-sub"))
		c.MustSubscribe(tb, paho.SubscribeOptions{Topic: "rt/#", QoS: 2})
		return &akSub{Next: func(tb testing.TB) string { tb.Helper(); return string(c.Next(tb).Payload) }}
	}
	in := mqtttest.DialV3(tb, b.Addr, "rt-sub").Subscription(tb, "rt/#", 2)
	return &akSub{Next: func(tb testing.TB) string { tb.Helper(); return string(mqtttest.NextV3(tb, in).Payload()) }}
}

// expect checks that the next messages are payloads, in order.
func (s *akSub) Expect(tb testing.TB, payloads ...string) {
	tb.Helper()
	for _, want := range payloads {
		if got := s.Next(tb); got != want {
			tb.Fatalf("subscriber got %q, want %q", got, want)
		}
	}
}

// once proves that nothing arrived since the last expect: a marker sent
// now is the next message (one session's messages keep their order).
func (s *akSub) once(tb testing.TB, b *testBroker, name string) {
	tb.Helper()
	marker := "marker " + name
	b.Publish(&broker.Message{Topic: "rt/marker", QoS: 1, Payload: []byte(marker)})
	if got := s.Next(tb); got != marker {
		tb.Fatalf("subscriber got %q again, or another message, before %q", got, marker)
	}
}

// TestQoS2RetransmittedOnNewConnection: a client publishes at QoS 2 on a
// persistent session, loses the connection before it sends PUBREL (after
// or before the server's PUBREC reached it, or while the policy is still
// storing the message), reconnects and sends the PUBLISH again with DUP
// and the same packet id, then PUBREL, or only PUBREL. The server answers
// PUBREC, then PUBCOMP; the message is delivered once and handed to the
// store once, and never acknowledged before it is stored
// ([MQTT-4.3.3-2], v5 [MQTT-4.3.3-10], [MQTT-4.4.0-1]). Under MQTT 3.1.1
// and 5, with a paho subscriber counting deliveries.
func TestQoS2RetransmittedOnNewConnection(t *testing.T) {
	const recvMax = 3
	for _, v := range akVersions {
		t.Run(v.name, func(t *testing.T) {
			policy := newAkCommitPolicy()
			b := startBroker(t, broker.Options{Policy: policy, ReceiveMaximum: recvMax})
			sub := dialAkSub(t, b, v.version)
			// connect opens the publisher's session (first) or resumes it.
			connect := func(t *testing.T, id string, first bool) *mqtttest.Raw {
				t.Helper()
				c := &packet.Connect{ClientID: id, CleanStart: first, KeepAlive: 30, ProtocolLevel: v.version}
				if v.version == packet.Version5 {
					c.Properties.SetSessionExpiry(300)
				} else {
					c.CleanStart = false // a persistent 3.1.1 session
				}
				rc, ack := mqtttest.ConnectRaw(t, b.Addr, c)
				if ack.SessionPresent == first {
					t.Fatalf("%s: session present %v", id, ack.SessionPresent)
				}
				return rc
			}
			publish := func(t *testing.T, rc *mqtttest.Raw, topic string, pid uint16, payload string, dup bool) {
				t.Helper()
				rc.Must(t, &packet.Publish{Topic: topic, QoS: 2, PacketID: pid, Payload: []byte(payload), Dup: dup})
			}
			// finish sends PUBREL and expects PUBCOMP.
			finish := func(t *testing.T, rc *mqtttest.Raw, pid uint16) {
				t.Helper()
				hcAck(t, rc, packet.PUBREL, pid)
				akExpectAck(t, rc, packet.PUBCOMP, pid, packet.Success)
			}
			// drop closes the publisher's socket and waits until the
			// session is offline (only the subscriber is connected).
			drop := func(t *testing.T, rc *mqtttest.Raw) {
				t.Helper()
				rc.Conn.Close()
				hcConns(t, b, 1)
			}
			// receiveMaximumHolds checks that the connection counts
			// exactly the QoS 2 messages it has not completed: recvMax
			// more are taken, one over ends the connection.
			receiveMaximumHolds := func(t *testing.T, rc *mqtttest.Raw) {
				t.Helper()
				for i := range recvMax {
					publish(t, rc, "rm/x", uint16(100+i), fmt.Sprintf("rm %s %d", t.Name(), i), false)
					akExpectAck(t, rc, packet.PUBREC, uint16(100+i), packet.Success)
				}
				publish(t, rc, "rm/x", 100+recvMax, "rm over", false)
				got := rc.Closed(t)
				if code, ok := lastDisconnect(got); v.version == packet.Version5 && (!ok || code != packet.ReceiveMaximumExceeded) {
					t.Fatalf("got %+v before the close, want DISCONNECT 0x93", got)
				}
			}
			checkStored := func(t *testing.T, payload string, want int) {
				t.Helper()
				if n := policy.stored(payload); n != want {
					t.Fatalf("%q handed to the store %d times, want %d", payload, n, want)
				}
			}

			t.Run("PUBREC reached the client, PUBREL did not leave", func(t *testing.T) {
				rc := connect(t, "rt-a", true)
				publish(t, rc, "rt/now/a", 7, "A", false)
				akExpectAck(t, rc, packet.PUBREC, 7, packet.Success)
				sub.Expect(t, "A")
				drop(t, rc)
				rc = connect(t, "rt-a", false)
				publish(t, rc, "rt/now/a", 7, "A", true)
				akExpectAck(t, rc, packet.PUBREC, 7, packet.Success)
				finish(t, rc, 7)
				sub.once(t, b, "A")
				checkStored(t, "A", 1)
				receiveMaximumHolds(t, rc)
			})

			t.Run("PUBREC did not reach the client", func(t *testing.T) {
				rc := connect(t, "rt-b", true)
				publish(t, rc, "rt/now/b", 8, "B", false)
				sub.Expect(t, "B") // handled (and PUBREC written) before the socket closes unread
				drop(t, rc)
				rc = connect(t, "rt-b", false)
				publish(t, rc, "rt/now/b", 8, "B", true)
				akExpectAck(t, rc, packet.PUBREC, 8, packet.Success)
				finish(t, rc, 8)
				sub.once(t, b, "B")
				checkStored(t, "B", 1)
			})

			t.Run("only PUBREL on the new connection", func(t *testing.T) {
				rc := connect(t, "rt-c", true)
				publish(t, rc, "rt/now/c", 9, "C", false)
				akExpectAck(t, rc, packet.PUBREC, 9, packet.Success)
				sub.Expect(t, "C")
				drop(t, rc)
				rc = connect(t, "rt-c", false)
				finish(t, rc, 9)
				sub.once(t, b, "C")
				checkStored(t, "C", 1)
				// The id is free again: the same id carries a new message.
				publish(t, rc, "rt/now/c", 9, "C2", false)
				akExpectAck(t, rc, packet.PUBREC, 9, packet.Success)
				finish(t, rc, 9)
				sub.Expect(t, "C2")
				sub.once(t, b, "C2")
				receiveMaximumHolds(t, rc)
			})

			t.Run("still being stored when the connection dropped", func(t *testing.T) {
				rc := connect(t, "rt-d", true)
				publish(t, rc, "rt/held/d", 10, "D", false)
				sub.Expect(t, "D") // delivered before it is stored
				m := policy.take(t, "D")
				akUsable(t, rc) // no PUBREC: not stored yet
				drop(t, rc)
				rc = connect(t, "rt-d", false)
				publish(t, rc, "rt/held/d", 10, "D", true)
				akUsable(t, rc) // the copy is not answered before the message is stored
				checkStored(t, "D", 1)
				m.Ack() // stored: the PUBREC goes to the new connection
				akExpectAck(t, rc, packet.PUBREC, 10, packet.Success)
				finish(t, rc, 10)
				sub.once(t, b, "D")
				checkStored(t, "D", 1)
				receiveMaximumHolds(t, rc)
			})

			t.Run("stored while the client was away", func(t *testing.T) {
				rc := connect(t, "rt-e", true)
				publish(t, rc, "rt/held/e", 11, "E", false)
				sub.Expect(t, "E")
				m := policy.take(t, "E")
				drop(t, rc)
				m.Ack() // the PUBREC has no connection to go to
				rc = connect(t, "rt-e", false)
				publish(t, rc, "rt/held/e", 11, "E", true)
				akExpectAck(t, rc, packet.PUBREC, 11, packet.Success)
				finish(t, rc, 11)
				sub.once(t, b, "E")
				checkStored(t, "E", 1)
			})

			t.Run("not stored after all, the client away", func(t *testing.T) {
				// The client cannot be told: its next copy is offered to
				// the store again, and not routed again.
				rc := connect(t, "rt-g", true)
				publish(t, rc, "rt/held/g", 12, "G", false)
				sub.Expect(t, "G")
				m := policy.take(t, "G")
				drop(t, rc)
				m.Refuse(packet.ImplementationSpecificError, "the store is down")
				rc = connect(t, "rt-g", false)
				publish(t, rc, "rt/held/g", 12, "G", true)
				m = policy.take(t, "G")
				akUsable(t, rc) // not answered before it is stored
				checkStored(t, "G", 2)
				m.Ack()
				akExpectAck(t, rc, packet.PUBREC, 12, packet.Success)
				finish(t, rc, 12)
				sub.once(t, b, "G")
				checkStored(t, "G", 2)
			})

			t.Run("not stored after all, the client connected", func(t *testing.T) {
				rc := connect(t, "rt-f", true)
				publish(t, rc, "rt/held/f", 13, "F", false)
				sub.Expect(t, "F")
				m := policy.take(t, "F")
				m.Refuse(packet.ImplementationSpecificError, "the store is down")
				if v.version == packet.Version5 {
					// Told in PUBREC: the flow ends, and the id carries a
					// new message next [MQTT-4.3.3-9].
					akExpectAck(t, rc, packet.PUBREC, 13, packet.ImplementationSpecificError)
					publish(t, rc, "rt/now/f", 13, "F2", false)
					akExpectAck(t, rc, packet.PUBREC, 13, packet.Success)
					finish(t, rc, 13)
					sub.Expect(t, "F2")
					sub.once(t, b, "F")
					return
				}
				// 3.1.1 cannot be told: the connection ends so that the
				// client sends the message again, which is stored then.
				if got := rc.Closed(t); len(got) != 0 {
					t.Fatalf("got %+v before the close, want nothing", got)
				}
				eventually(t, "message_not_stored close counted", func() bool { return b.Stats().Closes[broker.CloseNotStored] == 1 })
				hcConns(t, b, 1)
				rc = connect(t, "rt-f", false)
				publish(t, rc, "rt/held/f", 13, "F", true)
				m = policy.take(t, "F")
				akUsable(t, rc)
				m.Ack()
				akExpectAck(t, rc, packet.PUBREC, 13, packet.Success)
				finish(t, rc, 13)
				sub.once(t, b, "F")
				checkStored(t, "F", 2)
			})
		})
	}
}

// TestGroupAcks: acknowledgements made together with Message.AckTo (as the
// history writer makes a commit's) reach each publisher when the group is
// flushed: PUBACK for QoS 1 and PUBREC for QoS 2, each to its own client,
// over both protocol versions; one to a client that went away meanwhile
// holds back none of the others, and the group serves again after a flush.
func TestGroupAcks(t *testing.T) {
	policy := newAkCommitPolicy()
	b := startBroker(t, broker.Options{Policy: policy})
	type pub struct {
		rc  *mqtttest.Raw
		qos byte
		pid uint16
	}
	var pubs []pub
	for i, v := range akVersions {
		for _, qos := range []byte{1, 2} {
			rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: fmt.Sprintf("ga-%d-%d", i, qos), CleanStart: true, KeepAlive: 30, ProtocolLevel: v.version})
			pubs = append(pubs, pub{rc, qos, uint16(10*i + int(qos))})
		}
	}
	gone, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "ga-gone", CleanStart: true, KeepAlive: 30, ProtocolLevel: packet.Version5})

	var g broker.Acks
	for round := range 2 {
		for _, p := range pubs {
			payload := fmt.Sprintf("ga %d %d", round, p.pid)
			p.rc.Must(t, &packet.Publish{Topic: "ga/held/x", QoS: p.qos, PacketID: p.pid, Payload: []byte(payload)})
			policy.take(t, payload).AckTo(&g)
		}
		if round == 0 {
			gone.Must(t, &packet.Publish{Topic: "ga/held/x", QoS: 1, PacketID: 1, Payload: []byte("ga gone")})
			m := policy.take(t, "ga gone")
			gone.Conn.Close()
			hcConns(t, b, int64(len(pubs)))
			m.AckTo(&g)
		}
		g.Flush()
		for _, p := range pubs {
			kind := packet.PUBACK
			if p.qos == 2 {
				kind = packet.PUBREC
			}
			akExpectAck(t, p.rc, kind, p.pid, packet.Success)
			if p.qos == 2 {
				hcAck(t, p.rc, packet.PUBREL, p.pid)
				akExpectAck(t, p.rc, packet.PUBCOMP, p.pid, packet.Success)
			}
		}
	}
}
