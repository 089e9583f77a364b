package cluster

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// Router is the broker.Router of one node of a cluster.
//
// A message accepted here is delivered to this node's non-shared
// subscriptions at once (on the publisher's goroutine, as on one node),
// then handed to the sender goroutine, which publishes it on NATS on its
// topic's subject (Subject) with an envelope: this node's name, a
// sequence number, and the publisher's session key (for No Local). NATS
// sends it only to the nodes holding interest in the subject.
//
// The interest: for each filter its sessions subscribe to, the node holds
// NATS subscriptions on the filter's subjects (FilterSubjects), made and
// ended by the interest goroutine as the counts of Subscribed and
// Unsubscribed calls go above zero and back. What they bring is read by
// one receiver goroutine, in the order it arrives, and delivered to this
// node's non-shared subscriptions (broker.Deliverer, whose writes it makes
// together when no more messages wait). A message
// matching several of the node's filters arrives once per NATS
// subscription; the receiver keeps the last sequence number seen from
// each node and delivers each message once.
//
// A shared subscription "$share/{group}/{filter}" is a NATS queue
// subscription on the filter's subjects, in a queue group of that name,
// on a connection of its own that also hears this node's messages: NATS
// gives each message to one node of the group, which delivers it to one
// of its members (Deliverer.DeliverShared). Every node, the publisher's
// included, leaves shared subscriptions out of its direct delivery.
//
// Bounds: at most SendQueue messages wait for the sender (a publisher
// whose message finds it full waits, as for a full subscriber queue), and
// at most ReceiveQueue messages from other nodes wait for the receiver
// (more are dropped by NATS and counted: a node that cannot keep up loses
// live copies, never stored history).
type Router struct {
	node   string
	log    *slog.Logger
	pub    *nats.Conn // publishes, holds the plain interest; hears not its own messages
	shared *nats.Conn // holds the queue subscriptions; hears every node's messages
	server atomic.Pointer[broker.Server]

	out  chan *broker.Message
	in   chan *nats.Msg
	seq  uint64              // the sender's
	buf  []byte              // the sender's
	last map[string]lastSeen // the receiver's, by node

	mu       sync.Mutex
	ops      []interestOp
	opsReady chan struct{}
	counts   map[string]int
	subsMu   sync.Mutex // guards subs for Stats; the interest goroutine changes it
	subs     map[string][]*nats.Subscription
	dropped  int64 // messages NATS dropped on subscriptions since ended

	done     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once

	stats RouterStats
}

// RouterStats counts a router's traffic.
type RouterStats struct {
	Sent, SendErrors     atomic.Int64 // messages published to the other nodes; refused by NATS
	Received, Duplicates atomic.Int64 // messages from other nodes; copies of one already delivered
	SharedReceived       atomic.Int64 // messages for shared subscriptions, from any node
	// SharedRerouted counts shared-subscription messages this node had no
	// member for (its last one had just left) and handed back to the
	// group; SharedLost those handed on maxReroutes times already, dropped.
	SharedRerouted, SharedLost atomic.Int64
	Malformed                  atomic.Int64 // messages that did not decode
	Interest                   atomic.Int64 // filters of interest
	SlowEvents                 atomic.Int64 // times NATS found this node behind (it then drops, see Router.Dropped)
}

// lastSeen is the latest sequence number delivered from a node, and when.
type lastSeen struct {
	seq uint64
	at  time.Time
}

type interestOp struct {
	filter string
	delta  int
	// left, instead of a delta: a reroute drained these subscriptions of
	// filter (the node had no member of the share for a message); if the
	// filter still has interest here and they are still its
	// subscriptions, it subscribes again.
	left *shareSubs
}

// Queue bounds.
const (
	SendQueue    = 8192
	ReceiveQueue = 65536
)

// NewRouter connects a router to the NATS. Attach must give it the
// server before the server routes a message.
func NewRouter(n *NATS, node string, log *slog.Logger) (*Router, error) {
	if log == nil {
		log = slog.Default()
	}
	// The envelope names this start of the node: a node started again
	// numbers its messages from 1 again, which the other nodes' receivers
	// would take for copies of what they delivered.
	r := &Router{node: node + "/" + strings.ToLower(rand.Text()[:8]), log: log, out: make(chan *broker.Message, SendQueue), in: make(chan *nats.Msg, ReceiveQueue),
		last: map[string]lastSeen{}, opsReady: make(chan struct{}, 1), counts: map[string]int{},
		subs: map[string][]*nats.Subscription{}, done: make(chan struct{})}
	var err error
	slow := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			if n := r.stats.SlowEvents.Add(1); n&(n-1) == 0 {
				r.log.Warn("cluster: this node fell behind the messages of other nodes; NATS dropped some (live copies only: history has them)")
			}
		}
	})
	if r.pub, err = n.Connect("router", nats.NoEcho(), slow); err != nil {
		return nil, err
	}
	if r.shared, err = n.Connect("shared subscriptions", slow); err != nil {
		r.pub.Close()
		return nil, err
	}
	// Every node hears the long topics (see longSubject): a short filter
	// with wildcards may match them, and the subscription index sorts
	// out which sessions want each.
	if _, err := r.pub.ChanSubscribe(longSubject, r.in); err != nil {
		r.pub.Close()
		r.shared.Close()
		return nil, err
	}
	r.wg.Add(3)
	go r.send()
	go r.receive()
	go r.interest()
	return r, nil
}

// Attach gives the router the server it delivers to.
func (r *Router) Attach(s *broker.Server) { r.server.Store(s) }

// Connected reports whether the router's NATS connections are up.
func (r *Router) Connected() bool { return r.pub.IsConnected() && r.shared.IsConnected() }

// Stats returns the router's counters.
func (r *Router) Stats() *RouterStats { return &r.stats }

// Dropped is how many messages from other nodes NATS dropped because this
// node did not take them fast enough (ReceiveQueue waiting).
func (r *Router) Dropped() int64 {
	r.subsMu.Lock()
	defer r.subsMu.Unlock()
	n := r.dropped
	for _, subs := range r.subs {
		for _, s := range subs {
			if d, err := s.Dropped(); err == nil {
				n += int64(d)
			}
		}
	}
	return n
}

// Route delivers m here and queues it for the other nodes.
func (r *Router) Route(m *broker.Message, local broker.Local) {
	local.DeliverUnshared(m)
	select {
	case <-r.done:
		return // closed: nothing more goes to the other nodes
	default:
	}
	select {
	case r.out <- m:
	case <-r.done:
	}
}

// Subscribed counts a filter's interest.
func (r *Router) Subscribed(filter string) { r.op(filter, 1) }

// Unsubscribed ends one count of a filter's interest.
func (r *Router) Unsubscribed(filter string) { r.op(filter, -1) }

func (r *Router) op(filter string, delta int) { r.push(interestOp{filter: filter, delta: delta}) }

// push queues op for the interest goroutine.
func (r *Router) push(op interestOp) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
	select {
	case r.opsReady <- struct{}{}:
	default:
	}
}

// Close stops the router's goroutines and closes its connections; what
// waits to be sent is dropped.
func (r *Router) Close() {
	r.stopOnce.Do(func() {
		close(r.done)
		r.wg.Wait()
		r.pub.Close()
		r.shared.Close()
	})
}

// envelope: version 1, the node's name, the sequence number, the
// publisher's session key, then the message (broker.AppendMessage).
const envelopeVersion = 1

func (r *Router) send() {
	defer r.wg.Done()
	for {
		select {
		case m := <-r.out:
			r.publish(m)
		case <-r.done:
			// What was queued before Close still goes: the broker is
			// closed first, so nothing is added meanwhile.
			for len(r.out) > 0 {
				r.publish(<-r.out)
			}
			r.pub.FlushTimeout(5 * time.Second)
			return
		}
	}
}

// publish sends m to the other nodes (on the sender goroutine).
func (r *Router) publish(m *broker.Message) {
	r.seq++
	buf := appendEnvelope(r.buf[:0], r.node, r.seq, m)
	r.buf = buf
	if err := r.pub.Publish(Subject(m.Topic), buf); err != nil {
		if n := r.stats.SendErrors.Add(1); n&(n-1) == 0 { // 1st, 2nd, 4th, 8th...
			r.log.Warn("cluster: a message could not be sent to the other nodes", "topic", m.Topic, "error", err)
		}
		return
	}
	r.stats.Sent.Add(1)
}

// appendEnvelope appends m's envelope, from node with sequence number
// seq, to b.
func appendEnvelope(b []byte, node string, seq uint64, m *broker.Message) []byte {
	b = append(b, envelopeVersion)
	b = appendString(b, node)
	b = binary.AppendUvarint(b, seq)
	b = appendString(b, m.Origin)
	return broker.AppendMessage(b, m)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errEnvelope = errors.New("cluster: malformed message envelope")

// decode reads an envelope.
func decode(b []byte) (node string, seq uint64, m *broker.Message, err error) {
	if len(b) == 0 || b[0] != envelopeVersion {
		return "", 0, nil, errEnvelope
	}
	node, b, ok := readString(b[1:])
	if !ok {
		return "", 0, nil, errEnvelope
	}
	seq, k := binary.Uvarint(b)
	if k <= 0 {
		return "", 0, nil, errEnvelope
	}
	origin, b, ok := readString(b[k:])
	if !ok {
		return "", 0, nil, errEnvelope
	}
	if m, err = broker.DecodeMessage(b); err != nil {
		return "", 0, nil, err
	}
	m.Origin = origin
	return node, seq, m, nil
}

// readString reads what appendString wrote at the start of b, and
// returns the rest.
func readString(b []byte) (s string, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// receiveFlush is the most messages the receiver delivers before it
// makes their writes (broker.Deliverer.Flush); it makes them sooner when
// no more messages are waiting.
const receiveFlush = 64

func (r *Router) receive() {
	defer r.wg.Done()
	var x delivering
	for {
		select {
		case msg := <-r.in:
			r.deliver(msg, x.to(r.server.Load()))
			x.done(len(r.in) > 0)
		case <-r.done:
			x.flush()
			return
		}
	}
}

// delivering is a goroutine's Deliverer of the server the router is
// attached to, and how many messages it handled since its writes were
// last made: they are made when no more messages wait, or after
// receiveFlush of them.
type delivering struct {
	d *broker.Deliverer
	n int
}

// to returns the Deliverer of s (nil while s is nil): the one it has, or
// a new one once the server changed, the old one's writes made.
func (x *delivering) to(s *broker.Server) *broker.Deliverer {
	if s != nil && (x.d == nil || x.d.Server() != s) {
		x.flush()
		x.d = s.NewDeliverer()
	}
	return x.d
}

// done counts a message handled, whatever became of it, and makes the
// writes unless more messages wait and fewer than receiveFlush were
// handled since the last.
func (x *delivering) done(more bool) {
	if x.n++; !more || x.n >= receiveFlush {
		x.flush()
	}
}

// flush makes the writes owed.
func (x *delivering) flush() {
	if x.d != nil {
		x.d.Flush()
	}
	x.n = 0
}

// deliver delivers a message from another node through d (nil before the
// router is attached to its server: the message is then dropped).
func (r *Router) deliver(msg *nats.Msg, d *broker.Deliverer) {
	node, seq, m, err := decode(msg.Data)
	if err != nil {
		r.stats.Malformed.Add(1)
		return
	}
	if node == r.node {
		return // NoEcho keeps these away; never deliver one twice here
	}
	now := time.Now()
	if seen := r.last[node]; seq <= seen.seq {
		r.stats.Duplicates.Add(1)
		return
	}
	r.last[node] = lastSeen{seq, now}
	if r.stats.Received.Add(1)%4096 == 0 {
		// Each start of a node is a name of its own: forget the names
		// not heard for an hour.
		for n, seen := range r.last {
			if now.Sub(seen.at) > time.Hour {
				delete(r.last, n)
			}
		}
	}
	if d != nil {
		d.DeliverLocalUnshared(m)
	}
}

// interest makes and ends the NATS subscriptions as filters gain and lose
// their interest.
func (r *Router) interest() {
	defer r.wg.Done()
	for {
		select {
		case <-r.opsReady:
		case <-r.done:
			return
		}
		r.mu.Lock()
		ops := r.ops
		r.ops = nil
		r.mu.Unlock()
		for _, op := range ops {
			if op.left != nil {
				r.subsMu.Lock()
				current := op.left.holds(r.subs[op.filter])
				r.subsMu.Unlock()
				if current && r.counts[op.filter] > 0 {
					// A member is here after all (it was being replaced,
					// or came back): the node takes the group's messages
					// again.
					r.stats.Interest.Add(-1)
					r.subscribe(op.filter)
				}
				continue
			}
			before := r.counts[op.filter]
			n := before + op.delta
			if n <= 0 {
				delete(r.counts, op.filter)
			} else {
				r.counts[op.filter] = n
			}
			switch {
			case before <= 0 && n > 0:
				r.subscribe(op.filter)
			case before > 0 && n <= 0:
				r.subsMu.Lock()
				for _, s := range r.subs[op.filter] {
					if d, err := s.Dropped(); err == nil {
						r.dropped += int64(d)
					}
					if s.Queue != "" {
						// A shared subscription's: what NATS gave it
						// already goes back to the group (shareSubs.leave).
						s.Drain()
					} else {
						s.Unsubscribe()
					}
				}
				delete(r.subs, op.filter)
				r.subsMu.Unlock()
				r.stats.Interest.Add(-1)
			}
		}
	}
}

func (r *Router) subscribe(filter string) {
	group, inner, shared, err := topic.ParseShare(filter)
	if err != nil {
		r.log.Error("cluster: a filter of interest is not valid", "filter", filter, "error", err)
		return
	}
	var subs []*nats.Subscription
	subjects := FilterSubjects(inner)
	if shared && subjects[0] != longSubject {
		// A short filter with wildcards matches long topics too, which
		// go on longSubject: the group takes those from there.
		subjects = append(subjects, longSubject)
	}
	var gen *shareSubs
	if shared {
		gen = &shareSubs{filter: filter}
		subjects = append(subjects, rerouteSubject(queueName(group, inner)))
	}
	for _, subj := range subjects {
		var s *nats.Subscription
		if shared {
			handle, closed := r.sharedHandler(filter, queueName(group, inner), gen)
			s, err = r.shared.QueueSubscribe(subj, queueName(group, inner), handle)
			if err == nil {
				s.SetClosedHandler(closed)
				err = s.SetPendingLimits(ReceiveQueue, 64<<20)
			}
		} else {
			s, err = r.pub.ChanSubscribe(subj, r.in)
		}
		if err != nil {
			r.log.Error("cluster: interest in a filter could not be registered: this node will not hear other nodes' messages for it",
				"filter", filter, "error", err)
			continue
		}
		subs = append(subs, s)
		if gen != nil {
			gen.add(s)
		}
	}
	r.subsMu.Lock()
	r.subs[filter] = subs
	r.subsMu.Unlock()
	r.stats.Interest.Add(1)
}

// queueName is the NATS queue group of a shared subscription: a hash of
// its group and its whole filter (NATS groups queue subscribers by name
// across subjects, so two shared subscriptions must never share one; and
// a name of fixed length, as a long one would pass NATS's protocol line
// limit).
func queueName(group, filter string) string {
	h := sha256.Sum256([]byte(group + "\x00" + filter))
	return "share." + hex.EncodeToString(h[:16])
}

// rerouteSubject is where a node hands a shared subscription's message
// back to its queue group (queue): every node's subscriptions of the
// group listen there too, and no other subscription does.
func rerouteSubject(queue string) string { return "fleetmq.reroute." + queue }

// maxReroutes bounds how many times a shared subscription's message is
// handed back to its group: each node that does so has left the group
// first, so it takes more nodes losing their last member at once than
// this.
const maxReroutes = 8

// hopsHeader counts, on a shared subscription's message handed back to
// its group, how many times it was.
const hopsHeader = "Fleetmq-Hops"

// shareSubs is the NATS subscriptions a node made at once for one of its
// shared subscriptions, filter (one per subject, in the group's queue).
type shareSubs struct {
	filter string
	mu     sync.Mutex
	subs   []*nats.Subscription
	left   bool // drained by leave
}

func (g *shareSubs) add(s *nats.Subscription) {
	g.mu.Lock()
	g.subs = append(g.subs, s)
	if g.left { // left while its subscriptions were being made
		s.Drain()
	}
	g.mu.Unlock()
}

// holds reports whether subs are these subscriptions.
func (g *shareSubs) holds(subs []*nats.Subscription) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.subs) > 0 && len(subs) > 0 && g.subs[0] == subs[0]
}

// leave ends the subscriptions by draining them (again, harmlessly, when
// the interest goroutine ends them too): NATS is told at once, and the
// messages it had already given them are still handled (handed back to
// the group, see sharedHandler), where an unsubscribe would drop them.
func (g *shareSubs) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.left {
		return
	}
	g.left = true
	for _, s := range g.subs {
		s.Drain()
	}
}

// sharedHandler returns the handler of a NATS queue subscription for the
// shared subscription share (queue group queue, one of the subscriptions
// gen), and what to call when the subscription closes. NATS calls both on
// the subscription's own goroutine, the handler one message at a time: it
// delivers as the receiver does, making the writes when no more messages
// wait (whatever became of the message: one that does not decode may be
// the last); the close makes those still owed (a connection written to
// and not flushed would get nothing more).
//
// A message this node has no member of share for (the last one has just
// left, by a move to another node, an UNSUBSCRIBE or its session's end,
// and NATS had not heard yet) is handed back to the group (reroute)
// instead of going nowhere.
func (r *Router) sharedHandler(share, queue string, gen *shareSubs) (handle nats.MsgHandler, closed func(subject string)) {
	var x delivering
	_, inner, _, _ := topic.ParseShare(share)
	handle = func(msg *nats.Msg) {
		defer func() { x.done(!pendingNone(msg.Sub)) }()
		_, _, m, err := decode(msg.Data)
		if err != nil {
			r.stats.Malformed.Add(1)
			return
		}
		r.stats.SharedReceived.Add(1)
		d := x.to(r.server.Load())
		if d == nil || d.DeliverShared(m, share) || !topic.Match(inner, m.Topic) {
			// Not attached yet (as for the receiver); or delivered; or a
			// topic the share's filter does not match although NATS's
			// subject does (a long topic, on longSubject; one starting
			// with '$', which NATS's wildcards match and MQTT's leading
			// ones do not): not the group's. (Matched last: only a
			// message no member took pays for it.)
			return
		}
		r.reroute(msg, queue, gen)
	}
	return handle, func(string) { x.flush() }
}

// reroute hands msg, a message of the shared subscriptions gen for which
// this node has no member, back to their queue group: gen's subscriptions
// end first, on the connection the message then goes out on, so NATS
// (which handles a connection's commands in order) cannot give it back to
// this node. The interest goroutine subscribes again if a member is here
// after all (one being replaced when the message came).
func (r *Router) reroute(msg *nats.Msg, queue string, gen *shareSubs) {
	gen.leave()
	r.push(interestOp{filter: gen.filter, left: gen})
	hops, _ := strconv.Atoi(msg.Header.Get(hopsHeader))
	if hops >= maxReroutes {
		if n := r.stats.SharedLost.Add(1); n&(n-1) == 0 { // 1st, 2nd, 4th, 8th...
			r.log.Warn("cluster: a shared subscription's message found no member after going round its group; dropped", "group", queue, "hops", hops)
		}
		return
	}
	out := nats.NewMsg(rerouteSubject(queue))
	out.Data = msg.Data
	out.Header.Set(hopsHeader, strconv.Itoa(hops+1))
	if err := r.shared.PublishMsg(out); err != nil {
		r.stats.SharedLost.Add(1)
		r.log.Warn("cluster: a shared subscription's message could not be handed back to its group", "group", queue, "error", err)
		return
	}
	r.stats.SharedRerouted.Add(1)
}

// pendingNone reports, from sub's handler, whether no other message waits
// for it (or the count could not be read). NATS counts the message being
// handled as pending until its handler returns.
func pendingNone(sub *nats.Subscription) bool {
	if sub == nil {
		return true
	}
	msgs, _, err := sub.Pending()
	return err != nil || msgs <= 1
}
