//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServersQuietTheRuntimeMonitor: "fleetmq serve" runs with the Go
// runtime's monitor kept out of its deep sleep (monitor_linux.go), as the
// same process (its PID is the one started), adding to the operator's
// GODEBUG; an operator who names schedtrace gets what they asked for. A
// broker does too when it makes system calls the scheduler sees (a
// WebSocket listener, PROXY protocol connections, a state file, a
// cluster's NATS), and runs with the
// runtime's default when it serves plain TCP only.
func TestServersQuietTheRuntimeMonitor(t *testing.T) {
	broker := []string{"broker", "-listen", "127.0.0.1:0"}
	with := func(args ...string) []string { return append(append([]string{}, broker...), args...) }
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want string // the GODEBUG it runs with
	}{
		{"serve", nil, "", monitorSetting},
		{"serve", nil, "gctrace=0", "gctrace=0," + monitorSetting},
		{"serve", nil, "schedtrace=0", "schedtrace=0"},
		{"broker plain TCP", broker, "", ""},
		{"broker plain TCP", broker, "gctrace=0", "gctrace=0"},
		{"broker WebSocket", with("-ws-listen", "127.0.0.1:0"), "", monitorSetting},
		{"broker state file", with("-state", filepath.Join(t.TempDir(), "state")), "", monitorSetting},
		{"broker PROXY protocol", with("-proxy-protocol-from", "127.0.0.1"), "", monitorSetting},
		{"broker cluster node", with("-cluster-listen", "127.0.0.1:0"), "", monitorSetting},
	} {
		t.Run(tc.name+" GODEBUG="+tc.env, func(t *testing.T) {
			t.Setenv("GODEBUG", tc.env)
			var p *serveProcess
			if tc.args == nil {
				p = startServe(t, t.TempDir()) // waits until it serves MQTT
			} else {
				p = startChild(t, tc.args...)
			}
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if v, ok := bytes.CutPrefix(kv, []byte("GODEBUG=")); ok {
					got = append(got, string(v))
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("it runs with GODEBUG %q, want one, %q", got, tc.want)
			}
			// It keeps its name (ps, pgrep -x): the test binary's here.
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Base(os.Args[0])
			if len(want) > 15 {
				want = want[:15] // the kernel keeps 15 bytes
			}
			if got := strings.TrimSpace(string(comm)); got != want {
				t.Fatalf("it runs as %q, want %q", got, want)
			}
		})
	}
}
