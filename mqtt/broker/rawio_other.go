//go:build !linux

package broker

import "syscall"

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket
// (Linux makes them without telling the scheduler: rawio_linux.go).
func sysRead(fd int, p []byte) (int, error)  { return syscall.Read(fd, p) }
func sysWrite(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
