package broker

import (
	"fmt"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// indexFilter is the filter a subscription is indexed under: the internal
// filter, inside its $share group when shared.
func indexFilter(sub *subscription) string {
	if g, _, shared, _ := topic.ParseShare(sub.wire); shared {
		return "$share/" + g + "/" + sub.filter
	}
	return sub.filter
}

// subscribe handles SUBSCRIBE: each filter is validated and authorized,
// indexed, answered in SUBACK, and its retained messages are queued (at most
// the session's retained burst bound for the whole packet).
func (c *conn) subscribe(p *packet.Subscribe) error {
	v5 := c.version == packet.Version5
	var subID uint32
	if v5 && len(p.Properties.SubscriptionIDs) > 0 {
		subID = p.Properties.SubscriptionIDs[0]
	}
	ss := c.sess
	codes := make([]packet.ReasonCode, len(p.Subscriptions))
	now := c.srv.now()
	// The retained messages of each new subscription are queued with the
	// session's lock held from the moment it is indexed, so that a live
	// message on the same topic, which waits for that lock, comes after
	// its older retained copy; none goes out before the SUBACK.
	bound := ss.limits.MaxRetainedBurst // 0: no bound beyond the queue
	sent := 0
	ss.mu.Lock()
	ss.holdPump = true
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		ss.holdPump = false
		ss.pumpLocked(c)
		ss.mu.Unlock()
	}()
	for i := range p.Subscriptions {
		req := p.Subscriptions[i]
		group, inner, shared, err := topic.ParseShare(req.Filter)
		if err == nil {
			err = topic.ValidateFilter(req.Filter)
		}
		if err == nil && levels(req.Filter) > c.srv.opts.MaxTopicLevels {
			err = fmt.Errorf("more than %d levels", c.srv.opts.MaxTopicLevels)
		}
		if r, ok := topic.ControlChar(req.Filter); err == nil && ok && !c.srv.opts.AllowControlChars {
			err = fmt.Errorf("the control character %U", r)
		}
		if err != nil {
			codes[i] = c.refuseFilter(req, packet.TopicFilterInvalid, "invalid topic filter: "+err.Error())
			continue
		}
		if shared && req.NoLocal {
			return c.protocolError(packet.ProtocolError, "No Local on a shared subscription")
		}
		q := req
		q.Filter = inner
		filter, qos, err := c.srv.policy.Subscribe(c.id, group, &q)
		if err != nil {
			code, reason := refusal(err, packet.NotAuthorized)
			codes[i] = c.refuseFilter(req, code, reason)
			continue
		}
		code := packet.ReasonCode(min(qos, req.QoS, 2))
		if filter != inner {
			if err := topic.ValidateFilter(filter); err != nil {
				codes[i] = c.refuseFilter(req, packet.ImplementationSpecificError, fmt.Sprintf("the policy mapped it to an invalid filter %q: %v", filter, err))
				continue
			}
		}
		sub := &subscription{sess: ss, wire: req.Filter, filter: filter, qos: byte(code),
			noLocal: req.NoLocal, rap: req.RetainAsPublished, retainHandling: req.RetainHandling, id: subID}
		ss.mu.Lock()
		old := ss.subs[req.Filter]
		sub.since = ss.subscribedSinceLocked(old, filter, now)
		if old != nil && old.filter != filter {
			c.srv.unindex(old, ss.key)
		}
		ss.subs[req.Filter] = sub
		c.srv.index(sub)
		codes[i] = code
		// Its retained messages (shared subscriptions get none; nor one
		// whose Retain Handling says not now).
		if !shared && sub.retainHandling != 2 && (sub.retainHandling != 1 || old == nil) {
			for _, m := range c.srv.retained.Match(sub.filter, now) {
				if bound > 0 && sent >= bound {
					ss.dropLocked(m, DropRetainedBurst)
					continue
				}
				sent++
				var one [1]uint32
				ss.enqueueLocked(m, min(m.QoS, sub.qos), true, oneID(&one, sub.id), c)
			}
		}
		ss.mu.Unlock()
	}
	c.writePacket(&packet.Suback{PacketID: p.PacketID, ReasonCodes: codes})
	return nil // the deferred pump sends what was queued, after the SUBACK
}

// subscribedSinceLocked returns the since of a subscription to filter
// made now that replaces old (nil when there was none): now, less
// replayWindow, while the session's replay is pending and the filter is
// new to it; else old's, so that a client subscribing again to what it
// had (as many do on every CONNECT) keeps the whole replay of what it
// missed. A filter the client unsubscribed from meanwhile (old nil) is
// new again: what the replay would have brought it from before this
// SUBSCRIBE is dropped with the UNSUBSCRIBE, which MQTT allows (a server
// may drop what it buffered for a filter at UNSUBSCRIBE; remembering it
// would mean keeping unsubscribed filters until the replay is in). It is
// taken to history's precision (a microsecond), down: a message received
// in the same microsecond is the subscription's. The caller holds ss.mu.
func (ss *session) subscribedSinceLocked(old *subscription, filter string, now time.Time) time.Time {
	switch {
	case old != nil && old.filter == filter:
		return old.since
	case ss.replayFrom.IsZero():
		return time.Time{}
	}
	// replayWindow, as for a replay's start: a message stamped a moment
	// before now (by its publishing node's clock, or before this SUBSCRIBE
	// took now) may reach the session after the subscription is indexed;
	// queued to it live, a replay from a state saved meanwhile must not
	// skip it.
	return now.Add(-replayWindow).Truncate(time.Microsecond)
}

// refuseFilter counts and logs a refused filter and returns the code its
// SUBACK carries: code under v5; 3.1.1 has only 0x80.
func (c *conn) refuseFilter(req packet.Subscription, code packet.ReasonCode, reason string) packet.ReasonCode {
	c.srv.stats.subscribesRefused[code].Add(1)
	c.logRefused(RefusedSubscribe, req.Filter, req.QoS, code, reason)
	if c.version != packet.Version5 {
		return packet.UnspecifiedError
	}
	return code
}

// unsubscribe handles UNSUBSCRIBE.
func (c *conn) unsubscribe(p *packet.Unsubscribe) error {
	ss := c.sess
	codes := make([]packet.ReasonCode, len(p.Filters))
	for i, f := range p.Filters {
		if _, ok := topic.ControlChar(f); ok && !c.srv.opts.AllowControlChars {
			codes[i] = packet.TopicFilterInvalid // it could never have been subscribed
			continue
		}
		ss.mu.Lock()
		sub := ss.subs[f]
		if sub != nil {
			delete(ss.subs, f)
			c.srv.unindex(sub, ss.key)
		}
		ss.mu.Unlock()
		if sub == nil {
			codes[i] = packet.NoSubscriptionExisted
		}
	}
	c.writePacket(&packet.Unsuback{PacketID: p.PacketID, ReasonCodes: codes})
	return nil
}
