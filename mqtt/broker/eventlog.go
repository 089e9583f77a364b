package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The event log: one structured line for each connect, refused connect,
// disconnect (who closed it and why), refused publish or subscribe, session
// takeover and dropped message, on Options.Logger. Lines about one client
// (by session key; before authentication, by remote IP) are rate-limited so
// a misbehaving device cannot flood the log: a burst of Options.LogBurst
// lines, then one every Options.LogInterval. Suppressed lines are counted
// (Stats.LogSuppressed) and the next line that gets through says how many
// were suppressed before it (suppressed_before).

// maxLogKeys bounds the rate limiter's table; keys beyond it share one
// bucket.
const maxLogKeys = 1 << 17

// eventKind is a kind of line: each client has a rate limit per kind, so
// that lines repeated by a misbehaving device (drops, refusals, reconnects)
// are limited without hiding the one line that says why it was
// disconnected.
type eventKind uint8

const (
	evConnect eventKind = iota
	evDisconnect
	evRefused // a refused CONNECT, PUBLISH, SUBSCRIBE or will
	evTakeover
	evDrop
	evThrottled // a PUBLISH waiting for its publish rate
	numEventKinds
)

// logLimits is one client's (or remote IP's) rate limits, by eventKind.
type logLimits [numEventKinds]logBucket

// logBucket is one key's rate limit (GCRA: one atomic, no lock, so the
// drop path of an overloaded subscriber stays cheap).
type logBucket struct {
	tat        atomic.Int64 // theoretical arrival time, Unix ns
	suppressed atomic.Int64 // lines suppressed since the last one logged
}

// allow reports whether a line may be logged at now (Unix ns) with a
// burst of tau/every+1 lines and one per every, and how many were
// suppressed before it.
func (b *logBucket) allow(now, every, tau int64) (bool, int64) {
	for {
		tat := b.tat.Load()
		base := max(tat, now)
		if base-now > tau {
			b.suppressed.Add(1)
			return false, 0
		}
		if b.tat.CompareAndSwap(tat, base+every) {
			return true, b.suppressed.Swap(0)
		}
	}
}

// eventLog is the server's rate-limited event logger.
type eventLog struct {
	log        *slog.Logger
	every, tau int64 // the rate limit: one line per every ns, bursts of tau/every+1
	suppressed atomic.Int64

	mu       sync.Mutex
	buckets  map[string]*logLimits
	overflow logLimits
}

func newEventLog(o *Options) *eventLog {
	every := int64(o.LogInterval)
	return &eventLog{log: o.Logger, every: every, tau: int64(o.LogBurst-1) * every, buckets: make(map[string]*logLimits)}
}

// limits returns key's rate limits.
func (e *eventLog) limits(key string) *logLimits {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.buckets[key]
	if l == nil {
		if len(e.buckets) >= maxLogKeys {
			return &e.overflow
		}
		l = &logLimits{}
		e.buckets[key] = l
	}
	return l
}

// sweep forgets limits that are full again (idle keys), so the table
// holds only clients that logged recently.
func (e *eventLog) sweep(now time.Time) {
	n := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
next:
	for k, l := range e.buckets {
		for i := range l {
			if l[i].tat.Load() >= n || l[i].suppressed.Load() != 0 {
				continue next
			}
		}
		delete(e.buckets, k)
	}
}

// admit reports whether a line of kind at level may be logged for l now
// (the level is enabled and the rate limit lets it through), and how many
// lines of that kind were suppressed before it. Callers build a line's
// attributes only once admitted: a suppressed line costs no allocation.
func (e *eventLog) admit(l *logLimits, kind eventKind, level slog.Level) (suppressed int64, ok bool) {
	if !e.log.Enabled(context.Background(), level) {
		return 0, false
	}
	ok, suppressed = l[kind].allow(time.Now().UnixNano(), e.every, e.tau)
	if !ok {
		e.suppressed.Add(1)
	}
	return suppressed, ok
}

// emit writes an admitted line.
func (e *eventLog) emit(level slog.Level, msg string, suppressed int64, attrs ...slog.Attr) {
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed_before", suppressed))
	}
	e.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// codeAttr is a reason code as logs show it: "0x87 Not authorized".
func codeAttr(code packet.ReasonCode) slog.Attr {
	return slog.String("code", fmt.Sprintf("0x%02X %s", byte(code), code))
}

// transport names the listener a connection came through.
func (k listenerKind) transport() string {
	switch {
	case k.websocket && k.tls:
		return "wss"
	case k.websocket:
		return "ws"
	case k.tls:
		return "tls"
	}
	return "tcp"
}

// connectProtocol names the protocol a CONNECT asked for, as protocolName
// does for the ones this server speaks ("MQTT level 6", "MQIsdp level 4"
// for the others).
func connectProtocol(cp *packet.Connect) string {
	switch {
	case cp.ProtocolName == "MQTT" && (cp.ProtocolLevel == packet.Version311 || cp.ProtocolLevel == packet.Version5),
		cp.ProtocolName == "MQIsdp" && cp.ProtocolLevel == packet.Version31:
		return protocolName(cp.ProtocolLevel)
	}
	return cp.ProtocolName + " level " + strconv.Itoa(int(cp.ProtocolLevel))
}

func protocolName(v byte) string {
	switch v {
	case packet.Version5:
		return "5"
	case packet.Version311:
		return "3.1.1"
	case packet.Version31:
		return "3.1"
	}
	return "level " + strconv.Itoa(int(v))
}

// remoteIP is the key that rate-limits lines about a connection that has
// not authenticated.
func remoteIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// connAttrs are the attributes of every line about an authenticated
// connection: the client, what the policy adds (account, credential kind),
// and the transport.
func (c *conn) connAttrs(extra ...slog.Attr) []slog.Attr {
	id := c.id
	attrs := make([]slog.Attr, 0, 6+len(id.LogAttrs)+len(extra))
	attrs = append(attrs, slog.String("client_id", id.ClientID))
	attrs = append(attrs, id.LogAttrs...)
	attrs = append(attrs, slog.String("remote", addrString(c.info.RemoteAddr)),
		slog.String("transport", c.kind.transport()), slog.String("protocol", protocolName(c.version)))
	return append(attrs, extra...)
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// logConnected logs a connection that attached to its session.
func (c *conn) logConnected(cp *packet.Connect, present bool) {
	sup, ok := c.srv.events.admit(c.logb, evConnect, slog.LevelInfo)
	if !ok {
		return
	}
	c.srv.events.emit(slog.LevelInfo, "client connected", sup, c.connAttrs(
		slog.String("username", cp.Username),
		slog.Int("keep_alive", int(cp.KeepAlive)),
		slog.Bool("clean_start", cp.CleanStart),
		slog.Bool("session_present", present))...)
}

// logRefusedConnect logs a CONNECT answered with a refusal: this is also
// the line of the connection's close (reason connect_refused).
func (c *conn) logRefusedConnect(cp *packet.Connect, code packet.ReasonCode, detail string, known []slog.Attr) {
	sup, ok := c.srv.events.admit(c.preAuthLimits(), evRefused, slog.LevelWarn)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 9+len(known))
	attrs = append(attrs, slog.String("client_id", cp.ClientID))
	attrs = append(attrs, known...)
	attrs = append(attrs, slog.String("username", cp.Username),
		slog.String("remote", addrString(c.info.RemoteAddr)), slog.String("transport", c.kind.transport()),
		slog.String("protocol", connectProtocol(cp)), slog.String("by", "server"),
		slog.String("reason", CloseConnectRefused.String()), codeAttr(code), slog.String("detail", detail))
	c.srv.events.emit(slog.LevelWarn, "connect refused", sup, attrs...)
}

// preAuthLimits are the rate limits of a connection not yet
// authenticated: its remote IP's.
func (c *conn) preAuthLimits() *logLimits {
	if c.logb == nil {
		c.logb = c.srv.events.limits("ip:" + remoteIP(c.info.RemoteAddr))
	}
	return c.logb
}

// logClosed logs the end of a connection, once.
func (c *conn) logClosed(d Disconnection) {
	level := slog.LevelInfo
	if d.ByServer() && d.Reason != CloseShutdown && d.Reason != CloseTakenOver {
		level = slog.LevelWarn
	}
	if c.id == nil && d.Reason == CloseConnectRefused {
		return // logged as "connect refused"
	}
	if c.id == nil && d.Reason == CloseConnectionLost {
		level = slog.LevelDebug // health checks and port scans
	}
	limits := c.logb
	if c.id == nil {
		limits = c.preAuthLimits()
	}
	sup, ok := c.srv.events.admit(limits, evDisconnect, level)
	if !ok {
		return
	}
	by := "client"
	if d.ByServer() {
		by = "server"
	}
	attrs := []slog.Attr{slog.String("by", by), slog.String("reason", d.Reason.String())}
	if d.Code != packet.Success || d.Reason == CloseClientDisconnect {
		attrs = append(attrs, codeAttr(d.Code))
	}
	if d.Detail != "" {
		attrs = append(attrs, slog.String("detail", d.Detail))
	}
	if c.id == nil {
		attrs = append(attrs, slog.String("remote", addrString(c.info.RemoteAddr)), slog.String("transport", c.kind.transport()))
		c.srv.events.emit(level, "connection closed before CONNECT", sup, attrs...)
		return
	}
	attrs = append(attrs, slog.Duration("connected_for", time.Since(time.Unix(0, c.accepted)).Round(time.Millisecond)))
	c.srv.events.emit(level, "client disconnected", sup, c.connAttrs(attrs...)...)
}

// refused tells the policy of a refusal, if it wants to know.
func (s *Server) refused(id *Identity, r Refusal) {
	if s.refusals != nil {
		s.refusals.Refused(id, r)
	}
}

// logRefused logs a refused PUBLISH or SUBSCRIBE filter and tells the
// policy.
func (c *conn) logRefused(what RefusalKind, topic string, qos byte, code packet.ReasonCode, detail string) {
	c.srv.refused(c.id, Refusal{What: what, Topic: topic, QoS: qos, Code: code, Detail: detail})
	sup, ok := c.srv.events.admit(c.logb, evRefused, slog.LevelWarn)
	if !ok {
		return
	}
	msg, key := "publish refused", "topic"
	if what == RefusedSubscribe {
		msg, key = "subscribe refused", "filter"
	}
	c.srv.events.emit(slog.LevelWarn, msg, sup, c.connAttrs(slog.String(key, topic), slog.Int("qos", int(qos)),
		codeAttr(code), slog.String("detail", detail))...)
}

// logTakeover logs a session moving from an older connection to c.
func (c *conn) logTakeover(old *conn) {
	sup, ok := c.srv.events.admit(c.logb, evTakeover, slog.LevelInfo)
	if !ok {
		return
	}
	c.srv.events.emit(slog.LevelInfo, "session taken over", sup,
		c.connAttrs(slog.String("previous_remote", addrString(old.info.RemoteAddr)))...)
}

// logDropped logs a message not delivered to session ss.
func (ss *session) logDropped(m *Message, r DropReason) {
	id := ss.ident.Load()
	b := ss.logb.Load()
	if id == nil || b == nil {
		return
	}
	sup, ok := ss.srv.events.admit(b, evDrop, slog.LevelWarn)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 6+len(id.LogAttrs))
	attrs = append(attrs, slog.String("client_id", id.ClientID))
	attrs = append(attrs, id.LogAttrs...)
	attrs = append(attrs, slog.String("reason", r.String()), slog.String("detail", r.Detail()))
	if m != nil {
		attrs = append(attrs, slog.String("topic", m.Topic), slog.Int("qos", int(m.QoS)))
	}
	ss.srv.events.emit(slog.LevelWarn, "message dropped", sup, attrs...)
}

// logWillRefused logs a will message that was refused, and tells the
// policy.
func (s *Server) logWillRefused(id *Identity, w *packet.Will, code packet.ReasonCode, reason string) {
	s.refused(id, Refusal{What: RefusedWill, Topic: w.Topic, QoS: w.QoS, Code: code, Detail: reason})
	sup, ok := s.events.admit(s.events.limits(id.SessionKey()), evRefused, slog.LevelWarn)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 5+len(id.LogAttrs))
	attrs = append(attrs, slog.String("client_id", id.ClientID))
	attrs = append(attrs, id.LogAttrs...)
	attrs = append(attrs, slog.String("topic", w.Topic), slog.Int("qos", int(w.QoS)), codeAttr(code), slog.String("detail", reason))
	s.events.emit(slog.LevelWarn, "will refused", sup, attrs...)
}
