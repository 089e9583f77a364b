package broker

import (
	"fmt"
	"runtime/debug"
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
// clients get DISCONNECT 0x8D for the keep alive). The watchdog also asks
// idle clients to park (Options.IdleParkAfter). The exceptions are the
// drain of a connection the server ended (hangup.go): a read deadline, set
// once the connection is ending, when no write can follow it; and the
// request to park, a read deadline in the past that only a reader waiting
// with nothing buffered gets, and clears before it reads again
// (conn.askPark).

// finalWriteTimeout bounds the last write of a connection the server is
// closing (the DISCONNECT or refusing CONNACK after what was buffered).
const finalWriteTimeout = 2 * time.Second

// watchInterval is how often the watchdog looks at every connection: a
// tenth of the shortest time limit (or of the idle time before parking),
// within 10 ms - 1 s. Each look walks every connection (with the defaults,
// 10 s limits, once a second: a limit is enforced within 10% of it), so it
// is no more often than that needs: four walks a second of 15,000
// connections were 2.4% of a platform's CPU at a fleet's low rate.
func (o *Options) watchInterval() time.Duration {
	limit := min(o.ConnectTimeout, o.WriteTimeout)
	if o.IdleParkAfter > 0 {
		limit = min(limit, o.IdleParkAfter)
	}
	return min(max(limit/10, 10*time.Millisecond), time.Second)
}

// A crowd of clients parked at once leaves their readers' stacks to the Go
// runtime, which frees them at its next collection and returns the memory
// to the system slowly after that; on a quiet server the next collection
// may be two minutes away. After parking freeAfterParks clients, the
// watchdog has the memory returned at once once they have parked (at most
// every freeEvery): a full collection and runtime/debug.FreeOSMemory's
// return of every free page, tens of milliseconds of one core for a
// heap of a few hundred megabytes.
const (
	freeAfterParks = 1024
	freeEvery      = time.Minute
	freeDelay      = time.Second // for the parked readers to end
)

// watch runs the watchdog until stop is closed.
func (s *Server) watch(stop <-chan struct{}) {
	t := time.NewTicker(s.opts.watchInterval())
	defer t.Stop()
	parks, lastFree := 0, time.Time{}
	var all []*conn // reused between walks
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			var asked int
			asked, all = s.checkConns(now, all)
			parks += asked
			// Once the crowd has parked (a pass that asks nobody).
			if asked == 0 && parks >= freeAfterParks && now.Sub(lastFree) >= freeEvery {
				parks, lastFree = 0, now
				time.AfterFunc(freeDelay, debug.FreeOSMemory)
			}
		}
	}
}

// checkConns ends the connections that are over a time limit at now, and
// asks idle clients to park; it returns how many it asked, and all (its
// list of the connections, kept for the next call). The server's lock is
// held only to list the connections, not while each is looked at (cache
// misses, most of the walk's time): connects and disconnects wait for a
// copy of pointers, not for the walk.
func (s *Server) checkConns(now time.Time, all []*conn) (int, []*conn) {
	type due struct {
		c *conn
		d Disconnection
	}
	var ends []due
	var stuck, idle []*conn
	n := now.UnixNano()
	park := int64(s.opts.IdleParkAfter)
	all = all[:0]
	s.mu.Lock()
	for c := range s.conns {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		if c.ending.Load() != nil {
			// Closing: only its last write is bounded, more tightly.
			if ws := c.writeSince.Load(); ws != 0 && n-ws > int64(min(finalWriteTimeout, s.opts.WriteTimeout)) {
				stuck = append(stuck, c)
			}
			continue
		}
		if d, ok := c.overdue(n, &s.opts); ok {
			ends = append(ends, due{c, d})
		} else if park > 0 && c.raw != nil && c.parkedFD.Load() < 0 && n-c.lastRead.Load() > park && c.idp.Load() != nil {
			idle = append(idle, c)
		}
	}
	clear(all) // holds no ended connection until the next walk
	for _, c := range stuck {
		c.closeSocket()
	}
	for _, c := range idle {
		c.askPark()
	}
	for _, e := range ends {
		e.c.closeWith(e.d)
	}
	return len(idle), all
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
