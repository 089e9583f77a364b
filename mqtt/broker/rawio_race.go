//go:build linux && race

package broker

import "syscall"

// Under the race detector, sysRead and sysWrite are syscall.Read and
// syscall.Write, which tell the detector that what one goroutine writes
// to a socket happens before another reads it (rawio_linux.go makes them
// without that, and without telling the scheduler).
func sysRead(fd int, p []byte) (int, error)  { return syscall.Read(fd, p) }
func sysWrite(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
