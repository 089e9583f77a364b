package broker

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// ConnectRequest is what a Policy sees of a CONNECT.
type ConnectRequest struct {
	Connect    *packet.Connect
	RemoteAddr net.Addr
	TLS        bool // the connection came through a TLS listener
	WebSocket  bool // the connection came through the WebSocket listener
}

// Limits are per-session limits chosen by the Policy. Zero fields take the
// server's Options.
type Limits struct {
	MaxInflight      int // window of unacknowledged outbound QoS 1/2
	MaxQueued        int // messages waiting behind the window
	MaxRetainedBurst int // retained messages delivered per SUBSCRIBE
	// MaxQoS is the highest QoS the client may publish when CapQoS is set;
	// it is advertised in a v5 CONNACK when below 2, and a PUBLISH above it
	// ends the connection (v5: DISCONNECT 0x9B).
	CapQoS bool
	MaxQoS byte
	// PublishRate and PublishBytesRate bound what the client publishes:
	// PUBLISH packets per second, and their topic and payload bytes per
	// second (0: unlimited; not taken from Options). Over them the server
	// stops reading the connection until the rate allows more
	// (ratelimit.go); the client is not disconnected for it.
	// Server.SetPublishRates changes them for a connected client.
	PublishRate      float64
	PublishBytesRate float64
}

// Identity is the authenticated identity of a session, chosen by the Policy.
type Identity struct {
	// Namespace isolates sessions: two identities with the same ClientID in
	// different namespaces have different sessions and never take each
	// other over. The open policy uses "".
	Namespace string
	// ClientID is the MQTT client identifier (the assigned one when the
	// client sent none).
	ClientID string
	// Username as sent by the client.
	Username string
	// DeliverPrefix is prepended to internal topics delivered to this
	// session (for example a topic_prefix the client sees on the wire).
	DeliverPrefix string
	// ResponseInfo is returned to v5 clients that request response
	// information.
	ResponseInfo string
	Limits       Limits
	// GroupLimiter, when set, is a publish rate shared with other
	// identities (for example every session of one account): each PUBLISH
	// takes from it as well as from the session's own Limits. The policy
	// may change its rates at any time (RateLimiter.SetRates).
	GroupLimiter *RateLimiter
	// LogAttrs are added to every event-log line about this session (for
	// example the account and the kind of credential).
	LogAttrs []slog.Attr
	// Data belongs to the Policy (account, role, ...).
	Data any
}

// SessionKey is the key sessions are indexed by: namespace and client id.
func (id *Identity) SessionKey() string {
	if id.Namespace == "" {
		return id.ClientID
	}
	return id.Namespace + "\x00" + id.ClientID
}

// DropReason says why a message was not delivered to a session.
type DropReason uint8

// Drop reasons. Every dropped message is counted under one of them.
const (
	DropQueueFull      DropReason = iota // the session's queue was at its bound
	DropRetainedBurst                    // over the retained burst bound of one SUBSCRIBE
	DropTooLarge                         // bigger than the client's Maximum Packet Size
	DropExpired                          // message expiry passed before delivery
	DropSessionExpired                   // queued when the session expired, was cleaned or ended (Server.EndSessions)
	DropOffline                          // QoS 0 for an offline session (not queued)
	// DropConnectionClosed: in flight, queued or still in the write buffer
	// when a connection without a persistent session ended (or a write to
	// it failed), so never delivered.
	DropConnectionClosed
	numDropReasons
)

var dropNames = [numDropReasons]string{"queue_full", "retained_burst", "packet_too_large", "expired", "session_expired", "offline_qos0", "connection_closed"}

var dropDetails = [numDropReasons]string{
	"the subscriber's queue is full: it reads more slowly than messages arrive",
	"over the retained messages one SUBSCRIBE may deliver",
	"larger than the subscriber's Maximum Packet Size",
	"its Message Expiry Interval passed before it could be delivered",
	"the subscriber's session expired, was replaced by a clean start or was ended by the server",
	"QoS 0 messages are not kept for an offline session",
	"the subscriber's connection ended before it was delivered, and its session does not persist",
}

// Detail says what a drop reason means, for logs and tenants.
func (r DropReason) Detail() string {
	if r < numDropReasons {
		return dropDetails[r]
	}
	return ""
}

func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "unknown"
}

// Policy decides everything tenant-specific. Methods are called from
// connection goroutines concurrently and must not block on I/O, except
// Authenticate (once per connection) and Accepted (which may block to apply
// back-pressure to the publisher).
//
// A refusal is an error: a *packet.Error whose Code (>= 0x80) is what the
// client is answered with and whose Reason says why, for the event log and
// for Disconnected (for example "topic class data/ is not one of state,
// event, telemetry, sample"). Any other error refuses with a generic code.
type Policy interface {
	// Authenticate decides a CONNECT: an identity, or a refusal (mapped to
	// a 3.1.1 return code for 3.1.1 clients; other errors: Not authorized).
	// The reason is logged, never sent to the client; with a refusal it may
	// also return an Identity whose LogAttrs (what it knows, such as the
	// account) go into the log line.
	Authenticate(ctx context.Context, req *ConnectRequest) (*Identity, error)
	// Subscribe authorizes one filter (its inner filter when shared; share
	// is the group or ""). It returns the internal filter to index and the
	// granted QoS (at most the requested), or a refusal (other errors: Not
	// authorized).
	Subscribe(id *Identity, share string, sub *packet.Subscription) (filter string, qos byte, err error)
	// Publish decides an inbound PUBLISH (topic alias already resolved;
	// the packet is the broker's again once Publish returns, so a policy
	// keeps what it needs from it, not p). m is prefilled from the packet;
	// to accept, the policy may rewrite
	// m.Topic (the internal topic), lower m.QoS (the effective QoS, which
	// caps delivery while the inbound handshake keeps the published QoS),
	// set m.Expiry and m.Data, and return nil. A refusal refuses the
	// message (v5 publishers get its code in PUBACK/PUBREC; other errors:
	// Implementation specific error); code QoSNotSupported disconnects the
	// publisher (v5 DISCONNECT 0x9B).
	Publish(id *Identity, p *packet.Publish, m *Message) error
	// Accepted sees every accepted message, in receive order per
	// connection, before it is acknowledged. Returning false lets the broker
	// acknowledge at once; returning true defers the acknowledgement until
	// the policy calls m.Ack (from any goroutine, exactly once), for example
	// when the message is durable.
	Accepted(id *Identity, m *Message) (deferred bool)
	// Delivered reports a message handed to a session's connection.
	Delivered(id *Identity, m *Message, qos byte)
	// Dropped reports a message not delivered to a session. m is nil for
	// a QoS 0 message lost in the write buffer of a connection that ended
	// (DropConnectionClosed).
	Dropped(id *Identity, m *Message, reason DropReason)
	// Disconnected reports the end of an authenticated connection: who
	// ended it and why.
	Disconnected(id *Identity, d Disconnection)
}

// ConnectObserver is an optional interface of a Policy that wants to know
// when a connection becomes its session's connection (for a live view of
// who is connected). Connected is called on the connection's goroutine once
// an authenticated connection has attached to its session, before an older
// connection of the session is taken over (so before that one's
// Disconnected) and before the CONNACK is sent; it must not block. Every
// connection Connected is called for ends with a Disconnected call for the
// same Identity. When connections with the same session key race, their
// Connected and Disconnected calls may interleave in any order:
// Connection.Seq says which attached last.
type ConnectObserver interface {
	Connected(id *Identity, c *Connection)
}

// RefusalObserver is an optional interface of a Policy that wants to know
// of every refusal the server answers, whoever decided it (the policy or
// the broker's own limits and checks): a CONNECT, a PUBLISH, a SUBSCRIBE
// filter or a will. Refused is called once per refusal, with what the
// event log says about it, on the connection's goroutine; it must not
// block. For a refused CONNECT, id is the Identity Authenticate returned
// with its refusal (nil when it returned none, or the broker refused
// before asking), with ClientID set to the CONNECT's. Connections the
// server ends are reported by Disconnected, messages not delivered by
// Dropped.
type RefusalObserver interface {
	Refused(id *Identity, r Refusal)
}

// Refusal is what a RefusalObserver is told.
type Refusal struct {
	What   RefusalKind
	Topic  string // the topic of a PUBLISH or will, the filter of a SUBSCRIBE
	QoS    byte
	Code   packet.ReasonCode // what the client was answered (v5 codes; 3.1.1 clients get their version's)
	Detail string            // why
}

// RefusalKind says what was refused.
type RefusalKind uint8

// Kinds of refusal.
const (
	RefusedConnect RefusalKind = iota
	RefusedPublish
	RefusedSubscribe
	RefusedWill
)

var refusalNames = [...]string{"connect", "publish", "subscribe", "will"}

func (k RefusalKind) String() string {
	if int(k) < len(refusalNames) {
		return refusalNames[k]
	}
	return "unknown"
}

// Connection describes an authenticated network connection to a
// ConnectObserver. Its fields are fixed once Connected is called; it is
// safe to keep and read from any goroutine after the connection ended.
type Connection struct {
	// Seq increases server-wide in the order connections attach to their
	// sessions: of two connections of the same session key, the one with
	// the higher Seq took the session over from the other.
	Seq uint64
	// ProtocolLevel is packet.Version311, packet.Version5 or
	// packet.Version31 (MQTT 3.1, served as 3.1.1).
	ProtocolLevel byte
	RemoteAddr    net.Addr
	TLS           bool // through a TLS listener (or WebSocket over TLS)
	WebSocket     bool // through the WebSocket listener

	// lastRecv is the Options.Now of the last network read that returned
	// bytes, in Unix nanoseconds.
	lastRecv atomic.Int64
}

// LastReceived is when the broker last read bytes from the connection, by
// Options.Now (zero before the first read). It moves with every network
// read, so it is the arrival of the last packet, or of the last batch of
// packets that arrived together; PINGREQs count.
func (c *Connection) LastReceived() time.Time {
	n := c.lastRecv.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// OpenPolicy allows everything: anonymous clients, any topic, QoS as
// published, acknowledgement at once. Embed it to override a few methods.
type OpenPolicy struct{}

// Authenticate accepts every client in the empty namespace. Clients that
// request response information get "response/{client_id}".
func (OpenPolicy) Authenticate(_ context.Context, req *ConnectRequest) (*Identity, error) {
	c := req.Connect
	return &Identity{ClientID: c.ClientID, Username: c.Username, ResponseInfo: "response/" + c.ClientID}, nil
}

// Subscribe grants the requested QoS on the filter as given.
func (OpenPolicy) Subscribe(_ *Identity, _ string, sub *packet.Subscription) (string, byte, error) {
	return sub.Filter, sub.QoS, nil
}

// Publish accepts the message unchanged.
func (OpenPolicy) Publish(*Identity, *packet.Publish, *Message) error { return nil }

// Accepted lets the broker acknowledge at once.
func (OpenPolicy) Accepted(*Identity, *Message) bool { return false }

// Delivered does nothing.
func (OpenPolicy) Delivered(*Identity, *Message, byte) {}

// Dropped does nothing (the server counts drops itself).
func (OpenPolicy) Dropped(*Identity, *Message, DropReason) {}

// Disconnected does nothing.
func (OpenPolicy) Disconnected(*Identity, Disconnection) {}
