package broker_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// TestProxyProtocol: behind a load balancer that sends the PROXY protocol
// (Options.ProxyFrom), a client's address is the one the header carries,
// in version 2 (binary) and 1 (text): the connection's RemoteAddr says so
// and the per-address bound counts it, not the balancer's. A connection
// from the balancer without a header is refused.
func TestProxyProtocol(t *testing.T) {
	pol := &obsPolicy{}
	b := startBroker(t, broker.Options{Policy: pol, MaxConnsPerAddr: 1,
		ProxyFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	dst := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(b.Addr))
	// through opens a connection that says it comes from src.
	through := func(src string) net.Conn {
		t.Helper()
		nc, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		h := proxyproto.HeaderProxyFromAddrs(2, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(src)), dst)
		if _, err := h.WriteTo(nc); err != nil {
			t.Fatal(err)
		}
		return nc
	}
	remote := func(clientID string) string {
		ev := pol.of(clientID)
		if len(ev) == 0 {
			t.Fatalf("%s: no connection seen", clientID)
		}
		return ev[0].conn.RemoteAddr.String()
	}

	mqtttest.DialV5Over(t, through("203.0.113.7:50000"), mqtttest.Clean("first"))
	if got := remote("first"); got != "203.0.113.7:50000" {
		t.Fatalf("the client's address is %s, want the one in the PROXY header, 203.0.113.7:50000", got)
	}
	// Another device behind the same balancer: its own address, its own
	// share of the per-address bound.
	mqtttest.DialV5Over(t, through("[2001:db8::9]:40000"), mqtttest.Clean("second"))
	if got := remote("second"); got != "[2001:db8::9]:40000" {
		t.Fatalf("the second client's address is %s, want [2001:db8::9]:40000", got)
	}
	// The first device's address again: over its bound of one.
	if _, _, err := mqtttest.TryV5Over(t, through("203.0.113.7:50001"), mqtttest.Clean("third")); err == nil {
		t.Fatal("a second connection from 203.0.113.7 was accepted with a bound of one per address")
	}

	// Version 1, the text header.
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write([]byte("PROXY TCP4 198.51.100.20 127.0.0.1 41000 1883\r\n")); err != nil {
		t.Fatal(err)
	}
	mqtttest.DialV5Over(t, nc, mqtttest.Clean("textual"))
	if got := remote("textual"); got != "198.51.100.20:41000" {
		t.Fatalf("the client's address is %s, want 198.51.100.20:41000 from the version 1 header", got)
	}

	// The balancer's address without a header: refused.
	if _, _, err := mqtttest.TryV5(t, b.Addr, mqtttest.Clean("bare")); err == nil {
		t.Fatal("a connection from the load balancer without a PROXY header was accepted")
	}
	if ev := pol.of("bare"); len(ev) != 0 {
		t.Fatalf("a connection without a PROXY header reached the policy: %+v", ev)
	}
}

// TestProxyProtocolOthersAsTheyAre: a client that is not one of the
// load balancers connects without a header, as without ProxyFrom.
func TestProxyProtocolOthersAsTheyAre(t *testing.T) {
	pol := &obsPolicy{}
	b := startBroker(t, broker.Options{Policy: pol, ProxyFrom: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	c := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("direct"))
	if got, want := pol.of("direct")[0].conn.RemoteAddr.String(), c.Conn.LocalAddr().String(); got != want {
		t.Fatalf("a direct client's address is %s, want its own %s", got, want)
	}
}

// TestProxyProtocolSilentBalancer: connections from the load balancer
// that send no header yet (it sends it with the client's first bytes, or
// the peer is slow) hold no one else up: a client whose header comes at
// once behind three silent ones gets its CONNACK while they wait.
func TestProxyProtocolSilentBalancer(t *testing.T) {
	b := startBroker(t, broker.Options{ProxyFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	dst := net.TCPAddrFromAddrPort(netip.MustParseAddrPort(b.Addr))
	for range 3 {
		// Dialled first: ahead of the next one in the accept queue.
		nc, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	start := time.Now()
	nc, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	h := proxyproto.HeaderProxyFromAddrs(2, net.TCPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.7:50000")), dst)
	if _, err := h.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	mqtttest.DialV5Over(t, nc, mqtttest.Clean("prompt"))
	// The header wait is 5 s: behind three silent connections read one
	// after the other, the CONNACK would take 15.
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("a client with a prompt PROXY header got its CONNACK after %v, behind three silent connections", d)
	}
}

// TestProxyProtocolCloseEndsHeaderWaits: closing the server closes the
// connections from the load balancer still waiting for their header.
func TestProxyProtocolCloseEndsHeaderWaits(t *testing.T) {
	srv, err := broker.New(broker.Options{ProxyFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var silent []net.Conn
	for range 5 {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		silent = append(silent, nc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	srv.Close(ctx)
	for i, nc := range silent {
		// Closed by the server well before the 5 s header wait ends.
		nc.SetReadDeadline(time.Now().Add(3 * time.Second))
		// EOF, or a reset for one still in the accept queue when the
		// listener closed: closed by the server either way.
		var ne net.Error
		if _, err := nc.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("silent connection %d after Close: read %v, want it closed by the server", i, err)
		}
	}
}
