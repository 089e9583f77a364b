package broker

import (
	"testing"
	"unsafe"
)

// TestConnFitsItsSizeClass: every connection, idle ones included, holds a
// conn, and the Go allocator gives it the next size class up: 896 bytes
// fit, 904 would take 1,024, an eighth of a KiB more per idle device
// (docs/benchmarks.md, "Memory per idle connection"). A field added to
// conn must fit in its padding or pay for a smaller one elsewhere.
func TestConnFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(conn{}); n > 896 {
		t.Fatalf("conn is %d bytes: over the 896-byte size class, each connection takes 1,024", n)
	}
}
