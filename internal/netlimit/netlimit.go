// Package netlimit bounds the connections a listener keeps open, in all
// and per client IP address, so that no client (or crowd of them) can take
// every file descriptor of the process. A connection over a bound is
// closed as soon as it is accepted, rather than left in the kernel's
// backlog, and counted.
package netlimit

import (
	"net"
	"sync"
	"sync/atomic"
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

	refusedTotal, refusedAddr atomic.Int64
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
