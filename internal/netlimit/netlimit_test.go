package netlimit_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/netlimit"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestBounds: connections over the per-address bound, then over the total,
// are closed at accept and counted apart; a closed connection (closed
// twice, too) frees its place exactly once.
func TestBounds(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := netlimit.New(tl, 3, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from net.IP) net.Conn {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}).Dial("tcp", tl.Addr().String())
		if err != nil {
			t.Skipf("dial from %v: %v", from, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closedAtOnce := func(c net.Conn, what string) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("%s: not closed: %v", what, err)
		}
	}
	a, b := net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)
	dial(a)
	dial(a)
	closedAtOnce(dial(a), "a third from one address")
	dial(b)
	closedAtOnce(dial(b), "a fourth in all")
	testkit.Eventually(t, 10*time.Second, "the refusals counted", func() bool {
		total, perAddr := ln.Refused()
		return total == 1 && perAddr == 1
	})
	first := <-accepted
	first.Close()
	first.Close() // a second close frees nothing more
	dial(b)
	closedAtOnce(dial(b), "a fifth once the freed place is taken")
	testkit.Eventually(t, 10*time.Second, "one more refusal", func() bool {
		total, _ := ln.Refused()
		return total == 2
	})
}

// TestRatePerAddress: an address gets its burst of new connections, then
// the ones over the rate are closed at accept and counted; another
// address has its own bucket.
func TestRatePerAddress(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := netlimit.New(tl, 0, 0).LimitRate(0.001, 3) // no refill within the test
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	defer func() {
		ln.Close()
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from net.IP) net.Conn {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}).Dial("tcp", tl.Addr().String())
		if err != nil {
			t.Skipf("dial from %v: %v", from, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)
	for range 3 {
		dial(a)
	}
	over := dial(a)
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(over); err != nil {
		t.Fatalf("a fourth connection within the burst of 3 was not closed: %v", err)
	}
	dial(b)
	testkit.Eventually(t, 10*time.Second, "one rate refusal", func() bool { return ln.RefusedRate() == 1 })
	if total, perAddr := ln.Refused(); total != 0 || perAddr != 0 {
		t.Fatalf("refused %d total, %d per address; want only the rate refusal", total, perAddr)
	}
}
