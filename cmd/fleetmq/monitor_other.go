//go:build !linux

package main

// quietRuntimeMonitor does nothing where /proc/self/exe is not there to
// re-execute (see monitor_linux.go).
func quietRuntimeMonitor(argv, command []string) {}
