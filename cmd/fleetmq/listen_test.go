package main

// Tests of the listener flags' errors: TLS flags that would silently do
// nothing, and an address already in use, are refused at start with the
// flags and FLEETMQ_* variables to change.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestTLSFlagRules: TLS files without -tls-listen, or -tls-listen without
// both files, are refused by serve and broker before anything starts (the
// data directory is not even created), naming the flags and variables;
// set through the environment they are refused the same way.
func TestTLSFlagRules(t *testing.T) {
	cert, key := testkit.SelfSignedFiles(t)
	const (
		unsetListen = " is set but -tls-listen (FLEETMQ_MQTT_TLS_LISTEN) is not"
		needs       = "-tls-listen 127.0.0.1:0 (FLEETMQ_MQTT_TLS_LISTEN) needs -tls-cert (FLEETMQ_TLS_CERT) and -tls-key (FLEETMQ_TLS_KEY) (PEM files): "
	)
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"cert and key without listener", []string{"-tls-cert", cert, "-tls-key", key},
			nil, "-tls-cert (FLEETMQ_TLS_CERT) and -tls-key (FLEETMQ_TLS_KEY) are set but -tls-listen (FLEETMQ_MQTT_TLS_LISTEN) is not: set it (e.g. :8883) to serve MQTT over TLS, or unset them"},
		{"cert without listener", []string{"-tls-cert", cert}, nil, "-tls-cert (FLEETMQ_TLS_CERT)" + unsetListen},
		{"key without listener", []string{"-tls-key", key}, nil, "-tls-key (FLEETMQ_TLS_KEY)" + unsetListen},
		{"cert from the environment", nil, map[string]string{"FLEETMQ_TLS_CERT": cert}, "-tls-cert (FLEETMQ_TLS_CERT)" + unsetListen},
		{"listener without files", []string{"-tls-listen", "127.0.0.1:0"}, nil, needs + "both are missing"},
		{"listener without key", []string{"-tls-listen", "127.0.0.1:0", "-tls-cert", cert}, nil, needs + "-tls-key is missing"},
		{"listener without cert", []string{"-tls-listen", "127.0.0.1:0", "-tls-key", key}, nil, needs + "-tls-cert is missing"},
		{"listener from the environment, key missing", []string{"-tls-cert", cert},
			map[string]string{"FLEETMQ_MQTT_TLS_LISTEN": "127.0.0.1:0"}, needs + "-tls-key is missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			dir := filepath.Join(t.TempDir(), "data")
			for _, cmd := range [][]string{
				{"serve", "-data", dir, "-listen", "127.0.0.1:0", "-http-listen", ""},
				{"broker", "-listen", "127.0.0.1:0"},
			} {
				err := refused(t, append(cmd, tc.args...)...)
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %q\nwant it to say %q", cmd[0], err, tc.want)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused serve created its data directory: %v", err)
			}
		})
	}

	// All three: MQTT over TLS is served.
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-data", dir, "-listen", "", "-http-listen", "",
			"-tls-listen", "127.0.0.1:0", "-tls-cert", cert, "-tls-key", key}, &out, &errOut)
	}()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "serve to listen on mqtts://", func() bool { return strings.Contains(out.String(), "mqtts://127.0.0.1:") })
}

// TestListenAddressInUse: each listener of serve and broker whose address
// is taken fails the start with the flag, the address and the variable;
// the variable is the one the command's help names.
func TestListenAddressInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	cert, key := testkit.SelfSignedFiles(t)
	tlsFiles := []string{"-tls-cert", cert, "-tls-key", key}
	cases := []struct {
		cmd, flag, env string
		extra          []string
	}{
		{"serve", "-listen", "FLEETMQ_MQTT_LISTEN", nil},
		{"serve", "-tls-listen", "FLEETMQ_MQTT_TLS_LISTEN", tlsFiles},
		{"serve", "-ws-listen", "FLEETMQ_MQTT_WS_LISTEN", nil},
		{"serve", "-http-listen", "FLEETMQ_HTTP_LISTEN", nil},
		{"serve", "-metrics-listen", "FLEETMQ_METRICS_LISTEN", nil},
		{"broker", "-listen", "FLEETMQ_MQTT_LISTEN", nil},
		{"broker", "-tls-listen", "FLEETMQ_MQTT_TLS_LISTEN", tlsFiles},
		{"broker", "-ws-listen", "FLEETMQ_MQTT_WS_LISTEN", nil},
		{"broker", "-http-listen", "FLEETMQ_HTTP_LISTEN", nil},
	}
	for _, tc := range cases {
		t.Run(tc.cmd+tc.flag, func(t *testing.T) {
			args := []string{tc.cmd, "-listen", "127.0.0.1:0"}
			if tc.cmd == "serve" {
				args = append(args, "-data", t.TempDir(), "-http-listen", "127.0.0.1:0")
			}
			args = append(append(args, tc.extra...), tc.flag, addr)
			err := refused(t, args...)
			want := fmt.Sprintf("%s %s (%s): address already in use", tc.flag, addr, tc.env)
			if err.Error() != want || !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("%q\nwant %q", err, want)
			}
			if help := flagHelp(t, tc.cmd, tc.flag); !strings.Contains(help, "["+tc.env+"]") {
				t.Fatalf("fleetmq %s -h describes %s as %q: not [%s]", tc.cmd, tc.flag, help, tc.env)
			}
		})
	}
}

// flagHelp returns the help text "fleetmq CMD -h" prints for a flag.
func flagHelp(t *testing.T, cmd, flag string) string {
	t.Helper()
	var out, errOut lockedBuffer
	run(context.Background(), []string{cmd, "-h"}, &out, &errOut)
	lines := strings.Split(errOut.String(), "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == flag && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	t.Fatalf("fleetmq %s -h does not list %s:\n%s", cmd, flag, errOut.String())
	return ""
}

// TestMaxKeepAliveFlag: "broker -max-keepalive 30" refuses a 3.1.1 client
// asking for a 60 s keep alive (mosquitto_pub says why) and takes one
// asking for 30 s; a value over 65535 is refused at start.
func TestMaxKeepAliveFlag(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_pub"); err != nil {
		t.Skip("mosquitto_pub is not installed (scripts/test.sh installs it)")
	}
	if err := refused(t, "broker", "-listen", "127.0.0.1:0", "-max-keepalive", "70000"); !strings.Contains(err.Error(), "-max-keepalive") {
		t.Fatalf("-max-keepalive 70000: %v, want an error naming the flag", err)
	}
	_, _, out := startBrokerOut(t, "-max-keepalive", "30")
	m := regexp.MustCompile(`mqtt://(127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no address in %q", out.String())
	}
	host, port, _ := net.SplitHostPort(m[1])
	pub := func(ka string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		b, err := exec.CommandContext(ctx, "mosquitto_pub", "-h", host, "-p", port, "-V", "mqttv311", "-k", ka,
			"-i", "ka-"+ka, "-t", "ka/t", "-m", "x").CombinedOutput()
		return string(b), err
	}
	if msg, err := pub("60"); err == nil || !strings.Contains(strings.ToLower(msg), "identifier rejected") {
		t.Fatalf("3.1.1 keep alive 60 under -max-keepalive 30: %v %q, want refused (identifier rejected)", err, msg)
	}
	if msg, err := pub("30"); err != nil {
		t.Fatalf("3.1.1 keep alive 30 under -max-keepalive 30: %v %q", err, msg)
	}
}
