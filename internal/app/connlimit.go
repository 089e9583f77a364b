package app

import (
	"net"
	"sync"
	"sync/atomic"
)

// Defaults of the HTTP connection bounds: the HTTP listener never takes
// more than this share of the process's file descriptors, whatever its
// clients do, so MQTT keeps the rest.
const (
	DefaultHTTPMaxConns        = 4096
	DefaultHTTPMaxConnsPerAddr = 256
)

// limitListener accepts at most max connections at once, and at most
// perAddr from one IP address. A connection over either bound is closed as
// soon as it is accepted (so it does not wait in the kernel's backlog
// taking a descriptor there) and counted.
type limitListener struct {
	net.Listener
	max, perAddr int

	mu     sync.Mutex
	open   int
	byAddr map[string]int

	refusedTotal, refusedAddr atomic.Int64
}

func newLimitListener(ln net.Listener, max, perAddr int) *limitListener {
	return &limitListener{Listener: ln, max: max, perAddr: perAddr, byAddr: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := ipOf(c.RemoteAddr())
		l.mu.Lock()
		switch {
		case l.open >= l.max:
			l.mu.Unlock()
			l.refusedTotal.Add(1)
			c.Close()
			continue
		case l.byAddr[addr] >= l.perAddr:
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

func (l *limitListener) release(addr string) {
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
	l    *limitListener
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
