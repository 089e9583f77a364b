package broker

import (
	"io"
	"sync"
	"syscall"
)

// rawOp is one read or write on a plain TCP connection's socket through
// its syscall.RawConn. RawConn's methods take the operation as a func
// value; a closure over the caller's locals escapes through them and
// would be allocated on every call, with the locals it shares: three
// allocations for each read and one for each write, several per message
// when clients send one packet per write. A rawOp's func values are made
// once, and the ops are pooled.
type rawOp struct {
	c   *conn  // readOnce: the reader whose pooled buffer takes the bytes
	buf []byte // writeOnce and writeAll: the bytes to write
	n   int
	err error

	readOnce, writeOnce, writeAll func(fd uintptr) bool
}

var rawOps = sync.Pool{New: func() any {
	op := new(rawOp)
	op.readOnce, op.writeOnce, op.writeAll = op.read, op.writeSome, op.writeFull
	return op
}}

// rawRead reads what c's socket holds into c's pooled read buffer
// (taken for the read, given back when there is nothing), waiting for
// the socket until there is something: n bytes, and the error of the
// read (ioErr) or of the wait (err).
func rawRead(c *conn) (n int, ioErr, err error) {
	op := rawOps.Get().(*rawOp)
	op.c = c
	err = c.raw.Read(op.readOnce)
	n, ioErr = op.n, op.err
	putRawOp(op)
	return n, ioErr, err
}

// rawWrite writes buf to c's socket: all of it, waiting for the socket
// whenever it takes no more, or (all false) with one attempt that never
// waits. It returns the bytes written (-1 when the one attempt failed),
// and the error of the write (ioErr) or of the wait (err).
func rawWrite(c *conn, buf []byte, all bool) (n int, ioErr, err error) {
	op := rawOps.Get().(*rawOp)
	op.buf = buf
	if all {
		err = c.raw.Write(op.writeAll)
	} else {
		err = c.raw.Write(op.writeOnce)
	}
	n, ioErr = op.n, op.err
	putRawOp(op)
	return n, ioErr, err
}

// putRawOp clears op and gives it back to the pool.
func putRawOp(op *rawOp) {
	op.c, op.buf, op.n, op.err = nil, nil, 0, nil
	rawOps.Put(op)
}

// read reads what the socket holds into the reader's pooled buffer, taken
// for the read and given back when there is nothing (the connection waits
// with no buffer); false asks RawConn to wait for the socket.
func (op *rawOp) read(fd uintptr) bool {
	c := op.c
	if c.large == nil {
		c.large = readPool.Get().(*[]byte)
	}
	for {
		op.n, op.err = sysRead(int(fd), *c.large)
		if op.err != syscall.EINTR {
			break
		}
	}
	if op.err == syscall.EAGAIN {
		readPool.Put(c.large)
		c.large = nil
		return false
	}
	return true
}

// writeSome makes one write attempt: it never waits for the socket.
func (op *rawOp) writeSome(fd uintptr) bool {
	op.n, op.err = sysWrite(int(fd), op.buf)
	return true
}

// writeFull writes all of buf, asking RawConn to wait whenever the socket
// takes no more.
func (op *rawOp) writeFull(fd uintptr) bool {
	for op.n < len(op.buf) {
		m, err := sysWrite(int(fd), op.buf[op.n:])
		switch {
		case m > 0:
			op.n += m
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return false // wait until the socket takes more
		case err != nil:
			op.err = err
			return true
		default:
			op.err = io.ErrShortWrite // 0 bytes and no error: not from a socket
			return true
		}
	}
	return true
}
