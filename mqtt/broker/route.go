package broker

import (
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// maxCopyIDs bounds the distinct subscription identifiers one copy
// carries. A message matching subscriptions of one session with more goes
// out as one copy per subscription instead (see deliverMerged): queued
// copies then cost what they cost before, however many subscriptions a
// client makes, and merging needs no memory but the stack.
const maxCopyIDs = 64

// routeScratch is the scratch space of a route whose matches outgrow the
// stack (routeInline). Scratches are pooled, so that memory goes with the
// routes in progress, not with the connections.
type routeScratch struct {
	own   []routeMatch
	table []int32 // link's hash table
}

// routeMatch is what delivery needs of one matching subscription.
type routeMatch struct {
	sess   *session
	id     uint32
	next   int32 // link: the next match of the same session, -1 at the last
	qos    byte
	rap    bool
	shared bool // a shared subscription's group: a copy of its own
	dup    bool // link: not the first match of its session
}

var scratches = sync.Pool{New: func() any { return new(routeScratch) }}

// routeInline is how many matches a route collects on the stack; more
// take a pooled routeScratch.
const routeInline = 8

// scratchKeep is the most matches a pooled scratch keeps room for; the
// scratch of a larger fan-out is given back to the allocator.
const scratchKeep = 1 << 16

// route stores a retained message and hands the message to the router
// (Options.Router), which delivers it to this server's sessions through
// Local.Deliver (and, in a cluster, to the other nodes). from is the
// publishing connection (nil for wills and injected messages).
func (s *Server) route(m *Message, from *conn) {
	if m.Retain {
		s.retained.Set(m)
	}
	s.router.Route(m, Local{s: s, from: from})
}

// deliverLocal delivers the message to every matching subscription of
// this server's sessions: one copy per session for its non-shared
// subscriptions, one copy per matching shared subscription group. It
// reports whether any subscription in sc matched, and whether the session
// of a shared subscription's member chosen had ended before it took the
// message (the message went nowhere for that group).
//
// The matches are collected under the index's read locks and delivered
// after: enqueue takes session locks, and a SUBSCRIBE or UNSUBSCRIBE holds
// its session's lock while it updates the index (lock order session.mu,
// then the index), so delivering inside Match could deadlock with it.
func (s *Server) deliverLocal(m *Message, from *conn, sc scope) (matched, ended bool) {
	// ms is on the stack until it fills; then big holds the matches. No
	// heap object is ever given ms: inline stays on the stack.
	var inline [routeInline]routeMatch
	ms := inline[:0]
	var big *routeScratch
	s.subs.Match(m.Topic, func(_ string, sub subscription, group string) {
		if !sc.admits(group, sub.filter) {
			return
		}
		if group == "" && sub.noLocal && m.Origin != "" && m.Origin == sub.sess.key {
			// Not forwarded to its publisher through this subscription
			// [MQTT-3.8.3-3]: it adds nothing to the copy (QoS, identifier,
			// Retain As Published); another matching one may still send it.
			return
		}
		x := routeMatch{sess: sub.sess, id: sub.id, next: -1, qos: sub.qos, rap: sub.rap, shared: group != ""}
		switch {
		case big != nil:
			big.own = append(big.own, x)
		case len(ms) < cap(ms):
			ms = append(ms, x)
		default:
			big = scratches.Get().(*routeScratch)
			big.own = append(append(big.own[:0], ms...), x)
		}
	})
	if big != nil {
		ms = big.own
	}
	// A shared subscription is delivered on its own, even to a session
	// that also gets the message through a non-shared one (MQTT 5 §4.8.2).
	for i := range ms {
		if ms[i].shared && !s.deliverOne(m, ms[i], from) {
			ended = true // its session ended after the match (DeliverShared)
		}
	}
	link(ms, big)
	base := -1 // fits: the size of m's PUBLISH without identifiers, once needed
	for i := range ms {
		switch {
		case ms[i].shared || ms[i].dup:
		case ms[i].next < 0:
			s.deliverOne(m, ms[i], from)
		default:
			s.deliverMerged(m, ms, i, &base, from)
		}
	}
	matched = len(ms) > 0
	if big != nil {
		clear(big.own) // drop the references to sessions
		big.own, big.table = keep(big.own), keep(big.table)
		scratches.Put(big)
	}
	return matched, ended
}

func keep[T any](s []T) []T {
	if cap(s) > scratchKeep {
		return nil
	}
	return s[:0]
}

// link groups the non-shared matches by session in O(n): the first match
// of each session heads a chain (next) through its other matches, which
// are marked dup. Up to routeInline matches are compared pairwise; more
// (held by big) are hashed.
func link(ms []routeMatch, big *routeScratch) {
	if len(ms) <= routeInline {
		for i := 1; i < len(ms); i++ {
			if ms[i].shared {
				continue
			}
			for h := range i {
				if !ms[h].dup && !ms[h].shared && ms[h].sess == ms[i].sess {
					ms[i].dup, ms[i].next, ms[h].next = true, ms[h].next, int32(i)
					break
				}
			}
		}
		return
	}
	// Open addressing on the session pointers (heap objects do not move),
	// at most half full: each slot holds 1 + the index of a session's
	// first match, 0 when free.
	shift := bits.Len(uint(2*len(ms) - 1))
	t := big.table
	if cap(t) < 1<<shift {
		t = make([]int32, 1<<shift)
	} else {
		t = t[:1<<shift]
		clear(t)
	}
	big.table = t
	mask := uint(len(t) - 1)
	for i := range ms {
		if ms[i].shared {
			continue
		}
		h := uint((uint64(uintptr(unsafe.Pointer(ms[i].sess))) * 0x9E3779B97F4A7C15) >> (64 - shift))
		for {
			j := t[h] - 1
			if j < 0 {
				t[h] = int32(i + 1)
				break
			}
			if ms[j].sess == ms[i].sess {
				ms[i].dup, ms[i].next, ms[j].next = true, ms[j].next, int32(i)
				break
			}
			h = (h + 1) & mask
		}
	}
}

// deliverOne hands the session a copy for one subscription.
func (s *Server) deliverOne(m *Message, x routeMatch, from *conn) (live bool) {
	var one [1]uint32
	s.stats.routed.Add(1)
	return x.sess.enqueue(m, min(m.QoS, x.qos), m.Retain && x.rap, oneID(&one, x.id), from)
}

// deliverMerged hands a session one copy for its matching subscriptions
// (the chain from ms[head]): at the highest QoS they grant
// [MQTT-3.3.4-2], carrying their distinct subscription identifiers
// [MQTT-3.3.4-4], RETAIN as published if any of them has Retain As
// Published (the client asked to see the flag), else 0. When the
// identifiers are more than maxCopyIDs, or make the copy too large for the
// client's Maximum Packet Size, it sends a copy per subscription instead,
// each with its own QoS, identifier and flag [MQTT-3.3.4-5].
func (s *Server) deliverMerged(m *Message, ms []routeMatch, head int, base *int, from *conn) {
	var qos byte
	rap := false
	var buf [maxCopyIDs]uint32
	ids, over := buf[:0], false
	for i := int32(head); i >= 0; i = ms[i].next {
		qos = max(qos, ms[i].qos)
		rap = rap || ms[i].rap
		if ms[i].id == 0 {
			continue
		}
		if len(ids) == cap(ids) { // make room: drop repeated identifiers
			slices.Sort(ids)
			ids = slices.Compact(ids)
			if len(ids) == cap(ids) {
				if _, found := slices.BinarySearch(ids, ms[i].id); found {
					continue
				}
				over = true
				break
			}
		}
		ids = append(ids, ms[i].id)
	}
	if len(ids) > 1 {
		slices.Sort(ids)
		ids = slices.Compact(ids) // the same identifier on several subscriptions is sent once
	}
	ss := ms[head].sess
	if over || len(ids) > 1 && !fits(ss, m, ids, base) {
		for i := int32(head); i >= 0; i = ms[i].next {
			s.deliverOne(m, ms[i], from)
		}
		return
	}
	s.stats.routed.Add(1)
	ss.enqueue(m, min(m.QoS, qos), m.Retain && rap, ids, from)
}

// oneID returns id as a slice of buf, or nil when id is 0 (none).
func oneID(buf *[1]uint32, id uint32) []uint32 {
	if id == 0 {
		return nil
	}
	buf[0] = id
	return buf[:]
}

// fits reports whether a copy of m carrying the subscription identifiers
// ids stays within the Maximum Packet Size of the session's connection
// (when it is connected and set one) and the protocol's bound. The size
// is reckoned large: as sent under MQTT 5 at QoS 1 or 2, with a Message
// Expiry Interval and without a topic alias.
func fits(ss *session, m *Message, ids []uint32, base *int) bool {
	limit := 1 + 4 + packet.MaxVarint // the protocol's bound
	if c := ss.live.Load(); c != nil && c.maxOut > 0 {
		limit = int(c.maxOut)
	}
	if *base < 0 { // once per message
		p := packet.Publish{QoS: 1, Topic: m.Topic, Payload: m.Payload, Properties: m.Properties}
		p.Properties.SubscriptionIDs = nil
		*base = packet.PublishSize(&p, packet.Version5)
	}
	size := *base + 5 // + Message Expiry Interval
	for _, id := range ids {
		size += 2 // property identifier, and the identifier's first byte
		for v := id >> 7; v > 0; v >>= 7 {
			size++
		}
	}
	if id := ss.ident.Load(); id != nil {
		size += len(id.DeliverPrefix)
	}
	return size+6 <= limit // + the lengths (properties, remaining) growing by up to 3 bytes each
}
