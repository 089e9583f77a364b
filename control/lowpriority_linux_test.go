package control

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// threadNice reads the calling OS thread's niceness from /proc.
func threadNice(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", syscall.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var nice int
	if _, err := fmt.Sscan(f[16], &nice); err != nil { // field 19 of stat
		t.Fatal(err)
	}
	return nice
}

// TestPasswordHashingAtLowPriority: argon2id runs on a thread at the
// lowest priority, and the caller's thread keeps its own: a sign-in burst
// takes only CPU that message traffic leaves idle.
func TestPasswordHashingAtLowPriority(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadNice(t)
	var inside int
	atLowPriority(func() { inside = threadNice(t) })
	if inside != idleNice {
		t.Fatalf("niceness while hashing %d, want %d", inside, idleNice)
	}
	if after := threadNice(t); after != before {
		t.Fatalf("the caller's thread went from niceness %d to %d", before, after)
	}
	if _, err := HashPassword("correct horse battery staple"); err != nil {
		t.Fatal(err)
	}
}
