package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// subscription is one entry of the subscription index.
type subscription struct {
	sess           *session
	wire           string // the filter as the client sent it (with $share/...)
	filter         string // the internal filter that is indexed
	qos            byte
	noLocal        bool
	rap            bool // retain as published
	retainHandling byte
	id             uint32 // subscription identifier, 0 when none
	// since is when the subscription was made (less replayWindow, for a
	// message stamped by a clock a moment behind: subscribedSinceLocked),
	// when that was while the session's replay of what it missed was
	// pending (replayFrom) and the session had no subscription to its
	// filter yet; zero otherwise.
	// A state saved meanwhile is pending from where that replay started:
	// a replay from it gives this subscription only what was received
	// since it was made (only retained messages predate a subscription),
	// and reads that from there, so that what it had not yet subscribed
	// to takes no room from what the session missed.
	since time.Time
}

// delivery is one message on its way to one session: one copy, standing
// for every matching non-shared subscription of the session (see route).
// It is 24 bytes, as small as a delivery for one subscription was: the
// RETAIN flag shares a byte with the state.
type delivery struct {
	msg *Message
	// ids holds the subscription identifiers when the copy carries two or
	// more (an idBlock); nil otherwise, subID then being the one (0: none).
	ids   *uint32
	subID uint32
	pid   uint16
	qos   byte
	flags uint8 // the state (stateMask) and retainFlag
}

const (
	stateQueued   uint8 = iota
	stateSent           // awaiting PUBACK/PUBREC
	stateReleased       // PUBREL sent
	// stateResend: sent on an earlier connection, awaiting PUBACK/PUBREC,
	// and waiting for room in the current connection's window to be sent
	// again (resendLocked); saved as stateSent.
	stateResend
	stateMask  uint8 = 3
	retainFlag uint8 = 1 << 7 // the PUBLISH carries RETAIN=1
)

func (d *delivery) state() uint8     { return d.flags & stateMask }
func (d *delivery) setState(s uint8) { d.flags = d.flags&^stateMask | s }
func (d *delivery) retain() bool     { return d.flags&retainFlag != 0 }
func (d *delivery) setRetain(on bool) {
	if on {
		d.flags |= retainFlag
	} else {
		d.flags &^= retainFlag
	}
}

// newDelivery returns a queued delivery of m at qos carrying the
// subscription identifiers ids (none, one or several: copied).
func newDelivery(m *Message, qos byte, retain bool, ids []uint32) *delivery {
	d := &delivery{msg: m, qos: qos}
	d.setRetain(retain)
	d.setIDs(ids)
	return d
}

// setIDs records the subscription identifiers: one fits in subID, several
// take one allocation (idBlock). Identifiers are never 0.
func (d *delivery) setIDs(ids []uint32) {
	d.ids, d.subID = nil, 0
	switch len(ids) {
	case 0:
	case 1:
		d.subID = ids[0]
	default:
		d.ids = idBlock(ids)
	}
}

// subIDs returns the subscription identifiers to send (nil when none);
// one[0] holds a single one (so that the caller's array is not allocated).
func (d *delivery) subIDs(one *[1]uint32) []uint32 {
	if d.ids != nil {
		return idBlockIDs(d.ids)
	}
	return oneID(one, d.subID)
}

// idBlock copies ids into one allocation: their count, then the
// identifiers. A delivery keeps a pointer to its first word, so that it
// stays 24 bytes with room for any number of identifiers.
func idBlock(ids []uint32) *uint32 {
	b := make([]uint32, len(ids)+1)
	b[0] = uint32(len(ids))
	copy(b[1:], ids)
	return &b[0]
}

// idBlockIDs returns the identifiers of an idBlock (sharing its memory).
func idBlockIDs(p *uint32) []uint32 {
	return unsafe.Slice(p, int(*p)+1)[1:]
}

// session is the server side of an MQTT session. It outlives connections
// when persistent. All fields below mu are guarded by it.
type session struct {
	srv *Server
	key string

	// full mirrors qlen() >= limits.MaxQueued (kept under mu) and ident the
	// identity, so that messages for a session whose queue is at its bound
	// are dropped without taking mu: publishers outrunning a subscriber
	// must not contend for the lock its own acknowledgements need.
	full  atomic.Bool
	ident atomic.Pointer[Identity]
	// live mirrors c (kept under mu), for reading without the lock.
	live atomic.Pointer[conn]
	// logb rate-limits the session's event-log lines (drops); set at
	// attach to its connection's bucket.
	logb atomic.Pointer[logLimits]

	mu       sync.Mutex
	id       *Identity
	c        *conn // nil while offline
	claim    Claim // this node's hold on the session (SessionOwners)
	subs     map[string]*subscription
	queue    []*delivery // waiting behind the inflight window
	qhead    int
	inflight []*delivery // sent, unacknowledged, in send order
	ninfl    int         // non-nil entries of inflight
	nresend  int         // entries of inflight in stateResend
	// holdPump: a SUBSCRIBE is queueing its retained messages ahead of
	// the live ones its new subscriptions get; they go out after its
	// SUBACK (subscribe.go).
	holdPump bool
	nextPID  uint16
	inbound2 map[uint16]*inbound2 // inbound QoS 2 ids, from the PUBLISH to the PUBREL (inbound.go)
	window   int                  // effective inflight window of the current connection
	limits   Limits
	// recent holds the messages queued since the session was resumed
	// from another node (or restored at start) that its second replay
	// could bring again, until that replay (states.go); nil otherwise.
	recent *recentSet
	// replayTimer runs the second replay of a resumed session;
	// replayStop ends that replay's read once it runs.
	replayTimer *time.Timer
	replayStop  context.CancelFunc
	// saveMu orders the saves of the session's state to SessionStates
	// (periodic and at a hand-over); taken before mu.
	saveMu sync.Mutex
	// sent are the QoS 1 and 2 messages sent lately (persistent sessions,
	// with Options.Replay only; oldest first, at most maxSent), saved with
	// the state so that a replay where the session resumes does not send
	// them again.
	sent []replayKey
	// replayFrom is when the replay of what the session missed starts
	// (the time of the state it was restored from at start, or resumed
	// from another node's), until both passes of that replay are in
	// (restart.go, states.go: replay), or for good when a later CONNECT's
	// resume gave that replay up (its session replaces this one); zero
	// otherwise. restart is the replay of a session restored at start
	// (nil for others); set before the session is shared.
	replayFrom time.Time
	restart    *restart

	expiry         uint32 // session expiry interval, seconds
	disconnectedAt time.Time
	ended          bool
	// gone: the server ended the session for good (EndSessions): its
	// connection's end ends it, whatever a DISCONNECT says, and what it
	// held is dropped as when it expires.
	gone bool
}

// reading reports whether the session's client is taking what it is
// sent: connected, and its connection not blocked in a write. Only such a
// session gains from its publishers pausing (see conn.congested); one that
// stopped reading loses its own messages and slows nobody (its blocked
// write ends at the write timeout).
func (ss *session) reading() bool {
	c := ss.live.Load()
	return c != nil && c.writeSince.Load() == 0
}

// updateFull refreshes full after the queue or the limits changed.
func (ss *session) updateFull() {
	full := ss.qlen() >= ss.limits.MaxQueued
	if ss.full.Load() != full {
		ss.full.Store(full)
	}
}

// qlen is the number of queued deliveries.
func (ss *session) qlen() int { return len(ss.queue) - ss.qhead }

func (ss *session) push(d *delivery) {
	ss.queue = append(ss.queue, d)
	ss.srv.stats.queued.Add(1)
	ss.updateFull()
}

func (ss *session) pop() *delivery {
	d := ss.queue[ss.qhead]
	ss.queue[ss.qhead] = nil
	ss.qhead++
	if ss.qhead == len(ss.queue) {
		ss.queue = ss.queue[:0]
		ss.qhead = 0
	} else if ss.qhead > 64 && ss.qhead*2 > len(ss.queue) {
		n := copy(ss.queue, ss.queue[ss.qhead:])
		clear(ss.queue[n:])
		ss.queue = ss.queue[:n]
		ss.qhead = 0
	}
	ss.srv.stats.queued.Add(-1)
	ss.updateFull()
	return d
}

// expiredAt reports whether an offline session has outlived its expiry.
func (ss *session) expiredAt(now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.c == nil && !ss.ended && !now.Before(ss.disconnectedAt.Add(time.Duration(ss.expiry)*time.Second))
}

// endsWithConnection reports whether the session is connected and ends
// when that connection does (expiry 0: 3.1.1 Clean Session 1, or v5
// Session Expiry 0). A new connection taking it over cannot resume it,
// even without a clean start: the takeover closes the old connection, so
// the session ends and the new one starts afresh [MQTT-3.1.2-6].
func (ss *session) endsWithConnection() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.c != nil && ss.expiry == 0
}

// enqueue hands one copy of a message to the session, carrying the
// subscription identifiers ids: it is queued (or dropped when the queue is
// full) and the pump moves what it can to the connection.
func (ss *session) enqueue(m *Message, qos byte, retain bool, ids []uint32, from *conn) (live bool) {
	if ss.full.Load() {
		// At its bound: dropped without the lock (see full).
		ss.srv.stats.drops[DropQueueFull].Add(1)
		ss.srv.policy.Dropped(ss.ident.Load(), m, DropQueueFull)
		ss.logDropped(m, DropQueueFull)
		if from != nil && ss.reading() {
			from.congested = true
		}
		return true
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.enqueueLocked(m, qos, retain, ids, from)
}

// enqueueLocked is enqueue with ss.mu held (and the full check left to the
// caller).
func (ss *session) enqueueLocked(m *Message, qos byte, retain bool, ids []uint32, from *conn) (live bool) {
	if ss.ended {
		return false
	}
	if ss.c == nil && qos == 0 {
		ss.dropLocked(m, DropOffline)
		return true
	}
	if ss.qlen() >= ss.limits.MaxQueued {
		ss.dropLocked(m, DropQueueFull)
		return true
	}
	ss.push(newDelivery(m, qos, retain, ids))
	if ss.recent != nil {
		ss.recent.note(m) // a replay is under way (states.go)
	}
	ss.pumpLocked(from)
	return true
}

func (ss *session) dropLocked(m *Message, r DropReason) {
	ss.srv.stats.drops[r].Add(1)
	ss.srv.policy.Dropped(ss.id, m, r)
	ss.logDropped(m, r)
}

// pumpLocked moves queued deliveries onto the connection while the inflight
// window and the connection's write buffer allow.
//
// from is the connection whose reader goroutine calls (nil when none
// does): its own writes are flushed inline, and others' it flushes directly
// before it next blocks (see conn.flushes).
func (ss *session) pumpLocked(from *conn) {
	c := ss.c
	if c == nil || !c.served.Load() || ss.holdPump {
		// Offline, or the CONNACK is not written yet, or a SUBSCRIBE's
		// SUBACK: stays queued.
		return
	}
	now := ss.srv.now()
	if ss.nresend > 0 && !ss.resendWaitingLocked(c, now, from, false) {
		return // nothing queued goes ahead of a message sent again
	}
	for ss.qlen() > 0 {
		d := ss.queue[ss.qhead]
		if d.msg.expired(now) {
			ss.pop()
			ss.dropLocked(d.msg, DropExpired)
			continue
		}
		if d.qos > 0 && ss.ninfl >= ss.window {
			return
		}
		if c.backlogged() {
			return
		}
		ss.pop()
		if ss.srv.opts.Replay != nil && ss.expiry > 0 && d.msg.QoS > 0 {
			ss.noteSentLocked(d.msg) // a persistent session may move (states.go)
		}
		if d.qos > 0 {
			d.pid = ss.allocPID()
			d.setState(stateSent)
			ss.inflight = append(ss.inflight, d)
			ss.ninfl++
			ss.srv.stats.inflight.Add(1)
		}
		if !c.writePublish(ss, d, false, now, from) {
			// Too large for this client: not sent, counted.
			if d.qos > 0 {
				ss.removeInflight(d.pid)
			}
			ss.dropLocked(d.msg, DropTooLarge)
			continue
		}
		ss.srv.policy.Delivered(ss.id, d.msg, d.qos)
	}
}

// allocPID returns a packet identifier not used by an inflight delivery.
func (ss *session) allocPID() uint16 {
	for {
		ss.nextPID++
		if ss.nextPID == 0 {
			ss.nextPID = 1
		}
		if ss.findInflight(ss.nextPID) < 0 {
			return ss.nextPID
		}
	}
}

func (ss *session) findInflight(pid uint16) int {
	for i, d := range ss.inflight {
		if d != nil && d.pid == pid {
			return i
		}
	}
	return -1
}

// removeInflight forgets an inflight delivery and reports whether it existed.
func (ss *session) removeInflight(pid uint16) *delivery {
	i := ss.findInflight(pid)
	if i < 0 {
		return nil
	}
	d := ss.inflight[i]
	ss.inflight[i] = nil
	ss.ninfl--
	if d.state() == stateResend {
		ss.nresend--
	}
	ss.srv.stats.inflight.Add(-1)
	// Trim acknowledged entries at the head so in-order acks stay O(1).
	n := 0
	for n < len(ss.inflight) && ss.inflight[n] == nil {
		n++
	}
	if n > 0 {
		k := copy(ss.inflight, ss.inflight[n:])
		clear(ss.inflight[k:])
		ss.inflight = ss.inflight[:k]
	}
	return d
}

// ackResult is what session.ack made of an acknowledgement.
type ackResult uint8

const (
	ackDone    ackResult = iota // applied (or a repeated PUBREC answered again)
	ackUnknown                  // no delivery in flight with that packet id
	ackWrong                    // the wrong kind for the delivery's QoS or state: a protocol error
)

// ack handles PUBACK, PUBREC and PUBCOMP from the client, on the reader of
// from. The deliveries in flight belong to the session, so an
// acknowledgement on a resumed session's new connection completes what the
// previous one sent. For ackWrong it also says what was wrong. See
// docs/broker.md, "Acknowledgements of the wrong kind".
func (ss *session) ack(from *conn, kind packet.Type, pid uint16, code packet.ReasonCode) (ackResult, string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	i := ss.findInflight(pid)
	if i < 0 {
		return ackUnknown, ""
	}
	d := ss.inflight[i]
	switch kind {
	case packet.PUBACK:
		if d.qos != 1 {
			return ackWrong, fmt.Sprintf("PUBACK for packet id %d, a QoS 2 PUBLISH (awaiting %s)", pid, awaiting(d))
		}
		ss.removeInflight(pid)
	case packet.PUBREC:
		if d.qos != 2 {
			return ackWrong, fmt.Sprintf("PUBREC for packet id %d, a QoS 1 PUBLISH (awaiting PUBACK)", pid)
		}
		if d.state() == stateReleased {
			// A repeated PUBREC (the client answered a PUBLISH and its
			// retransmission, or a PUBREC crossed our PUBREL): the PUBLISH
			// was accepted already, so whatever its code the PUBREL is
			// sent again, which lets the client release the id.
			ss.writeRel(from, pid)
			return ackDone, ""
		}
		if code >= 0x80 {
			// The client refused the message: the flow ends here.
			ss.removeInflight(pid)
			break
		}
		if d.state() == stateResend {
			ss.nresend-- // the client had it: not sent again
		}
		d.setState(stateReleased)
		ss.writeRel(from, pid)
		return ackDone, ""
	case packet.PUBCOMP:
		if d.qos != 2 {
			return ackWrong, fmt.Sprintf("PUBCOMP for packet id %d, a QoS 1 PUBLISH (awaiting PUBACK)", pid)
		}
		if d.state() != stateReleased {
			return ackWrong, fmt.Sprintf("PUBCOMP for packet id %d before PUBREC (no PUBREL was sent for it)", pid)
		}
		ss.removeInflight(pid)
	}
	ss.pumpLocked(from)
	return ackDone, ""
}

// awaiting names the acknowledgement a QoS 2 delivery in flight waits for.
func awaiting(d *delivery) string {
	if d.state() == stateReleased {
		return "PUBCOMP"
	}
	return "PUBREC"
}

// writeRel sends PUBREL for pid on the session's connection (flushed by
// the reader of from when it is that connection's).
func (ss *session) writeRel(from *conn, pid uint16) {
	if c := ss.c; c != nil {
		c.writeAck(packet.PUBREL, pid, packet.Success, c == from)
	}
}

// pump moves queued messages when the connection can take more (called by
// the writer after it drained a full buffer).
func (ss *session) pump() {
	ss.mu.Lock()
	ss.pumpLocked(nil)
	ss.mu.Unlock()
}

// resendLocked retransmits the inflight deliveries on a resumed session,
// in the order they were first sent: PUBREL for released ones, PUBLISH
// with DUP for those awaiting PUBACK/PUBREC while the new connection's
// window (its Receive Maximum) has room. Each delivery in flight holds a
// place in it until acknowledged, so those beyond it wait (stateResend)
// until acknowledgements free places, ahead of anything queued
// (pumpLocked).
func (ss *session) resendLocked() {
	for _, d := range ss.inflight {
		if d != nil && d.state() == stateSent {
			d.setState(stateResend)
			ss.nresend++
		}
	}
	ss.resendWaitingLocked(ss.c, ss.srv.now(), ss.c, true)
}

// resendWaitingLocked sends again, in order, the deliveries waiting to be
// (stateResend) while the window has room, with the PUBRELs of the
// released ones among them when rels, and reports whether none is left
// waiting. One too large for the connection's Maximum Packet Size is
// dropped and counted, as pumpLocked does, and frees its place.
func (ss *session) resendWaitingLocked(c *conn, now time.Time, from *conn, rels bool) bool {
	for {
		var tooLarge []uint16
		for _, d := range ss.inflight {
			if d == nil {
				continue
			}
			switch d.state() {
			case stateReleased:
				if rels {
					c.writeAck(packet.PUBREL, d.pid, packet.Success, c == from)
				}
			case stateResend:
				if ss.ninfl-ss.nresend >= ss.window {
					continue // no room: it waits, and so do those after it
				}
				d.setState(stateSent)
				ss.nresend--
				if !c.writePublish(ss, d, true, now, from) {
					tooLarge = append(tooLarge, d.pid)
				}
			}
		}
		rels = false
		for _, pid := range tooLarge { // not while ranging over inflight: removing compacts it
			ss.dropLocked(ss.removeInflight(pid).msg, DropTooLarge)
		}
		if len(tooLarge) == 0 || ss.nresend == 0 {
			return ss.nresend == 0
		}
	}
}

// clearLocked drops every queued and inflight delivery (session end or clean
// start), counting them under why.
func (ss *session) clearLocked(why DropReason) {
	for ss.qlen() > 0 {
		ss.dropLocked(ss.pop().msg, why)
	}
	for _, d := range ss.inflight {
		if d != nil {
			ss.dropLocked(d.msg, why)
			ss.srv.stats.inflight.Add(-1)
		}
	}
	ss.inflight = nil
	ss.ninfl, ss.nresend = 0, 0
}
