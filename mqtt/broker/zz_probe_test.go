package broker_test

import (
	"crypto/tls"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

func TestProbeTLSStall(t *testing.T) {
	cert, _ := testkit.SelfSigned(t)
	b := startBroker(t, broker.Options{ConnectTimeout: 500 * time.Millisecond})
	ln, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	var cs []net.Conn
	for i := 0; i < 150; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		switch i % 3 {
		case 0:
			c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}) // record header, no body
		case 1:
			c.Write([]byte{0x16})
		}
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("goroutines %d -> %d, conns %d, strangers %d", base, runtime.NumGoroutine(), b.Stats().Connections, b.Stats().StrangersWaiting)
	start := time.Now()
	eventually(t, "all closed", func() bool { return b.Stats().Connections == 0 })
	t.Logf("closed after %v; goroutines %d closes %v", time.Since(start), runtime.NumGoroutine(), b.Stats().Closes)
	for _, c := range cs {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 10)); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("not closed")
			}
		}
	}
}
