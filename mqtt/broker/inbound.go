package broker

import (
	"fmt"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The inbound side of QoS 1 and 2: the connection's Receive Maximum
// count, and the session's receiver state of each QoS 2 packet identifier.
// Everything that reads or changes session.inbound2 is in this file, as
// session methods that take the session's lock; the connection's methods
// around them write the acknowledgements, outside it.

// admit counts an inbound QoS 1/2 PUBLISH against the Receive Maximum the
// server gave the client; false when the client already has that many
// unacknowledged.
func (c *conn) admit() bool {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	if c.pending >= int(c.srv.opts.ReceiveMaximum) {
		return false
	}
	c.pending++
	return true
}

// release gives back n units of the inbound Receive Maximum.
func (c *conn) release(n int) {
	c.pendingMu.Lock()
	c.pending -= n
	c.pendingMu.Unlock()
}

// inbound2 is the server's receiver state of one inbound QoS 2 packet
// identifier, kept in the session from the first PUBLISH with it until the
// PUBREL ([MQTT-4.3.3-2]; v5 [MQTT-4.3.3-8] to [MQTT-4.3.3-12]): every
// copy of the PUBLISH in between, on this connection or a later one of the
// session, is answered PUBREC and routed no more.
type inbound2 struct {
	// c is the connection that last received a PUBLISH with this id: its
	// Receive Maximum counts the message, and a PUBREC the policy defers
	// goes to it (a client that reconnected and sent the PUBLISH again is
	// answered on its new connection). nil once that connection has ended,
	// and for an id restored from the state file.
	c *conn
	// m is the message while its acknowledgement is pending (the policy
	// deferred it: "acked means stored"), and while retry is set.
	m *Message
	// rec: PUBREC was sent (the message accepted); PUBREL is awaited.
	rec bool
	// retry: the policy could not keep the message after all
	// (Message.Refuse) and the client could not be told: a 3.1.1 client,
	// whose connection was closed for it, or a client that was away. Its
	// next copy of the PUBLISH is offered to Policy.Accepted again (m), not
	// routed again.
	retry bool
}

// receiveQoS2 applies a QoS 2 PUBLISH to the session's receiver state. A new
// packet id is recorded with m (done false: the caller goes on with m). A
// copy of a message received before, on this connection or an earlier one
// of the session, is not routed again [MQTT-4.3.3-2] (v5 [MQTT-4.3.3-10]):
// it is answered PUBREC when the message was acknowledged already, and
// otherwise once the policy acknowledges it (that PUBREC follows the
// client to this connection: "acked means stored", never before). After a
// refusal the client could not be told of (Message.Refuse) the copy is the
// client's retry: retry is the message to offer to Policy.Accepted again.
func (c *conn) receiveQoS2(pid uint16, m *Message) (done bool, retry *Message) {
	again, retry, counted, rec := c.sess.receive2(c, pid, m)
	if !again {
		return false, retry
	}
	if counted {
		// Counted once per connection: a copy on the connection that
		// counts it already gives back the unit it just took.
		c.release(1)
	}
	if rec {
		c.writeAck(packet.PUBREC, pid, packet.Success, true)
	}
	return true, nil
}

// receive2 records a QoS 2 PUBLISH with id pid received on c. For a new id
// it keeps m and returns again false. For a retry of a message refused
// without the client being told, it returns the first copy's message in
// retry (again false), now counted by c. For any other copy it returns
// again true: counted reports whether c already counted the id in its
// Receive Maximum, rec whether the message was acknowledged (PUBREC sent).
func (ss *session) receive2(c *conn, pid uint16, m *Message) (again bool, retry *Message, counted, rec bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	e := ss.inbound2[pid]
	switch {
	case e == nil:
		if ss.inbound2 == nil {
			ss.inbound2 = make(map[uint16]*inbound2)
		}
		ss.inbound2[pid] = &inbound2{c: c, m: m}
		return false, nil, false, false
	case e.retry:
		// This connection's Receive Maximum counts it from now on.
		e.retry, e.c = false, c
		e.m.ack.rearm(c)
		return false, e.m, false, false
	}
	counted = e.c == c
	e.c = c
	return true, nil, counted, e.rec
}

// refusePublish answers a refused PUBLISH. Under v5 the publisher learns
// the reason in PUBACK/PUBREC; 3.1.1 has no way to say it, so the message
// is acknowledged and discarded (as MQTT-3.3.5-2 allows).
func (c *conn) refusePublish(p *packet.Publish, code packet.ReasonCode) {
	if c.version != packet.Version5 {
		code = packet.Success
	}
	switch p.QoS {
	case 1:
		c.writeAck(packet.PUBACK, p.PacketID, code, true)
		c.release(1)
	case 2:
		c.sess.answered2(p.PacketID, code)
		if code >= 0x80 {
			c.release(1)
		}
		c.writeAck(packet.PUBREC, p.PacketID, code, true)
	}
}

// answered2 records the PUBREC of a refused QoS 2 PUBLISH: with an error
// code the flow ends there, otherwise (3.1.1, which cannot be told) the
// id awaits its PUBREL as for an accepted message.
func (ss *session) answered2(pid uint16, code packet.ReasonCode) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if code >= 0x80 {
		delete(ss.inbound2, pid)
	} else if e := ss.inbound2[pid]; e != nil {
		e.rec, e.m = true, nil
	}
}

// pubrel completes an inbound QoS 2 flow: PUBCOMP for a message answered
// with PUBREC, whichever connection of the session received it; PUBCOMP
// (v5: 0x92 Packet Identifier not found) for an id the session does not
// hold [MQTT-4.3.3-2] (v5 [MQTT-4.3.3-11]); a PUBREL before the server's
// PUBREC is a protocol error.
func (c *conn) pubrel(pid uint16) error {
	known, rec, counted := c.sess.released2(c, pid)
	switch {
	case rec:
		c.writeAck(packet.PUBCOMP, pid, packet.Success, true)
		if counted {
			c.release(1)
		}
	case known:
		// PUBREL before our PUBREC: the client broke the flow.
		return c.protocolError(packet.ProtocolError, fmt.Sprintf("PUBREL for packet id %d before PUBREC (the message is not acknowledged yet)", pid))
	default:
		c.writeAck(packet.PUBCOMP, pid, packet.PacketIdentifierNotFound, true)
	}
	return nil
}

// released2 applies a PUBREL for pid received on c: known reports whether
// the session holds the id, rec whether its PUBREC was sent (the flow then
// ends and the id is forgotten), counted whether c's Receive Maximum
// counts it.
func (ss *session) released2(c *conn, pid uint16) (known, rec, counted bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	e, known := ss.inbound2[pid]
	rec, counted = known && e.rec, known && e.c == c
	if rec {
		delete(ss.inbound2, pid)
	}
	return known, rec, counted
}

// pending2Locked finds the receiver state of the QoS 2 message whose
// acknowledgement a is; nil when the id no longer holds it (the session
// ended, or the flow did). Called with ss.mu held.
func (ss *session) pending2Locked(a *ackState) *inbound2 {
	if e := ss.inbound2[a.pid]; e != nil && e.m != nil && &e.m.ack == a {
		return e
	}
	return nil
}

// acked2 marks the QoS 2 message whose acknowledgement a is as
// acknowledged, before its PUBREC is written, so that a PUBREL answering
// that PUBREC finds it; it returns the connection the PUBREC goes to (the
// one that last received the message), nil if none.
func (ss *session) acked2(a *ackState) *conn {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	e := ss.pending2Locked(a)
	if e == nil {
		return nil
	}
	e.rec, e.m = true, nil
	return e.c
}

// refused2 applies the policy's refusal of the QoS 2 message whose
// acknowledgement a is, and returns the connection to tell: a live v5
// connection (told with PUBREC and an error code: the client forgets the
// message and the id carries a new one next [MQTT-4.3.3-9]), or a live
// 3.1.1 one (closed, so that the client sends the message again: that copy
// is the retry). It returns nil when the message's connection is gone:
// the client sends the message again, whatever its version, and that copy
// is the retry.
func (ss *session) refused2(a *ackState) *conn {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	e := ss.pending2Locked(a)
	if e == nil {
		return nil
	}
	to := e.c
	live := to != nil && ss.c == to && to.ending.Load() == nil
	switch {
	case live && to.version == packet.Version5:
		delete(ss.inbound2, a.pid)
		return to
	case live:
		e.retry = true
		return to
	}
	e.retry = true
	return nil
}

// left2Locked forgets c as the receiver of the session's QoS 2 ids when it
// ends: a PUBREC deferred for it goes nowhere (the client sends the
// message again). Called with ss.mu held.
func (ss *session) left2Locked(c *conn) {
	for _, e := range ss.inbound2 {
		if e.c == c {
			e.c = nil
		}
	}
}

// end2Locked ends the session's QoS 2 flows with the session. Called with
// ss.mu held.
func (ss *session) end2Locked() { clear(ss.inbound2) }

// saved2Locked lists the QoS 2 ids the state file keeps: those whose
// message was acknowledged (PUBREC sent or owed: the policy kept it). Not
// one whose message the policy has not acknowledged yet, nor a refused
// message awaiting the client's retry: restored, either would be answered
// as acknowledged when the client sends its copy again, whether or not
// the message was ever kept ("acked means stored"). Left out, that copy is
// taken as new and stored (twice, if the first was stored after the save:
// never lost). Called with ss.mu held.
func (ss *session) saved2Locked() []uint16 {
	var ids []uint16
	for pid, e := range ss.inbound2 {
		if e.rec {
			ids = append(ids, pid)
		}
	}
	return ids
}

// unanswered2 counts the session's inbound QoS 2 messages the policy has
// not acknowledged or refused yet.
func (ss *session) unanswered2() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := 0
	for _, e := range ss.inbound2 {
		if e.m != nil && !e.rec && !e.retry {
			n++
		}
	}
	return n
}

// restore2 takes back the QoS 2 ids of a saved session: each awaits its
// PUBREL, its message acknowledged before the restart.
func (ss *session) restore2(ids []uint16) {
	if len(ids) == 0 {
		return
	}
	ss.inbound2 = make(map[uint16]*inbound2, len(ids))
	for _, pid := range ids {
		ss.inbound2[pid] = &inbound2{rec: true}
	}
}
