package topic

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// numShards is how many shards hold filters with a literal first level. In production
// the first level is the tenant's account id, so tenants rarely share a lock.
const numShards = 64

// Index is a concurrency-safe subscription index mapping filters to subscribers.
// K identifies a subscriber (the broker uses a session key string); V is the subscription data.
//
// Filters are kept in tries of levels. A filter whose first level is literal lives in one
// of numShards shards chosen by a hash of that level; a filter starting with '+' or '#'
// lives in the wild shard, which every Match consults unless it is empty or the name
// starts with '$'. Each shard has its own RWMutex and Match only takes read locks, so
// publishes to different tenants do not contend. Create an Index with NewIndex.
type Index[K comparable, V any] struct {
	seed   maphash.Seed
	shards [numShards]shard[K, V]
	wild   shard[K, V]
}

// shard is one trie with its lock, padded so neighbouring locks do not share a cache line.
type shard[K comparable, V any] struct {
	mu    sync.RWMutex
	root  *node[K, V]
	count atomic.Int64 // subscriptions in this shard
	_     [64]byte
}

// NewIndex returns an empty Index.
func NewIndex[K comparable, V any]() *Index[K, V] {
	ix := &Index[K, V]{seed: maphash.MakeSeed()}
	for i := range ix.shards {
		ix.shards[i].root = &node[K, V]{}
	}
	ix.wild.root = &node[K, V]{}
	return ix
}

// shardFor returns the shard that holds filters with the given (non-shared) first level.
func (ix *Index[K, V]) shardFor(first string) *shard[K, V] {
	if first == "+" || first == "#" {
		return &ix.wild
	}
	return &ix.shards[maphash.String(ix.seed, first)%numShards]
}

// Subscribe adds or replaces the subscription of key on filter (filter may be "$share/g/f": shared).
// Returns true if it replaced an existing subscription of the same key on the same (group, filter).
// The caller validates filter with ValidateFilter first; Subscribe ignores a filter that
// does not validate and returns false. The index keeps copies of the strings it stores,
// so filter may alias a reusable buffer.
func (ix *Index[K, V]) Subscribe(filter string, key K, v V) (replaced bool) {
	group, inner, shared, err := ParseShare(filter)
	if err != nil {
		return false
	}
	first, _ := level(inner, 0)
	s := ix.shardFor(first)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.root
	for i := 0; i >= 0; {
		var l string
		l, i = level(inner, i)
		n = n.childOrNew(l)
	}
	if shared {
		replaced = n.group(group).members.put(key, v)
	} else {
		replaced = n.subs.put(key, v)
	}
	if !replaced {
		s.count.Add(1)
	}
	return replaced
}

// Unsubscribe removes it; reports whether it existed. Trie nodes left without
// subscriptions or children are removed, so churn does not leak memory.
func (ix *Index[K, V]) Unsubscribe(filter string, key K) bool {
	group, inner, shared, err := ParseShare(filter)
	if err != nil {
		return false
	}
	first, _ := level(inner, 0)
	s := ix.shardFor(first)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.root
	for i := 0; i >= 0 && n != nil; {
		var l string
		l, i = level(inner, i)
		n = n.child(l)
	}
	if n == nil {
		return false
	}
	if shared {
		if !n.removeShared(group, key) {
			return false
		}
	} else if !n.subs.remove(key) {
		return false
	}
	s.count.Add(-1)
	n.prune()
	return true
}

// Match calls fn for every non-shared subscription whose filter matches name, and for every
// shared subscription (group+filter) that matches, once, for ONE member chosen round-robin.
// fn gets the key, value, and the shared group ("" if not shared). Order unspecified.
// fn must not call back into the index: it runs under a shard's read lock.
// The same key is reported once per matching filter; deduplicating is the caller's job.
// Match does not allocate.
func (ix *Index[K, V]) Match(name string, fn func(key K, v V, group string)) {
	first, _ := level(name, 0)
	s := ix.shardFor(first)
	s.match(name, fn)
	if s != &ix.wild && !strings.HasPrefix(name, "$") { // leading wildcards never match '$' names
		ix.wild.match(name, fn)
	}
}

// match reports the subscriptions of s that match name.
func (s *shard[K, V]) match(name string, fn func(K, V, string)) {
	if s.count.Load() == 0 {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.root.match(name, 0, fn)
}

// Len returns the number of subscriptions (shared members counted individually).
func (ix *Index[K, V]) Len() int {
	n := ix.wild.count.Load()
	for i := range ix.shards {
		n += ix.shards[i].count.Load()
	}
	return int(n)
}
