package broker

import (
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// counters are the server's live counters, updated with atomics on the
// message path.
type counters struct {
	connections       atomic.Int64
	connectionsBy     [numListeners]atomic.Int64 // open now, by listenerKind.index
	connectionsTotal  atomic.Int64
	connectsRefused   [256]atomic.Int64 // by reason code
	packetsIn         [16]atomic.Int64
	packetsOut        [16]atomic.Int64
	bytesIn           atomic.Int64
	bytesOut          atomic.Int64
	publishIn         [3]atomic.Int64
	publishOut        [3]atomic.Int64
	publishRefused    [256]atomic.Int64 // by reason code
	subscribesRefused [256]atomic.Int64 // by reason code
	closes            [numCloseReasons]atomic.Int64
	routed            atomic.Int64
	drops             [numDropReasons]atomic.Int64
	inflight          atomic.Int64
	queued            atomic.Int64
	protocolErrors    atomic.Int64
	willsPublished    atomic.Int64
	publisherPauses   atomic.Int64
	idleParks         atomic.Int64
	// publish rates (ratelimit.go)
	publishThrottled      atomic.Int64
	publishThrottledNanos atomic.Int64
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	Connections int64 // open now (including those not yet through CONNECT)
	// ConnectionsBy counts the open connections by the kind of listener
	// they came through (ListenerNames).
	ConnectionsBy    [numListeners]int64
	ConnectionsTotal int64
	// StrangersWaiting counts the open connections whose CONNECT has not
	// fully arrived that wait with no goroutine (Linux; see the parker).
	StrangersWaiting int64
	// IdleParked counts the clients past CONNECT that wait with no
	// goroutine, idle for Options.IdleParkAfter (Linux, plain TCP).
	IdleParked int64
	// IdleParks counts the times an idle client was parked.
	IdleParks int64
	// ConnsRefusedAtAccept counts connections closed as soon as they were
	// accepted: a listener had Options.MaxConns open ([0]), their address
	// had its MaxConnsPerAddr ([1]) or came faster than MaxConnRatePerAddr
	// ([2]).
	ConnsRefusedAtAccept [3]int64
	ConnectsRefused      int64 // CONNECTs answered with a refusal
	// ConnectsRefusedBy, PublishRefusedBy and SubscribesRefusedBy count
	// refusals by reason code (only codes that occurred).
	ConnectsRefusedBy   map[packet.ReasonCode]int64
	PublishRefusedBy    map[packet.ReasonCode]int64
	SubscribesRefusedBy map[packet.ReasonCode]int64
	SubscribesRefused   int64 // SUBSCRIBE filters refused
	// Closes counts ended connections by CloseReason (CloseNames).
	Closes [numCloseReasons]int64
	// PublisherPauses counts the brief pauses of publishers' readers after
	// their messages overflowed the queue of a subscriber still reading.
	PublisherPauses int64
	// PublishThrottled counts inbound PUBLISH packets that waited for
	// their client's or group's publish rate (Limits.PublishRate,
	// Identity.GroupLimiter); PublishThrottledTime is the time their
	// connections spent waiting, not reading.
	PublishThrottled     int64
	PublishThrottledTime time.Duration
	// LogSuppressed counts event-log lines the per-client rate limit
	// suppressed.
	LogSuppressed  int64
	Sessions       int64     // sessions known (connected or persisted)
	PacketsIn      [16]int64 // by packet.Type
	PacketsOut     [16]int64
	BytesIn        int64
	BytesOut       int64
	PublishIn      [3]int64              // inbound PUBLISH by QoS
	PublishOut     [3]int64              // outbound PUBLISH by QoS
	PublishRefused int64                 // inbound PUBLISH refused by the policy or limits
	Routed         int64                 // deliveries handed to sessions
	Drops          [numDropReasons]int64 // by DropReason
	Inflight       int64                 // outbound QoS 1/2 awaiting acknowledgement now
	Queued         int64                 // deliveries waiting in session queues now
	Retained       int64                 // retained messages stored now
	Subscriptions  int64                 // subscriptions in the index now
	ProtocolErrors int64
	WillsPublished int64
}

// DropNames lists the drop reasons in DropReason order.
func DropNames() []string { return dropNames[:] }

// numListeners is the number of listener kinds.
const numListeners = 3

var listenerNames = [numListeners]string{"tcp", "tls", "websocket"}

// ListenerNames lists the listener kinds in Stats.ConnectionsBy order:
// tcp, tls and websocket (with or without TLS).
func ListenerNames() []string { return listenerNames[:] }

// index is k's place in ListenerNames.
func (k listenerKind) index() int {
	switch {
	case k.websocket:
		return 2
	case k.tls:
		return 1
	}
	return 0
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	st := Stats{
		Connections:      c.connections.Load(),
		ConnectionsTotal: c.connectionsTotal.Load(),
		BytesIn:          c.bytesIn.Load(),
		BytesOut:         c.bytesOut.Load(),
		Routed:           c.routed.Load(),
		Inflight:         c.inflight.Load(),
		Queued:           c.queued.Load(),
		Retained:         s.retained.Len(),
		Subscriptions:    int64(s.subs.Len()),
		ProtocolErrors:   c.protocolErrors.Load(),
		WillsPublished:   c.willsPublished.Load(),
		LogSuppressed:    s.events.suppressed.Load(),
		PublisherPauses:  c.publisherPauses.Load(),
		IdleParks:        c.idleParks.Load(),

		PublishThrottled:     c.publishThrottled.Load(),
		PublishThrottledTime: time.Duration(c.publishThrottledNanos.Load()),
	}
	strangers, idle := s.parker.parked()
	st.StrangersWaiting, st.IdleParked = int64(strangers), int64(idle)
	st.ConnectsRefused, st.ConnectsRefusedBy = byCode(&c.connectsRefused)
	st.PublishRefused, st.PublishRefusedBy = byCode(&c.publishRefused)
	st.SubscribesRefused, st.SubscribesRefusedBy = byCode(&c.subscribesRefused)
	for i := range c.connectionsBy {
		st.ConnectionsBy[i] = c.connectionsBy[i].Load()
	}
	s.mu.Lock()
	for _, l := range s.limits {
		total, perAddr := l.Refused()
		st.ConnsRefusedAtAccept[0] += total
		st.ConnsRefusedAtAccept[1] += perAddr
		st.ConnsRefusedAtAccept[2] += l.RefusedRate()
	}
	s.mu.Unlock()
	for i := range c.closes {
		st.Closes[i] = c.closes[i].Load()
	}
	for i := range c.packetsIn {
		st.PacketsIn[i] = c.packetsIn[i].Load()
		st.PacketsOut[i] = c.packetsOut[i].Load()
	}
	for i := range c.publishIn {
		st.PublishIn[i] = c.publishIn[i].Load()
		st.PublishOut[i] = c.publishOut[i].Load()
	}
	for i := range c.drops {
		st.Drops[i] = c.drops[i].Load()
	}
	s.mu.Lock()
	st.Sessions = int64(len(s.sessions))
	s.mu.Unlock()
	return st
}

// byCode sums counters indexed by reason code and lists the nonzero ones.
func byCode(a *[256]atomic.Int64) (int64, map[packet.ReasonCode]int64) {
	var total int64
	var m map[packet.ReasonCode]int64
	for i := range a {
		if n := a[i].Load(); n != 0 {
			if m == nil {
				m = make(map[packet.ReasonCode]int64)
			}
			m[packet.ReasonCode(i)] = n
			total += n
		}
	}
	return total, m
}

// countRefusedPublish counts a PUBLISH refused with code.
func (c *counters) countRefusedPublish(code packet.ReasonCode) { c.publishRefused[code].Add(1) }
