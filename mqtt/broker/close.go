package broker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// CloseReason says why a connection ended. Every connection ends with
// exactly one, chosen by whoever ended it first; the server counts them
// (Stats.Closes), logs them and hands them to Policy.Disconnected.
type CloseReason uint8

// Close reasons. The first two are the client's doing; every other one is
// a close by the server, for the stated reason.
const (
	// CloseClientDisconnect: the client sent DISCONNECT.
	CloseClientDisconnect CloseReason = iota
	// CloseConnectionLost: the network connection ended without a
	// DISCONNECT (the client closed it, reset it, or the network failed;
	// also a write that failed at once).
	CloseConnectionLost
	// CloseConnectTimeout: no complete CONNECT within Options.ConnectTimeout
	// of the connection being accepted (TLS handshake included).
	CloseConnectTimeout
	// CloseConnectRefused: the CONNECT was answered with a refusing CONNACK.
	CloseConnectRefused
	// CloseKeepAliveTimeout: nothing received for 1.5 times the keep alive
	// (v5: DISCONNECT 0x8D).
	CloseKeepAliveTimeout
	// CloseWriteTimeout: a write to the client did not complete within
	// Options.WriteTimeout (a client that stopped reading).
	CloseWriteTimeout
	// CloseMalformedPacket: a packet could not be decoded (v5: 0x81).
	CloseMalformedPacket
	// ClosePacketTooLarge: a packet over the maximum packet size (v5: 0x95).
	ClosePacketTooLarge
	// CloseProtocolError: any other violation of the protocol (v5: the
	// reason code that names it, for example 0x82, 0x90, 0x93, 0x94).
	CloseProtocolError
	// CloseQoSNotAllowed: a PUBLISH above the client's maximum QoS (v5: 0x9B).
	CloseQoSNotAllowed
	// CloseTakenOver: a newer connection took the session over (v5: 0x8E).
	CloseTakenOver
	// CloseNotAuthorized: the policy withdrew the client's right to be
	// connected (credential revoked or expired, account suspended, client
	// removed; v5: the code passed to Server.Disconnect, usually 0x87).
	CloseNotAuthorized
	// CloseShutdown: the server is shutting down (v5: 0x8B).
	CloseShutdown
	// CloseNotStored: the policy could not keep a message the 3.1.1 client
	// published (Message.Refuse); the protocol has no way to say so, so the
	// connection ends and the client sends the message again.
	CloseNotStored
	numCloseReasons
)

var closeNames = [numCloseReasons]string{
	"client_disconnect", "connection_lost", "connect_timeout", "connect_refused", "keepalive_timeout",
	"write_timeout", "malformed_packet", "packet_too_large", "protocol_error", "qos_not_allowed",
	"session_taken_over", "not_authorized", "server_shutdown", "message_not_stored",
}

// String returns the reason's name as metrics and logs spell it, for
// example "keepalive_timeout".
func (r CloseReason) String() string {
	if r < numCloseReasons {
		return closeNames[r]
	}
	return "unknown"
}

// ByServer reports whether the server chose to end the connection.
func (r CloseReason) ByServer() bool {
	return r != CloseClientDisconnect && r != CloseConnectionLost
}

// CloseNames lists the close reasons in CloseReason order.
func CloseNames() []string { return closeNames[:] }

// Disconnection describes how a connection ended.
type Disconnection struct {
	Reason CloseReason
	// Code is the reason code the server sent (DISCONNECT or refusing
	// CONNACK), or the one the client's DISCONNECT carried; Success when
	// there was none.
	Code packet.ReasonCode
	// Detail says what exactly happened, for logs and for the tenant (for
	// example "nothing received for 45s (keep alive 30s)").
	Detail string
}

// ByServer reports whether the server chose to end the connection.
func (d Disconnection) ByServer() bool { return d.Reason.ByServer() }

func (d Disconnection) String() string {
	s := d.Reason.String()
	if d.Code != packet.Success {
		s += fmt.Sprintf(" (0x%02X %s)", byte(d.Code), d.Code)
	}
	if d.Detail != "" {
		s += ": " + d.Detail
	}
	return s
}

// protocolClose is the Disconnection for a protocol error with code.
func protocolClose(code packet.ReasonCode, detail string) Disconnection {
	r := CloseProtocolError
	switch code {
	case packet.MalformedPacket:
		r = CloseMalformedPacket
	case packet.PacketTooLarge:
		r = ClosePacketTooLarge
	case packet.QoSNotSupported:
		r = CloseQoSNotAllowed
	}
	return Disconnection{Reason: r, Code: code, Detail: detail}
}

// lostClose is the Disconnection for a network error the server did not
// cause (EOF, reset, a failed write).
func lostClose(err error) Disconnection {
	d := Disconnection{Reason: CloseConnectionLost}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		d.Detail = "closed by the client without DISCONNECT"
	case errors.Is(err, syscall.ECONNRESET):
		d.Detail = "reset by the client"
	case errors.Is(err, syscall.EPIPE):
		d.Detail = "broken pipe"
	case errors.Is(err, net.ErrClosed):
		d.Detail = "closed"
	default:
		d.Detail = err.Error()
	}
	return d
}

// end records d as the reason the connection ends, unless one is recorded
// already; it reports whether d was recorded. The first reason wins: a
// read error that follows the server's own close is not a second reason.
func (c *conn) end(d Disconnection) bool {
	if !c.ending.CompareAndSwap(nil, &d) {
		return false
	}
	close(c.endc)
	if c.prc != nil && c.srv.parker != nil {
		c.srv.parker.unpark(c) // a parked stranger's reader sees the end
	}
	return true
}

// endedWith returns the recorded reason, or the one err implies.
func (c *conn) endedWith(err error) Disconnection {
	if d := c.ending.Load(); d != nil {
		return *d
	}
	var pe *packet.Error
	if errors.As(err, &pe) {
		return protocolClose(pe.Code, pe.Reason)
	}
	return lostClose(err)
}
