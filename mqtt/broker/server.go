package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/internal/netlimit"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("broker: server closed")

// Server is an MQTT broker. Create it with New, add listeners, stop it with
// Close.
type Server struct {
	opts     Options
	policy   Policy
	observer ConnectObserver // the policy, when it is one
	refusals RefusalObserver // the policy, when it is one
	log      *slog.Logger
	events   *eventLog
	now      func() time.Time
	// realNow: now is time.Now (Options.Now was not set), so a reading of
	// the real clock serves as now's too.
	realNow bool

	router Router
	owners SessionOwners
	states SessionStates
	// stateSums are the hashes of the session states last saved to
	// states, by session key (guarded by saving).
	stateSums map[string]uint64
	// lost are the takeover notices of the last minute, by session key
	// (guarded by mu; states.go).
	lost map[string]lostNotice
	// resuming are the resumes from another node's state under way (from
	// before their Take until their session is installed), by session
	// key (guarded by mu; states.go).
	resuming map[string]*resumeRun
	unwatch  func() // ends the watch of this node's claims
	subs     *topic.Index[string, subscription]
	retained Retained        // Options.Retained, or local
	local    *MemoryRetained // the in-memory retained store, saved with the state (nil: Options.Retained)
	rlog     *retainedLog    // nil without Options.StatePath
	saving   sync.Mutex      // one state save at a time
	stats    counters

	mu        sync.Mutex // guards sessions, listeners, conns, closed, wills, attached
	sessions  map[string]*session
	listeners []net.Listener
	limits    []*netlimit.Listener // the bounds of the listeners the server opened
	parker    *parker              // strangers waiting without a goroutine (nil: not on this OS)
	conns     map[*conn]struct{}
	closed    bool
	wills     map[string]*time.Timer // delayed wills by session key
	attached  uint64                 // connections attached so far (Connection.Seq)

	wg sync.WaitGroup // serve loops, connections, background loops
	// life ends (endLife) when Close begins; done is its Done channel.
	life    context.Context
	endLife context.CancelFunc
	done    <-chan struct{}
	// restarts are the sessions restored at start whose replay is to run
	// (restart.go); New hands them to their workers.
	restarts []*restart
	// stopWatch ends the watchdog, after the connections ended (it bounds
	// their last writes during Close).
	stopWatch chan struct{}
	nextID    atomic.Uint64 // assigned client identifiers
}

// New creates a server and loads saved state from Options.StatePath.
func New(opts Options) (*Server, error) {
	realNow := opts.Now == nil
	opts.fill()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s := &Server{
		opts:      opts,
		policy:    opts.Policy,
		log:       opts.Logger,
		events:    newEventLog(&opts),
		now:       opts.Now,
		realNow:   realNow,
		subs:      topic.NewIndex[string, subscription](),
		router:    opts.Router,
		owners:    opts.Owners,
		states:    opts.States,
		retained:  opts.Retained,
		sessions:  make(map[string]*session),
		conns:     make(map[*conn]struct{}),
		wills:     make(map[string]*time.Timer),
		lost:      make(map[string]lostNotice),
		resuming:  make(map[string]*resumeRun),
		stopWatch: make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.done = s.life.Done()
	if s.retained == nil {
		s.local = NewMemoryRetained()
		s.retained = s.local
	}
	s.parker = newParker(s.done, s.log)
	s.observer, _ = opts.Policy.(ConnectObserver)
	s.refusals, _ = opts.Policy.(RefusalObserver)
	if opts.StatePath != "" {
		s.rlog = newRetainedLog(opts.StatePath, s.log)
		if err := s.loadState(opts.StatePath); err != nil {
			return nil, fmt.Errorf("broker: load state: %w", err)
		}
	}
	s.unwatch = s.owners.Watch(opts.Node, s.takenElsewhere)
	s.replayRestarts()
	s.wg.Add(1)
	go s.background()
	go s.watch(s.stopWatch)
	return s, nil
}

// ListenTCP opens a TCP listener on addr and serves it in the background.
func (s *Server) ListenTCP(addr string) (net.Listener, error) {
	ln, err := s.listen(addr)
	if err != nil {
		return nil, fmt.Errorf("broker: listen tcp %s: %w", addr, err)
	}
	return ln, s.serveBackground(ln, listenerKind{})
}

// listen opens a TCP listener within Options.MaxConns and MaxConnsPerAddr.
func (s *Server) listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if len(s.opts.ProxyFrom) > 0 {
		// Inside the bounds: they count the client's address, not the
		// load balancer's.
		ln = newProxyListener(ln, s.opts.ProxyFrom, s.log)
	}
	lim := netlimit.New(ln, s.opts.MaxConns, s.opts.MaxConnsPerAddr)
	if r := s.opts.MaxConnRatePerAddr; r > 0 {
		lim.LimitRate(r, int(2*r))
	}
	s.mu.Lock()
	s.limits = append(s.limits, lim)
	s.mu.Unlock()
	return lim, nil
}

// ListenTLS opens a TLS listener on addr and serves it in the background.
func (s *Server) ListenTLS(addr string, cfg *tls.Config) (net.Listener, error) {
	if cfg == nil || len(cfg.Certificates) == 0 && cfg.GetCertificate == nil && cfg.GetConfigForClient == nil {
		return nil, fmt.Errorf("broker: listen tls %s: no certificate in the TLS config", addr)
	}
	raw, err := s.listen(addr)
	if err != nil {
		return nil, fmt.Errorf("broker: listen tls %s: %w", addr, err)
	}
	ln := tls.NewListener(raw, cfg)
	return ln, s.serveBackground(ln, listenerKind{tls: true})
}

type listenerKind struct{ tls, websocket bool }

func (s *Server) serveBackground(ln net.Listener, kind listenerKind) error {
	if err := s.track(ln); err != nil {
		ln.Close()
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.serve(ln, kind)
	}()
	return nil
}

// Serve accepts MQTT connections on ln until Close. It returns
// ErrServerClosed after Close.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.track(ln); err != nil {
		return err
	}
	s.wg.Add(1)
	defer s.wg.Done()
	return s.serve(ln, listenerKind{})
}

func (s *Server) track(ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrServerClosed
	}
	s.listeners = append(s.listeners, ln)
	return nil
}

func (s *Server) serve(ln net.Listener, kind listenerKind) error {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return ErrServerClosed
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("broker: accept: %w", err)
			}
			// Anything else (EMFILE, ENFILE, ECONNABORTED) is taken as
			// temporary: back off and keep listening.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "error", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.done:
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		s.startConn(nc, kind)
	}
}

func (s *Server) startConn(nc net.Conn, kind listenerKind) {
	c := newConn(s, nc, kind)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.connectionsTotal.Add(1)
	s.stats.connections.Add(1)
	s.stats.connectionsBy[kind.index()].Add(1)
	go c.run() // a stranger silent past strangerGrace parks (park_linux.go)
}

// release forgets a connection whose reader ended.
func (s *Server) release(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.stats.connections.Add(-1)
	s.stats.connectionsBy[c.kind.index()].Add(-1)
	s.wg.Done()
}

// Close stops the listeners, disconnects every client (v5 clients get
// DISCONNECT 0x8B Server shutting down), and saves state to
// Options.StatePath. Wills of disconnected clients are not published: their
// sessions are saved with them. Close waits for connections to end or ctx.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.endLife()
	lns := s.listeners
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	for _, t := range s.wills {
		t.Stop()
	}
	s.mu.Unlock()

	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.shutdown()
	}
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	var err error
	select {
	case <-waited:
	case <-ctx.Done():
		err = fmt.Errorf("broker: close: %w", ctx.Err())
		for _, c := range conns {
			c.closeSocket() // no more waiting for their last writes
		}
	}
	close(s.stopWatch)
	s.unwatch()
	if s.opts.StatePath != "" {
		s.awaitUnanswered2(ctx)
		if serr := s.saveState(s.opts.StatePath); serr != nil {
			err = errors.Join(err, fmt.Errorf("broker: save state: %w", serr))
		}
	}
	return err
}

// unanswered2Wait bounds how long Close waits, before it saves the state,
// for the policy to answer the QoS 2 messages it is still keeping.
const unanswered2Wait = 2 * time.Second

// awaitUnanswered2 waits (within ctx and unanswered2Wait) until the policy
// has answered every inbound QoS 2 message of every session, so that the
// state saved next knows the ids of the messages it kept (saved2Locked):
// a copy the client sends again after the restart is then answered, not
// stored a second time. The clients are gone; the policy (the history
// writer) is still working.
func (s *Server) awaitUnanswered2(ctx context.Context) {
	awaitNone(ctx, unanswered2Wait, s.unanswered2)
}

// awaitNone polls count every few milliseconds until it is 0, for at most
// limit (and within ctx).
func awaitNone(ctx context.Context, limit time.Duration, count func() int) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for count() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// unanswered2 counts the inbound QoS 2 messages the policy has not
// answered yet, in every session.
func (s *Server) unanswered2() int {
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	n := 0
	for _, ss := range sessions {
		n += ss.unanswered2()
	}
	return n
}

// background runs the periodic sweep (retained expiry, session expiry) and
// state saves.
func (s *Server) background() {
	defer s.wg.Done()
	sweep := time.NewTicker(s.opts.SweepInterval)
	defer sweep.Stop()
	var save <-chan time.Time
	if s.opts.StatePath != "" && s.opts.SaveInterval > 0 {
		t := time.NewTicker(s.opts.SaveInterval)
		defer t.Stop()
		save = t.C
	}
	for {
		select {
		case <-s.done:
			return
		case <-sweep.C:
			s.Sweep()
		case <-save:
			if err := s.saveState(s.opts.StatePath); err != nil {
				s.log.Error("save broker state", "error", err)
			}
		}
	}
}

// Sweep removes expired retained messages and expired offline sessions now.
// It runs every Options.SweepInterval; tests call it to avoid waiting.
func (s *Server) Sweep() {
	now := s.now()
	s.retained.Sweep(now, s.opts.RetainedMaxAge)
	s.mu.Lock()
	var expired []*session
	for _, ss := range s.sessions {
		if ss.expiredAt(now) {
			expired = append(expired, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range expired {
		s.endSession(ss, true, DropSessionExpired)
	}
	s.events.sweep(time.Now())
	s.sweepLost(time.Now())
}

// EndSessions ends every session for which why returns a reason (not ""),
// connected or not: what it held is dropped (DropSessionExpired) and its
// subscriptions removed, as when it expires. A connected one ends with its
// connection, closed as Disconnect closes it (v5: DISCONNECT with code).
// Offline sessions restored from the state file have the identity they
// were saved with (no Identity.Data). It reports how many sessions it
// ended or is ending. Use it when the owner of sessions is gone for good
// (a credential revoked, a client or account deleted).
func (s *Server) EndSessions(why func(*Identity) string, code packet.ReasonCode) int {
	type end struct {
		ss     *session
		c      *conn
		reason string
	}
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	var ends []end
	for _, ss := range all {
		ss.mu.Lock()
		if ss.id != nil && !ss.ended {
			if r := why(ss.id); r != "" {
				// A connection ending now leaves no persistent session
				// (detach ends it).
				ss.expiry, ss.gone = 0, true
				ends = append(ends, end{ss, ss.c, r})
			}
		}
		ss.mu.Unlock()
	}
	for _, e := range ends {
		if e.c != nil {
			e.c.closeWith(Disconnection{Reason: CloseNotAuthorized, Code: code, Detail: e.reason})
		} else {
			s.endSession(e.ss, true, DropSessionExpired)
		}
	}
	return len(ends)
}

// Disconnect ends every connection for which why returns a reason (not
// ""), with that reason (v5 clients get DISCONNECT with code, for example
// NotAuthorized or AdministrativeAction, and the reason as its reason
// string). It reports how many it ended. Use it when a credential is
// revoked or expires.
func (s *Server) Disconnect(why func(*Identity) string, code packet.ReasonCode) int {
	type end struct {
		c      *conn
		reason string
	}
	s.mu.Lock()
	var ends []end
	for c := range s.conns {
		if id := c.identity(); id != nil && c.ending.Load() == nil {
			if r := why(id); r != "" {
				ends = append(ends, end{c, r})
			}
		}
	}
	s.mu.Unlock()
	for _, e := range ends {
		e.c.closeWith(Disconnection{Reason: CloseNotAuthorized, Code: code, Detail: e.reason})
	}
	return len(ends)
}
