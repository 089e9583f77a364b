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
	accepted := serveLimited(t, ln)
	addr := tl.Addr().String()
	a, b := net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)
	dialFrom(t, addr, a)
	dialFrom(t, addr, a)
	closedAtOnce(t, dialFrom(t, addr, a), "a third from one address")
	dialFrom(t, addr, b)
	closedAtOnce(t, dialFrom(t, addr, b), "a fourth in all")
	testkit.Eventually(t, 10*time.Second, "the refusals counted", func() bool {
		total, perAddr := ln.Refused()
		return total == 1 && perAddr == 1
	})
	first := <-accepted
	first.Close()
	first.Close() // a second close frees nothing more
	dialFrom(t, addr, b)
	closedAtOnce(t, dialFrom(t, addr, b), "a fifth once the freed place is taken")
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
	serveLimited(t, ln)
	addr := tl.Addr().String()
	a, b := net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)
	for range 3 {
		dialFrom(t, addr, a)
	}
	closedAtOnce(t, dialFrom(t, addr, a), "a fourth connection after the burst of 3")
	dialFrom(t, addr, b)
	testkit.Eventually(t, 10*time.Second, "one rate refusal", func() bool { return ln.RefusedRate() == 1 })
	if total, perAddr := ln.Refused(); total != 0 || perAddr != 0 {
		t.Fatalf("refused %d total, %d per address; want only the rate refusal", total, perAddr)
	}
}

// serveLimited runs ln's accept loop until the test ends and returns the
// connections it accepts (those left are closed at the end).
func serveLimited(t *testing.T, ln *netlimit.Listener) <-chan net.Conn {
	accepted := make(chan net.Conn, 16)
	t.Cleanup(func() {
		ln.Close()
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return accepted
}

// dialFrom connects to addr from a loopback address (skipping the test
// where the machine has no such address).
func dialFrom(t *testing.T, addr string, from net.IP) net.Conn {
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}).Dial("tcp", addr)
	if err != nil {
		t.Skipf("dial from %v: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedAtOnce fails unless the server closed c.
func closedAtOnce(t *testing.T, c net.Conn, what string) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("%s: not closed: %v", what, err)
	}
}
