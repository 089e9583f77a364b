package broker

import (
	"fmt"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The watchdog enforces every time limit of a connection from one
// goroutine, instead of socket deadlines: the connect timeout (from
// accept, TLS handshake included), the keep alive (1.5 times the client's,
// from the last bytes received) and the write timeout (a write that has
// not completed). Sockets carry no deadlines at all, so a deadline set for
// one write can never fail a later one, and reads and writes cost no timer
// operations. A connection over a limit is ended with its reason (v5
// clients get DISCONNECT 0x8D for the keep alive). The one exception is the
// drain of a connection the server ended (hangup.go): a read deadline, set
// once the connection is ending, when no write can follow it.

// finalWriteTimeout bounds the last write of a connection the server is
// closing (the DISCONNECT or refusing CONNACK after what was buffered).
const finalWriteTimeout = 2 * time.Second

// watchInterval is how often the watchdog looks at every connection: a
// quarter of the shortest time limit, within 10-250 ms.
func (o *Options) watchInterval() time.Duration {
	return min(max(min(o.ConnectTimeout, o.WriteTimeout)/4, 10*time.Millisecond), 250*time.Millisecond)
}

// watch runs the watchdog until stop is closed.
func (s *Server) watch(stop <-chan struct{}) {
	t := time.NewTicker(s.opts.watchInterval())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.checkConns(now)
		}
	}
}

// checkConns ends the connections that are over a time limit at now.
func (s *Server) checkConns(now time.Time) {
	type due struct {
		c *conn
		d Disconnection
	}
	var ends []due
	var stuck []*conn
	n := now.UnixNano()
	s.mu.Lock()
	for c := range s.conns {
		if c.ending.Load() != nil {
			// Closing: only its last write is bounded, more tightly.
			if ws := c.writeSince.Load(); ws != 0 && n-ws > int64(min(finalWriteTimeout, s.opts.WriteTimeout)) {
				stuck = append(stuck, c)
			}
			continue
		}
		if d, ok := c.overdue(n, &s.opts); ok {
			ends = append(ends, due{c, d})
		}
	}
	s.mu.Unlock()
	for _, c := range stuck {
		c.nc.Close()
	}
	for _, e := range ends {
		e.c.closeWith(e.d)
	}
}

// overdue reports whether c is over a time limit at n (Unix ns), and why.
func (c *conn) overdue(n int64, o *Options) (Disconnection, bool) {
	if ws := c.writeSince.Load(); ws != 0 && n-ws > int64(o.WriteTimeout) {
		return Disconnection{Reason: CloseWriteTimeout,
			Detail: fmt.Sprintf("a write to the client did not complete in %v (the client is not reading)", o.WriteTimeout)}, true
	}
	if c.idp.Load() == nil {
		if n-c.accepted > int64(o.ConnectTimeout) {
			return Disconnection{Reason: CloseConnectTimeout,
				Detail: fmt.Sprintf("no CONNECT within %v of connecting", o.ConnectTimeout)}, true
		}
		return Disconnection{}, false
	}
	ka := c.kaLimit.Load()
	if idle := n - c.lastRead.Load(); ka > 0 && idle > ka {
		return Disconnection{Reason: CloseKeepAliveTimeout, Code: packet.KeepAliveTimeout,
			Detail: fmt.Sprintf("nothing received for %v (keep alive %v)", time.Duration(idle).Round(time.Millisecond), time.Duration(ka*2/3).Round(time.Second))}, true
	}
	return Disconnection{}, false
}
