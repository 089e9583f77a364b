package broker

import (
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Message is an accepted application message. It is immutable once routed:
// every subscriber session holds the same *Message.
type Message struct {
	Topic        string // internal topic
	Payload      []byte
	QoS          byte // effective QoS (caps delivery)
	PublishedQoS byte // QoS of the inbound PUBLISH
	Retain       bool
	// Properties carried onward (v5): payload format, content type,
	// response topic, correlation data, user properties. Message Expiry is
	// carried in Expiry instead; topic alias and subscription identifiers
	// are per delivery.
	Properties packet.Properties
	Created    time.Time // receive time
	Expiry     time.Time // zero: never
	// Origin is the session key of the publisher (for No Local); empty for
	// wills published after their session ended and for restored messages.
	Origin string
	// Publisher is the identity of the publishing session (nil for a will
	// of an ended session or a restored message).
	Publisher *Identity
	// Data belongs to the Policy.
	Data any
	// NoDeliver, set by a Policy, accepts and acknowledges the message and
	// hands it to Accepted (for storage) without retaining it or delivering
	// it to subscribers.
	NoDeliver bool
	// held: room is reserved for the message in the retained store
	// (Retained.Reserve), until its Set or Release. Touched only by the
	// publishing goroutine, under the store's lock.
	held bool

	// The pending acknowledgement to the publisher, for Ack.
	ack ackState
}

type ackState struct {
	once atomic.Bool
	c    *conn
	pid  uint16
	qos  byte
}

// Ack acknowledges the message to its publisher (PUBACK for QoS 1, PUBREC
// for QoS 2). A Policy whose Accepted returned true calls it exactly once,
// from any goroutine; further calls, and calls for QoS 0 messages, wills
// and injected messages, do nothing.
func (m *Message) Ack() { m.ack.send(false, nil) }

// AckTo is Ack as one of a group of acknowledgements the calling goroutine
// makes at once (a history writer acknowledging a commit's messages): the
// acknowledgement is written when g is flushed.
func (m *Message) AckTo(g *Acks) { m.ack.send(false, &g.conns) }

// Acks is a group of acknowledgements made by a goroutine that is not a
// connection's own (Message.AckTo). Flush writes them: each plain TCP
// connection's buffer with one non-blocking write from the calling
// goroutine, instead of a writer goroutine started for each connection
// (which Ack does). The zero value is an empty group; a group is reused
// after each Flush, by one goroutine at a time.
type Acks struct{ conns flushList }

// Flush writes the group's acknowledgements. It must follow every AckTo
// before long: until then they wait in the connections' buffers.
func (g *Acks) Flush() { g.conns.flush() }

// Refuse answers the publisher, instead of Ack, that the message was not
// taken after all (a policy that could not store it): an MQTT 5 client
// gets PUBACK (QoS 1) or PUBREC (QoS 2, which ends the flow) with code and
// the reason; a 3.1.1 client, which cannot be told, has its connection
// closed (CloseNotStored) so that it sends the message again (a QoS 2
// message's next copy is then offered to Policy.Accepted again, without
// being routed again). Like Ack it acts once, and only on a pending
// acknowledgement.
func (m *Message) Refuse(code packet.ReasonCode, reason string) { m.ack.refuse(code, reason) }

// rearm makes a refused QoS 2 message's acknowledgement pending again, for
// the client's next copy on c (called with the session's mu held).
func (a *ackState) rearm(c *conn) {
	a.c = c
	a.once.Store(false)
}

func (a *ackState) refuse(code packet.ReasonCode, reason string) {
	c := a.c
	if c == nil || !a.once.CompareAndSwap(false, true) {
		return
	}
	a.c = nil
	to := c
	kind := packet.PUBACK
	if a.qos == 2 {
		// The connection that last received the message, which may be a
		// newer one of the session than c; nil when the client must send
		// it again to be told.
		kind = packet.PUBREC
		if to = c.sess.refused2(a); to == nil {
			return
		}
	}
	if to.version != packet.Version5 {
		to.closeWith(Disconnection{Reason: CloseNotStored, Detail: reason})
		return
	}
	to.writeAckReason(kind, a.pid, code, reason)
	to.release(1)
}

func (a *ackState) send(own bool, into *flushList) {
	c := a.c
	if c == nil || !a.once.CompareAndSwap(false, true) {
		return
	}
	a.c = nil
	switch a.qos {
	case 1:
		c.writeAckInto(packet.PUBACK, a.pid, packet.Success, own, into)
		c.release(1)
	case 2:
		// PUBREC goes to the connection that last received the message:
		// a client that reconnected and sent it again while the policy
		// was storing it is answered there.
		if to := c.sess.acked2(a); to != nil {
			to.writeAckInto(packet.PUBREC, a.pid, packet.Success, own && to == c, into)
		}
	}
}

// expired reports whether the message has expired at now.
func (m *Message) expired(now time.Time) bool {
	return !m.Expiry.IsZero() && !now.Before(m.Expiry)
}

// remainingExpiry is the Message Expiry Interval to send at now (seconds,
// rounded up), and whether one is set.
func (m *Message) remainingExpiry(now time.Time) (uint32, bool) {
	if m.Expiry.IsZero() {
		return 0, false
	}
	d := m.Expiry.Sub(now)
	if d <= 0 {
		return 0, true
	}
	s := (d + time.Second - 1) / time.Second
	if s > 1<<32-1 {
		s = 1<<32 - 1
	}
	return uint32(s), true
}
