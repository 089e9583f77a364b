//go:build !linux || race

package broker

import "syscall"

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket
// through syscall.Read and syscall.Write: off Linux, and under the race
// detector, which those calls tell that what one goroutine writes to a
// socket happens before another reads it (rawio_linux.go makes them
// without that, and without telling the scheduler).
func sysRead(fd int, p []byte) (int, error)  { return syscall.Read(fd, p) }
func sysWrite(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
