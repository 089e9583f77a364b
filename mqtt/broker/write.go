package broker

import (
	"syscall"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// beginWrite locks the write buffer; it reports false (and leaves it
// unlocked) when the connection is closed. Append to c.wbuf, then call
// endWrite.
func (c *conn) beginWrite() bool {
	c.wmu.Lock()
	if c.closed {
		c.wmu.Unlock()
		return false
	}
	return true
}

// endWrite unlocks the write buffer and makes sure it gets flushed: own
// writes (from this connection's reader goroutine) are flushed inline before
// the reader next blocks; others start a short-lived writer goroutine unless
// one is running.
//
// from, when not nil, is the connection whose reader goroutine is writing
// to c (a routed message): if c is a plain TCP connection, from flushes it
// with one non-blocking write before it next blocks (flushPending), which
// saves waking another goroutine per message at moderate rates.
func (c *conn) endWrite(typ packet.Type, own bool, from *conn) {
	start := !c.writing && !own
	if start {
		c.writing = true
	}
	c.wmu.Unlock()
	c.srv.stats.packetsOut[typ&15].Add(1)
	if start {
		if from != nil && from != c && c.raw != nil {
			from.flushes = append(from.flushes, c)
		} else {
			go c.flushLoop()
		}
	}
}

// writeAck queues PUBACK/PUBREC/PUBREL/PUBCOMP.
func (c *conn) writeAck(kind packet.Type, pid uint16, code packet.ReasonCode, own bool) {
	if !c.beginWrite() {
		return
	}
	a := packet.Ack{Kind: kind, PacketID: pid, ReasonCode: code}
	c.wbuf = packet.AppendAck(c.wbuf, &a, c.version)
	c.endWrite(kind, own, nil)
}

// writePacket queues any other packet from the reader goroutine.
func (c *conn) writePacket(p packet.Packet) {
	if !c.beginWrite() {
		return
	}
	out, err := packet.Encode(c.wbuf, p, c.version)
	if err != nil {
		c.srv.log.Error("encode packet", "type", p.Type().String(), "error", err)
	} else {
		c.wbuf = out
	}
	c.endWrite(p.Type(), true, nil)
}

// sendNow writes a packet synchronously (CONNACK refusals, DISCONNECT)
// after what is already buffered, bounded by a short deadline.
func (c *conn) sendNow(p packet.Packet) {
	c.wmu.Lock()
	buf := c.wbuf
	c.wbuf = nil
	c.closed = true
	c.wmu.Unlock()
	out, err := packet.Encode(buf, p, c.version)
	if err != nil {
		out = buf
	}
	c.srv.stats.packetsOut[p.Type()&15].Add(1)
	c.sockMu.Lock()
	defer c.sockMu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.nc.Write(out); err == nil {
		c.srv.stats.bytesOut.Add(int64(n))
	}
}

// backlogged reports whether the write buffer is over the high mark; the
// pump then leaves messages queued until the writer drains it.
func (c *conn) backlogged() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return true
	}
	if len(c.wbuf) >= highWater {
		c.full = true
		return true
	}
	return false
}

// flushLoop writes the buffer until it is empty.
func (c *conn) flushLoop() {
	c.sockMu.Lock()
	for {
		c.wmu.Lock()
		if len(c.wbuf) == 0 || c.closed {
			c.writing = false
			c.wmu.Unlock()
			c.sockMu.Unlock()
			return
		}
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		c.spare = nil
		wasFull := c.full
		c.full = false
		c.wmu.Unlock()

		c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
		n, err := c.nc.Write(buf)
		c.srv.stats.bytesOut.Add(int64(n))
		if err != nil {
			c.wmu.Lock()
			c.closed = true
			c.writing = false
			c.wmu.Unlock()
			c.sockMu.Unlock()
			c.nc.Close() // the reader sees the error and cleans up
			return
		}
		c.wmu.Lock()
		if cap(buf) <= 4*highWater {
			c.spare = buf[:0]
		}
		c.wmu.Unlock()
		if wasFull && c.sess != nil {
			c.sockMu.Unlock()
			c.sess.pump()
			c.sockMu.Lock()
		}
	}
}

// flushInline is called by the reader goroutine before it blocks: when no
// writer is running it writes the buffer itself, saving a goroutine start
// for the common case of acks to the reading client.
func (c *conn) flushInline() {
	c.wmu.Lock()
	if c.writing || len(c.wbuf) == 0 || c.closed {
		c.wmu.Unlock()
		return
	}
	c.writing = true
	c.wmu.Unlock()
	c.flushLoop()
}

// writePublish encodes a delivery for this connection. It reports false,
// writing nothing, when the packet is over the client's Maximum Packet
// Size. Called with the session mutex held.
func (c *conn) writePublish(ss *session, d *delivery, dup bool, now time.Time, from *conn) bool {
	m := d.msg
	p := packet.Publish{
		Dup:        dup,
		QoS:        d.qos,
		Retain:     d.retain,
		Topic:      m.Topic,
		PacketID:   d.pid,
		Payload:    m.Payload,
		Properties: m.Properties,
	}
	if ss.id != nil && ss.id.DeliverPrefix != "" {
		p.Topic = ss.id.DeliverPrefix + m.Topic
	}
	var ids [1]uint32
	if c.version == packet.Version5 {
		if sec, ok := m.remainingExpiry(now); ok {
			p.Properties.SetMessageExpiry(max(sec, 1))
		}
		if d.subID != 0 {
			ids[0] = d.subID
			p.Properties.SubscriptionIDs = ids[:]
		}
	}
	if c.maxOut > 0 && uint32(packet.PublishSize(&p, c.version)) > c.maxOut {
		return false
	}
	if c.aliasMax > 0 && !dup {
		if a, ok := c.aliasOut[p.Topic]; ok {
			p.Properties.SetTopicAlias(a)
			p.Topic = ""
		} else if len(c.aliasOut) < int(c.aliasMax) {
			if c.aliasOut == nil {
				c.aliasOut = make(map[string]uint16)
			}
			a := uint16(len(c.aliasOut) + 1)
			c.aliasOut[p.Topic] = a
			p.Properties.SetTopicAlias(a)
		}
	}
	if !c.beginWrite() {
		return true // closed: the delivery stays inflight for a resume
	}
	c.wbuf = packet.AppendPublish(c.wbuf, &p, c.version)
	c.endWrite(packet.PUBLISH, from == c, from)
	c.srv.stats.publishOut[d.qos].Add(1)
	return true
}

// flushPending makes the direct flushes this reader owes (see endWrite).
func (c *conn) flushPending() {
	for i, t := range c.flushes {
		c.flushes[i] = nil
		t.flushDirect()
	}
	c.flushes = c.flushes[:0]
}

// flushDirect writes t's buffer with one non-blocking write from the
// calling reader goroutine. Whatever the socket does not take at once (or
// the whole buffer, when another goroutine holds the socket) is left to a
// writer goroutine, so a slow client never stalls the publisher's reader.
func (t *conn) flushDirect() {
	if !t.sockMu.TryLock() {
		go t.flushLoop()
		return
	}
	t.wmu.Lock()
	if len(t.wbuf) == 0 || t.closed {
		t.writing = false
		t.wmu.Unlock()
		t.sockMu.Unlock()
		return
	}
	buf := t.wbuf
	t.wbuf = t.spare[:0]
	t.spare = nil
	wasFull := t.full
	t.full = false
	t.wmu.Unlock()

	n, err := 0, error(nil)
	werr := t.raw.Write(func(fd uintptr) bool {
		n, err = syscall.Write(int(fd), buf)
		return true // one attempt: never wait for the socket here
	})
	if n < 0 {
		n = 0
	}
	t.srv.stats.bytesOut.Add(int64(n))
	if werr != nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR {
		t.wmu.Lock()
		t.closed = true
		t.writing = false
		t.wmu.Unlock()
		t.sockMu.Unlock()
		t.nc.Close() // the reader sees the error and cleans up
		return
	}
	t.wmu.Lock()
	if n < len(buf) {
		// Put the rest back in front of anything appended meanwhile; the
		// writer goroutine takes over (and pumps after draining if the
		// pump was waiting).
		rest := append(buf[:0:0], buf[n:]...)
		t.wbuf = append(rest, t.wbuf...)
		t.full = t.full || wasFull
	} else if cap(buf) <= 4*highWater && t.spare == nil {
		t.spare = buf[:0]
	}
	more := len(t.wbuf) > 0
	if !more {
		t.writing = false
	}
	t.wmu.Unlock()
	t.sockMu.Unlock()
	if more {
		go t.flushLoop() // still owed: writing stays true for it
	} else if wasFull && t.sess != nil {
		t.sess.pump() // the buffer drained: let the session send more
	}
}
