package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// monitorSetting keeps the Go runtime's monitor thread (sysmon) out of its
// deep sleep, which costs a server like fleetmq more than it saves.
//
// The monitor sleeps deeply while every processor is idle. The next
// goroutine that enters a system call wakes it (every cgo call into
// SQLite, every socket call of the NATS client counts), and a monitor
// woken that way polls every 20 µs for at least a millisecond before it
// backs off. A server whose work arrives every few milliseconds, as a
// fleet's steady publishing does, so keeps it polling about half of the
// time: 9-13% of `fleetmq serve`'s CPU at 4,000 msg/s (see
// docs/benchmarks.md). With the scheduler trace set, the runtime never
// lets the monitor sleep deeply: it backs off to one wake-up every 10 ms
// and stays there while nothing needs it (100 wake-ups a second when the
// process is idle). The trace's period, the largest the runtime takes
// (about 24.9 days), means it prints at most one line to stderr in that
// time (and one at start on a machine up for longer).
const monitorSetting = "schedtrace=2147483647"

// quietRuntimeMonitor re-executes this program (its arguments argv, from
// the program's name on), when command is one of the long-running servers,
// with monitorSetting added to GODEBUG: the runtime reads it only at
// start. It returns, and the program runs as it is, when GODEBUG names
// schedtrace already (GODEBUG=schedtrace=0 keeps the Go runtime's default
// behaviour) or the re-execution fails.
func quietRuntimeMonitor(command string, argv []string) {
	if command != "serve" && command != "broker" {
		return
	}
	godebug := os.Getenv("GODEBUG")
	for _, kv := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(kv), "schedtrace=") {
			return
		}
	}
	if godebug != "" {
		godebug += ","
	}
	env := []string{"GODEBUG=" + godebug + monitorSetting}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") { // the runtime reads the first
			env = append(env, kv)
		}
	}
	// /proc/self/exe is this very program even if its file was replaced
	// since it started.
	err := syscall.Exec("/proc/self/exe", argv, env)
	fmt.Fprintln(os.Stderr, "fleetmq: running with the Go runtime's default monitor: re-executing with GODEBUG="+monitorSetting+":", err)
}
