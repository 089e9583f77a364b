package broker

import (
	"sync"
)

// Claim is a node's hold on a session: the node serving the session's
// connection, or keeping it while it is offline.
type Claim struct {
	Key   string // the session key (Identity.SessionKey)
	Node  string // Options.Node of the server that claimed it
	Epoch uint64 // grows with every claim of Key: the later claim has the greater epoch
	// From is the node whose claim this one replaced ("" when none). Only
	// the claim Claim returns has it; it is not part of the claim's
	// identity (Same).
	From string
	// Fresh, on a replaced claim given to a Watch's lost, says whether
	// the claim that replaced it was fresh (a clean start: the session
	// ends) or resumes the session (its state is wanted). Not part of
	// the claim's identity.
	Fresh bool
}

// Same reports whether c and o are the same claim.
func (c Claim) Same(o Claim) bool { return c.Key == o.Key && c.Node == o.Node && c.Epoch == o.Epoch }

// SessionOwners records which node owns each session, so that a client
// connecting to one node takes its session over from whichever node held
// it. A server claims a session at each CONNECT (before CONNACK), releases
// the claim when the session ends, and watches for its claims taken by
// another node: that node's claim is a takeover, and the server
// disconnects the session's connection here (SessionTakenOver) and lets
// go of the session.
//
// LocalOwners, the single-node implementation, keeps the claims in
// memory. A cluster implementation keeps one record per session key
// where every node sees it (a JetStream key-value bucket, whose revision
// is the epoch and whose watch is the takeover notice, or a PostgreSQL
// row changed with one atomic update and announced with NOTIFY).
//
// The contract a second implementation must meet (the suite in
// internal/contract, SessionOwners, checks it):
//   - Claim(key, node, fresh) makes node the owner of key and returns
//     the new claim, whose Epoch is greater than that of every earlier
//     claim of key, and whose From names the node of the claim it
//     replaced. A fresh claim (a clean start) also discards the state
//     saved for key (SessionStates), and a later claim never finds it.
//     Claims of one key from any number of goroutines or nodes at once
//     are ordered: each gets a distinct epoch, and Owner reports the one
//     with the greatest.
//   - When a claim replaces a claim of another node, the lost function
//     that node registered with Watch is called once with the replaced
//     claim, within a bounded time (single node: before Claim returns;
//     cluster: within a second while the nodes can talk). A claim
//     replacing one of the same node tells no one: the node handles its
//     own takeover. A claim that is not fresh returns once lost returned
//     on the old node (it hands the session's state over there), or once
//     a bounded wait ends (the old node is gone or does not answer).
//   - Release(c) removes c when it still holds its key and reports
//     whether it did; a release of a replaced claim changes nothing, so a
//     slow node ending its old session never frees the new owner's.
//   - Owner(key) returns the claim holding key, ok false when none.
//   - Watch(node, lost) registers lost for node's replaced claims until
//     stop is called; lost may be called from any goroutine, may block
//     for a bounded time (saving the session's state), and must not call
//     back into the SessionOwners.
//   - An error from Claim (the shared record cannot be reached) refuses
//     the CONNECT with Server unavailable; the session is not taken.
type SessionOwners interface {
	Claim(key, node string, fresh bool) (Claim, error)
	Release(c Claim) (bool, error)
	Owner(key string) (c Claim, ok bool, err error)
	Watch(node string, lost func(old Claim)) (stop func())
}

// LocalOwners is the SessionOwners of a single process: the claims in a
// map. It is safe for concurrent use.
type LocalOwners struct {
	mu       sync.Mutex
	claims   map[string]Claim
	epoch    uint64 // the last epoch given, across keys
	watchers map[string]map[*watcher]struct{}
}

type watcher struct{ lost func(Claim) }

// NewLocalOwners returns an empty LocalOwners.
func NewLocalOwners() *LocalOwners {
	return &LocalOwners{claims: make(map[string]Claim), watchers: make(map[string]map[*watcher]struct{})}
}

// Claim makes node the owner of key. One process keeps no state apart
// from its sessions: fresh changes nothing here.
func (o *LocalOwners) Claim(key, node string, fresh bool) (Claim, error) {
	o.mu.Lock()
	o.epoch++
	c := Claim{Key: key, Node: node, Epoch: o.epoch}
	old, had := o.claims[key]
	o.claims[key] = c
	if had {
		c.From = old.Node
	}
	var tell []func(Claim)
	if had && old.Node != node {
		for w := range o.watchers[old.Node] {
			tell = append(tell, w.lost)
		}
		old.Fresh = fresh
	}
	o.mu.Unlock()
	for _, lost := range tell {
		lost(old)
	}
	return c, nil
}

// Release removes c if it still holds its key.
func (o *LocalOwners) Release(c Claim) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, ok := o.claims[c.Key]; !ok || !cur.Same(c) {
		return false, nil
	}
	delete(o.claims, c.Key)
	return true, nil
}

// Owner returns the claim holding key.
func (o *LocalOwners) Owner(key string) (Claim, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.claims[key]
	return c, ok, nil
}

// Watch calls lost for each claim of node's replaced by another node's.
func (o *LocalOwners) Watch(node string, lost func(old Claim)) (stop func()) {
	w := &watcher{lost: lost}
	o.mu.Lock()
	if o.watchers[node] == nil {
		o.watchers[node] = make(map[*watcher]struct{})
	}
	o.watchers[node][w] = struct{}{}
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		delete(o.watchers[node], w)
		o.mu.Unlock()
	}
}

// takenElsewhere ends this server's hold on a session another node
// claimed (handOff). The notice is remembered a while: a CONNECT here that
// made the replaced claim and has not attached its session yet ends it
// once attached.
func (s *Server) takenElsewhere(old Claim) {
	s.noteLost(old)
	s.mu.Lock()
	ss := s.sessions[old.Key]
	if ss == nil {
		// No session here, but maybe the will of its last connection,
		// closed for a resume that failed here (closeTaken): it goes
		// now when the session ends there (a fresh claim), else never.
		s.settleWillLocked(old.Key, old.Fresh)
	}
	s.mu.Unlock()
	if ss != nil {
		s.handOff(ss, old)
	}
}

// releaseClaim gives up the claim of a session that ended here.
func (s *Server) releaseClaim(c Claim) {
	if c.Epoch == 0 {
		return // never claimed
	}
	if _, err := s.owners.Release(c); err != nil {
		s.log.Warn("release session claim", "session", c.Key, "error", err)
	}
}
