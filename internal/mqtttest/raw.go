package mqtttest

import (
	"bufio"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Raw speaks MQTT with fleetmq's own codec, for tests that need control
// over every packet (retransmission, windows, malformed input, staying
// silent past the keep alive) and for benchmarks, where it costs far less
// than a client library. It is safe to send from one goroutine while
// another reads.
type Raw struct {
	Conn    net.Conn
	Version byte // the protocol level packets are encoded and decoded at

	r   *bufio.Reader
	mu  sync.Mutex // guards w and buf
	w   *bufio.Writer
	buf []byte
}

// DialRaw opens a TCP connection without sending anything.
func DialRaw(tb testing.TB, addr string, version byte) *Raw {
	tb.Helper()
	return RawOver(tb, dial(tb, addr), version)
}

// RawOver wraps a connection already open (TLS, WebSocket); it is closed
// when the test ends.
func RawOver(tb testing.TB, nc net.Conn, version byte) *Raw {
	tb.Helper()
	tb.Cleanup(func() { nc.Close() })
	return &Raw{Conn: nc, Version: version, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10)}
}

// ConnectRaw dials and completes CONNECT/CONNACK with cp as the CONNECT
// (protocol level 5 unless cp says otherwise), failing unless the server
// accepts.
func ConnectRaw(tb testing.TB, addr string, cp *packet.Connect) (*Raw, *packet.Connack) {
	tb.Helper()
	if cp.ProtocolLevel == 0 {
		cp.ProtocolLevel = packet.Version5
	}
	c := DialRaw(tb, addr, cp.ProtocolLevel)
	return c, c.Connect(tb, cp)
}

// Connect sends cp (with protocol name "MQTT" unless it has one, and c's
// level unless it has one) and fails unless the CONNACK accepts it.
func (c *Raw) Connect(tb testing.TB, cp *packet.Connect) *packet.Connack {
	tb.Helper()
	if cp.ProtocolName == "" {
		cp.ProtocolName = "MQTT"
	}
	if cp.ProtocolLevel == 0 {
		cp.ProtocolLevel = c.Version
	}
	c.Must(tb, cp)
	ack := c.Expect(tb, packet.CONNACK).(*packet.Connack)
	if ack.ReasonCode != packet.Success {
		tb.Fatalf("connect %s refused: %v", cp.ClientID, ack.ReasonCode)
	}
	return ack
}

// Send encodes p and writes it, flushing when flush is set.
func (c *Raw) Send(p packet.Packet, flush bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.buf, err = packet.Encode(c.buf[:0], p, c.Version); err != nil {
		return err
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return err
	}
	if flush {
		return c.w.Flush()
	}
	return nil
}

// Must sends p and flushes, failing the test on error.
func (c *Raw) Must(tb testing.TB, p packet.Packet) {
	tb.Helper()
	if err := c.Send(p, true); err != nil {
		tb.Fatalf("send %v: %v", p.Type(), err)
	}
}

// Flush writes what Send buffered.
func (c *Raw) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Flush()
}

// ReadPacket reads one packet, without a deadline of its own. The packet
// owns its memory.
func (c *Raw) ReadPacket() (packet.Packet, error) {
	p, _, err := packet.ReadPacket(c.r, nil, c.Version)
	return p, err
}

// Read reads raw bytes, for tests that check what is on the wire.
func (c *Raw) Read(b []byte) (int, error) { return c.r.Read(b) }

// Buffered is how many bytes have been received but not read yet.
func (c *Raw) Buffered() int { return c.r.Buffered() }

// Next reads one packet within Timeout.
func (c *Raw) Next(tb testing.TB) packet.Packet {
	tb.Helper()
	c.Conn.SetReadDeadline(time.Now().Add(Timeout))
	defer c.Conn.SetReadDeadline(time.Time{})
	p, err := c.ReadPacket()
	if err != nil {
		tb.Fatalf("read: %v", err)
	}
	return p
}

// Expect reads one packet and checks its type.
func (c *Raw) Expect(tb testing.TB, t packet.Type) packet.Packet {
	tb.Helper()
	p := c.Next(tb)
	if p.Type() != t {
		tb.Fatalf("got %v (%+v), want %v", p.Type(), p, t)
	}
	return p
}

// Closed waits until the server closes the connection, returning the
// packets (such as a DISCONNECT) that came before.
func (c *Raw) Closed(tb testing.TB) []packet.Packet {
	tb.Helper()
	c.Conn.SetReadDeadline(time.Now().Add(Timeout))
	var got []packet.Packet
	for {
		p, err := c.ReadPacket()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				tb.Fatalf("connection still open after %v (got %v)", Timeout, got)
			}
			return got
		}
		got = append(got, p)
	}
}
