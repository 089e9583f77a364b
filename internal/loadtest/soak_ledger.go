package loadtest

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// The soak's ledger: every message a device published (with the time its
// PUBLISH was written and the time it was acknowledged), every copy a
// subscriber received, the times each subscription was in place, and every
// connection the fleet opened with how it ended. Loss, duplicates and
// unexplained closes are computed from it at the end of a run.

// soakMagic starts every soak payload; the run's nonce follows, so copies
// of another run's messages (a persistent session of an earlier run on a
// broker given by -addr) are recognised and ignored.
const soakMagic = "soak"

// soakHeader is the part of a payload the ledger reads back: magic, nonce,
// message id and the time the PUBLISH was written.
const soakHeader = 4 + 8 + 4 + 8

// pubRecord is one message a device published.
type pubRecord struct {
	device string
	topic  string
	qos    byte  // published QoS
	start  int64 // Unix ns, just before the PUBLISH was written
	acked  int64 // Unix ns of the PUBACK/PUBCOMP; 0: not acknowledged
}

// span is a time during which a subscriber's subscription was in place:
// a message published (start to acknowledgement) inside it must reach the
// subscriber. to is 0 while the span is open; a clean session's span
// closes when its connection is lost, and messages acknowledged within
// lossGrace of that end are not counted (they may have been in flight).
type span struct{ from, to int64 }

// lossGrace is how long before a clean session's lost connection a
// message must have been acknowledged to count as owed to it.
const lossGrace = 10 * time.Second

// subBook is what one subscriber received.
type subBook struct {
	name       string
	filter     string
	qos        byte
	persistent bool
	// keepsQoS2State: the client keeps the packet ids of QoS 2 messages it
	// acknowledged across its reconnects and never passes a redelivery on
	// (paho.golang's session state, the lean client). paho.mqtt.golang
	// keeps none: a QoS 2 redelivery after a reconnect (DUP set) reaches
	// the application again without the broker doing anything wrong.
	keepsQoS2State bool

	epoch   int32 // connections so far
	cover   []span
	count   []uint8 // by message id: copies received (saturating)
	lastEp  []int32 // by message id: the epoch of the last copy
	matches map[string]bool

	received    [3]int64 // copies by delivered QoS
	dupAllowed  int64    // QoS 1 redelivered with DUP after a reconnect
	dupV3QoS2   int64    // QoS 2 redelivered with DUP after a reconnect to a client without QoS 2 state
	dupBad      []string // duplicates the protocol does not allow (first few)
	dupBadN     int64
	qosAbove    int64 // copies delivered above min(subscription, published) QoS
	qosBelow    int64 // copies delivered below it (a broker that demotes QoS 2)
	sessionLost int64 // resumed without the session the broker should have kept
	foreign     int64 // copies of messages not from this run
}

// endKind says how a connection ended.
type endKind uint8

const (
	endOpen      endKind = iota // still open
	endHarness                  // the harness closed it (DISCONNECT, or a deliberate drop)
	endServerMsg                // the server sent DISCONNECT with a reason code (v5)
	endLost                     // it ended without DISCONNECT (EOF, reset, a client-side timeout)
)

// connRecord is one connection of the fleet.
type connRecord struct {
	client  string
	role    string
	version byte
	local   string // the client's address, as the server logs it in remote=
	opened  time.Time

	mu     sync.Mutex
	ended  time.Time
	end    endKind
	code   byte   // the DISCONNECT reason code (endServerMsg)
	detail string // the error (endLost)
	// closing is set before the harness closes the connection: errors
	// after it are the harness's doing.
	closing bool
	// provoked names the server close reason the harness provokes on
	// purpose (the canaries), "" for ordinary fleet connections.
	provoked string
}

// finish records how the connection ended; the first call wins.
func (r *connRecord) finish(k endKind, code byte, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.end != endOpen {
		return
	}
	if r.closing {
		k = endHarness
	}
	r.end, r.code, r.detail, r.ended = k, code, detail, time.Now()
}

// setLocal records the client's address once dialed.
func (r *connRecord) setLocal(a string) {
	r.mu.Lock()
	r.local = a
	r.mu.Unlock()
}

// harnessCloses marks the connection as being closed by the harness.
func (r *connRecord) harnessCloses() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
}

// ledger is the soak's book.
type ledger struct {
	nonce uint64

	mu    sync.Mutex
	msgs  []pubRecord
	subs  []*subBook
	conns []*connRecord
	// unacked counts QoS 1/2 publishes that failed (the connection ended
	// before the acknowledgement): they are owed to no one.
	unacked [3]int64
}

func newLedger(nonce uint64) *ledger { return &ledger{nonce: nonce} }

// begin records a message about to be published and returns its id and
// payload (size bytes, at least soakHeader).
func (l *ledger) begin(device, topic string, qos byte, size int) (uint32, []byte) {
	now := time.Now().UnixNano()
	l.mu.Lock()
	id := uint32(len(l.msgs))
	l.msgs = append(l.msgs, pubRecord{device: device, topic: topic, qos: qos, start: now})
	l.mu.Unlock()
	p := make([]byte, max(size, soakHeader))
	copy(p, soakMagic)
	binary.BigEndian.PutUint64(p[4:], l.nonce)
	binary.BigEndian.PutUint32(p[12:], id)
	binary.BigEndian.PutUint64(p[16:], uint64(now))
	for i := soakHeader; i < len(p); i++ {
		p[i] = 'x'
	}
	return id, p
}

// acked records the acknowledgement of message id (QoS 1/2) or, for
// QoS 0, that it was written.
func (l *ledger) acked(id uint32) {
	now := time.Now().UnixNano()
	l.mu.Lock()
	l.msgs[id].acked = now
	l.mu.Unlock()
}

// failed records a publish that got no acknowledgement.
func (l *ledger) failed(id uint32) {
	l.mu.Lock()
	l.unacked[l.msgs[id].qos]++
	l.mu.Unlock()
}

// addSub registers a subscriber's book.
func (l *ledger) addSub(b *subBook) {
	b.matches = map[string]bool{}
	l.mu.Lock()
	l.subs = append(l.subs, b)
	l.mu.Unlock()
}

// addConn registers a connection.
func (l *ledger) addConn(r *connRecord) {
	l.mu.Lock()
	l.conns = append(l.conns, r)
	l.mu.Unlock()
}

// connected counts a new connection of b (before its first message).
func (l *ledger) connected(b *subBook) {
	l.mu.Lock()
	b.epoch++
	l.mu.Unlock()
}

// subscribed records that b's subscription is in place from now: a new
// span for a clean session or a persistent session the broker did not
// keep (sessionLost says the broker should have kept it), the open span
// continued for a resumed one.
func (l *ledger) subscribed(b *subBook, resumed, sessionLost bool) {
	now := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	if sessionLost {
		b.sessionLost++
	}
	if n := len(b.cover); n > 0 && b.cover[n-1].to == 0 && (resumed || sessionLost) {
		// A persistent session continues (or should have: what it held
		// while offline is owed, and counted as lost if it never comes).
		return
	}
	b.cover = append(b.cover, span{from: now})
}

// lostConnection ends a clean session's span when its connection ends
// before the end of the run.
func (l *ledger) lostConnection(b *subBook) {
	if b.persistent {
		return
	}
	now := time.Now().UnixNano()
	l.mu.Lock()
	if n := len(b.cover); n > 0 && b.cover[n-1].to == 0 {
		b.cover[n-1].to = now
	}
	l.mu.Unlock()
}

// receive records a copy of a message delivered to b at QoS qos.
func (l *ledger) receive(b *subBook, payload []byte, qos byte, dup bool) {
	if len(payload) < soakHeader || string(payload[:4]) != soakMagic || binary.BigEndian.Uint64(payload[4:]) != l.nonce {
		l.mu.Lock()
		b.foreign++
		l.mu.Unlock()
		return
	}
	id := binary.BigEndian.Uint32(payload[12:])
	l.mu.Lock()
	defer l.mu.Unlock()
	if int(id) >= len(l.msgs) || qos > 2 {
		b.foreign++
		return
	}
	m := &l.msgs[id]
	b.received[qos]++
	switch want := min(b.qos, m.qos); {
	case qos > want:
		b.qosAbove++
	case qos < want:
		b.qosBelow++
	}
	for len(b.count) <= int(id) {
		b.count = append(b.count, 0)
		b.lastEp = append(b.lastEp, 0)
	}
	c := b.count[id]
	if c < 255 {
		b.count[id] = c + 1
	}
	prev := b.lastEp[id]
	b.lastEp[id] = b.epoch
	if c == 0 {
		return
	}
	reconnected := b.epoch > prev
	switch {
	case qos == 1 && reconnected && dup:
		b.dupAllowed++
	case qos == 2 && reconnected && dup && !b.keepsQoS2State:
		b.dupV3QoS2++
	default:
		b.dupBadN++
		if len(b.dupBad) < 5 {
			b.dupBad = append(b.dupBad, fmt.Sprintf("message %d (%s, published QoS %d) copy %d at QoS %d, dup=%v, reconnected=%v",
				id, m.topic, m.qos, c+1, qos, dup, reconnected))
		}
	}
}

// owed reports whether message m must reach b: it was acknowledged, b's
// filter matches it, it is delivered at QoS 1 or 2, and b's subscription
// was in place the whole time it was being published.
func (b *subBook) owed(m *pubRecord) bool {
	if m.acked == 0 || min(b.qos, m.qos) == 0 {
		return false
	}
	match, ok := b.matches[m.topic]
	if !ok {
		match = topic.Match(b.filter, m.topic)
		b.matches[m.topic] = match
	}
	if !match {
		return false
	}
	for _, s := range b.cover {
		if m.start < s.from {
			continue
		}
		if s.to == 0 || m.acked <= s.to-int64(lossGrace) {
			return true
		}
	}
	return false
}

// soakTally is the ledger's summary.
type soakTally struct {
	Published   [3]int64 `json:"published"`   // by published QoS
	Acked       [3]int64 `json:"acked"`       // QoS 1/2 acknowledged, QoS 0 written
	Unacked     [3]int64 `json:"unacked"`     // publishes whose connection ended first
	Owed        int64    `json:"owed"`        // QoS 1/2 deliveries owed to subscribers
	Received    [3]int64 `json:"received"`    // copies received, by delivered QoS
	Lost        int64    `json:"lost"`        // owed and never received
	DupAllowed  int64    `json:"dup_allowed"` // QoS 1 after a reconnect, with DUP
	DupV3QoS2   int64    `json:"dup_v3_qos2"` // QoS 2 after a reconnect to a 3.1.1 client without QoS 2 state
	DupBad      int64    `json:"dup_forbidden"`
	QoSAbove    int64    `json:"qos_above"`
	QoSBelow    int64    `json:"qos_below"`
	SessionLost int64    `json:"session_lost"`
	Foreign     int64    `json:"foreign,omitempty"`
	// LostBy and DupBadBy name the subscribers with losses or forbidden
	// duplicates, with examples.
	LostBy   map[string]int64 `json:"lost_by,omitempty"`
	Examples []string         `json:"examples,omitempty"`
}

// tally computes loss and duplicates now.
func (l *ledger) tally() soakTally {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t soakTally
	t.Unacked = l.unacked
	for i := range l.msgs {
		m := &l.msgs[i]
		t.Published[m.qos]++
		if m.acked != 0 {
			t.Acked[m.qos]++
		}
	}
	for _, b := range l.subs {
		var lost int64
		for i := range l.msgs {
			m := &l.msgs[i]
			if !b.owed(m) {
				continue
			}
			t.Owed++
			if i >= len(b.count) || b.count[i] == 0 {
				lost++
				if lost <= 3 {
					t.Examples = append(t.Examples, fmt.Sprintf("%s lost message %d (%s, QoS %d, published %s, acknowledged %s)",
						b.name, i, m.topic, m.qos, time.Unix(0, m.start).Format("15:04:05.000"), time.Unix(0, m.acked).Format("15:04:05.000")))
				}
			}
		}
		if lost > 0 {
			if t.LostBy == nil {
				t.LostBy = map[string]int64{}
			}
			t.LostBy[b.name] = lost
		}
		t.Lost += lost
		for q := range b.received {
			t.Received[q] += b.received[q]
		}
		t.DupAllowed += b.dupAllowed
		t.DupV3QoS2 += b.dupV3QoS2
		t.DupBad += b.dupBadN
		for _, e := range b.dupBad {
			t.Examples = append(t.Examples, b.name+": forbidden duplicate: "+e)
		}
		t.QoSAbove += b.qosAbove
		t.QoSBelow += b.qosBelow
		t.SessionLost += b.sessionLost
		t.Foreign += b.foreign
	}
	return t
}

// outstanding counts owed deliveries not received yet (the drain waits
// for it to reach 0).
func (l *ledger) outstanding() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, b := range l.subs {
		for i := range l.msgs {
			if b.owed(&l.msgs[i]) && (i >= len(b.count) || b.count[i] == 0) {
				n++
			}
		}
	}
	return n
}
