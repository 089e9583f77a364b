package broker_test

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// hdMosquitto runs a mosquitto client command against the broker at addr
// and returns its standard output; it fails the test if the command fails.
func hdMosquitto(tb testing.TB, addr string, name string, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hdMosquittoCmd(ctx, addr, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		tb.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

func hdMosquittoCmd(ctx context.Context, addr string, name string, args ...string) *exec.Cmd {
	host, port, _ := net.SplitHostPort(addr)
	return exec.CommandContext(ctx, name, append([]string{"-h", host, "-p", port}, args...)...)
}

// TestMosquittoClients: mosquitto_sub and mosquitto_pub (MQTT 3.1 with
// -V mqttv31, 3.1.1 and 5) exchange messages at QoS 0, 1 and 2 through the
// broker, and a retained message reaches a later subscriber.
func TestMosquittoClients(t *testing.T) {
	testkit.NeedTools(t, "mosquitto_pub", "mosquitto_sub")
	for _, v := range []string{"mqttv31", "mqttv311", "mqttv5"} {
		t.Run(v, func(t *testing.T) {
			b := startBroker(t, broker.Options{})
			prefix := "mosq/" + v
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sub := hdMosquittoCmd(ctx, b.Addr, "mosquitto_sub", "-V", v, "-i", "sub-"+v,
				"-t", prefix+"/+/x", "-q", "2", "-C", "3", "-W", "10", "-v")
			var out, errb bytes.Buffer
			sub.Stdout, sub.Stderr = &out, &errb
			if err := sub.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- sub.Wait() }()
			eventually(t, "mosquitto_sub subscribed", func() bool {
				select {
				case err := <-done:
					t.Fatalf("mosquitto_sub ended before subscribing: %v\n%s", err, errb.String())
				default:
				}
				return b.Stats().Subscriptions > 0
			})

			want := make([]string, 0, 3)
			for q := range 3 {
				qs := string(rune('0' + q))
				tp := prefix + "/q" + qs + "/x"
				hdMosquitto(t, b.Addr, "mosquitto_pub", "-V", v, "-i", "pub-"+v+"-"+qs, "-q", qs, "-t", tp, "-m", "payload "+qs)
				want = append(want, tp+" payload "+qs)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("mosquitto_sub: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
				}
			case <-ctx.Done():
				t.Fatalf("mosquitto_sub did not finish\nstdout: %s", out.String())
			}
			// The publishers are separate connections, so their messages
			// may be routed in any order.
			got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("mosquitto_sub printed %q, want %q", got, want)
			}

			// Retained: set by mosquitto_pub -r, received by a later
			// mosquitto_sub.
			hdMosquitto(t, b.Addr, "mosquitto_pub", "-V", v, "-q", "1", "-r", "-t", prefix+"/retained", "-m", "kept")
			if got := hdMosquitto(t, b.Addr, "mosquitto_sub", "-V", v, "-t", prefix+"/#", "-C", "1", "-W", "10", "-v"); got != prefix+"/retained kept\n" {
				t.Fatalf("later subscriber got %q", got)
			}
		})
	}
}
