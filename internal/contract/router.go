package contract

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// Router runs the contract of broker.Router against the routers
// newRouter returns (a new one per case), each in a server of its own
// with MQTT 3.1.1 clients: a routed message reaches each local subscriber
// once and in order; Server.DeliverLocal reaches the local subscribers
// without being routed or retained; interest (Subscribed, Unsubscribed)
// follows the sessions' subscriptions, shared ones with their group.
func Router(t *testing.T, newRouter func(t *testing.T) broker.Router) {
	t.Run("each message once, in order", func(t *testing.T) {
		srv, rec, addr := routerServer(t, newRouter(t))
		got := subscriber(t, addr, "order-sub", "rt/#")
		const n = 100
		for i := range n {
			srv.Publish(&broker.Message{Topic: "rt/a", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)})
		}
		srv.Publish(&broker.Message{Topic: "rt/b", QoS: 1, Payload: []byte("end")})
		for i := range n {
			if p := next(t, got); p != fmt.Sprint(i) {
				t.Fatalf("message %d: got %q, want %q (lost, repeated or reordered)", i, p, fmt.Sprint(i))
			}
		}
		if p := next(t, got); p != "end" {
			t.Fatalf("after the %d messages: got %q, want end", n, p)
		}
		if r := rec.routes.Load(); r != n+1 {
			t.Fatalf("Route called %d times, want %d", r, n+1)
		}
		// A second barrier comes right after the first: nothing was
		// delivered twice behind it.
		srv.Publish(&broker.Message{Topic: "rt/b", QoS: 1, Payload: []byte("end2")})
		if p := next(t, got); p != "end2" {
			t.Fatalf("after end: got %q, want end2", p)
		}
	})

	t.Run("DeliverLocal is neither routed nor retained", func(t *testing.T) {
		srv, rec, addr := routerServer(t, newRouter(t))
		got := subscriber(t, addr, "remote-sub", "rt/#")
		now := time.Now()
		srv.DeliverLocal(&broker.Message{Topic: "rt/remote", QoS: 1, Retain: true, Payload: []byte("from another node"),
			Created: now, Expiry: now.Add(time.Hour)})
		if p := next(t, got); p != "from another node" {
			t.Fatalf("got %q, want the delivered message", p)
		}
		if r := rec.routes.Load(); r != 0 {
			t.Fatalf("DeliverLocal called Route %d times, want 0", r)
		}
		if rs, err := srv.Retained("rt/#", 0); err != nil || len(rs) != 0 {
			t.Fatalf("retained after DeliverLocal: %v, %v; want none", rs, err)
		}
	})

	t.Run("a Deliverer's messages arrive in order, its writes made at Flush", func(t *testing.T) {
		srv, rec, addr := routerServer(t, newRouter(t))
		got := subscriber(t, addr, "deliverer-sub", "rt/#")
		d := srv.NewDeliverer()
		now := time.Now()
		const n = 100 // more than the inflight window: the rest follow the acknowledgements
		for i := range n {
			d.DeliverLocalUnshared(&broker.Message{Topic: "rt/remote", QoS: 1, Payload: fmt.Appendf(nil, "%d", i),
				Created: now, Expiry: now.Add(time.Hour)})
			if i%7 == 6 {
				d.Flush() // as a receiver does when no more messages wait
			}
		}
		d.Flush()
		for i := range n {
			if p := next(t, got); p != fmt.Sprint(i) {
				t.Fatalf("message %d: got %q, want %q (lost, repeated or reordered)", i, p, fmt.Sprint(i))
			}
		}
		if r := rec.routes.Load(); r != 0 {
			t.Fatalf("a Deliverer called Route %d times, want 0", r)
		}
	})

	t.Run("interest follows subscriptions", func(t *testing.T) {
		_, rec, addr := routerServer(t, newRouter(t))
		a := dial(t, addr, "interest-a", true)
		wait(t, "subscribe", a.SubscribeMultiple(map[string]byte{"in/a": 1, "$share/g/in/b": 1}, nil))
		// SUBACK is written after the index (and the router) learned of
		// the subscription.
		rec.want(t, map[string]int{"in/a": 1, "$share/g/in/b": 1})
		b := dial(t, addr, "interest-b", false) // a persistent session
		wait(t, "subscribe", b.Subscribe("in/a", 0, nil))
		wait(t, "resubscribe", b.Subscribe("in/a", 1, nil)) // the same filter again: no new interest
		rec.want(t, map[string]int{"in/a": 2, "$share/g/in/b": 1})
		wait(t, "unsubscribe", a.Unsubscribe("in/a"))
		rec.want(t, map[string]int{"in/a": 1, "$share/g/in/b": 1})
		a.Disconnect(0) // a clean session ends with its connection
		testkit.Eventually(t, within, "the ended session's interest to go", func() bool {
			return rec.interest("$share/g/in/b") == 0
		})
		b.Disconnect(0) // a persistent session keeps its subscriptions offline
		rec.want(t, map[string]int{"in/a": 1, "$share/g/in/b": 0})
		dial(t, addr, "interest-b", true) // a clean start ends the stored session
		testkit.Eventually(t, within, "the replaced session's interest to go", func() bool {
			return rec.interest("in/a") == 0
		})
		rec.want(t, map[string]int{"in/a": 0, "$share/g/in/b": 0})
	})
}

// recorder counts what the server asks of the router under test and
// passes every call on.
type recorder struct {
	broker.Router
	routes   atomic.Int64
	mu       sync.Mutex
	counts   map[string]int
	negative []string
}

func (r *recorder) Route(m *broker.Message, local broker.Local) {
	r.routes.Add(1)
	r.Router.Route(m, local)
}

func (r *recorder) Subscribed(filter string) {
	r.mu.Lock()
	r.counts[filter]++
	r.mu.Unlock()
	r.Router.Subscribed(filter)
}

func (r *recorder) Unsubscribed(filter string) {
	r.mu.Lock()
	r.counts[filter]--
	if r.counts[filter] < 0 {
		r.negative = append(r.negative, filter)
	}
	r.mu.Unlock()
	r.Router.Unsubscribed(filter)
}

func (r *recorder) interest(filter string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[filter]
}

func (r *recorder) want(t *testing.T, want map[string]int) {
	t.Helper()
	r.mu.Lock()
	negative := r.negative
	r.mu.Unlock()
	if len(negative) > 0 {
		t.Fatalf("more Unsubscribed than Subscribed calls for %q", negative)
	}
	for f, n := range want {
		if got := r.interest(f); got != n {
			t.Fatalf("interest in %q: %d, want %d", f, got, n)
		}
	}
}

func routerServer(t *testing.T, r broker.Router) (*broker.Server, *recorder, string) {
	t.Helper()
	rec := &recorder{Router: r, counts: make(map[string]int)}
	srv, err := broker.New(broker.Options{Router: rec, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, rec, ln.Addr().String()
}

func dial(t *testing.T, addr, id string, clean bool) mqtt3.Client {
	t.Helper()
	o := mqtt3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetProtocolVersion(4).
		SetCleanSession(clean).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(within).SetOrderMatters(true)
	c := mqtt3.NewClient(o)
	wait(t, "connect "+id, c.Connect())
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

func subscriber(t *testing.T, addr, id, filter string) <-chan string {
	t.Helper()
	got := make(chan string, 1000)
	c := dial(t, addr, id, true)
	wait(t, "subscribe "+filter, c.Subscribe(filter, 1, func(_ mqtt3.Client, m mqtt3.Message) { got <- string(m.Payload()) }))
	return got
}

func next(t *testing.T, got <-chan string) string {
	t.Helper()
	select {
	case p := <-got:
		return p
	case <-time.After(within):
		t.Fatal("no message within", within)
		return ""
	}
}

func wait(t *testing.T, what string, tok mqtt3.Token) {
	t.Helper()
	if !tok.WaitTimeout(within) {
		t.Fatalf("%s: timed out", what)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
