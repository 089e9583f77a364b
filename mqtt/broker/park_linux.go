package broker

import (
	"cmp"
	"errors"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// parker holds strangers (connections whose CONNECT has not fully arrived)
// and idle clients (plain TCP connections past CONNECT that sent nothing
// for Options.IdleParkAfter) without a goroutine each: their sockets wait
// in one epoll set, and a reader goroutine runs only while bytes are there
// to read. A plain TCP stranger that sends part of a CONNECT and falls
// silent keeps its connection struct and the bytes it sent, not a
// goroutine's stack; a TLS stranger waits here for its first byte (the
// handshake then runs in its reader); an idle device keeps its session
// and connection struct, and messages for it are written from the
// goroutines that route them, as for any connection. The watchdog's
// connect timeout and keep alive still end them: ending a parked
// connection starts its reader, which sees the end and cleans up.
type parker struct {
	epfd int
	// ep is epfd as a file in Go's own poller, which tells loop when the
	// set has events: no thread waits in epoll_wait for it.
	ep  *os.File
	epc syscall.RawConn
	log *slog.Logger

	mu     sync.Mutex
	conns  map[int32]*conn // by socket descriptor
	idle   int             // how many of conns are past CONNECT
	closed bool            // epfd is closed: park refuses
}

// newParker starts the epoll loop, which stops once done is closed; nil
// when epoll is unavailable (connections then wait in their goroutines).
func newParker(done <-chan struct{}, log *slog.Logger) *parker {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		log.Warn("no epoll: strangers wait in their own goroutines", "error", err)
		return nil
	}
	// Non-blocking, so that NewFile puts it in Go's poller.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		log.Warn("no epoll: strangers wait in their own goroutines", "error", err)
		return nil
	}
	ep := os.NewFile(uintptr(fd), "parker-epoll")
	epc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		log.Warn("no epoll: strangers wait in their own goroutines", "error", err)
		return nil
	}
	p := &parker{epfd: fd, ep: ep, epc: epc, log: log, conns: make(map[int32]*conn)}
	go p.loop()
	go func() {
		<-done
		p.close()
	}()
	return p
}

// loop starts the reader of every parked connection with bytes (or an end)
// to read, until the parker closes.
func (p *parker) loop() {
	events := make([]syscall.EpollEvent, 64)
	for {
		n := 0
		var werr error
		// Go's poller waits for the set to have events; epoll_wait only
		// takes them (timeout 0), without telling the scheduler (as
		// sysRead). The deadline makes the loop look again every
		// parkerRecheck whatever the poller says: some kernels could miss
		// the wake-up of an epoll set watched by another one.
		p.ep.SetReadDeadline(time.Now().Add(parkerRecheck))
		err := p.epc.Read(func(fd uintptr) bool {
			for {
				if n, werr = epollTake(int(fd), events); werr != syscall.EINTR {
					return n > 0 || werr != nil
				}
			}
		})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil
		}
		if err != nil || werr != nil {
			if !p.down() {
				p.log.Error("epoll wait failed: strangers wait in their own goroutines from now on", "error", cmp.Or(err, werr))
				p.close()
			}
			return
		}
		for _, ev := range events[:n] {
			p.wake(ev.Fd)
		}
	}
}

// parkerRecheck is how often the parker looks for events at most, if
// the poller did not wake it before.
const parkerRecheck = time.Second

// epollCtl is epoll_ctl(2), made as sysRead is.
func epollCtl(epfd, op, fd int, ev *syscall.EpollEvent) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0); e != 0 {
		return e
	}
	return nil
}

// epollTake is epoll_wait(2) with a timeout of 0.
func epollTake(epfd int, events []syscall.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// close closes the epoll set and starts the reader of every connection
// still parked (an idle client's reader then waits in its goroutine).
func (p *parker) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ep.Close() // and loop's wait ends
	var parked []*conn
	for _, c := range p.conns {
		parked = append(parked, c)
	}
	p.mu.Unlock()
	// Whoever they were waiting for, they wait in their own goroutines now
	// (at shutdown, the server ends them meanwhile).
	for _, c := range parked {
		p.unpark(c)
	}
}

// down reports whether the parker has stopped: strangers then wait in
// their own goroutines.
func (p *parker) down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// park puts c's socket in the epoll set instead of a goroutine; false when
// it cannot (the socket is closed, or the parker is), and the caller goes
// on with c. After park returns true, c belongs to the parker: only a
// wake or unpark starts its reader again.
func (p *parker) park(c *conn) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	fd, addErr := int32(-1), error(nil)
	// Control keeps the descriptor open (and its number ours) meanwhile.
	err := c.prc.Control(func(f uintptr) {
		// One-shot: an event disables the socket's entry until it is
		// parked again, so each wake starts one reader.
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(f)}
		if addErr = epollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(f), &ev); addErr == nil {
			fd = int32(f)
		}
	})
	if err != nil || addErr != nil {
		p.mu.Unlock()
		return false
	}
	p.conns[fd] = c
	c.parkedFD.Store(fd)
	if c.parkedIdle = c.identity() != nil; c.parkedIdle {
		p.idle++
	}
	p.mu.Unlock()
	if c.ending.Load() != nil {
		p.unpark(c) // ended while it was being parked: end's unpark missed it
	}
	return true
}

// wake starts the reader of the connection parked on fd, if one still is
// (an event read before the connection was unparked finds none, or a newer
// connection on the same descriptor, whose reader then finds nothing to
// read and parks again).
func (p *parker) wake(fd int32) {
	p.mu.Lock()
	c := p.conns[fd]
	p.mu.Unlock()
	if c != nil {
		p.unpark(c) // unless another wake or an end took it meanwhile
	}
}

// unpark starts c's reader if c is parked (c is ending: its reader sees
// that and cleans up).
func (p *parker) unpark(c *conn) {
	if c.parkedFD.Load() < 0 {
		return // not parked: every ending connection asks, without the lock
	}
	p.mu.Lock()
	if fd := c.parkedFD.Load(); fd < 0 || p.conns[fd] != c {
		p.mu.Unlock()
		return
	}
	p.removeLocked(c)
	p.mu.Unlock()
	go c.run()
}

func (p *parker) removeLocked(c *conn) {
	delete(p.conns, c.parkedFD.Load())
	c.parkedFD.Store(-1)
	if c.parkedIdle {
		p.idle--
	}
	if p.closed {
		return
	}
	// A closed socket has left the epoll set already (Control fails).
	c.prc.Control(func(f uintptr) {
		epollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(f), nil)
	})
}

// parked reports how many strangers and how many idle clients are parked.
func (p *parker) parked() (strangers, idle int) {
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) - p.idle, p.idle
}

// strangerGrace is how long a new connection's reader waits for its first
// bytes before it parks: a device sends its CONNECT right after connecting,
// and is served without a trip through the parker; a silent stranger
// holds a goroutine this long, once.
const strangerGrace = 50 * time.Millisecond

// readNoWait reads what a stranger has sent: errParked when nothing is
// there (after strangerGrace, the first time). It only reads once bytes
// (or the end) are there, so the read never waits; a TLS stranger, once
// its first byte is there, reads (and handshakes) like any connection.
func (c *conn) readNoWait(b []byte) (int, error) {
	if c.ending.Load() != nil {
		return 0, errEnded // ended (its socket about to close): nothing more is acted on
	}
	wait := !c.graced
	if wait {
		c.graced = true
		c.nc.SetReadDeadline(time.Now().Add(strangerGrace))
	}
	var one [1]byte
	var err error
	rerr := c.prc.Read(func(fd uintptr) bool {
		for {
			if _, _, err = syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT); err != syscall.EINTR {
				// Nothing there: wait for it (with the grace's deadline)
				// or not at all.
				return err != syscall.EAGAIN || !wait
			}
		}
	})
	if wait {
		c.nc.SetReadDeadline(time.Time{})
	}
	if errors.Is(rerr, os.ErrDeadlineExceeded) || rerr == nil && err == syscall.EAGAIN {
		return 0, errParked
	}
	if c.raw == nil {
		c.parking = false // TLS: from its first byte on, as any connection
	}
	return c.nc.Read(b)
}
