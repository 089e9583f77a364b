package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// maxClientID31 is the longest client id MQTT 3.1 allows, in characters.
const maxClientID31 = 23

// errNormalDisconnect ends a connection after a client's DISCONNECT.
var errNormalDisconnect = errors.New("normal disconnect")

// connect handles the CONNECT packet: authentication, session attach and
// the CONNACK.
func (c *conn) connect(cp *packet.Connect) error {
	c.version = cp.ProtocolLevel
	v5 := c.version == packet.Version5
	v31 := c.version == packet.Version31
	refuse := func(code packet.ReasonCode, reason string, known *Identity) error {
		c.srv.stats.connectsRefused[code].Add(1)
		var attrs []slog.Attr
		if known != nil {
			attrs = known.LogAttrs
			if known.ClientID == "" {
				known.ClientID = cp.ClientID
			}
		}
		c.logRefusedConnect(cp, code, reason, attrs)
		c.srv.refused(known, Refusal{What: RefusedConnect, Code: code, Detail: reason})
		if c.end(Disconnection{Reason: CloseConnectRefused, Code: code, Detail: reason}) {
			c.closeAfter(&packet.Connack{ReasonCode: code})
		}
		return packet.Errorf(code, "connect refused: %s", reason)
	}
	if v5 && cp.Properties.Has(packet.PropAuthMethod) {
		return refuse(packet.BadAuthenticationMethod, "enhanced authentication is not supported", nil)
	}
	if v31 {
		// MQTT 3.1: the client id is 1 to 23 characters; anything else
		// is answered 0x02 identifier rejected (3.1 has no empty id).
		if n := utf8.RuneCountInString(cp.ClientID); n == 0 || n > maxClientID31 {
			return refuse(packet.ClientIdentifierNotValid, fmt.Sprintf("MQTT 3.1 client id of %d characters: 1 to %d are allowed", n, maxClientID31), nil)
		}
	}
	assigned := ""
	if cp.ClientID == "" {
		if !v5 && !cp.CleanStart {
			return refuse(packet.ClientIdentifierNotValid, "an empty client id needs a clean session", nil)
		}
		assigned = "auto-" + strconv.FormatUint(c.srv.nextID.Add(1), 36) + "-" + strconv.FormatInt(c.srv.now().UnixNano()%1e9, 36)
		cp.ClientID = assigned
	}
	if !c.srv.opts.AllowControlChars {
		if r, ok := topic.ControlChar(cp.ClientID); ok {
			return refuse(packet.ClientIdentifierNotValid, fmt.Sprintf("client id with the control character %U", r), nil)
		}
		if r, ok := topic.ControlChar(cp.Username); ok {
			return refuse(packet.BadUserNameOrPassword, fmt.Sprintf("user name with the control character %U", r), nil)
		}
		if cp.Will != nil {
			if r, ok := topic.ControlChar(cp.Will.Topic); ok {
				return refuse(packet.TopicNameInvalid, fmt.Sprintf("will topic with the control character %U", r), nil)
			}
		}
	}
	if w := cp.Will; w != nil && levels(w.Topic) > c.srv.opts.MaxTopicLevels {
		// A topic name like any PUBLISH's (publish.go).
		return refuse(packet.TopicNameInvalid, fmt.Sprintf("will topic with more than %d levels", c.srv.opts.MaxTopicLevels), nil)
	}
	if max := c.srv.opts.MaxKeepAlive; max > 0 && !v5 && (cp.KeepAlive == 0 || cp.KeepAlive > max) {
		// 3.1.1 cannot tell the client to use another keep alive; as
		// Mosquitto does with max_keepalive, the connection is refused
		// (0x02, identifier rejected).
		return refuse(packet.ClientIdentifierNotValid, fmt.Sprintf("keep alive %d s: this server allows 1 to %d s", cp.KeepAlive, max), nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.srv.opts.ConnectTimeout)
	id, err := c.srv.policy.Authenticate(ctx, &ConnectRequest{Connect: cp, RemoteAddr: c.nc.RemoteAddr(), TLS: c.kind.tls, WebSocket: c.kind.websocket})
	cancel()
	if err != nil || id == nil {
		code, reason := refusal(err, packet.NotAuthorized)
		return refuse(code, reason, id)
	}
	if id.ClientID == "" {
		id.ClientID = cp.ClientID
	}
	c.fillLimits(id)
	if w := cp.Will; w != nil && w.QoS > id.Limits.MaxQoS {
		if v5 {
			// [MQTT-3.2.2-12]: a will the server cannot publish at its QoS
			// refuses the connection.
			return refuse(packet.QoSNotSupported, fmt.Sprintf("will at QoS %d is above this client's maximum QoS %d", w.QoS, id.Limits.MaxQoS), id)
		}
		// 3.1.1 has no Maximum QoS to tell the client: its will is
		// published at the client's maximum QoS, as a subscription is
		// granted a lower QoS than asked.
		w.QoS = id.Limits.MaxQoS
	}
	c.setThrottle(id)

	// Keep alive: the client's value, capped by the server.
	ka := cp.KeepAlive
	serverKA := false
	if max := c.srv.opts.MaxKeepAlive; max > 0 && (ka == 0 || ka > max) {
		ka, serverKA = max, true
	}

	expiry := uint32(0)
	if v5 {
		expiry = min(cp.Properties.SessionExpiry, c.srv.opts.MaxSessionExpiry)
		c.sessionExpiryZero = cp.Properties.SessionExpiry == 0
		c.problemInfo = !cp.Properties.Has(packet.PropRequestProblemInfo) || cp.Properties.RequestProblemInfo == 1
		if cp.Properties.Has(packet.PropMaximumPacketSize) {
			c.maxOut = cp.Properties.MaximumPacketSize
		}
		c.aliasMax = cp.Properties.TopicAliasMaximum
	} else if !cp.CleanStart {
		expiry = c.srv.opts.MaxSessionExpiry
	}
	if cp.Will != nil {
		c.will = cp.Will
	}

	window := id.Limits.MaxInflight
	if v5 && cp.Properties.Has(packet.PropReceiveMaximum) {
		window = min(window, int(cp.Properties.ReceiveMaximum))
	}

	c.info.ProtocolLevel = c.version
	// Past this point the connection is authenticated: the watchdog no
	// longer applies the connect timeout, and applies the keep alive once
	// the CONNACK is written (until then the client cannot send; what
	// the CONNECT waits for, a claim or a session's hand-over, has bounds
	// of its own, but for the replay of a session restored at start, which
	// waits in its account's line of replays).
	c.lastRead.Store(time.Now().UnixNano())
	c.logb = c.srv.events.limits(id.SessionKey())
	c.id = id
	c.idp.Store(id)
	claim, err := c.srv.owners.Claim(id.SessionKey(), c.srv.opts.Node, cp.CleanStart)
	if err != nil {
		return refuse(packet.ServerUnavailable, "session ownership: "+err.Error(), id)
	}
	resumed := !cp.CleanStart && c.srv.resumes(claim)
	if resumed {
		// The session was another node's: its state comes from there.
		if err := c.srv.resume(claim); err != nil {
			return refuse(packet.ServerUnavailable, "resume the session: "+err.Error(), id)
		}
	}
	if c.srv.lostWhileResuming(claim, resumed) {
		// Another node took the session over while this CONNECT resumed
		// it: the client is told to try again (and reaches the session
		// where it is now).
		return refuse(packet.ServerUnavailable, "another node took the session over meanwhile", id)
	}
	if !cp.CleanStart {
		c.srv.awaitRestored(id.SessionKey())
	}
	ss, present := c.srv.attach(c, id, cp.CleanStart, expiry, window, claim)
	c.sess = ss
	if c.srv.lostWhileResuming(claim, resumed) {
		// The notice came during attach: the session this CONNECT
		// attached is gone again, and with it the connection (closed
		// without a CONNACK, as a refused one: nothing was served).
		return nil
	}
	c.logConnected(cp, present)

	// MQTT 3.1's CONNACK has no Session Present flag: the byte is 0.
	ack := &packet.Connack{SessionPresent: present && !v31, ReasonCode: packet.Success}
	if v5 {
		pr := &ack.Properties
		if assigned != "" {
			pr.SetString(packet.PropAssignedClientID, assigned)
		}
		if serverKA {
			pr.SetUint16(packet.PropServerKeepAlive, ka)
		}
		if cp.Properties.Has(packet.PropSessionExpiry) && expiry != cp.Properties.SessionExpiry {
			pr.SetSessionExpiry(expiry)
		}
		pr.SetUint16(packet.PropReceiveMaximum, c.srv.opts.ReceiveMaximum)
		pr.SetUint32(packet.PropMaximumPacketSize, c.srv.opts.MaxPacketSize)
		pr.SetUint16(packet.PropTopicAliasMaximum, c.srv.opts.TopicAliasMaximum)
		if id.Limits.MaxQoS < 2 {
			pr.SetByte(packet.PropMaximumQoS, id.Limits.MaxQoS)
		}
		if cp.Properties.RequestResponseInfo == 1 && id.ResponseInfo != "" {
			pr.SetString(packet.PropResponseInfo, id.ResponseInfo)
		}
	}
	// The CONNACK and the session's first sends, under the session's
	// lock: a takeover ending the connection meanwhile sees it served or
	// not, never in between.
	ss.mu.Lock()
	c.writeConnack(ack)
	c.lastRead.Store(time.Now().UnixNano())
	if ka > 0 {
		c.kaLimit.Store(int64(time.Duration(ka) * time.Second * 3 / 2))
	}
	if ss.c == c {
		// Resend what the resumed session had in flight, then queued
		// messages.
		ss.resendLocked()
		ss.pumpLocked(ss.c)
	}
	ss.mu.Unlock()
	return nil
}

// refusal is the reason code and reason a Policy gave with err (a
// *packet.Error), or fallback and err's text for any other error.
func refusal(err error, fallback packet.ReasonCode) (packet.ReasonCode, string) {
	var pe *packet.Error
	switch {
	case errors.As(err, &pe) && pe.Code >= 0x80:
		return pe.Code, pe.Reason
	case err == nil:
		return fallback, "refused by the policy"
	}
	return fallback, err.Error()
}

// fillLimits replaces zero limits with the server's options.
func (c *conn) fillLimits(id *Identity) {
	o := &c.srv.opts
	l := &id.Limits
	if l.MaxInflight <= 0 {
		l.MaxInflight = o.MaxInflight
	}
	if l.MaxQueued <= 0 {
		l.MaxQueued = o.MaxQueued
	}
	if l.MaxRetainedBurst <= 0 {
		l.MaxRetainedBurst = o.MaxRetainedBurst
	}
	if !l.CapQoS || l.MaxQoS > 2 {
		l.MaxQoS = 2
	}
}

// attach binds a connection to its session: taking over a connected
// session, resuming a stored one, or starting fresh. It reports whether a
// session was present. The lookup and the swap of the session's connection
// happen under the server lock, so of two simultaneous CONNECTs with the same
// client id exactly one ends up owning the session. claim is the
// connection's claim of the session (SessionOwners): the session keeps
// the latest.
func (s *Server) attach(c *conn, id *Identity, clean bool, expiry uint32, window int, claim Claim) (*session, bool) {
	key := id.SessionKey()
	now := s.now()
	s.mu.Lock()
	ss := s.sessions[key]
	var prev *session // a session this connection replaces
	if ss != nil && (clean || ss.expiredAt(now) || ss.endsWithConnection()) {
		prev, ss = ss, nil
	}
	present := ss != nil
	if clean {
		s.startedCleanLocked(key, claim)
	}
	// Resumed within the will delay, the will is not published; the
	// session ends (clean start or expired), and with it the will delay:
	// the will is published now.
	s.settleWillLocked(key, !present)
	if ss == nil {
		ss = &session{srv: s, key: key, subs: make(map[string]*subscription)}
		s.sessions[key] = ss
	}
	s.attached++
	c.info.Seq = s.attached
	ss.mu.Lock()
	old := ss.c
	ss.c = c
	ss.live.Store(c)
	ss.id = id
	ss.ident.Store(id)
	ss.limits = id.Limits
	ss.updateFull()
	ss.window = window
	ss.expiry = expiry
	ss.ended, ss.gone = false, false
	if claim.Epoch > ss.claim.Epoch {
		ss.claim = claim
	}
	ss.mu.Unlock()
	var prevConn *conn
	if prev != nil {
		prev.mu.Lock()
		prevConn = prev.c
		prev.c = nil
		prev.mu.Unlock()
	}
	s.mu.Unlock()

	// The observer learns of the new connection before the connection it
	// replaces ends.
	ss.logb.Store(c.logb)
	if s.observer != nil {
		s.observer.Connected(id, c.info)
	}
	if old != nil {
		s.takeOver(old, c, clean)
	}
	if prev != nil {
		if prevConn != nil {
			s.takeOver(prevConn, c, true)
		}
		s.endSession(prev, false, DropSessionExpired)
	}
	return ss, present
}

// takeOver ends an older connection of the same session in favour of c.
// Its will follows the normal rules: published now unless the new
// connection resumes the session and the will has a delay.
func (s *Server) takeOver(old, c *conn, clean bool) {
	c.logTakeover(old)
	if will := old.takeWill(); will != nil && (clean || will.Properties.WillDelay == 0) {
		s.publishWill(old.id, will) // else the client is back within the delay
	}
	old.taken.Store(true)
	old.closeWith(Disconnection{Reason: CloseTakenOver, Code: packet.SessionTakenOver,
		Detail: "a new connection from " + addrString(c.info.RemoteAddr) + " took over the session"})
}

// takeWill takes the connection's will, which no one else then publishes
// (detach, a takeover, a hand-over, a resume's close).
func (c *conn) takeWill() *packet.Will {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	will := c.will
	c.will = nil
	return will
}

// detach runs when a connection ends: the session goes offline (or ends)
// and the will is published or scheduled.
func (s *Server) detach(c *conn, d Disconnection) {
	ss := c.sess
	if ss == nil {
		return
	}
	will := c.takeWill()
	if d.Reason == CloseClientDisconnect && !c.sendWill {
		will = nil
	}
	ss.mu.Lock()
	current := ss.c == c
	if current {
		ss.c = nil
		ss.live.Store(nil)
		ss.disconnectedAt = s.now()
	}
	ss.left2Locked(c)
	expiry, why := ss.expiry, DropConnectionClosed
	if ss.gone {
		why = DropSessionExpired
	}
	ss.mu.Unlock()
	if !current {
		return // taken over: the new connection owns the session
	}
	s.mu.Lock()
	closing := s.closed
	s.mu.Unlock()
	if closing {
		return // saved with the state; wills are not published at shutdown
	}
	if expiry == 0 {
		s.endSession(ss, true, why)
	}
	if will != nil {
		s.willAtEnd(c.id, ss.key, will, expiry)
	}
}

// willAtEnd publishes the will of id's connection that ended now (it has
// no delay, or the session, of expiry seconds, ended with the connection)
// or when its delay ends (scheduleWill).
func (s *Server) willAtEnd(id *Identity, key string, will *packet.Will, expiry uint32) {
	delay := will.Properties.WillDelay
	if delay == 0 || expiry == 0 {
		s.publishWill(id, will)
		return
	}
	s.scheduleWill(id, key, will, min(delay, expiry))
}

// settleWillLocked settles the will whose delay runs for the session key
// (if any) as a CONNECT of its client does: published now when the session
// ends, else never (the client is back). The caller holds s.mu.
func (s *Server) settleWillLocked(key string, ends bool) {
	t, ok := s.wills[key]
	switch {
	case !ok:
	case ends:
		t.Reset(0)
	default:
		t.Stop()
		delete(s.wills, key)
	}
}

// scheduleWill publishes will of id's session key in delay seconds,
// unless a connection resumes the session first (attach stops it).
func (s *Server) scheduleWill(id *Identity, key string, will *packet.Will, delay uint32) {
	s.mu.Lock()
	var timer *time.Timer
	timer = time.AfterFunc(time.Duration(delay)*time.Second, func() {
		s.mu.Lock()
		t, ok := s.wills[key]
		ok = ok && t == timer // not a newer connection's will
		if ok {
			delete(s.wills, key)
		}
		closed := s.closed
		s.mu.Unlock()
		if ok && !closed {
			s.publishWill(id, will)
		}
	})
	s.wills[key] = timer
	s.mu.Unlock()
}

// endSession removes a session: its subscriptions leave the index and its
// queued and inflight messages are dropped (counted under why). With
// remove it also leaves the session table (unless a newer session took its
// key).
func (s *Server) endSession(ss *session, remove bool, why DropReason) {
	ss.mu.Lock()
	if ss.ended || ss.c != nil && remove {
		ss.mu.Unlock()
		return // already ended, or reconnected meanwhile
	}
	claim := ss.claim
	ss.retireLocked(why, false, nil)
	ss.mu.Unlock()
	s.mu.Lock()
	mine := s.sessions[ss.key] == ss
	if mine {
		delete(s.sessions, ss.key)
	}
	s.mu.Unlock()
	if mine {
		s.releaseClaim(claim)
	}
}

// disconnect handles a client's DISCONNECT.
func (c *conn) disconnect(d *packet.Disconnect) error {
	if c.version == packet.Version5 {
		if d.Properties.Has(packet.PropSessionExpiry) {
			if c.sessionExpiryZero && d.Properties.SessionExpiry != 0 {
				return c.protocolError(packet.ProtocolError, "session expiry cannot be raised from zero at DISCONNECT")
			}
			c.sess.mu.Lock()
			if !c.sess.gone {
				c.sess.expiry = min(d.Properties.SessionExpiry, c.srv.opts.MaxSessionExpiry)
			}
			c.sess.mu.Unlock()
		}
		c.sendWill = d.ReasonCode == packet.DisconnectWithWill
	}
	c.end(Disconnection{Reason: CloseClientDisconnect, Code: d.ReasonCode})
	c.flushInline()   // the acks still buffered
	c.closeAfter(nil) // closes now, or after a writer still running
	return errNormalDisconnect
}
