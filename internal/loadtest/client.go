// Package loadtest is fleetmq's load harness: it drives publishers into
// subscribers (or holds idle connections) against any MQTT broker on
// loopback, measures delivery, loss, duplicates, latency and the broker
// process's CPU time and memory, and compares fleetmq with Mosquitto in one
// run. "fleetmq bench" is its command line; docs/benchmarks.md has the
// figures it produced.
//
// The clients speak MQTT with fleetmq's own codec (mqtt/packet) and reuse
// their buffers, so the harness spends little CPU of its own on a machine it
// shares with the broker under test.
package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// conn is a lean MQTT client connection.
type conn struct {
	nc      net.Conn
	version byte
	r       *bufio.Reader
	body    []byte

	mu  sync.Mutex // guards w and out
	w   *bufio.Writer
	out []byte
}

// dialer opens connections, optionally from a given source address.
type dialer struct {
	addr    string
	version byte
	source  net.IP // nil: any
	timeout time.Duration
}

// connect dials and completes CONNECT/CONNACK. It returns the server's
// Receive Maximum (65535 when not given).
func (d dialer) connect(ctx context.Context, c *packet.Connect, bufSize int) (*conn, uint16, error) {
	cn, ack, err := d.connectAck(ctx, c, bufSize, nil)
	if err != nil {
		return nil, 0, err
	}
	rm := uint16(65535)
	if ack.Properties.Has(packet.PropReceiveMaximum) {
		rm = ack.Properties.ReceiveMaximum
	}
	return cn, rm, nil
}

// connectAck is connect returning the CONNACK; dialed, when not nil, is
// told the connection's local address before CONNECT is sent.
func (d dialer) connectAck(ctx context.Context, c *packet.Connect, bufSize int, dialed func(local string)) (*conn, *packet.Connack, error) {
	nd := net.Dialer{Timeout: d.timeout}
	if d.source != nil {
		nd.LocalAddr = &net.TCPAddr{IP: d.source}
	}
	nc, err := nd.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, nil, err
	}
	if dialed != nil {
		dialed(nc.LocalAddr().String())
	}
	cn := &conn{nc: nc, version: d.version, r: bufio.NewReaderSize(nc, bufSize), w: bufio.NewWriterSize(nc, bufSize)}
	c.ProtocolName = "MQTT"
	c.ProtocolLevel = d.version
	if err := cn.send(c, true); err != nil {
		nc.Close()
		return nil, nil, err
	}
	nc.SetReadDeadline(time.Now().Add(d.timeout))
	p, err := cn.read()
	nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("connect %s: %w", c.ClientID, err)
	}
	ack, ok := p.(*packet.Connack)
	if !ok {
		nc.Close()
		return nil, nil, fmt.Errorf("connect %s: got %v, want CONNACK", c.ClientID, p.Type())
	}
	if ack.ReasonCode != packet.Success {
		nc.Close()
		return nil, nil, fmt.Errorf("connect %s refused: %v", c.ClientID, ack.ReasonCode)
	}
	return cn, ack, nil
}

func (c *conn) send(p packet.Packet, flush bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.out, err = packet.Encode(c.out[:0], p, c.version); err != nil {
		return err
	}
	if _, err := c.w.Write(c.out); err != nil {
		return err
	}
	if flush {
		return c.w.Flush()
	}
	return nil
}

// sendAck writes a PUBACK/PUBREC/PUBREL/PUBCOMP.
func (c *conn) sendAck(kind packet.Type, id uint16, flush bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = packet.AppendAck(c.out[:0], &packet.Ack{Kind: kind, PacketID: id}, c.version)
	if _, err := c.w.Write(c.out); err != nil {
		return err
	}
	if flush {
		return c.w.Flush()
	}
	return nil
}

func (c *conn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Flush()
}

// read reads one packet. The returned packet may alias c's buffer until the
// next read.
func (c *conn) read() (packet.Packet, error) {
	p, body, err := packet.ReadPacket(c.r, c.body, c.version)
	c.body = body
	return p, err
}

func (c *conn) close() { c.nc.Close() }
