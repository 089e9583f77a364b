package broker

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pires/go-proxyproto"
)

// proxyHeaderTimeout bounds the wait for a load balancer's PROXY header
// (it sends it as it connects, or with the client's first bytes).
const proxyHeaderTimeout = 5 * time.Second

// maxProxyPending bounds the connections of a listener whose PROXY header
// is being read; more from the load balancers are closed at once.
const maxProxyPending = 4096

// proxyListener serves the PROXY protocol (Options.ProxyFrom): a
// connection from one of the load balancers is handed on once its header
// is read, in a goroutine of its own, so that a slow one delays no other
// connection; its RemoteAddr is then the client's, which the listener's
// bounds (wrapping this one) count. A connection from any other address
// is handed on as it is; one from a load balancer without a header is
// closed.
type proxyListener struct {
	net.Listener
	from   []netip.Prefix
	log    *slog.Logger
	ready  chan accepted
	closed chan struct{}
	once   sync.Once

	mu      sync.Mutex
	pending map[net.Conn]struct{} // connections whose header is being read
}

type accepted struct {
	c   net.Conn
	err error
}

func newProxyListener(ln net.Listener, from []netip.Prefix, log *slog.Logger) *proxyListener {
	l := &proxyListener{Listener: ln, from: from, log: log, ready: make(chan accepted),
		pending: make(map[net.Conn]struct{}), closed: make(chan struct{})}
	go l.run()
	return l
}

// trusted reports whether addr is one of the load balancers.
func (l *proxyListener) trusted(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip := tcp.AddrPort().Addr().Unmap()
	for _, p := range l.from {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (l *proxyListener) run() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			// Temporary errors go to the server's accept loop, which
			// backs off; the end of the listener ends this.
			if !l.hand(accepted{err: err}) || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !l.trusted(c.RemoteAddr()) {
			if !l.hand(accepted{c: c}) {
				c.Close()
				return
			}
			continue
		}
		if !l.track(c) {
			c.Close() // too many headers under way, or closing
			continue
		}
		go l.header(c)
	}
}

// header reads a load balancer's connection's PROXY header and hands the
// connection on.
func (l *proxyListener) header(c net.Conn) {
	defer l.untrack(c)
	pc := proxyproto.NewConn(c, proxyproto.WithPolicy(proxyproto.REQUIRE), proxyproto.SetReadHeaderTimeout(proxyHeaderTimeout))
	pc.RemoteAddr() // reads the header
	if pc.ProxyHeader() == nil {
		l.log.Debug("mqtt: a connection from a load balancer without a PROXY header; closed", "remote", c.RemoteAddr().String())
		c.Close()
		return
	}
	if !l.hand(accepted{c: pc}) {
		pc.Close()
	}
}

// hand gives a to Accept, and reports false once the listener closed.
func (l *proxyListener) hand(a accepted) bool {
	select {
	case l.ready <- a:
		return true
	case <-l.closed:
		return false
	}
}

func (l *proxyListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.ready:
		return a.c, a.err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// track counts a connection whose header is being read, unless there are
// maxProxyPending already or the listener closed.
func (l *proxyListener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return false
	default:
	}
	if len(l.pending) >= maxProxyPending {
		return false
	}
	l.pending[c] = struct{}{}
	return true
}

func (l *proxyListener) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.pending, c)
	l.mu.Unlock()
}

// Close stops accepting and closes the connections whose header is still
// being read.
func (l *proxyListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	l.mu.Lock()
	for c := range l.pending {
		c.Close()
	}
	l.mu.Unlock()
	return l.Listener.Close()
}
