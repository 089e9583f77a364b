package broker_test

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// connectHeader is a CONNECT fixed header declaring remaining bytes.
func connectHeader(remaining int) []byte {
	b := []byte{byte(packet.CONNECT) << 4}
	for {
		d := byte(remaining % 128)
		remaining /= 128
		if remaining > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if remaining == 0 {
			return b
		}
	}
}

// TestStrangersGetMemoryForWhatTheySend: before a connection has
// authenticated, the broker's memory for it grows with the bytes it sent,
// not with what its CONNECT header declares; a CONNECT declared over
// MaxConnectSize, or a first packet other than CONNECT, is refused at its
// header.
func TestStrangersGetMemoryForWhatTheySend(t *testing.T) {
	b := startBroker(t, broker.Options{ConnectTimeout: time.Minute})

	for _, first := range [][]byte{connectHeader(broker.DefaultMaxConnectSize), {byte(packet.PUBLISH) << 4, 0xff, 0xff, 0x3f}} {
		nc, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(first)
		nc.SetReadDeadline(time.Now().Add(waitFor))
		if _, err := io.ReadAll(nc); err != nil {
			t.Fatalf("% x: the connection was not closed at once: %v", first, err)
		}
		nc.Close()
	}

	const socks = 200
	declared := broker.DefaultMaxConnectSize - 100 // allowed: the body may still come
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	in0 := b.Stats().BytesIn
	sent := 0
	for range socks {
		nc, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		msg := append(connectHeader(declared), "\x00\x04MQTT\x05"...) // then silence
		if _, err := nc.Write(msg); err != nil {
			t.Fatal(err)
		}
		sent += len(msg)
	}
	eventually(t, "the broker to read every stranger's first bytes", func() bool { return b.Stats().BytesIn-in0 >= int64(sent) })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perSocket := (int64(after.HeapInuse) - int64(before.HeapInuse)) / socks
	t.Logf("heap in use per silent stranger that declared %d bytes: %d bytes", declared, perSocket)
	if perSocket > 8<<10 {
		t.Fatalf("%d bytes of heap per stranger that sent %d bytes and declared %d; want at most 8 KiB", perSocket, len(connectHeader(declared))+7, declared)
	}
}
