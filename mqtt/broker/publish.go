package broker

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// publish handles an inbound PUBLISH.
func (c *conn) publish(p *packet.Publish) error {
	v5 := c.version == packet.Version5
	if len(p.Properties.SubscriptionIDs) > 0 {
		// Only the server sends them ([MQTT-3.3.4-6]).
		return c.protocolError(packet.ProtocolError, "PUBLISH from a client carries a Subscription Identifier")
	}
	if v5 && p.Properties.Has(packet.PropTopicAlias) {
		a := p.Properties.TopicAlias
		if a == 0 || a > c.srv.opts.TopicAliasMaximum {
			return c.protocolError(packet.TopicAliasInvalid, "topic alias out of range")
		}
		if p.Topic != "" {
			if c.aliasIn == nil {
				c.aliasIn = make(map[uint16]string)
			}
			if c.aliasIn[a] != p.Topic {
				// A copy: p.Topic shares the memory of the whole
				// PUBLISH, which the alias would keep alive.
				c.aliasIn[a] = strings.Clone(p.Topic)
			}
		} else if t, ok := c.aliasIn[a]; ok {
			p.Topic = t
		} else {
			return c.protocolError(packet.ProtocolError, "unknown topic alias")
		}
	}
	if err := topic.ValidateName(p.Topic); err != nil {
		return c.protocolError(packet.TopicNameInvalid, fmt.Sprintf("topic name %q: %v", p.Topic, err))
	}
	if r, ok := topic.ControlChar(p.Topic); ok && !c.srv.opts.AllowControlChars {
		return c.protocolError(packet.TopicNameInvalid, fmt.Sprintf("topic name %q has the control character %U", p.Topic, r))
	}
	if levels(p.Topic) > c.srv.opts.MaxTopicLevels {
		return c.protocolError(packet.TopicNameInvalid, fmt.Sprintf("topic name %q has more than %d levels", p.Topic, c.srv.opts.MaxTopicLevels))
	}
	if p.QoS > c.id.Limits.MaxQoS {
		c.srv.stats.countRefusedPublish(packet.QoSNotSupported)
		return c.protocolError(packet.QoSNotSupported, fmt.Sprintf("PUBLISH at QoS %d on %s is above this client's maximum QoS %d", p.QoS, p.Topic, c.id.Limits.MaxQoS))
	}
	c.srv.stats.publishIn[p.QoS].Add(1)
	if p.QoS > 0 && !c.admit() {
		return c.protocolError(packet.ReceiveMaximumExceeded, fmt.Sprintf("more than %d QoS 1/2 PUBLISHes awaiting acknowledgement (Receive Maximum)", c.srv.opts.ReceiveMaximum))
	}
	now := c.srv.now()
	m := &Message{
		Topic:        p.Topic,
		Payload:      p.Payload,
		QoS:          p.QoS,
		PublishedQoS: p.QoS,
		Retain:       p.Retain,
		Properties:   p.Properties,
		Created:      now,
		Origin:       c.sess.key,
		Publisher:    c.id,
	}
	m.Properties.Clear(packet.PropTopicAlias)
	m.Properties.Clear(packet.PropMessageExpiry)
	m.Properties.SubscriptionIDs = nil // the packet's (reused) slice, always empty here
	if v5 && p.Properties.Has(packet.PropMessageExpiry) {
		m.Expiry = now.Add(time.Duration(p.Properties.MessageExpiry) * time.Second)
	}
	c.srv.clampRetained(m)
	if p.QoS == 2 {
		if done, retry := c.receiveQoS2(p.PacketID, m); done {
			return nil
		} else if retry != nil {
			// The policy could not keep the first copy: this one is
			// offered to it again, not routed again.
			if !c.srv.policy.Accepted(c.id, retry) {
				retry.ack.send(true, nil)
			}
			return nil
		}
	}
	if err := c.srv.policy.Publish(c.id, p, m); err != nil {
		c.srv.unreserve(m)
		code, reason := refusal(err, packet.ImplementationSpecificError)
		c.srv.stats.countRefusedPublish(code)
		if code == packet.QoSNotSupported {
			return c.protocolError(code, reason)
		}
		c.logRefused(RefusedPublish, p.Topic, p.QoS, code, reason)
		c.refusePublish(p, code)
		return nil
	}
	m.QoS = min(m.QoS, p.QoS)
	if p.QoS > 0 {
		m.ack = ackState{c: c, pid: p.PacketID, qos: p.QoS}
	}
	if !m.NoDeliver {
		c.srv.route(m, c)
	} else {
		c.srv.unreserve(m)
	}
	if !c.srv.policy.Accepted(c.id, m) {
		m.ack.send(true, nil)
	}
	return nil
}

// clampRetained applies the retained maximum age to a retained message's
// expiry.
func (s *Server) clampRetained(m *Message) {
	if !m.Retain || s.opts.RetainedMaxAge <= 0 {
		return
	}
	limit := m.Created.Add(s.opts.RetainedMaxAge)
	if m.Expiry.IsZero() || m.Expiry.After(limit) {
		m.Expiry = limit
	}
}

// levels counts the levels of a topic name or filter.
func levels(t string) int { return strings.Count(t, "/") + 1 }

// Publish injects a message as if a client had published it on m.Topic
// (for bridges and tests). Created is set when zero.
func (s *Server) Publish(m *Message) {
	if m.Created.IsZero() {
		m.Created = s.now()
	}
	s.clampRetained(m)
	s.route(m, nil)
}

// publishWill publishes a will message on behalf of id.
func (s *Server) publishWill(id *Identity, w *packet.Will) {
	p := &packet.Publish{Topic: w.Topic, QoS: w.QoS, Retain: w.Retain, Payload: w.Payload, Properties: w.Properties}
	now := s.now()
	m := &Message{Topic: w.Topic, Payload: w.Payload, QoS: w.QoS, PublishedQoS: w.QoS, Retain: w.Retain,
		Properties: w.Properties, Created: now, Publisher: id}
	m.Properties.Clear(packet.PropWillDelay)
	m.Properties.Clear(packet.PropMessageExpiry)
	if w.Properties.Has(packet.PropMessageExpiry) {
		m.Expiry = now.Add(time.Duration(w.Properties.MessageExpiry) * time.Second)
	}
	s.clampRetained(m)
	if w.QoS > id.Limits.MaxQoS {
		s.stats.countRefusedPublish(packet.QoSNotSupported)
		s.logWillRefused(id, w, packet.QoSNotSupported, fmt.Sprintf("will at QoS %d is above this client's maximum QoS %d", w.QoS, id.Limits.MaxQoS))
		return
	}
	if err := s.policy.Publish(id, p, m); err != nil {
		s.unreserve(m)
		code, reason := refusal(err, packet.ImplementationSpecificError)
		s.stats.countRefusedPublish(code)
		s.logWillRefused(id, w, code, reason)
		return
	}
	m.QoS = min(m.QoS, w.QoS)
	s.stats.willsPublished.Add(1)
	if !m.NoDeliver {
		s.route(m, nil)
	} else {
		s.unreserve(m)
	}
	s.policy.Accepted(id, m)
}
