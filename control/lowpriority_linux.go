package control

import (
	"runtime"
	"syscall"
)

// idleNice is the niceness password hashing runs at: the lowest priority
// Linux gives a thread that is not idle-scheduled.
const idleNice = 19

// atLowPriority runs f on an OS thread of its own at the lowest CPU
// priority, and waits for it. An argon2id run holds a core for tens of
// milliseconds; at this priority the kernel gives that core to anything
// else that wants it first (the broker's connections, the history
// writer, the database), so a burst of sign-ins takes only idle CPU from
// message traffic. The thread is locked to the goroutine and never
// unlocked, so it ends with it, niceness and all (a process that is not
// root could not lower it back).
func atLowPriority(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), idleNice) // at worst, f runs at normal priority
		f()
	}()
	<-done
}
