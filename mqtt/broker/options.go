package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// ReplayFilter is a filter a replay reads (Options.Replay) and From, when
// it became the session's: a message received before From (Created) is
// not the filter's. A filter subscribed while the session's replay was
// pending starts at its subscription (a second before its SUBSCRIBE:
// subscription.since), the others at the replay's start.
type ReplayFilter struct {
	Filter string
	From   time.Time
}

// ReplayStart returns where a read of filters begins (Options.Replay):
// the earliest From (zero when there are none).
func ReplayStart(filters []ReplayFilter) time.Time {
	var start time.Time
	for i, f := range filters {
		if i == 0 || f.From.Before(start) {
			start = f.From
		}
	}
	return start
}

// ReplayAllows reports whether a replay of filters brings a message on
// name received at received (Options.Replay): a filter matches it and
// had started by then.
func ReplayAllows(filters []ReplayFilter, name string, received time.Time) bool {
	for _, f := range filters {
		if !f.From.After(received) && topic.Match(f.Filter, name) {
			return true
		}
	}
	return false
}

// Options configure a Server. Zero values are replaced by the defaults in
// fill; Validate reports values that cannot work.
type Options struct {
	// Policy decides authentication, authorization and publish handling.
	// Default: OpenPolicy{}.
	Policy Policy
	// Router takes each accepted message to the subscribers and learns
	// of the sessions' subscription interest. Default: LocalRouter{} (this
	// server's sessions only).
	Router Router
	// Retained keeps the retained messages. Default: an in-memory store,
	// saved beside StatePath. Another store is not saved there: it keeps
	// its messages itself.
	Retained Retained
	// Owners records which node owns each session; Node names this
	// server among the nodes sharing it. Defaults: NewLocalOwners() and
	// "local".
	Owners SessionOwners
	Node   string
	// States keeps persistent sessions' state where the other nodes read
	// it, so that a session moves with its client (saved every
	// SaveInterval and at a takeover). Default: none (one node; the
	// sessions are saved at StatePath).
	States SessionStates
	// Replay reads the messages a session resumed from another node's
	// state (States), or restored from StatePath at start, may have
	// missed: the QoS 1 and 2 messages that match one of filters whose
	// From is not after the message's Created (when it was received),
	// oldest first, at most max, each given to fn (the platform reads
	// them from history). It reads from the earliest From; a message that
	// matches only filters starting after it (subscribed later) neither
	// counts toward max nor goes to fn, so that it takes no room from
	// what the session missed. One call is one read: the session's pass
	// reads all its filters at once, whatever their starts (the platform
	// gives each call one place in its account's line of replays).
	// Replay bounds its own reading time; ctx bounds the whole (a
	// resume's and a second pass's, not a restored session's at start,
	// which ends only with the server). Default: none (a session has
	// what was saved).
	Replay func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error
	// Logger receives connection-level events. Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests inject one). Default: time.Now.
	Now func() time.Time

	// MaxInflight is the default per-session window of unacknowledged
	// outbound QoS 1/2 messages (a Policy may set it per session). Default 20.
	MaxInflight int
	// MaxQueued bounds the messages waiting behind the inflight window (and
	// offline messages of a persistent session). Excess is dropped and
	// counted as DropQueueFull. Default 1000.
	MaxQueued int
	// MaxRetainedBurst bounds the retained messages one SUBSCRIBE delivers;
	// excess is dropped and counted as DropRetainedBurst. 0 means no bound
	// beyond MaxQueued.
	MaxRetainedBurst int
	// ReceiveMaximum is advertised to v5 clients: the number of inbound
	// QoS 1/2 PUBLISH the server accepts unacknowledged. Default 1024.
	ReceiveMaximum uint16
	// MaxPacketSize is the largest inbound packet accepted (advertised to v5
	// clients). Default 1 MiB.
	MaxPacketSize uint32
	// MaxConns and MaxConnsPerAddr bound the connections each listener
	// keeps open, in all and from one IP address; a connection over a bound
	// is closed as soon as it is accepted and counted in
	// Stats.ConnsRefusedAtAccept. 0 means no bound (the process's file
	// limit applies).
	MaxConns, MaxConnsPerAddr int
	// MaxConnRatePerAddr bounds the new connections per second from one IP
	// address on each listener (bursts of twice as many, at least 1); the
	// ones over are closed at accept and counted. 0 means no bound.
	MaxConnRatePerAddr float64
	// ProxyFrom lists the load balancers that send the PROXY protocol
	// (HAProxy's, version 1 or 2) on the TCP, TLS and WebSocket
	// listeners: a connection from one of them must open with a PROXY
	// header, whose source address is then the client's (in logs, the
	// per-address bounds, the connection's RemoteAddr); a connection from
	// anywhere else is served as it is. Empty: no PROXY protocol.
	ProxyFrom []netip.Prefix
	// MaxConnectSize is the largest CONNECT accepted (its will message
	// included): a stranger gets no more before authenticating. Default
	// 64 KiB, at most MaxPacketSize.
	MaxConnectSize uint32
	// TopicAliasMaximum is advertised to v5 clients for inbound aliases.
	// Default 64.
	TopicAliasMaximum uint16
	// MaxTopicLevels bounds the levels of a topic name (a will topic too)
	// or filter; deeper ones are refused (TopicNameInvalid /
	// TopicFilterInvalid). Default 128.
	MaxTopicLevels int
	// AllowControlChars accepts the control characters U+0001..U+001F and
	// U+007F..U+009F in client identifiers, user names, will topics and
	// topic names and filters. By default they are refused, as the
	// specifications let a server do: a CONNECT with one is refused
	// (client id: 0x85, user name: 0x86, will topic: 0x90), a PUBLISH
	// ends the connection (v5: DISCONNECT 0x90), a SUBSCRIBE filter is
	// refused in SUBACK (0x8F), and an UNSUBSCRIBE filter answered 0x8F.
	AllowControlChars bool
	// MaxKeepAlive caps the client's keep alive in seconds: a v5 client
	// asking for more, or for none (0), gets this value as Server Keep
	// Alive in its CONNACK; a 3.1.1 client, which cannot be told, is
	// refused (CONNACK 0x02), as Mosquitto's max_keepalive does. 0 means no
	// cap. Default 0.
	MaxKeepAlive uint16
	// MaxSessionExpiry caps the session expiry interval in seconds; 3.1.1
	// persistent sessions use it as their expiry. Default 7 days.
	MaxSessionExpiry uint32
	// RetainedMaxAge is the maximum age of a retained message; 0 means no
	// limit. v5 retained publishes without Message Expiry get it, longer
	// ones are clamped to it.
	RetainedMaxAge time.Duration
	// SweepInterval is how often expired retained messages and expired
	// sessions are swept. Default 1 minute.
	SweepInterval time.Duration
	// ConnectTimeout is how long a new connection may take to send CONNECT;
	// ListenWebSocket's HTTP server gives an upgrade request, and an idle
	// HTTP connection, as long. Default 10 seconds.
	ConnectTimeout time.Duration
	// IdleParkAfter is how long a plain TCP client may send nothing before
	// its reader goroutine ends and its socket waits in the server's epoll
	// set (Linux), until bytes arrive: an idle device then costs its
	// session and connection state, not a goroutine's stack. Messages to
	// it are written as to any connection. Default 10 seconds; negative
	// never parks.
	IdleParkAfter time.Duration
	// WriteTimeout bounds one write to a client socket: a client that
	// takes nothing for this long is disconnected (write_timeout). Default
	// 30 seconds.
	WriteTimeout time.Duration
	// CloseDrainTimeout and CloseDrainBytes bound the drain of a
	// connection the server ends: once its last packet (DISCONNECT,
	// refusing CONNACK) is written, the write side is half-closed (TCP
	// FIN, TLS close_notify, WebSocket close frame) and what the client
	// still sends is read and discarded until it closes its side, for at
	// most CloseDrainTimeout or CloseDrainBytes, whichever comes first;
	// then the socket is closed. Closing at once instead would make the
	// kernel answer the client's unread bytes with a reset, which can
	// destroy the last packet before the client reads it. Defaults 2
	// seconds and 1 MiB; a negative CloseDrainTimeout closes at once.
	CloseDrainTimeout time.Duration
	CloseDrainBytes   int
	// LogBurst and LogInterval rate-limit the event log per client: a
	// burst of LogBurst lines, then one per LogInterval; the rest are
	// counted in Stats.LogSuppressed. Defaults 20 and 3 seconds.
	LogBurst    int
	LogInterval time.Duration
	// StatePath, when set, is the file where persistent sessions are saved
	// on shutdown (and every SaveInterval) and loaded on start; retained
	// messages go to the log StatePath+".retained" beside it (see Save).
	StatePath string
	// SaveInterval is how often state is saved while running. Default 30s;
	// negative disables periodic saves.
	SaveInterval time.Duration
}

// Defaults used by fill.
const (
	DefaultMaxInflight       = 20
	DefaultMaxQueued         = 1000
	DefaultReceiveMaximum    = 1024
	DefaultMaxPacketSize     = 1 << 20
	DefaultMaxConnectSize    = 64 << 10
	DefaultTopicAliasMaximum = 64
	DefaultMaxSessionExpiry  = 7 * 24 * 3600
	DefaultMaxTopicLevels    = 128
	DefaultCloseDrainTimeout = 2 * time.Second
	DefaultCloseDrainBytes   = 1 << 20
	DefaultSweepInterval     = time.Minute
	DefaultConnectTimeout    = 10 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleParkAfter     = 10 * time.Second
	DefaultSaveInterval      = 30 * time.Second
)

func (o *Options) fill() {
	if o.Policy == nil {
		o.Policy = OpenPolicy{}
	}
	if o.Router == nil {
		o.Router = LocalRouter{}
	}
	if o.Owners == nil {
		o.Owners = NewLocalOwners()
	}
	if o.Node == "" {
		o.Node = "local"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	if o.ReceiveMaximum == 0 {
		o.ReceiveMaximum = DefaultReceiveMaximum
	}
	if o.MaxPacketSize == 0 {
		o.MaxPacketSize = DefaultMaxPacketSize
	}
	if o.MaxConnectSize == 0 {
		o.MaxConnectSize = min(DefaultMaxConnectSize, o.MaxPacketSize)
	}
	if o.TopicAliasMaximum == 0 {
		o.TopicAliasMaximum = DefaultTopicAliasMaximum
	}
	if o.MaxTopicLevels == 0 {
		o.MaxTopicLevels = DefaultMaxTopicLevels
	}
	if o.MaxSessionExpiry == 0 {
		o.MaxSessionExpiry = DefaultMaxSessionExpiry
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.IdleParkAfter == 0 {
		o.IdleParkAfter = DefaultIdleParkAfter
	}
	if o.CloseDrainTimeout == 0 {
		o.CloseDrainTimeout = DefaultCloseDrainTimeout
	}
	if o.CloseDrainBytes == 0 {
		o.CloseDrainBytes = DefaultCloseDrainBytes
	}
	if o.SaveInterval == 0 {
		o.SaveInterval = DefaultSaveInterval
	}
	if o.LogBurst == 0 {
		o.LogBurst = 20
	}
	if o.LogInterval == 0 {
		o.LogInterval = 3 * time.Second
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxInflight < 1 || o.MaxInflight > 65535 {
		errs = append(errs, fmt.Errorf("max inflight %d: must be 1..65535", o.MaxInflight))
	}
	if o.MaxQueued < 0 {
		errs = append(errs, fmt.Errorf("max queued %d: must not be negative", o.MaxQueued))
	}
	if o.MaxRetainedBurst < 0 {
		errs = append(errs, fmt.Errorf("max retained burst %d: must not be negative", o.MaxRetainedBurst))
	}
	if o.MaxPacketSize < 64 || o.MaxPacketSize > 268435460 {
		errs = append(errs, fmt.Errorf("max packet size %d: must be 64..268435460", o.MaxPacketSize))
	}
	if o.MaxConns < 0 || o.MaxConnsPerAddr < 0 || o.MaxConnRatePerAddr < 0 {
		errs = append(errs, fmt.Errorf("max connections %d, per address %d, rate per address %g: must not be negative", o.MaxConns, o.MaxConnsPerAddr, o.MaxConnRatePerAddr))
	}
	if o.MaxConnectSize < 64 || o.MaxConnectSize > o.MaxPacketSize {
		errs = append(errs, fmt.Errorf("max CONNECT size %d: must be 64..max packet size (%d)", o.MaxConnectSize, o.MaxPacketSize))
	}
	if o.RetainedMaxAge < 0 {
		errs = append(errs, errors.New("retained max age must not be negative"))
	}
	if o.ConnectTimeout < 0 || o.WriteTimeout < 0 {
		errs = append(errs, errors.New("connect and write timeouts must not be negative"))
	}
	if o.CloseDrainBytes < 0 {
		errs = append(errs, fmt.Errorf("close drain bytes %d: must not be negative", o.CloseDrainBytes))
	}
	if o.LogBurst < 1 || o.LogInterval < 0 {
		errs = append(errs, fmt.Errorf("log burst %d, interval %v: want at least 1 line and a non-negative interval", o.LogBurst, o.LogInterval))
	}
	return errors.Join(errs...)
}
