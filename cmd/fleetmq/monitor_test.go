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

// TestServeQuietsTheRuntimeMonitor: "fleetmq serve" runs with the Go
// runtime's monitor kept out of its deep sleep (monitor_linux.go), as the
// same process (its PID is the one started), adding to the operator's
// GODEBUG; an operator who names schedtrace gets what they asked for.
func TestServeQuietsTheRuntimeMonitor(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"", monitorSetting},
		{"gctrace=0", "gctrace=0," + monitorSetting},
		{"schedtrace=0", "schedtrace=0"},
	} {
		t.Run("GODEBUG="+tc.env, func(t *testing.T) {
			t.Setenv("GODEBUG", tc.env)
			p := startServe(t, t.TempDir()) // waits until it serves MQTT
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
				t.Fatalf("serve runs with GODEBUG %q, want one, %q", got, tc.want)
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
				t.Fatalf("serve runs as %q, want %q", got, want)
			}
		})
	}
}
