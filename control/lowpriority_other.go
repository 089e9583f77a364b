//go:build !linux

package control

// atLowPriority runs f (at normal priority where threads have no niceness
// of their own).
func atLowPriority(f func()) { f() }
