//go:build linux

package broker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestParkerDownStrangersGoOn: if the parker stops (its epoll wait
// failed), a stranger parked mid-CONNECT, and one that connects afterwards,
// are served from their own goroutines: each gets its CONNACK when its
// CONNECT is complete.
func TestParkerDownStrangersGoOn(t *testing.T) {
	s, err := New(Options{Logger: slog.New(slog.DiscardHandler), ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ln, err := s.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := packet.Encode(nil, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.Version311, ClientID: "p1", CleanStart: true}, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() net.Conn {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, what, cond)
	}
	connack := func(nc net.Conn, what string) {
		t.Helper()
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		h := make([]byte, 4)
		if _, err := io.ReadFull(nc, h); err != nil || packet.Type(h[0]>>4) != packet.CONNACK || h[3] != 0 {
			t.Fatalf("%s: read % x, %v; want a CONNACK accepting it", what, h, err)
		}
	}

	parked := dial()
	parked.Write(msg[:len(msg)/2])
	strangers := func() int { n, _ := s.parker.parked(); return n }
	waitFor("the stranger parked", func() bool { return strangers() == 1 })
	s.parker.close() // as after a failed epoll wait
	waitFor("the parked stranger let go", func() bool { return strangers() == 0 })
	parked.Write(msg[len(msg)/2:])
	connack(parked, "the stranger parked when the parker stopped")

	late := dial()
	time.Sleep(2 * strangerGrace) // a slow client: past the grace before its CONNECT
	msg[len(msg)-1] = '2'         // client id p2
	late.Write(msg)
	connack(late, "a slow stranger after the parker stopped")
}
