package topic

import (
	"strings"
	"sync/atomic"
)

// node is one level of a subscription trie. The filter of a node is the path of levels
// from the root; its subscribers are stored on the node itself.
type node[K comparable, V any] struct {
	parent   *node[K, V]
	level    string                 // this node's level in parent; "+" or "#" for the wildcard children
	children map[string]*node[K, V] // literal levels; nil when empty
	plus     *node[K, V]
	hash     *node[K, V]
	subs     set[K, V]                 // non-shared subscriptions
	groups   set[string, *group[K, V]] // shared subscriptions by group name
}

// group is the members of one shared subscription on one filter.
type group[K comparable, V any] struct {
	members set[K, V]
	next    atomic.Uint64 // round-robin position; advanced under the read lock
}

// child returns the child for level l, or nil.
func (n *node[K, V]) child(l string) *node[K, V] {
	switch l {
	case "+":
		return n.plus
	case "#":
		return n.hash
	}
	return n.children[l]
}

// childOrNew returns the child for level l, creating it if needed.
func (n *node[K, V]) childOrNew(l string) *node[K, V] {
	if c := n.child(l); c != nil {
		return c
	}
	c := &node[K, V]{parent: n, level: strings.Clone(l)}
	switch l {
	case "+":
		n.plus = c
	case "#":
		n.hash = c
	default:
		if n.children == nil {
			n.children = make(map[string]*node[K, V])
		}
		n.children[c.level] = c
	}
	return c
}

// group returns the shared group with the given name, creating it if needed.
func (n *node[K, V]) group(name string) *group[K, V] {
	if i := n.groups.find(name); i >= 0 {
		return n.groups.items[i].val
	}
	g := &group[K, V]{}
	n.groups.put(strings.Clone(name), g)
	return g
}

// removeShared removes key from the named group and the group once it is empty. It
// reports whether key was a member.
func (n *node[K, V]) removeShared(name string, key K) bool {
	i := n.groups.find(name)
	if i < 0 {
		return false
	}
	g := n.groups.items[i].val
	if !g.members.remove(key) {
		return false
	}
	if g.members.len() == 0 {
		n.groups.remove(name)
	}
	return true
}

// prune removes n and then its ancestors, as long as they hold nothing. The root has no
// parent and is never removed.
func (n *node[K, V]) prune() {
	for n.parent != nil && n.subs.len() == 0 && n.groups.len() == 0 &&
		n.children == nil && n.plus == nil && n.hash == nil {
		p := n.parent
		switch n.level {
		case "+":
			p.plus = nil
		case "#":
			p.hash = nil
		default:
			delete(p.children, n.level)
			if len(p.children) == 0 {
				p.children = nil
			}
		}
		n.parent = nil
		n = p
	}
}

// match reports the subscriptions below n that match name from byte i on, where i is the
// start of the next level of name, or -1 when name has no more levels.
func (n *node[K, V]) match(name string, i int, fn func(K, V, string)) {
	if n.hash != nil {
		n.hash.report(fn) // '#' also matches the parent level, so before the i < 0 check
	}
	if i < 0 {
		n.report(fn)
		return
	}
	l, next := level(name, i)
	if c := n.children[l]; c != nil {
		c.match(name, next, fn)
	}
	if n.plus != nil {
		n.plus.match(name, next, fn)
	}
}

// report calls fn for every non-shared subscriber of n and one member of every group.
func (n *node[K, V]) report(fn func(K, V, string)) {
	for _, e := range n.subs.items {
		fn(e.key, e.val, "")
	}
	for _, ge := range n.groups.items {
		g := ge.val
		m := g.members.items
		e := &m[(g.next.Add(1)-1)%uint64(len(m))]
		fn(e.key, e.val, ge.key)
	}
}

// set holds subscriptions by key in a slice, for fast iteration while matching, with a
// position map once it grows past a few entries.
type set[K comparable, V any] struct {
	items []entry[K, V]
	pos   map[K]int // index into items; nil while len(items) <= setScanMax
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// setScanMax is the size up to which a set finds keys by scanning instead of a map.
const setScanMax = 8

func (s *set[K, V]) len() int { return len(s.items) }

// find returns the index of key in items, or -1.
func (s *set[K, V]) find(key K) int {
	if s.pos != nil {
		if i, ok := s.pos[key]; ok {
			return i
		}
		return -1
	}
	for i := range s.items {
		if s.items[i].key == key {
			return i
		}
	}
	return -1
}

// put adds or replaces the value of key and reports whether it replaced one.
func (s *set[K, V]) put(key K, v V) (replaced bool) {
	if i := s.find(key); i >= 0 {
		s.items[i].val = v
		return true
	}
	s.items = append(s.items, entry[K, V]{key, v})
	switch {
	case s.pos != nil:
		s.pos[key] = len(s.items) - 1
	case len(s.items) > setScanMax:
		s.pos = make(map[K]int, len(s.items))
		for i, e := range s.items {
			s.pos[e.key] = i
		}
	}
	return false
}

// remove deletes key and reports whether it was present. The last entry takes the
// removed one's place.
func (s *set[K, V]) remove(key K) bool {
	i := s.find(key)
	if i < 0 {
		return false
	}
	last := len(s.items) - 1
	if s.pos != nil {
		delete(s.pos, key)
		if i != last {
			s.pos[s.items[last].key] = i
		}
	}
	s.items[i] = s.items[last]
	s.items[last] = entry[K, V]{} // drop references held by the value
	s.items = s.items[:last]
	switch {
	case len(s.items) == 0:
		s.items, s.pos = nil, nil
	case s.pos != nil && len(s.items) <= setScanMax/2:
		s.pos = nil
	}
	return true
}
