package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// monitorMark, in the environment, tells the re-executed program that it
// added monitorSetting itself.
const monitorMark = "FLEETMQ_RUNTIME_MONITOR_SET"

// quietRuntimeMonitor re-executes this program (its arguments argv, from
// the program's name on), when command (the fleetmq command line, from the
// command's name on) is one of the long-running servers and one that wakes
// the monitor (wakesMonitor), with monitorSetting added to GODEBUG: the
// runtime reads it only at start. It returns, and the program runs as it
// is, when GODEBUG names schedtrace already (GODEBUG=schedtrace=0 keeps
// the Go runtime's default behaviour) or the re-execution fails.
//
// Once re-executed, it takes the setting out of the environment again (the
// runtime has read it), so that the processes the server starts (its
// password-hashing workers) do not print the scheduler's line.
func quietRuntimeMonitor(argv, command []string) {
	if len(command) == 0 || !wakesMonitor(command[0], command[1:]) {
		return
	}
	godebug := os.Getenv("GODEBUG")
	if before, ok := strings.CutSuffix(godebug, monitorSetting); ok && os.Getenv(monitorMark) == "1" {
		os.Unsetenv(monitorMark)
		if before = strings.TrimSuffix(before, ","); before == "" {
			os.Unsetenv("GODEBUG")
		} else {
			os.Setenv("GODEBUG", before)
		}
		return
	}
	for _, kv := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(kv), "schedtrace=") {
			return
		}
	}
	if godebug != "" {
		godebug += ","
	}
	env := []string{"GODEBUG=" + godebug + monitorSetting, monitorMark + "=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, monitorMark+"=") { // the first counts
			env = append(env, kv)
		}
	}
	// By the path it was started with, so that it keeps its name (ps,
	// pgrep -x; a symbolic link's name included); if that fails (its file
	// is gone), by /proc/self/exe, this very program, which the kernel
	// then names "exe".
	path, err := argv[0], error(nil)
	if !strings.Contains(path, "/") {
		path, err = exec.LookPath(path)
	}
	if err == nil {
		err = syscall.Exec(path, argv, env)
	}
	err = errors.Join(err, syscall.Exec("/proc/self/exe", argv, env))
	fmt.Fprintln(os.Stderr, "fleetmq: running with the Go runtime's default monitor: re-executing with GODEBUG="+monitorSetting+":", err)
}

// wakesMonitor reports whether the fleetmq command name, run with args,
// makes system calls on its message path that the Go scheduler is told of,
// each of which wakes a deeply sleeping monitor: `serve` always (SQLite's
// cgo calls), `broker` with a TLS or WebSocket listener (crypto/tls and the
// WebSocket library read and write through net.Conn), behind a PROXY
// protocol load balancer (its connections are wrapped, without raw
// access to their sockets), as a cluster node (the NATS client's sockets)
// or with a state file (its writes). A broker
// that serves plain TCP only makes its socket calls raw
// (mqtt/broker/rawio_linux.go), which the scheduler never sees: its
// monitor sleeps deeply between bursts and nothing but a timer wakes it,
// which costs less than 100 wake-ups a second (a third fewer context
// switches at 4,000 msg/s; see docs/benchmarks.md). Its HTTP listener's
// few requests (a scrape every few seconds) do not change that.
func wakesMonitor(name string, args []string) bool {
	switch name {
	case "serve":
		return true
	case "broker":
		var cfg brokerConfig
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.flags(fs)
		if parseFlags(fs, args) != nil {
			return true // as before: the broker reports the error itself
		}
		return cfg.TLSListen != "" || cfg.WSListen != "" || len(cfg.ProxyFrom) > 0 || cfg.Cluster.On() || cfg.StatePath != ""
	}
	return false
}
