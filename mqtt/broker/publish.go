package broker

import (
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// publish handles an inbound PUBLISH.
func (c *conn) publish(p *packet.Publish) error {
	v5 := c.version == packet.Version5
	if v5 && p.Properties.Has(packet.PropTopicAlias) {
		a := p.Properties.TopicAlias
		if a == 0 || a > c.srv.opts.TopicAliasMaximum {
			return c.protocolError(packet.TopicAliasInvalid, "topic alias out of range")
		}
		if p.Topic != "" {
			if c.aliasIn == nil {
				c.aliasIn = make(map[uint16]string)
			}
			c.aliasIn[a] = p.Topic
		} else if t, ok := c.aliasIn[a]; ok {
			p.Topic = t
		} else {
			return c.protocolError(packet.ProtocolError, "unknown topic alias")
		}
	}
	if err := topic.ValidateName(p.Topic); err != nil {
		return c.protocolError(packet.TopicNameInvalid, err.Error())
	}
	if p.QoS > c.id.Limits.MaxQoS {
		c.srv.stats.publishRefused.Add(1)
		return c.protocolError(packet.QoSNotSupported, "QoS above this client's maximum")
	}
	c.srv.stats.publishIn[p.QoS].Add(1)
	if p.QoS > 0 {
		c.pendingMu.Lock()
		over := c.pending >= int(c.srv.opts.ReceiveMaximum)
		if !over {
			c.pending++
		}
		c.pendingMu.Unlock()
		if over {
			return c.protocolError(packet.ReceiveMaximumExceeded, "too many unacknowledged QoS 1/2 publishes")
		}
	}
	if p.QoS == 2 {
		ss := c.sess
		ss.mu.Lock()
		acked, dup := ss.inbound2[p.PacketID]
		if !dup {
			if ss.inbound2 == nil {
				ss.inbound2 = make(map[uint16]bool)
			}
			ss.inbound2[p.PacketID] = false
		}
		ss.mu.Unlock()
		if dup {
			// A retransmission of a message already received: not routed
			// again. PUBREC goes out once the first copy is acknowledged.
			c.release(1)
			if acked {
				c.writeAck(packet.PUBREC, p.PacketID, packet.Success, true)
			}
			return nil
		}
	}

	now := c.srv.now()
	d := PublishDecision{Topic: p.Topic, QoS: p.QoS}
	if v5 && p.Properties.Has(packet.PropMessageExpiry) {
		d.Expiry = now.Add(time.Duration(p.Properties.MessageExpiry) * time.Second)
	}
	if p.Retain && c.srv.opts.RetainedMaxAge > 0 {
		limit := now.Add(c.srv.opts.RetainedMaxAge)
		if d.Expiry.IsZero() || d.Expiry.After(limit) {
			d.Expiry = limit
		}
	}
	code := c.srv.policy.Publish(c.id, p, &d)
	if code == packet.QoSNotSupported {
		c.srv.stats.publishRefused.Add(1)
		return c.protocolError(code, "QoS not allowed")
	}
	if code >= 0x80 {
		c.srv.stats.publishRefused.Add(1)
		c.refusePublish(p, code)
		return nil
	}
	if d.QoS > p.QoS {
		d.QoS = p.QoS
	}
	m := &Message{
		Topic:        d.Topic,
		Payload:      p.Payload,
		QoS:          d.QoS,
		PublishedQoS: p.QoS,
		Retain:       p.Retain,
		Properties:   p.Properties,
		Created:      now,
		Expiry:       d.Expiry,
		Origin:       c.sess.key,
		Publisher:    c.id,
		Data:         d.Data,
	}
	m.Properties.Clear(packet.PropTopicAlias)
	m.Properties.Clear(packet.PropMessageExpiry)
	m.Properties.SubscriptionIDs = nil

	c.srv.route(m, c)
	switch p.QoS {
	case 0:
		c.srv.policy.Accepted(c.id, m, func() {})
	case 1:
		pid := p.PacketID
		c.srv.policy.Accepted(c.id, m, func() {
			c.writeAck(packet.PUBACK, pid, packet.Success, false)
			c.release(1)
		})
	case 2:
		pid := p.PacketID
		ss := c.sess
		c.srv.policy.Accepted(c.id, m, func() {
			ss.mu.Lock()
			if _, ok := ss.inbound2[pid]; ok {
				ss.inbound2[pid] = true
			}
			ss.mu.Unlock()
			c.writeAck(packet.PUBREC, pid, packet.Success, false)
		})
	}
	return nil
}

// release gives back n units of the inbound Receive Maximum.
func (c *conn) release(n int) {
	c.pendingMu.Lock()
	c.pending -= n
	c.pendingMu.Unlock()
}

// refusePublish answers a refused PUBLISH. Under v5 the publisher learns
// the reason in PUBACK/PUBREC; 3.1.1 has no way to say it, so the message
// is acknowledged and discarded (as MQTT-3.3.5-2 allows).
func (c *conn) refusePublish(p *packet.Publish, code packet.ReasonCode) {
	if c.version != packet.Version5 {
		code = packet.Success
	}
	switch p.QoS {
	case 1:
		c.writeAck(packet.PUBACK, p.PacketID, code, true)
		c.release(1)
	case 2:
		if code >= 0x80 {
			// The flow ends at PUBREC with an error code.
			c.sess.mu.Lock()
			delete(c.sess.inbound2, p.PacketID)
			c.sess.mu.Unlock()
			c.release(1)
		} else {
			c.sess.mu.Lock()
			c.sess.inbound2[p.PacketID] = true
			c.sess.mu.Unlock()
		}
		c.writeAck(packet.PUBREC, p.PacketID, code, true)
	}
}

// pubrel completes an inbound QoS 2 flow.
func (c *conn) pubrel(pid uint16) error {
	ss := c.sess
	ss.mu.Lock()
	acked, ok := ss.inbound2[pid]
	if ok && acked {
		delete(ss.inbound2, pid)
	}
	ss.mu.Unlock()
	switch {
	case ok && acked:
		c.writeAck(packet.PUBCOMP, pid, packet.Success, true)
		c.release(1)
	case ok:
		// PUBREL before our PUBREC: the client broke the flow.
		return c.protocolError(packet.ProtocolError, "PUBREL before PUBREC")
	default:
		c.writeAck(packet.PUBCOMP, pid, packet.PacketIdentifierNotFound, true)
	}
	return nil
}

// route stores a retained message and hands the message to every matching
// subscription. from is the publishing connection (nil for wills and
// injected messages).
func (s *Server) route(m *Message, from *conn) {
	if m.Retain {
		s.retained.set(m)
	}
	s.subs.Match(m.Topic, func(_ string, sub subscription, _ string) {
		if sub.noLocal && m.Origin != "" && m.Origin == sub.sess.key {
			return
		}
		qos := min(m.QoS, sub.qos)
		s.stats.routed.Add(1)
		sub.sess.enqueue(m, qos, m.Retain && sub.rap, sub.id, from)
	})
}

// Publish injects a message as if a client had published it on m.Topic
// (for bridges and tests). Created is set when zero.
func (s *Server) Publish(m *Message) {
	if m.Created.IsZero() {
		m.Created = s.now()
	}
	s.route(m, nil)
}

// publishWill publishes a will message on behalf of id.
func (s *Server) publishWill(id *Identity, w *packet.Will) {
	p := &packet.Publish{Topic: w.Topic, QoS: w.QoS, Retain: w.Retain, Payload: w.Payload, Properties: w.Properties}
	now := s.now()
	d := PublishDecision{Topic: w.Topic, QoS: w.QoS}
	if w.Properties.Has(packet.PropMessageExpiry) {
		d.Expiry = now.Add(time.Duration(w.Properties.MessageExpiry) * time.Second)
	}
	if w.Retain && s.opts.RetainedMaxAge > 0 {
		limit := now.Add(s.opts.RetainedMaxAge)
		if d.Expiry.IsZero() || d.Expiry.After(limit) {
			d.Expiry = limit
		}
	}
	if w.QoS > id.Limits.MaxQoS {
		s.stats.publishRefused.Add(1)
		return
	}
	if code := s.policy.Publish(id, p, &d); code >= 0x80 {
		s.stats.publishRefused.Add(1)
		return
	}
	m := &Message{Topic: d.Topic, Payload: w.Payload, QoS: min(d.QoS, w.QoS), PublishedQoS: w.QoS, Retain: w.Retain,
		Properties: w.Properties, Created: now, Expiry: d.Expiry, Publisher: id, Data: d.Data}
	m.Properties.Clear(packet.PropWillDelay)
	m.Properties.Clear(packet.PropMessageExpiry)
	s.stats.willsPublished.Add(1)
	s.route(m, nil)
	s.policy.Accepted(id, m, func() {})
}
