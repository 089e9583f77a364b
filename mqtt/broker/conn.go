package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// smallRead is the inline read buffer an idle TLS or WebSocket connection
// waits on; it moves to a pooled large buffer only while traffic is heavy,
// so an idle connection holds no large buffer. A plain TCP connection
// waits with no buffer at all and reads into a pooled one (readRaw).
const (
	smallRead = 128
	largeRead = 4096
)

var readPool = sync.Pool{New: func() any { b := make([]byte, largeRead); return &b }}

// conn is one network connection. The reader goroutine (run) owns the read
// side and the inbound protocol state; the write side is shared and guarded
// by wmu.
type conn struct {
	srv  *Server
	nc   net.Conn
	kind listenerKind
	// version is the client's protocol level, from its CONNECT (next to
	// kind, where it costs no padding: see TestConnFitsItsSizeClass).
	version byte
	// info is what a ConnectObserver sees of the connection; its
	// last-received time is updated by the reader.
	info *Connection

	// Read side, owned by the reader goroutine.
	small   [smallRead]byte
	large   *[]byte // pooled buffer while busy, nil while idle
	buf     []byte  // small[:] or *large
	r, w    int
	lastN   int       // bytes returned by the last read
	id      *Identity // set once after CONNECT; read by others through identity()
	idp     atomic.Pointer[Identity]
	sess    *session
	aliasIn map[uint16]string
	ack     packet.Ack // reused for every inbound ack
	will    *packet.Will
	// problemInfo: v5 Request Problem Information (reason strings allowed).
	problemInfo bool
	// sessionExpiryZero: the CONNECT asked for expiry 0 (a DISCONNECT may
	// not raise it).
	sessionExpiryZero bool
	// sendWill: the client disconnected with 0x04 (publish the will).
	sendWill bool
	// taken is set when a newer connection took the session over.
	taken atomic.Bool
	// served is set (with the session's mu held) once the CONNACK is
	// written: until then the pump leaves deliveries queued, so a message
	// routed to the session while it attaches cannot come first, and an
	// ending connection gets no DISCONNECT [MQTT-3.2.0-1].
	served atomic.Bool

	// Time limits, enforced by the server's watchdog (watch.go), in real
	// Unix nanoseconds: when the connection was accepted, when bytes last
	// arrived, the keep alive limit (1.5x the keep alive, 0 = none), and
	// when the write in progress began (0 = none).
	accepted   int64
	lastRead   atomic.Int64
	kaLimit    atomic.Int64
	writeSince atomic.Int64
	// ending is why the connection ends, recorded once by whoever ends it
	// first (see end), which then closes endc (a throttled reader's wait
	// ends with it).
	ending atomic.Pointer[Disconnection]
	endc   chan struct{}
	// throttle is the publish rate the reader applies (nil: none), set
	// at CONNECT (ratelimit.go); rates are its own rates, which
	// Server.SetPublishRates may change meanwhile.
	throttle *throttle
	rates    atomic.Pointer[clientRates]
	// logb rate-limits this connection's event-log lines (its session key's
	// bucket once authenticated, its remote IP's before).
	logb *logLimits

	// Inbound QoS 1/2 not yet fully acknowledged (Receive Maximum).
	pendingMu sync.Mutex
	pending   int

	// Outbound limits the client asked for (v5), fixed after CONNECT.
	maxOut   uint32 // client's Maximum Packet Size, 0 = protocol max
	aliasMax uint16 // client's Topic Alias Maximum
	// aliasOut is guarded by the session mutex (encoding happens under it).
	aliasOut map[string]uint16
	// oneID holds the subscription identifier of the PUBLISH being
	// encoded (guarded by the session mutex, like aliasOut).
	oneID [1]uint32

	// Write side.
	wmu     sync.Mutex
	wbuf    []byte
	spare   []byte
	writing bool // a writer is flushing
	// closed: nothing more is appended; with final, the socket is closed
	// once what is buffered has been written (closeAfter), otherwise the
	// buffer is discarded.
	closed bool
	final  bool
	full   bool // the pump stopped because wbuf was over the high mark
	// How the socket closes (hangup.go): linger, set with final, says the
	// server ended the connection and it is half-closed and drained;
	// writeShut, that its last write is done; inDrain and drained, that
	// the reader is draining and has finished; drainUntil, when the drain
	// ends (zero until its clock starts).
	linger     bool
	writeShut  bool
	inDrain    bool
	drained    bool
	drainUntil time.Time
	// qos0 counts the QoS 0 PUBLISHes in wbuf: if the connection ends
	// before they are written they are lost, and counted as dropped.
	qos0   int
	sockMu sync.Mutex
	// raw is the socket of a plain TCP connection, for non-blocking direct
	// writes and reads (nil for TLS and WebSocket).
	raw syscall.RawConn
	// prc is the TCP socket under a plain or TLS connection, which the
	// parker waits on while the connection is a stranger (nil: never
	// parked, as WebSocket connections). parking (reader-owned) says
	// reads must not wait: the CONNECT has not fully arrived. parkedFD is
	// the socket's descriptor while parked, else -1 (guarded by the
	// parker's mu). pend is a CONNECT body in the making across parks.
	prc      syscall.RawConn
	parking  bool
	graced   bool // the reader had its strangerGrace wait
	parkedFD atomic.Int32
	pend     *pendingConnect
	// An idle client is parked too (Options.IdleParkAfter): idleState
	// says whether its reader waits in readRaw with nothing buffered
	// (idleWaiting), and the watchdog's request to park (idleAsked, with
	// a read deadline in the past that wakes the read). The reader clears
	// the deadline under idleMu before any other read, so no deadline
	// outlives the request. parkedIdle (guarded by the parker's mu) says
	// the parked connection is past CONNECT; noIdlePark (reader-owned),
	// that the parker stopped.
	idleMu     sync.Mutex
	idleState  uint8
	parkedIdle bool
	noIdlePark bool
	// congested is set (by this reader) when a message it routed was
	// dropped because the queue of a subscriber that is still reading was
	// full; the reader then pauses briefly before reading more (see
	// readPacket). A subscriber that stopped reading sets nothing: pausing
	// cannot help it, and would slow the publisher a hundredfold.
	congested bool
	pausedAt  time.Time // the reader's last congestion pause
	// flushes lists the connections this reader wrote routed messages to
	// and owes a flush (reader-owned; see endWrite).
	flushes flushList
}

// congestionPause is how long a publisher's reader waits before reading
// more after its messages overflowed a subscriber's queue. Besides easing
// wasted work, the pause lets the Go scheduler poll the network: publishers
// whose sockets always hold data never park, and a subscriber's
// acknowledgements would otherwise wait for the runtime's 10 ms background
// poll, starving the very session that overflowed.
const congestionPause = time.Millisecond

// congestionEvery is the least time between two congestion pauses of one
// reader: the pauses take at most a tenth of a publisher's time, however
// slow the subscribers its messages overflow.
const congestionEvery = 10 * congestionPause

// highWater is how many encoded bytes a connection buffers before the pump
// leaves messages in the session queue.
const highWater = 256 << 10

func newConn(s *Server, nc net.Conn, kind listenerKind) *conn {
	c := &conn{srv: s, nc: nc, kind: kind, info: &Connection{RemoteAddr: nc.RemoteAddr(), TLS: kind.tls, WebSocket: kind.websocket}, endc: make(chan struct{})}
	c.accepted = time.Now().UnixNano()
	c.lastRead.Store(c.accepted)
	c.buf = c.small[:]
	c.parkedFD.Store(-1)
	if !kind.websocket {
		under := nc
		if tc, ok := nc.(*tls.Conn); ok {
			under = tc.NetConn()
		}
		if sc, ok := under.(syscall.Conn); ok {
			c.prc, _ = sc.SyscallConn()
		}
		if !kind.tls {
			c.raw = c.prc
		}
	}
	c.parking = c.prc != nil && s.parker != nil
	return c
}

// run serves the connection until it ends, or until it parks: a stranger
// whose CONNECT has not fully arrived, or an idle client, waits in the
// parker, which runs it again when more bytes come (or when it ends).
func (c *conn) run() {
	err := c.serve()
	for err == errParked {
		idle := c.id != nil // readRaw parked it holding no buffer
		if srv := c.srv; c.ending.Load() == nil && srv.parker.park(c) {
			if idle { // not c.id: once parked, c is the parker's
				srv.stats.idleParks.Add(1)
			}
			return
		}
		if c.ending.Load() != nil || !c.srv.parker.down() {
			err = net.ErrClosed // ending, or the socket is closed
			break
		}
		c.parking, c.noIdlePark = false, true // the parker stopped: wait here
		err = c.serve()
	}
	c.flushes.flush() // flushes this reader still owes others
	c.finish(err)
	c.srv.release(c)
}

// errParked is the reads' answer, while the connection is a stranger, when
// nothing is there to read: its reader gives the connection to the parker
// and ends.
var errParked = errors.New("nothing to read yet: parked")

// serve reads and handles packets until the connection ends or parks
// (errParked); a connection that parked goes on where it was: a stranger
// with its CONNECT, an idle client with its next packet.
func (c *conn) serve() error {
	if c.id == nil {
		first, err := c.readPacket()
		if err == errParked {
			return err
		}
		c.parking = false
		if err != nil {
			c.failConnect(first, err)
			return err
		}
		cp, ok := first.(*packet.Connect)
		if !ok {
			return c.protocolError(packet.ProtocolError, fmt.Sprintf("first packet is %v, not CONNECT", first.Type()))
		}
		if err := c.connect(cp); err != nil {
			return err
		}
	}
	for {
		p, err := c.readPacket()
		if err != nil {
			var pe *packet.Error
			if errors.As(err, &pe) {
				// Malformed or over the maximum size: v5 clients get
				// DISCONNECT with the reason code.
				c.closeWith(protocolClose(pe.Code, pe.Reason))
			}
			return err
		}
		if c.ending.Load() != nil {
			// Ended by the server (taken over, not authorized, keep
			// alive): nothing more the client sends is acted on.
			return errEnded
		}
		if err := c.handle(p); err != nil {
			return err
		}
		release(p)
	}
}

// errEnded stops a reader whose connection another goroutine ended.
var errEnded = errors.New("connection ended by the server")

// failConnect answers a CONNECT that could not be decoded where the
// protocol allows it, and records why the connection ends. first is what
// Decode returned with the error: for a CONNECT past its protocol name and
// level, the partial *packet.Connect.
func (c *conn) failConnect(first packet.Packet, err error) {
	var pe *packet.Error
	if !errors.As(err, &pe) {
		return // the network: endedWith says so
	}
	d := protocolClose(pe.Code, pe.Reason)
	cp, _ := first.(*packet.Connect)
	if c.version == 0 && (cp == nil || pe.Code != packet.UnsupportedProtocolVersion) {
		c.closeWith(d)
		return
	}
	var ack packet.Packet
	if cp != nil && pe.Code == packet.UnsupportedProtocolVersion {
		// A protocol level this server does not speak: refused, in the
		// form the client can read (unsupportedForm).
		d = Disconnection{Reason: CloseConnectRefused, Code: pe.Code, Detail: pe.Reason}
		c.srv.stats.connectsRefused[pe.Code].Add(1)
		c.logRefusedConnect(cp, pe.Code, pe.Reason, nil)
		c.srv.refused(nil, Refusal{What: RefusedConnect, Code: pe.Code, Detail: pe.Reason})
		c.version = unsupportedForm(cp)
		ack = &packet.Connack{ReasonCode: pe.Code}
	} else if c.version == packet.Version5 {
		ack = &packet.Connack{ReasonCode: pe.Code}
	}
	if c.end(d) {
		c.closeAfter(ack)
	}
}

// unsupportedForm is the protocol level whose CONNACK form answers a
// CONNECT of a level this server does not speak: a client naming the
// protocol "MQTT" with level 5 or more (a later version) reads MQTT 5's
// CONNACK, with reason code 0x84 Unsupported Protocol Version ([MQTT-3.1.2-2]
// of MQTT 5); any other (levels 0-3 under "MQTT", "MQIsdp" with a level
// other than 3) reads 3.1.1's, return code 0x01 unacceptable protocol
// version, which is also 3.1's.
func unsupportedForm(cp *packet.Connect) byte {
	if cp.ProtocolName == "MQTT" && cp.ProtocolLevel >= packet.Version5 {
		return packet.Version5
	}
	return packet.Version311
}

// fill reads more bytes into the read buffer. A plain TCP connection
// holds no buffer while it waits (readRaw); a TLS or WebSocket one
// releases the large buffer before blocking when the previous read was
// small, so idle connections hold only the inline buffer.
func (c *conn) fill() error {
	if c.r == c.w && c.raw != nil && !c.parking {
		return c.readRaw()
	}
	if c.r == c.w {
		c.r, c.w = 0, 0
		switch {
		case c.large != nil && c.lastN < smallRead:
			// Traffic is light: wait on the inline buffer.
			readPool.Put(c.large)
			c.large = nil
			c.buf = c.small[:]
		case c.large == nil && c.lastN == smallRead:
			// The last read filled the inline buffer: more is coming.
			c.large = readPool.Get().(*[]byte)
			c.buf = *c.large
		}
	} else if c.w == len(c.buf) {
		// Partial packet at the end of the buffer: make room.
		if c.large == nil {
			c.large = readPool.Get().(*[]byte)
			n := copy(*c.large, c.buf[c.r:c.w])
			c.buf = *c.large
			c.r, c.w = 0, n
		} else {
			n := copy(c.buf, c.buf[c.r:c.w])
			c.r, c.w = 0, n
		}
	}
	n, err := c.readSome(c.buf[c.w:])
	c.lastN = n
	c.w += n
	if n > 0 {
		c.srv.stats.bytesIn.Add(int64(n))
		c.received()
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// The reader's states for idle parking (conn.idleState).
const (
	idleBusy    = iota // reading a packet, or handling one
	idleWaiting        // in readRaw, nothing buffered
	idleAsked          // asked to park: the read's deadline is in the past
)

// mayParkIdle reports whether the reader, about to wait for a packet, may
// be parked if none comes for Options.IdleParkAfter: plain TCP only (TLS
// and WebSocket keep bytes the socket no longer shows), past CONNECT, and
// not ending.
func (c *conn) mayParkIdle() bool {
	return c.raw != nil && c.id != nil && !c.noIdlePark && c.srv.parker != nil && c.srv.opts.IdleParkAfter > 0 &&
		c.ending.Load() == nil
}

// setIdle sets the reader's idle state and reports whether the watchdog
// had asked it to park; if so, it clears the read deadline the request
// set, unless the connection is closing and its own deadline (hangup.go)
// stands.
func (c *conn) setIdle(state uint8) (asked bool) {
	c.idleMu.Lock()
	asked = c.idleState == idleAsked
	c.idleState = state
	if asked {
		c.wmu.Lock()
		if !c.writeShut && !c.inDrain {
			c.nc.SetReadDeadline(time.Time{})
		}
		c.wmu.Unlock()
	}
	c.idleMu.Unlock()
	return asked
}

// askPark is the watchdog's request to park an idle client: if its reader
// waits in readRaw with nothing buffered, a read deadline in the past
// wakes the read, which then parks.
func (c *conn) askPark() {
	c.idleMu.Lock()
	if c.idleState == idleWaiting {
		c.idleState = idleAsked
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
	c.idleMu.Unlock()
}

// readRaw is fill for a plain TCP connection whose read buffer is empty:
// it waits for bytes with no buffer at all, then reads whatever is there
// (up to largeRead) into a pooled buffer in one system call, which the
// next readRaw gives back. A PUBLISH longer than the inline buffer comes
// in one read, not two, and a waiting connection holds nothing.
func (c *conn) readRaw() error {
	c.releaseRead()
	c.buf, c.r, c.w = c.small[:], 0, 0
	idle := c.mayParkIdle()
	if idle {
		c.setIdle(idleWaiting)
	}
	n, rerr, err := rawRead(c)
	if idle && c.setIdle(idleBusy) && errors.Is(err, os.ErrDeadlineExceeded) && c.ending.Load() == nil {
		return errParked // idle: the watchdog woke the wait to park it
	}
	if err == nil {
		err = rerr
	}
	if n > 0 {
		c.buf, c.w, c.lastN = *c.large, n, n
		c.srv.stats.bytesIn.Add(int64(n))
		c.received()
		return nil
	}
	c.releaseRead()
	if err != nil {
		return err
	}
	return io.EOF // read returned 0: the client closed its side
}

// received records the time of a network read that returned bytes (per
// read call, not per packet): by the real clock for the keep alive, and by
// Options.Now for the ConnectObserver.
func (c *conn) received() {
	now := time.Now()
	c.lastRead.Store(now.UnixNano())
	if !c.srv.realNow {
		now = c.srv.now()
	}
	c.info.lastRecv.Store(now.UnixNano())
}

// readPacket returns the next packet. Bodies of packets whose fields are
// kept (PUBLISH, CONNECT, SUBSCRIBE, UNSUBSCRIBE) are copied out of the read
// buffer; the others are decoded in place.
func (c *conn) readPacket() (packet.Packet, error) {
	if c.pend != nil {
		return c.readConnectBody() // went on where it parked
	}
	for {
		header, remaining, n, err := packet.ParseHeader(c.buf[c.r:c.w])
		if err == packet.ErrIncomplete {
			// Before reading, flush what the packets handled so far
			// produced (acks, SUBACKs): this is where own writes go out.
			c.flushInline()
			c.flushes.flush()
			if c.congested {
				c.congested = false
				// At most one pause per congestionEvery: a subscriber
				// that reads, but slower than its publishers send, costs
				// them at most a tenth of their time.
				if now := time.Now(); now.Sub(c.pausedAt) >= congestionEvery {
					c.pausedAt = now
					c.srv.stats.publisherPauses.Add(1)
					time.Sleep(congestionPause)
				}
			}
			if err := c.fill(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if limit := c.srv.opts.MaxPacketSize; uint64(n)+uint64(remaining) > uint64(limit) {
			return nil, packet.Errorf(packet.PacketTooLarge, "packet of %d bytes is over the maximum of %d", n+remaining, limit)
		}
		typ := packet.Type(header >> 4)
		if c.version == 0 { // a stranger: refused before anything is allocated for it
			if typ != packet.CONNECT {
				return nil, packet.Errorf(packet.ProtocolError, "first packet is %v, not CONNECT", typ)
			}
			if limit := c.srv.opts.MaxConnectSize; uint64(n)+uint64(remaining) > uint64(limit) {
				return nil, packet.Errorf(packet.PacketTooLarge, "CONNECT of %d bytes is over the maximum of %d", n+remaining, limit)
			}
		}
		c.srv.stats.packetsIn[typ&15].Add(1)
		keep := typ == packet.PUBLISH || typ == packet.CONNECT || typ == packet.SUBSCRIBE || typ == packet.UNSUBSCRIBE
		var body []byte
		if avail := c.w - c.r - n; avail >= remaining && !keep {
			body = c.buf[c.r+n : c.r+n+remaining]
			c.r += n + remaining
		} else if c.version == 0 {
			// The CONNECT body, in memory that grows with the bytes that
			// arrive, not with what the header declares.
			have := c.buf[c.r+n : min(c.w, c.r+n+remaining)]
			c.r += n + len(have)
			if len(have) < remaining {
				body = make([]byte, len(have), min(remaining, max(2*len(have), 512)))
				copy(body, have)
				c.pend = &pendingConnect{header: header, remaining: remaining, body: body}
				return c.readConnectBody()
			}
			body = slices.Clone(have)
		} else {
			body = make([]byte, remaining)
			got := copy(body, c.buf[c.r+n:c.w])
			c.r += n + got
			if got < remaining {
				if _, err := io.ReadFull(c.nc, body[got:]); err != nil {
					return nil, err
				}
				c.srv.stats.bytesIn.Add(int64(remaining - got))
				c.received()
				c.lastN = remaining - got
			}
		}
		if typ == packet.CONNECT && c.version == 0 {
			// Learn the protocol level early so a failed decode can be
			// answered in the right form.
			c.version = connectLevel(body)
		}
		if typ >= packet.PUBACK && typ <= packet.PUBCOMP {
			// Acks are decoded into the connection's own Ack: no
			// allocation per acknowledgement.
			if err := packet.DecodeAck(header, body, c.version, &c.ack); err != nil {
				return nil, err
			}
			return &c.ack, nil
		}
		if typ == packet.PUBLISH && c.version != 0 {
			// Into a pooled packet, which serve gives back once handled.
			p := publishPool.Get().(*packet.Publish)
			if err := packet.DecodePublish(header, body, c.version, p); err != nil {
				publishPool.Put(p)
				return nil, err
			}
			return p, nil
		}
		return packet.Decode(header, body, c.version)
	}
}

// publishPool holds the inbound PUBLISH packets the readers decode into:
// a packet lives from its decode to the end of its handling (the Message
// made from it copies what it keeps), so one per message need not be
// allocated.
var publishPool = sync.Pool{New: func() any { return new(packet.Publish) }}

// release gives a handled packet back to its pool, if it came from one.
func release(p packet.Packet) {
	if pub, ok := p.(*packet.Publish); ok {
		*pub = packet.Publish{} // keeps no payload alive
		publishPool.Put(pub)
	}
}

// pendingConnect is a stranger's CONNECT whose body is still arriving.
type pendingConnect struct {
	header    byte
	remaining int
	body      []byte // what arrived, in memory that grows with it
}

// readConnectBody reads the rest of c.pend's body into a buffer that grows
// as bytes arrive (from 512 bytes, doubling), then decodes the CONNECT.
// It reads the socket itself, with no reader layers between; a stranger
// that falls silent parks (errParked) with what it sent kept in c.pend.
func (c *conn) readConnectBody() (packet.Packet, error) {
	p := c.pend
	var err error
	for len(p.body) < p.remaining && err == nil {
		if len(p.body) == cap(p.body) {
			p.body = slices.Grow(p.body, min(p.remaining, 2*cap(p.body))-len(p.body))
		}
		var k int
		k, err = c.readSome(p.body[len(p.body):min(cap(p.body), p.remaining)])
		if k > 0 { // counted as it arrives
			p.body = p.body[:len(p.body)+k]
			c.srv.stats.bytesIn.Add(int64(k))
			c.received()
			c.lastN = k
		}
	}
	if len(p.body) < p.remaining {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	c.pend = nil
	c.version = connectLevel(p.body)
	return packet.Decode(p.header, p.body, c.version)
}

// readSome reads from the socket; while the connection is a stranger, it
// does not wait (errParked: nothing there).
func (c *conn) readSome(b []byte) (int, error) {
	if c.parking {
		return c.readNoWait(b)
	}
	return c.nc.Read(b)
}

func connectLevel(body []byte) byte {
	if len(body) < 2 {
		return 0
	}
	n := int(body[0])<<8 | int(body[1])
	if len(body) < 2+n+1 {
		return 0
	}
	return body[2+n]
}

// identity is the connection's identity once CONNECT succeeded (safe from
// any goroutine).
func (c *conn) identity() *Identity { return c.idp.Load() }

// handle dispatches one packet after CONNECT.
func (c *conn) handle(p packet.Packet) error {
	switch p := p.(type) {
	case *packet.Publish:
		if err := c.throttlePublish(p); err != nil {
			return err
		}
		return c.publish(p)
	case *packet.Ack:
		return c.handleAck(p)
	case *packet.Subscribe:
		return c.subscribe(p)
	case *packet.Unsubscribe:
		return c.unsubscribe(p)
	case *packet.Pingreq:
		c.writePacket(&packet.Pingresp{})
		return nil
	case *packet.Disconnect:
		return c.disconnect(p)
	case *packet.Connect:
		return c.protocolError(packet.ProtocolError, "second CONNECT")
	case *packet.Auth:
		return c.protocolError(packet.ProtocolError, "AUTH without an authentication method")
	default:
		return c.protocolError(packet.ProtocolError, fmt.Sprintf("unexpected %v from a client", p.Type()))
	}
}

// protocolError ends the connection: v5 clients get a DISCONNECT with code.
func (c *conn) protocolError(code packet.ReasonCode, reason string) error {
	c.closeWith(protocolClose(code, reason))
	return packet.Errorf(code, "%s", reason)
}

// closeWith ends the connection for reason d, unless it is ending already:
// v5 clients get a DISCONNECT with d's code (when it has one and the
// connection is past CONNECT) after what is already buffered, then the
// socket closes. It does not block: a stuck client's last write is bounded
// by the watchdog.
func (c *conn) closeWith(d Disconnection) {
	if !c.end(d) {
		return
	}
	if d.Reason == CloseWriteTimeout {
		c.closeSocket() // the socket takes nothing more
		return
	}
	if d.Code < 0x80 || c.version != packet.Version5 {
		c.closeAfter(nil)
		return
	}
	dp := &packet.Disconnect{ReasonCode: d.Code}
	if d.Detail != "" && c.problemInfo {
		dp.Properties.SetReasonString(d.Detail)
	}
	c.closeServed(dp)
}

// handleAck processes PUBACK/PUBREC/PUBREL/PUBCOMP: an acknowledgement of
// the wrong kind for the packet id ends the connection, one for an id the
// server is not using is answered where the protocol has an answer (PUBREL,
// PUBCOMP) and otherwise ignored (docs/broker.md, "Acknowledgements of the
// wrong kind").
func (c *conn) handleAck(a *packet.Ack) error {
	if a.Kind == packet.PUBREL {
		return c.pubrel(a.PacketID)
	}
	switch r, why := c.sess.ack(c, a.Kind, a.PacketID, a.ReasonCode); r {
	case ackWrong:
		return c.protocolError(packet.ProtocolError, why)
	case ackUnknown:
		if a.Kind == packet.PUBREC {
			// The sender answers every PUBREC with PUBREL ([MQTT-4.3.3-1],
			// v5 [MQTT-4.3.3-4]); v5 says the id is unknown (3.1.1 has no
			// reason codes). An unknown PUBACK or PUBCOMP has no answer.
			c.writeAck(packet.PUBREL, a.PacketID, packet.PacketIdentifierNotFound, true)
		}
	}
	return nil
}

// finish cleans up after the reader ends: the reason is counted, logged
// and reported to the policy, and the session detached.
//
// A connection the server ended with linger set is closed last, after its
// drain (hangup.go): the bookkeeping does not wait for it.
func (c *conn) finish(err error) {
	d := c.endedWith(err)
	c.end(d)
	c.wmu.Lock()
	lost := 0
	closeNow := !(c.final && c.writing) // else the final write closes it
	if !c.final {
		lost = c.qos0 // buffered, never to be written
		c.wbuf, c.qos0 = nil, 0
	}
	c.closed = true
	linger := c.linger
	c.wmu.Unlock()
	if linger {
		defer c.releaseRead()
		defer c.drain()
	} else {
		if closeNow {
			c.closeSocket()
		}
		c.releaseRead()
	}
	c.srv.stats.closes[d.Reason].Add(1)
	switch d.Reason {
	case CloseProtocolError, CloseMalformedPacket, ClosePacketTooLarge, CloseQoSNotAllowed:
		c.srv.stats.protocolErrors.Add(1)
	}
	c.logClosed(d)
	if c.id == nil {
		return
	}
	if lost > 0 {
		c.srv.stats.drops[DropConnectionClosed].Add(int64(lost))
		for range lost {
			c.srv.policy.Dropped(c.id, nil, DropConnectionClosed)
		}
	}
	c.srv.detach(c, d)
	c.srv.policy.Disconnected(c.id, d)
}

// releaseRead gives the large read buffer back to the pool.
func (c *conn) releaseRead() {
	if c.large != nil {
		readPool.Put(c.large)
		c.large = nil
	}
}

// shutdown ends the connection because the server stops.
func (c *conn) shutdown() {
	c.closeWith(Disconnection{Reason: CloseShutdown, Code: packet.ServerShuttingDown, Detail: "the server is shutting down"})
}
