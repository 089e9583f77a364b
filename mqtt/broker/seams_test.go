package broker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/internal/contract"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

func TestLocalRouterContract(t *testing.T) {
	contract.Router(t, func(*testing.T) broker.Router { return broker.LocalRouter{} })
}

func TestMemoryRetainedContract(t *testing.T) {
	contract.Retained(t, func(*testing.T) broker.Retained { return broker.NewMemoryRetained() })
}

func TestLocalOwnersContract(t *testing.T) {
	contract.SessionOwners(t, func(*testing.T) func(string) broker.SessionOwners {
		o := broker.NewLocalOwners()
		return func(string) broker.SessionOwners { return o }
	})
}

// TestTakeoverByAnotherNode runs two servers on one SessionOwners, as two
// nodes would share one: a client connecting to the second takes its
// session from the first, whose connection is closed.
func TestTakeoverByAnotherNode(t *testing.T) {
	owners := broker.NewLocalOwners()
	start := func(node string) (*broker.Server, string) {
		s, err := broker.New(broker.Options{Owners: owners, Node: node, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		ln, err := s.ListenTCP("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return s, ln.Addr().String()
	}
	srvA, a := start("a")
	_, b := start("b")
	lost := make(chan error, 1)
	dial := func(addr string) mqtt3.Client {
		o := mqtt3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("roamer").SetProtocolVersion(4).
			SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second).
			SetConnectionLostHandler(func(_ mqtt3.Client, err error) { lost <- err })
		c := mqtt3.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect to %s: %v", addr, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(0) })
		return c
	}
	first := dial(a)
	if c, ok, _ := owners.Owner("roamer"); !ok || c.Node != "a" {
		t.Fatalf("after connecting to a: owner %+v, %v; want node a", c, ok)
	}
	dial(b)
	if c, ok, _ := owners.Owner("roamer"); !ok || c.Node != "b" {
		t.Fatalf("after connecting to b: owner %+v, %v; want node b", c, ok)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to node a was not closed")
	}
	testkit.Eventually(t, 10*time.Second, "the first client to see its connection gone", func() bool { return !first.IsConnectionOpen() })
	testkit.Eventually(t, 10*time.Second, "node a to let go of the session", func() bool { return srvA.Stats().Sessions == 0 })
	// Node a ending its session did not free node b's claim.
	if c, ok, _ := owners.Owner("roamer"); !ok || c.Node != "b" {
		t.Fatalf("after the takeover: owner %+v, %v; want node b", c, ok)
	}
}
