package broker

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/fleetmq/fleetmq/internal/netlimit"
)

// How a connection the server ends is closed, in one place.
//
// Closing a socket while the client's bytes sit unread in its receive
// buffer makes the kernel answer with a reset (RST) instead of a FIN, and
// a reset throws away what the server had not sent yet (a DISCONNECT or
// refusing CONNACK queued behind a full window), and on some systems what
// the client had received but not read. A client still writing when the
// server ends its connection (a device flushing a burst of PUBLISHes, a
// refused CONNECT followed by its first packets) would then never read why
// it was disconnected. So, when the server ends a connection (lingers):
//
//  1. the last packet is written after what was buffered (closeAfter);
//  2. the write side is half-closed (closeWriteSide): TCP FIN, TLS
//     close_notify and FIN, WebSocket close frame, so the client reads
//     the last packet and then the end of the stream;
//  3. the reader goroutine reads and discards what the client still
//     sends (drain), until the client closes its side, for at most
//     Options.CloseDrainTimeout (a read deadline: the clock starts at the
//     half-close or the drain, whichever comes first) and
//     Options.CloseDrainBytes;
//  4. the socket is closed by whichever of the writer and the reader
//     finishes last.
//
// Connections the client ended (DISCONNECT, a closed or reset socket), a
// stranger the server closes without answering (no CONNECT in time, a
// first packet other than CONNECT), a write that failed or timed out, the
// watchdog's bound on a stuck last write and Server.Close's context close
// the socket at once (closeSocket).

// lingers reports whether the connection, ending now, is half-closed and
// drained instead of closed at once; last says a packet (DISCONNECT or
// CONNACK) is its last write. Called with wmu held.
func (c *conn) lingers(last bool) bool {
	if c.srv.opts.CloseDrainTimeout < 0 {
		return false
	}
	d := c.ending.Load()
	if d == nil || !d.ByServer() || d.Reason == CloseWriteTimeout {
		return false
	}
	// Something was written the client may not have read: the last
	// packet, or (after a CONNACK) whatever was buffered.
	return last || c.identity() != nil
}

// closeWriteSide runs once the last write of an ending connection is done
// (or there was nothing to write): a lingering connection is half-closed
// and its drain clock started, unless the reader has finished draining
// already; any other connection is closed.
//
// A reader still in its packet loop (the connection was ended by another
// goroutine: the watchdog, a takeover, Server.Disconnect, shutdown) is
// woken by a read deadline of now, so that the will, the session and the
// policy learn of the end at once, not after the drain; it then drains.
// Over WebSocket an interrupted read closes the connection (the library
// does so), so that reader is left to read on until the client answers
// the close frame, or the drain deadline.
func (c *conn) closeWriteSide() {
	c.wmu.Lock()
	if c.writeShut {
		c.wmu.Unlock()
		return
	}
	linger, drained := c.linger, c.drained
	c.writeShut = true
	c.wmu.Unlock()
	if !linger || drained || !halfClose(c.nc) {
		c.closeSocket()
		return
	}
	c.wmu.Lock()
	until := c.drainClockLocked()
	if !c.inDrain {
		wake := time.Now()
		if _, ws := c.nc.(*wsConn); ws {
			wake = until
		}
		c.nc.SetReadDeadline(wake)
	}
	c.wmu.Unlock()
}

// drainClockLocked returns when the drain ends, starting its clock on the
// first call (by the writer's half-close or the reader's drain, whichever
// comes first). Called with wmu held.
func (c *conn) drainClockLocked() time.Time {
	if c.drainUntil.IsZero() {
		c.drainUntil = time.Now().Add(c.srv.opts.CloseDrainTimeout)
	}
	return c.drainUntil
}

// drain is the reader's last act on a lingering connection: it reads and
// discards what the client sends until the client closes its side, the
// drain deadline passes or CloseDrainBytes were read, then closes the
// socket unless the last write is still going on (closeWriteSide closes
// it then; the watchdog bounds that write).
func (c *conn) drain() {
	c.wmu.Lock()
	c.inDrain = true
	c.nc.SetReadDeadline(c.drainClockLocked())
	c.wmu.Unlock()
	if c.large == nil {
		c.large = readPool.Get().(*[]byte)
	}
	buf := *c.large
	limit := c.srv.opts.CloseDrainBytes
	n := 0
	for n < limit {
		k, err := c.nc.Read(buf[:min(len(buf), limit-n)])
		n += k
		if err != nil {
			break
		}
	}
	c.srv.stats.bytesIn.Add(int64(n))
	c.wmu.Lock()
	c.drained = true
	closeNow := c.writeShut || !c.writing
	c.wmu.Unlock()
	if closeNow {
		c.closeSocket()
	}
}

// closeSocket closes c's connection at once. A TLS connection's Close
// sends close_notify first, a write that waits (up to the 5 s tls.Conn
// gives it) when the client stopped reading with the socket full and no
// write is under way; the goroutine closing may be the watchdog or
// Server.Close's loop over every connection. So the socket under it is
// closed first, and the alert fails at once: a connection that ends
// gracefully was sent its close_notify by halfClose.
func (c *conn) closeSocket() { closeNow(c.nc) }

// closeNow closes nc; a TLS connection's socket first, so that its Close
// does not wait to send close_notify (closeSocket).
func closeNow(nc net.Conn) error {
	if tc, ok := nc.(*tls.Conn); ok {
		tc.NetConn().Close()
	}
	return nc.Close()
}

// halfClose shuts the write side of nc, reporting whether it could: a TCP
// connection sends FIN; TLS sends close_notify, then FIN; a WebSocket
// sends its close frame (wsConn.CloseWrite). Wrappers that expose the
// connection they wrap (NetConn) are looked through. TLS's close_notify
// is a write, which waits (up to the 5 s tls.Conn gives it) when the
// client stopped reading with the socket's buffer full; the caller may be
// the watchdog, which serves every connection, so it is sent from a
// goroutine of its own, as a WebSocket's close frame is.
func halfClose(nc net.Conn) bool {
	if tc, ok := nc.(*tls.Conn); ok {
		if !tc.ConnectionState().HandshakeComplete {
			return false // no close_notify before the handshake
		}
		go func() {
			if tc.CloseWrite() == nil {
				shutWrite(tc.NetConn())
			}
		}()
		return true
	}
	return shutWrite(nc)
}

// shutWrite shuts the write side of nc or of the connection it wraps.
func shutWrite(nc net.Conn) bool {
	cw, ok := netlimit.Under[interface{ CloseWrite() error }](nc)
	return ok && cw.CloseWrite() == nil
}
