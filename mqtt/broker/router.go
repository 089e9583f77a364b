package broker

// Router is where an accepted message goes after the Policy, and what
// learns of the topic filters this server's sessions subscribe to (their
// interest). It sits between the sessions and the subscription index: the
// server updates the retained store, then calls Route; Route hands the
// message to this server's own sessions through local.Deliver.
//
// LocalRouter, the single-node router, does only that. A cluster router
// also passes the message to the other nodes, and holds interest in the
// other nodes' messages for the filters its sessions subscribe to; what
// arrives from another node it hands to Server.DeliverLocal, which
// delivers to this server's sessions only (never routed again, never
// retained again: the node that accepted the message did both).
//
// The contract a second implementation must meet (the suite in
// internal/contract, Router, checks it):
//   - Route is called once per accepted message that is to be delivered,
//     on the goroutine of the publishing connection (or of the injector),
//     after the retained store was updated. It calls local.Deliver(m)
//     exactly once before it returns: a publisher's messages reach the
//     local subscribers in the order it sent them, and the publisher's
//     back-pressure (a full subscriber queue pausing its reader) depends
//     on it. Route does no blocking I/O and allocates nothing per message
//     in the steady state: what goes to other nodes is handed off to a
//     goroutine of its own.
//   - m is shared and read-only: Route must not change it. What outlives
//     Route (a copy for another node) may keep m or its Payload.
//   - Subscribed(filter) is called when a session's subscription enters
//     the subscription index and Unsubscribed(filter) when it leaves
//     (UNSUBSCRIBE, a SUBSCRIBE replacing its filter, the session's end).
//     The calls pair up: a filter is of interest while its Subscribed
//     calls outnumber its Unsubscribed calls. A shared subscription's
//     filter carries its group: "$share/{group}/{filter}" (a cluster
//     delivers one copy per group across the nodes: a queue group). They
//     are called with the session's lock held: they must not block or call
//     back into the Server.
type Router interface {
	Route(m *Message, local Local)
	Subscribed(filter string)
	Unsubscribed(filter string)
}

// Local delivers a message to the sessions of one server: the Router
// gets one with each message to route.
type Local struct {
	s    *Server
	from *conn // the publishing connection, nil when none
}

// Deliver hands m to every matching subscription of the server's own
// sessions.
func (l Local) Deliver(m *Message) { l.s.deliverLocal(m, l.from, scope{}) }

// DeliverUnshared is Deliver without the shared subscriptions: a router
// that hands each shared subscription's messages to one member across
// several nodes (Deliverer.DeliverShared on the node it picks) calls it
// instead of Deliver.
func (l Local) DeliverUnshared(m *Message) { l.s.deliverLocal(m, l.from, scope{unshared: true}) }

// DeliverLocal delivers m to the matching subscriptions of this server's
// sessions only: it neither retains m nor hands it to the Router. A
// cluster router calls it for a message another node accepted; m.Created
// and m.Expiry must be set as that node set them (Message Expiry counts
// from there).
func (s *Server) DeliverLocal(m *Message) { s.deliverLocal(m, nil, scope{}) }

// A Deliverer delivers messages, as DeliverLocal does but to non-shared
// subscriptions only, for one goroutine outside the server's connections
// (a cluster router's receiver), and leaves the writes they make to
// Flush: one non-blocking write per connection written to, on the
// caller's goroutine, as a publisher's reader flushes its routed messages
// (what a socket does not take at once goes on in a writer goroutine).
// Delivered without it, each message to an idle connection would start a
// goroutine to write it. The caller must Flush before it waits for more
// messages, and never use a Deliverer from two goroutines at once.
type Deliverer struct {
	s    *Server
	from conn // stands for the delivering goroutine: only its flushes are used
}

// NewDeliverer returns a Deliverer for one goroutine.
func (s *Server) NewDeliverer() *Deliverer { return &Deliverer{s: s} }

// DeliverLocalUnshared is DeliverLocal without the shared subscriptions,
// its writes left to Flush.
func (d *Deliverer) DeliverLocalUnshared(m *Message) {
	d.s.deliverLocal(m, &d.from, scope{unshared: true})
}

// Flush makes the writes of the messages delivered since the last Flush.
func (d *Deliverer) Flush() { d.from.flushes.flush() }

// DeliverShared delivers m to one member of this server's shared
// subscription share, named as Router.Subscribed names it
// ("$share/{group}/{filter}"), when m's topic matches it; nothing else
// gets m. A cluster router calls it on the node its queue group picked.
// Its writes are left to Flush. It reports whether a member of share
// here took m (false: this server has no member whose filter matches m's
// topic, and m went nowhere). A member whose session ended between its
// choice and its delivery (taken over by another node) has left the
// subscription index: another member here is chosen, if any.
func (d *Deliverer) DeliverShared(m *Message, share string) bool {
	for range maxSharedTries {
		matched, ended := d.s.deliverLocal(m, &d.from, scope{share: share})
		if !ended {
			return matched
		}
	}
	return false
}

// maxSharedTries bounds DeliverShared's choices of a member: each one
// chosen and found ended has left the index, so it takes that many
// members ending at once to pass it.
const maxSharedTries = 4

// Server is the server d delivers to.
func (d *Deliverer) Server() *Server { return d.s }

// scope narrows a delivery: the zero scope is every matching
// subscription.
type scope struct {
	unshared bool   // non-shared subscriptions only
	share    string // only this shared subscription ("$share/{group}/{filter}")
}

// admits reports whether a match of the subscription with filter, in
// group ("" when not shared), is in the scope. It allocates nothing.
func (sc scope) admits(group, filter string) bool {
	switch {
	case sc.share != "":
		const p = "$share/"
		return group != "" && len(sc.share) == len(p)+len(group)+1+len(filter) &&
			sc.share[len(p):len(p)+len(group)] == group && sc.share[len(p)+len(group)] == '/' &&
			sc.share[len(p)+len(group)+1:] == filter
	case sc.unshared:
		return group == ""
	}
	return true
}

// LocalRouter is the Router of a single node: every message goes to the
// server's own sessions, and interest concerns no one else.
type LocalRouter struct{}

// Route delivers m locally.
func (LocalRouter) Route(m *Message, local Local) { local.Deliver(m) }

// Subscribed does nothing: no other node needs to know.
func (LocalRouter) Subscribed(string) {}

// Unsubscribed does nothing: no other node needs to know.
func (LocalRouter) Unsubscribed(string) {}

// index puts a session's subscription in the subscription index and tells
// the router of the new interest. The caller holds the session's lock.
func (s *Server) index(sub *subscription) {
	f := indexFilter(sub)
	if !s.subs.Subscribe(f, sub.sess.key, *sub) {
		s.router.Subscribed(f)
	}
}

// unindex takes a session's subscription out of the subscription index
// and tells the router the interest ended. The caller holds the session's
// lock.
func (s *Server) unindex(sub *subscription, key string) {
	f := indexFilter(sub)
	if s.subs.Unsubscribe(f, key) {
		s.router.Unsubscribed(f)
	}
}
