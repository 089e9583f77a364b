package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
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

// TestOptionsRetainedIsTheStore: a server given a retained store keeps
// its retained messages there and reads them from there.
func TestOptionsRetainedIsTheStore(t *testing.T) {
	rs := broker.NewMemoryRetained()
	s, err := broker.New(broker.Options{Retained: rs, StatePath: filepath.Join(t.TempDir(), "state"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s.Publish(&broker.Message{Topic: "r/a", Payload: []byte("kept"), QoS: 1, Retain: true})
	if n := rs.Len(); n != 1 {
		t.Fatalf("the given store holds %d messages, want 1", n)
	}
	rs.Set(&broker.Message{Topic: "r/b", Payload: []byte("set elsewhere"), QoS: 1, Retain: true, Created: time.Now()})
	got, err := s.Retained("r/#", 0)
	if err != nil || len(got) != 2 || string(got[1].Payload) != "set elsewhere" {
		t.Fatalf("Retained = %+v, %v; want both, read from the given store", got, err)
	}
	if n, _, _ := s.RetainedUnder("r/x"); n != 2 {
		t.Fatalf("RetainedUnder counts %d, want 2", n)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// failingOwners cannot reach its shared record.
type failingOwners struct{ *broker.LocalOwners }

func (failingOwners) Claim(string, string, bool) (broker.Claim, error) {
	return broker.Claim{}, errors.New("the shared record cannot be reached")
}

// TestClaimErrorRefusesConnect: a session that cannot be claimed is not
// served: CONNACK Server unavailable.
func TestClaimErrorRefusesConnect(t *testing.T) {
	s, err := broker.New(broker.Options{Owners: failingOwners{broker.NewLocalOwners()}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ln, err := s.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := mqtt3.NewClientOptions().AddBroker("tcp://" + ln.Addr().String()).SetClientID("unclaimed").SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second)
	c := mqtt3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("connect timed out")
	}
	if err := tok.Error(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "unavailable") {
		t.Fatalf("connect: %v; want refused, server unavailable", err)
	}
}
