//go:build linux && !race

package broker

import (
	"syscall"
	"unsafe"
)

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket,
// made without telling the Go scheduler (syscall.RawSyscall, not
// syscall.Syscall): they never block, and a scheduler told of every
// system call wakes its monitor thread (sysmon) on each one made after a
// quiet moment, which then polls every 20 µs for a while. At a fleet's
// steady low rate that polling was a third of the broker's CPU. The
// scheduler cannot run another goroutine on this thread meanwhile, as
// during any other few microseconds of work.
func sysRead(fd int, p []byte) (int, error)  { return rawIO(syscall.SYS_READ, fd, p) }
func sysWrite(fd int, p []byte) (int, error) { return rawIO(syscall.SYS_WRITE, fd, p) }

// rawIO makes read(2) or write(2) (trap) with RawSyscall.
func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
