package broker_test

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// waitFor is how long a test waits for something it expects to happen.
const waitFor = 10 * time.Second

// testBroker is an in-process broker on a loopback port.
type testBroker struct {
	*broker.Server
	Addr string
}

// startBroker starts a broker with opts on 127.0.0.1 and closes it when the
// test ends.
func startBroker(tb testing.TB, opts broker.Options) *testBroker {
	tb.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler) // tests that read the log set their own
	}
	srv, err := broker.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		srv.Close(ctx)
	})
	return &testBroker{Server: srv, Addr: ln.Addr().String()}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, waitFor, what, cond)
}

// wsURL turns a listener address into the broker's WebSocket URL.
func wsURL(addr string) string {
	u := url.URL{Scheme: "ws", Host: addr, Path: "/mqtt"}
	return u.String()
}
