// Package netlimit bounds the connections a listener keeps open, in all
// and per client IP address, so that no client (or crowd of them) can take
// every file descriptor of the process. A connection over a bound is
// closed as soon as it is accepted, rather than left in the kernel's
// backlog, and counted.
package netlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Listener accepts at most max connections at once, and at most perAddr
// from one IP address (0: no bound). A connection is counted until it is
// closed.
type Listener struct {
	net.Listener
	max, perAddr int

	mu     sync.Mutex
	open   int
	byAddr map[string]int

	// The optional rate of new connections per address: a token bucket per
	// address, of burst tokens, refilled at rate per second.
	rate    float64
	burst   float64
	buckets map[string]*bucket

	refusedTotal, refusedAddr, refusedRate atomic.Int64
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxBuckets bounds the rate buckets kept: past it, the full ones (of
// addresses quiet long enough to be back at their burst) are dropped.
const maxBuckets = 10_000

// LimitRate bounds the new connections from one address to perSecond, with
// bursts of burst; the ones over are closed at accept and counted
// (RefusedRate). It returns l, and must be called before Accept.
func (l *Listener) LimitRate(perSecond float64, burst int) *Listener {
	l.rate, l.burst, l.buckets = perSecond, float64(max(burst, 1)), map[string]*bucket{}
	return l
}

// RefusedRate counts the connections closed at accept because their
// address came too fast (LimitRate).
func (l *Listener) RefusedRate() int64 { return l.refusedRate.Load() }

// takeLocked spends a token of addr's bucket at now; false when it has
// none. Callers hold mu.
func (l *Listener) takeLocked(addr string, now time.Time) bool {
	if l.rate <= 0 {
		return true
	}
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			for a, o := range l.buckets {
				if min(l.burst, o.tokens+now.Sub(o.at).Seconds()*l.rate) >= l.burst {
					delete(l.buckets, a)
				}
			}
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[addr] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Refused counts the connections closed at accept: the listener had its
// maximum open (total), or their address had its share (perAddr).
func (l *Listener) Refused() (total, perAddr int64) {
	return l.refusedTotal.Load(), l.refusedAddr.Load()
}

// New bounds ln.
func New(ln net.Listener, max, perAddr int) *Listener {
	return &Listener{Listener: ln, max: max, perAddr: perAddr, byAddr: map[string]int{}}
}

// Accept returns the next connection within the bounds, closing (and
// counting) those over them.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := ipOf(c.RemoteAddr())
		l.mu.Lock()
		switch {
		case l.max > 0 && l.open >= l.max:
			l.mu.Unlock()
			l.refusedTotal.Add(1)
			c.Close()
			continue
		case l.perAddr > 0 && l.byAddr[addr] >= l.perAddr:
			l.mu.Unlock()
			l.refusedAddr.Add(1)
			c.Close()
			continue
		case !l.takeLocked(addr, time.Now()):
			l.mu.Unlock()
			l.refusedRate.Add(1)
			c.Close()
			continue
		}
		l.open++
		l.byAddr[addr]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, addr: addr}, nil
	}
}

func (l *Listener) release(addr string) {
	l.mu.Lock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
	l.mu.Unlock()
}

// limitedConn gives its place back when it is closed (once).
type limitedConn struct {
	net.Conn
	l    *Listener
	addr string
	once sync.Once
}

// SyscallConn gives the accepted socket's raw connection (the broker
// writes to plain TCP sockets without blocking, and waits for a stranger's
// first bytes without a goroutine), when the accepted connection has one.
func (c *limitedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// NetConn returns the connection it wraps (a *net.TCPConn from a TCP
// listener), for what the wrapper does not pass on, such as CloseWrite.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

func ipOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Under returns the first of c and the connections it wraps (through
// their NetConn methods: this package's, TLS's, an HTTP listener's) that
// is a T, such as a *net.TCPConn or an interface{ CloseWrite() error }.
func Under[T any](c net.Conn) (T, bool) {
	for c != nil {
		if t, ok := c.(T); ok {
			return t, true
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	var zero T
	return zero, false
}
