//go:build unix

package app

import "syscall"

// fileLimit is the process's soft limit on open files (Go raises it to the
// hard limit at start on Linux), 0 if unknown.
func fileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
