package broker

import (
	"cmp"
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
// into, when not nil, is the list of direct flushes of the goroutine
// writing to c: another connection's reader writing a routed message
// (its flushes), or a goroutine acknowledging a group of messages (Acks).
// If c is a plain TCP connection, that goroutine flushes it with one
// non-blocking write once it is done (flushList.flush), which saves waking
// another goroutine per message at moderate rates.
func (c *conn) endWrite(typ packet.Type, own bool, into *flushList) {
	start := !c.writing && !own
	if start {
		c.writing = true
	}
	c.wmu.Unlock()
	c.srv.stats.packetsOut[typ&15].Add(1)
	if start {
		if into != nil && c.raw != nil {
			*into = append(*into, c)
		} else {
			go c.flushLoop()
		}
	}
}

// writeAck queues PUBACK/PUBREC/PUBREL/PUBCOMP.
func (c *conn) writeAck(kind packet.Type, pid uint16, code packet.ReasonCode, own bool) {
	c.writeAckInto(kind, pid, code, own, nil)
}

// writeAckInto is writeAck, leaving the flush to into's goroutine (see
// endWrite).
func (c *conn) writeAckInto(kind packet.Type, pid uint16, code packet.ReasonCode, own bool, into *flushList) {
	if !c.beginWrite() {
		return
	}
	a := packet.Ack{Kind: kind, PacketID: pid, ReasonCode: code}
	c.wbuf = packet.AppendAck(c.wbuf, &a, c.version)
	c.endWrite(kind, own, into)
}

// writeAckReason queues a refusing PUBACK/PUBREC with the reason string
// (when the client asked for problem information), from any goroutine.
func (c *conn) writeAckReason(kind packet.Type, pid uint16, code packet.ReasonCode, reason string) {
	if !c.beginWrite() {
		return
	}
	a := packet.Ack{Kind: kind, PacketID: pid, ReasonCode: code}
	if reason != "" && c.problemInfo {
		a.Properties.SetReasonString(reason)
	}
	c.bufferLocked(&a)
	c.endWrite(kind, false, nil)
}

// writePacket queues any other packet from the reader goroutine.
func (c *conn) writePacket(p packet.Packet) {
	if !c.beginWrite() {
		return
	}
	c.bufferLocked(p)
	c.endWrite(p.Type(), true, nil)
}

// writeConnack writes the CONNACK and marks the connection served in one
// hold of the write buffer: closeServed, which decides under that lock
// whether its DISCONNECT may follow, finds the CONNACK buffered and the
// connection served, or neither (the connection closed first: no CONNACK).
func (c *conn) writeConnack(ack packet.Packet) {
	if !c.beginWrite() {
		return
	}
	c.bufferLocked(ack)
	c.served.Store(true)
	c.endWrite(ack.Type(), true, nil)
}

// bufferLocked encodes p after what the write buffer holds. The caller
// holds wmu.
func (c *conn) bufferLocked(p packet.Packet) {
	if err := c.appendLocked(p); err != nil {
		c.srv.log.Error("encode packet", "type", p.Type().String(), "error", err)
	}
}

// appendLocked encodes p at the end of the write buffer (its lock held).
// A packet the client's Maximum Packet Size cannot take with its Reason
// String and User Properties goes without them: the server must not send
// them where they would make the packet too large ([MQTT-3.1.2-25], and
// each packet's "MUST NOT send this property" clause). What is left of a
// server's packet (a code, an id) is always small enough.
func (c *conn) appendLocked(p packet.Packet) error {
	start := len(c.wbuf)
	out, err := packet.Encode(c.wbuf, p, c.version)
	if err != nil {
		return err
	}
	if c.maxOut > 0 && uint32(len(out)-start) > c.maxOut {
		if pr := diagnostics(p); pr != nil && (pr.Has(packet.PropReasonString) || len(pr.User) > 0) {
			pr.Clear(packet.PropReasonString)
			pr.User = nil
			if out, err = packet.Encode(out[:start], p, c.version); err != nil {
				return err
			}
		}
	}
	c.wbuf = out
	return nil
}

// diagnostics returns the properties of the server's packets that may
// carry a Reason String and User Properties (nil for the others).
func diagnostics(p packet.Packet) *packet.Properties {
	switch p := p.(type) {
	case *packet.Connack:
		return &p.Properties
	case *packet.Ack:
		return &p.Properties
	case *packet.Suback:
		return &p.Properties
	case *packet.Unsuback:
		return &p.Properties
	case *packet.Disconnect:
		return &p.Properties
	case *packet.Auth:
		return &p.Properties
	}
	return nil
}

// closeAfter ends the write side: p (when not nil) is appended after what
// is buffered, nothing more is accepted, and once the buffer is written
// (by the writer running now, or a new one) the socket is closed, or, when
// the server ended the connection, half-closed and drained first
// (closeWriteSide, hangup.go). The watchdog bounds that last write
// (finalWriteTimeout).
func (c *conn) closeAfter(p packet.Packet) { c.closeAfterIf(p, false) }

// closeServed is closeAfter for a DISCONNECT p, which goes only when the
// connection was served (its CONNACK written: no DISCONNECT before the
// CONNACK [MQTT-3.2.0-1]), as the write buffer's lock finds it.
func (c *conn) closeServed(p packet.Packet) { c.closeAfterIf(p, true) }

func (c *conn) closeAfterIf(p packet.Packet, ifServed bool) {
	c.wmu.Lock()
	if ifServed && !c.served.Load() {
		p = nil
	}
	if c.closed {
		final := c.final
		c.wmu.Unlock()
		if !final {
			c.closeSocket()
		}
		return
	}
	if p != nil && c.appendLocked(p) == nil {
		c.srv.stats.packetsOut[p.Type()&15].Add(1)
	}
	c.closed, c.final = true, true
	c.linger = c.lingers(p != nil)
	if c.writing {
		c.wmu.Unlock() // the running writer closes after the buffer
		return
	}
	if len(c.wbuf) == 0 {
		c.wmu.Unlock()
		c.closeWriteSide()
		return
	}
	c.writing = true
	c.wmu.Unlock()
	go c.flushLoop()
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

// takeLocked takes the buffer for writing (with wmu held): the bytes, the
// QoS 0 PUBLISHes among them, and whether the pump waits for room.
func (c *conn) takeLocked() (buf []byte, qos0 int, wasFull bool) {
	buf, qos0, wasFull = c.wbuf, c.qos0, c.full
	c.wbuf = c.spare[:0]
	c.spare = nil
	c.qos0 = 0
	c.full = false
	return buf, qos0, wasFull
}

// writeFailed ends the connection after a write error (with sockMu and
// the writer's role held, which it gives up): the bytes not written are
// lost, their QoS 0 PUBLISHes counted as dropped by finish.
func (c *conn) writeFailed(err error, qos0 int) {
	c.end(lostClose(err)) // unless the watchdog ended it first (write timeout)
	c.wmu.Lock()
	c.closed, c.final = true, false
	c.writing = false
	c.qos0 += qos0
	c.wmu.Unlock()
	c.sockMu.Unlock()
	c.closeSocket() // the reader sees the error and cleans up
}

// doneWriting gives up the writer's role when the buffer is empty or
// discarded (with wmu and sockMu held, which it releases), ending the
// write side when the connection was ending after its last write.
func (c *conn) doneWriting() {
	c.writing = false
	final := c.final
	c.wmu.Unlock()
	c.sockMu.Unlock()
	if final {
		c.closeWriteSide()
	}
}

// takeForWrite takes the buffer to write, for the goroutine that holds
// the writer's role and the socket (sockMu). When there is nothing to
// write, or the connection closed without a last write owed, it gives up
// the role and the socket (doneWriting) and reports false.
func (c *conn) takeForWrite() (buf []byte, qos0 int, wasFull, ok bool) {
	c.wmu.Lock()
	if len(c.wbuf) == 0 || c.closed && !c.final {
		c.doneWriting()
		return nil, 0, false, false
	}
	buf, qos0, wasFull = c.takeLocked()
	c.wmu.Unlock()
	return buf, qos0, wasFull, true
}

// keepSpareLocked keeps a written buffer, unless it grew large, for the
// next write to fill (with wmu held): a busy connection swaps two buffers
// instead of allocating.
func (c *conn) keepSpareLocked(buf []byte) {
	if cap(buf) <= 4*highWater && c.spare == nil {
		c.spare = buf[:0]
	}
}

// flushLoop writes the buffer until it is empty. A write that blocks is
// bounded by the watchdog (Options.WriteTimeout), which closes the socket.
func (c *conn) flushLoop() {
	c.sockMu.Lock()
	for {
		buf, qos0, wasFull, ok := c.takeForWrite()
		if !ok {
			return
		}
		c.writeSince.Store(time.Now().UnixNano())
		n, err := c.write(buf)
		c.writeSince.Store(0)
		c.srv.stats.bytesOut.Add(int64(n))
		if err != nil {
			c.writeFailed(err, qos0)
			return
		}
		c.wmu.Lock()
		c.keepSpareLocked(buf)
		c.wmu.Unlock()
		if wasFull && c.sess != nil {
			c.sockMu.Unlock()
			c.sess.pump()
			c.sockMu.Lock()
		}
	}
}

// write writes all of buf, waiting for the socket as long as it takes: a
// plain TCP connection with sysWrite and Go's poller, others through
// their net.Conn.
func (c *conn) write(buf []byte) (int, error) {
	if c.raw == nil {
		return c.nc.Write(buf)
	}
	n, werr, err := rawWrite(c, buf, true)
	return n, cmp.Or(err, werr)
}

// flushInline is called by the reader goroutine before it blocks: when no
// writer is running it writes the buffer itself, saving a goroutine start
// for the common case of acks to the reading client.
func (c *conn) flushInline() {
	c.wmu.Lock()
	if c.writing || len(c.wbuf) == 0 || c.closed && !c.final {
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
		Retain:     d.retain(),
		Topic:      m.Topic,
		PacketID:   d.pid,
		Payload:    m.Payload,
		Properties: m.Properties,
	}
	if ss.id != nil && ss.id.DeliverPrefix != "" {
		p.Topic = ss.id.DeliverPrefix + m.Topic
	}
	if c.version == packet.Version5 {
		if sec, ok := m.remainingExpiry(now); ok {
			p.Properties.SetMessageExpiry(max(sec, 1))
		}
		// c.oneID, not an array of this function's: that escapes (p is
		// passed on), which cost an allocation per PUBLISH.
		p.Properties.SubscriptionIDs = d.subIDs(&c.oneID)
	}
	newAlias := uint16(0) // an alias this PUBLISH sets, taken once it is sent
	if c.aliasMax > 0 && !dup {
		if a, ok := c.aliasOut[p.Topic]; ok {
			p.Properties.SetTopicAlias(a)
			p.Topic = ""
		} else if len(c.aliasOut) < int(c.aliasMax) {
			newAlias = uint16(len(c.aliasOut) + 1)
			p.Properties.SetTopicAlias(newAlias)
		}
	}
	// The client's Maximum Packet Size counts the alias too
	// ([MQTT-3.1.2-24]): a PUBLISH that fits only without a new alias
	// goes without it, and the alias waits for the topic's next message.
	if c.maxOut > 0 && uint32(packet.PublishSize(&p, c.version)) > c.maxOut {
		if newAlias == 0 {
			return false
		}
		newAlias = 0
		p.Properties.Clear(packet.PropTopicAlias)
		if uint32(packet.PublishSize(&p, c.version)) > c.maxOut {
			return false
		}
	}
	if newAlias != 0 {
		if c.aliasOut == nil {
			c.aliasOut = make(map[string]uint16)
		}
		c.aliasOut[p.Topic] = newAlias
	}
	if !c.beginWrite() {
		return true // closed: the delivery stays inflight for a resume
	}
	c.wbuf = packet.AppendPublish(c.wbuf, &p, c.version)
	if d.qos == 0 {
		c.qos0++
	}
	var into *flushList
	if from != nil && from != c {
		into = &from.flushes
	}
	c.endWrite(packet.PUBLISH, from == c, into)
	c.srv.stats.publishOut[d.qos].Add(1)
	return true
}

// flushList is the connections a goroutine wrote to and owes one direct
// flush each (see endWrite): a reader's routed messages (conn.flushes), a
// group of acknowledgements (Acks).
type flushList []*conn

// flush makes the direct flushes listed and empties the list.
func (l *flushList) flush() {
	for i, t := range *l {
		(*l)[i] = nil
		t.flushDirect()
	}
	*l = (*l)[:0]
}

// flushDirect writes t's buffer with one non-blocking write from the
// calling reader goroutine. Whatever the socket does not take at once (or
// the whole buffer, when another goroutine holds the socket) is left to a
// writer goroutine, so a slow client never stalls the publisher's reader.
// The caller holds t's writer role (endWrite gave it).
func (t *conn) flushDirect() {
	if !t.sockMu.TryLock() {
		go t.flushLoop()
		return
	}
	buf, qos0, wasFull, ok := t.takeForWrite()
	if !ok {
		return
	}
	n, err, werr := rawWrite(t, buf, false) // one attempt: never wait for the socket here
	if n < 0 {
		n = 0
	}
	t.srv.stats.bytesOut.Add(int64(n))
	if werr == nil && (err == syscall.EAGAIN || err == syscall.EINTR) {
		err = nil
	}
	if werr != nil || err != nil {
		t.writeFailed(cmp.Or(werr, err), qos0)
		return
	}
	t.wmu.Lock()
	if n < len(buf) {
		// Put the rest back in front of anything appended meanwhile; the
		// writer goroutine takes over (and pumps after draining if the
		// pump was waiting).
		rest := append(buf[:0:0], buf[n:]...)
		t.wbuf = append(rest, t.wbuf...)
		t.qos0 += qos0 // not known which were written: counted as unsent
		t.full = t.full || wasFull
		t.wmu.Unlock()
		t.sockMu.Unlock()
		go t.flushLoop() // still owed: writing stays true for it
		return
	}
	t.keepSpareLocked(buf)
	if len(t.wbuf) > 0 {
		t.wmu.Unlock()
		t.sockMu.Unlock()
		go t.flushLoop()
		return
	}
	t.doneWriting()
	if wasFull && t.sess != nil {
		t.sess.pump() // the buffer drained: let the session send more
	}
}
