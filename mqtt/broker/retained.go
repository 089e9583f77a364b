package broker

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// MemoryRetained is the Retained store of a single node: the retained
// message of each topic in a trie of topic levels, sharded by first level
// so retained publishes of different tenants do not contend. A server
// without Options.Retained keeps one and saves it with its state.
//
// With track set (when state is saved) each shard also remembers the
// topics set, replaced or cleared since the last save, so a save writes
// only those (see retainedLog).
type MemoryRetained struct {
	seed   maphash.Seed
	shards [32]retainedShard
	count  atomic.Int64
	track  bool // set before the server starts serving, never after
}

type retainedShard struct {
	mu    sync.RWMutex
	root  rnode
	dirty map[string]struct{} // topics changed since the last save
}

type rnode struct {
	children map[string]*rnode
	msg      *Message
	// pending is the reservations (Reserve) of messages for this topic
	// not yet Set or Released; a node with some is kept.
	pending int32
	// On a first-level node (a child of a shard's root): the retained
	// messages stored anywhere under it and their payload bytes, and the
	// room reserved under it: topics with no message yet but a pending
	// reservation (held), and the payload bytes of every pending
	// reservation (heldBytes).
	under      int
	underBytes int64
	held       int
	heldBytes  int64
}

// isHeld reports whether n takes a message of room by reservation alone.
func (n *rnode) isHeld() bool { return n.msg == nil && n.pending > 0 }

// empty reports whether n can be pruned.
func (n *rnode) empty() bool { return n.msg == nil && n.pending == 0 && len(n.children) == 0 }

// NewMemoryRetained returns an empty store.
func NewMemoryRetained() *MemoryRetained {
	return &MemoryRetained{seed: maphash.MakeSeed()}
}

// Len is the number of retained messages stored.
func (rs *MemoryRetained) Len() int64 { return rs.count.Load() }

func firstLevel(t string) string {
	if i := strings.IndexByte(t, '/'); i >= 0 {
		return t[:i]
	}
	return t
}

func (rs *MemoryRetained) shard(first string) *retainedShard {
	return &rs.shards[maphash.String(rs.seed, first)%uint64(len(rs.shards))]
}

// Set stores m as the retained message of its topic, or clears the topic
// when the payload is empty. The room reserved for m (Reserve), if any,
// becomes the room it takes.
func (rs *MemoryRetained) Set(m *Message) {
	sh := rs.shard(firstLevel(m.Topic))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(m.Payload) == 0 {
		if rs.removeLocked(&sh.root, nil, m.Topic) {
			rs.markLocked(sh, m.Topic)
		}
		return
	}
	n, top := nodeLocked(&sh.root, m.Topic)
	wasHeld := n.isHeld()
	if m.held {
		m.held = false
		n.pending--
		top.heldBytes -= int64(len(m.Payload))
	}
	if wasHeld {
		top.held-- // a message now, not room held
	}
	if n.msg == nil {
		rs.count.Add(1)
		top.under++
	} else {
		top.underBytes -= int64(len(n.msg.Payload))
	}
	top.underBytes += int64(len(m.Payload))
	n.msg = m
	rs.markLocked(sh, m.Topic)
}

// nodeLocked returns the node of topic under the shard root n, made when
// missing, and its first-level node.
func nodeLocked(n *rnode, topic string) (node, top *rnode) {
	for rest := topic; ; {
		level, more := cut(rest)
		child := n.children[level]
		if child == nil {
			if n.children == nil {
				n.children = make(map[string]*rnode)
			}
			child = &rnode{}
			n.children[level] = child
		}
		n = child
		if top == nil {
			top = n
		}
		if !more {
			return n, top
		}
		rest = rest[len(level)+1:]
	}
}

// lookupNode returns the node of topic under n, or nil.
func lookupNode(n *rnode, topic string) *rnode {
	for rest := topic; n != nil; {
		level, more := cut(rest)
		n = n.children[level]
		if !more {
			break
		}
		rest = rest[len(level)+1:]
	}
	return n
}

// Reserve takes room for the retained message m (a non-empty payload)
// under its topic's first level when, counting the messages stored there
// and the room already reserved for others, m fits within maxCount
// messages and maxBytes payload bytes (replacing a message takes no
// message of room, and its bytes count as freed); the check and the
// reservation are one step, so concurrent publishers never pass the bound
// together. It returns what was stored and reserved there before, and
// whether m got its room. The room is m's until Set(m) takes it or
// Release(m) gives it back: a server sets every message reserved for that
// it routes, and releases the others.
func (rs *MemoryRetained) Reserve(m *Message, maxCount int, maxBytes int64) (count int, bytes int64, ok bool) {
	if len(m.Payload) == 0 || m.held {
		return 0, 0, true
	}
	sh := rs.shard(firstLevel(m.Topic))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	first, _ := cut(m.Topic)
	top := sh.root.children[first]
	n := lookupNode(&sh.root, m.Topic)
	if top != nil {
		count, bytes = top.under+top.held, top.underBytes+top.heldBytes
	}
	after, afterBytes := count, bytes+int64(len(m.Payload))
	switch {
	case n != nil && n.msg != nil:
		afterBytes -= int64(len(n.msg.Payload))
	case n != nil && n.pending > 0: // the topic's room is held already
	default:
		after++
	}
	if after > maxCount || afterBytes > maxBytes {
		return count, bytes, false
	}
	if n == nil {
		n, top = nodeLocked(&sh.root, m.Topic)
	}
	if !n.isHeld() && n.msg == nil {
		top.held++
	}
	n.pending++
	top.heldBytes += int64(len(m.Payload))
	m.held = true
	return count, bytes, true
}

// Release gives back the room reserved for m (Reserve) when it was not
// Set; otherwise it does nothing.
func (rs *MemoryRetained) Release(m *Message) {
	if !m.held {
		return
	}
	sh := rs.shard(firstLevel(m.Topic))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m.held = false
	first, _ := cut(m.Topic)
	top := sh.root.children[first]
	n := lookupNode(&sh.root, m.Topic)
	if n == nil || top == nil || n.pending == 0 {
		return // cannot be: a node with a reservation is kept
	}
	wasHeld := n.isHeld()
	n.pending--
	top.heldBytes -= int64(len(m.Payload))
	if wasHeld && !n.isHeld() {
		top.held--
	}
	if n.empty() {
		rs.removeLocked(&sh.root, nil, m.Topic) // prunes what is empty
	}
}

// markLocked records that topic changed since the last save.
func (rs *MemoryRetained) markLocked(sh *retainedShard, topic string) {
	if !rs.track {
		return
	}
	if sh.dirty == nil {
		sh.dirty = make(map[string]struct{})
	}
	sh.dirty[topic] = struct{}{}
}

// markDirty records topics as changed since the last save (a save that
// failed gives its topics back).
func (rs *MemoryRetained) markDirty(topics []string) {
	for _, t := range topics {
		sh := rs.shard(firstLevel(t))
		sh.mu.Lock()
		rs.markLocked(sh, t)
		sh.mu.Unlock()
	}
}

// retainedChange is a topic changed since the last save and its retained
// message now (nil: cleared).
type retainedChange struct {
	topic string
	msg   *Message
}

// takeDirty returns the topics changed since the last save with their
// messages now, and starts a new set of changes. With all it returns every
// retained message instead (and every change is forgotten): the content of
// a compacted log.
func (rs *MemoryRetained) takeDirty(all bool) []retainedChange {
	var out []retainedChange
	for i := range rs.shards {
		sh := &rs.shards[i]
		sh.mu.Lock()
		if all {
			var ms []*Message
			collectAll(&sh.root, &ms)
			for _, m := range ms {
				out = append(out, retainedChange{topic: m.Topic, msg: m})
			}
		} else {
			for t := range sh.dirty {
				out = append(out, retainedChange{topic: t, msg: lookup(&sh.root, t)})
			}
		}
		sh.dirty = nil
		sh.mu.Unlock()
	}
	return out
}

// lookup returns the message retained on topic under n, or nil.
func lookup(n *rnode, topic string) *Message {
	if n = lookupNode(n, topic); n == nil {
		return nil
	}
	return n.msg
}

// Get returns the message retained on topic, expired or not, nil when
// none (a cluster's store compares creation times with it).
func (rs *MemoryRetained) Get(topic string) *Message {
	first, _ := cut(topic)
	sh := rs.shard(first)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return lookup(&sh.root, topic)
}

// Under returns the retained messages stored under topic's first level
// and their payload bytes, and the payload size of the one retained on
// topic itself (-1 when none).
func (rs *MemoryRetained) Under(topic string) (count int, bytes int64, current int) {
	first, _ := cut(topic)
	sh := rs.shard(first)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	top := sh.root.children[first]
	if top == nil {
		return 0, 0, -1
	}
	current = -1
	if m := lookup(&sh.root, topic); m != nil {
		current = len(m.Payload)
	}
	return top.under, top.underBytes, current
}

// removeLocked clears topic under n (top is n's first-level node, nil
// when n is a shard's root) and prunes empty nodes.
func (rs *MemoryRetained) removeLocked(n, top *rnode, topic string) bool {
	level, more := cut(topic)
	child := n.children[level]
	if child == nil {
		return false
	}
	if top == nil {
		top = child
	}
	if more {
		rs.removeLocked(child, top, topic[len(level)+1:])
	} else if child.msg != nil {
		top.under--
		top.underBytes -= int64(len(child.msg.Payload))
		child.msg = nil
		rs.count.Add(-1)
		if child.isHeld() {
			top.held++ // the room a pending reservation takes stays
		}
	}
	if child.empty() {
		delete(n.children, level)
	}
	return true
}

// cut splits off the first level of a topic.
func cut(t string) (level string, more bool) {
	if i := strings.IndexByte(t, '/'); i >= 0 {
		return t[:i], true
	}
	return t, false
}

// Match returns the unexpired retained messages matching filter (not
// shared). Leading wildcards do not match topics that start with '$'.
func (rs *MemoryRetained) Match(filter string, now time.Time) []*Message {
	var out []*Message
	first, _ := cut(filter)
	visit := func(sh *retainedShard) {
		sh.mu.RLock()
		matchNode(&sh.root, filter, true, now, &out)
		sh.mu.RUnlock()
	}
	if first == "+" || first == "#" {
		for i := range rs.shards {
			visit(&rs.shards[i])
		}
	} else {
		visit(rs.shard(first))
	}
	return out
}

func matchNode(n *rnode, filter string, top bool, now time.Time, out *[]*Message) {
	level, more := cut(filter)
	switch level {
	case "#":
		// "a/#" also matches "a" itself: the parent was handled by the
		// caller; here collect this subtree.
		collect(n, top, now, out)
		return
	case "+":
		for name, child := range n.children {
			if top && strings.HasPrefix(name, "$") {
				continue
			}
			matchStep(child, filter, level, more, now, out)
		}
	default:
		if child := n.children[level]; child != nil {
			matchStep(child, filter, level, more, now, out)
		}
	}
}

func matchStep(child *rnode, filter, level string, more bool, now time.Time, out *[]*Message) {
	if !more {
		if child.msg != nil && !child.msg.expired(now) {
			*out = append(*out, child.msg)
		}
		return
	}
	rest := filter[len(level)+1:]
	if rest == "#" && child.msg != nil && !child.msg.expired(now) {
		*out = append(*out, child.msg) // "a/#" matches "a"
	}
	matchNode(child, rest, false, now, out)
}

// collect appends every message below n (excluding n itself).
func collect(n *rnode, top bool, now time.Time, out *[]*Message) {
	for name, child := range n.children {
		if top && strings.HasPrefix(name, "$") {
			continue
		}
		if child.msg != nil && !child.msg.expired(now) {
			*out = append(*out, child.msg)
		}
		collect(child, false, now, out)
	}
}

// Sweep removes expired retained messages, and those older than maxAge
// when it is set. It returns how many it removed.
func (rs *MemoryRetained) Sweep(now time.Time, maxAge time.Duration) int {
	removed := 0
	for i := range rs.shards {
		sh := &rs.shards[i]
		sh.mu.Lock()
		removed += rs.sweepNode(sh, &sh.root, nil, now, maxAge)
		sh.mu.Unlock()
	}
	return removed
}

// sweepNode sweeps n's subtree; top is n's first-level node (nil when n
// is a shard's root).
func (rs *MemoryRetained) sweepNode(sh *retainedShard, n, top *rnode, now time.Time, maxAge time.Duration) int {
	removed := 0
	for name, child := range n.children {
		t := top
		if t == nil {
			t = child
		}
		removed += rs.sweepNode(sh, child, t, now, maxAge)
		if m := child.msg; m != nil && (m.expired(now) || maxAge > 0 && now.Sub(m.Created) >= maxAge) {
			t.under--
			t.underBytes -= int64(len(m.Payload))
			child.msg = nil
			rs.count.Add(-1)
			if child.isHeld() {
				t.held++
			}
			rs.markLocked(sh, m.Topic)
			removed++
		}
		if child.empty() {
			delete(n.children, name)
		}
	}
	return removed
}

// collectAll appends every message below n.
func collectAll(n *rnode, out *[]*Message) {
	for _, child := range n.children {
		if child.msg != nil {
			*out = append(*out, child.msg)
		}
		collectAll(child, out)
	}
}

// RetainedUnder reports the retained messages stored under topic's first
// level (how many, and their payload bytes) and the payload size of the
// one retained on topic itself (-1 when none): what a policy needs to
// bound the retained state of one tenant (see Policy.Publish).
func (s *Server) RetainedUnder(topic string) (count int, bytes int64, current int) {
	return s.retained.Under(topic)
}

// ReserveRetained takes room for the retained message m in the retained
// store, under its topic's first level, when the messages stored there
// and the room reserved for others leave it room within maxCount messages
// and maxBytes payload bytes (Retained.Reserve): what a Policy calls, last
// in Publish, to bound the retained state of one tenant exactly, however
// many of its publishers retain at the same moment. It returns what was
// stored and reserved there and whether m got its room. The server sets
// m when it routes it, and gives the room back when the Policy refuses m
// or m is not delivered (NoDeliver). A message that is not retained, or
// clears its topic, always has room.
func (s *Server) ReserveRetained(m *Message, maxCount int, maxBytes int64) (count int, bytes int64, ok bool) {
	if !m.Retain || len(m.Payload) == 0 || m.NoDeliver {
		return 0, 0, true
	}
	return s.retained.Reserve(m, maxCount, maxBytes)
}

// unreserve gives back the retained room reserved for m, if any: m is not
// routed.
func (s *Server) unreserve(m *Message) {
	if m.held {
		s.retained.Release(m)
	}
}

// RetainedMessage is a copy of a stored retained message.
type RetainedMessage struct {
	Topic   string // internal topic
	Payload []byte // a copy
	QoS     byte   // effective QoS (caps delivery)
	Created time.Time
	Expiry  time.Time // zero: never
}

// Retained returns copies of the retained messages whose topics match
// filter (a topic filter, not a shared one) and that have not expired by
// Options.Now, sorted by topic. With limit > 0 it returns at most limit of
// them: the first by topic. It only reads: expired messages are skipped,
// not removed (the sweep removes them). An invalid or shared filter is an
// error.
func (s *Server) Retained(filter string, limit int) ([]RetainedMessage, error) {
	if _, _, shared, err := topic.ParseShare(filter); err != nil || shared {
		if err == nil {
			err = fmt.Errorf("shared filter %q", filter)
		}
		return nil, fmt.Errorf("broker: retained: %w", err)
	}
	ms := s.retained.Match(filter, s.now())
	sort.Slice(ms, func(i, j int) bool { return ms[i].Topic < ms[j].Topic })
	if limit > 0 && len(ms) > limit {
		ms = ms[:limit]
	}
	out := make([]RetainedMessage, len(ms))
	for i, m := range ms {
		out[i] = RetainedMessage{Topic: m.Topic, Payload: bytes.Clone(m.Payload), QoS: m.QoS, Created: m.Created, Expiry: m.Expiry}
	}
	return out, nil
}
