package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServersFitTheirProcessors: "fleetmq broker" runs on one processor
// while idle, on two once a client floods it, and on one again when the
// flood ends (package procs); with GOMAXPROCS in its environment it runs on
// that many whatever the load. The processors are read from its metrics.
func TestServersFitTheirProcessors(t *testing.T) {
	if runtime.NumCPU() < 2 || (os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < 2) {
		t.Skip("one CPU (or a CPU limit of one): nothing to fit")
	}
	t.Setenv("GOMAXPROCS", "") // the operator's setting would hold in the broker
	mqtt, metrics := startBrokerProcess(t)
	waitProcessors(t, metrics, 1, 10*time.Second, nil)

	stop := make(chan struct{})
	flooded := make(chan error, 1)
	go func() { flooded <- flood(mqtt, stop) }()
	waitProcessors(t, metrics, 2, 15*time.Second, flooded)
	close(stop)
	if err := <-flooded; err != nil {
		t.Fatal(err)
	}
	waitProcessors(t, metrics, 1, 30*time.Second, nil)

	t.Setenv("GOMAXPROCS", "2")
	_, metrics = startBrokerProcess(t)
	if n := processors(t, metrics); n != 2 {
		t.Fatalf("with GOMAXPROCS=2 the broker runs on %d processors", n)
	}
}

// startBrokerProcess runs "fleetmq broker" with its metrics in a child
// process and returns its MQTT address and its metrics URL.
func startBrokerProcess(t *testing.T) (mqtt, metrics string) {
	t.Helper()
	p := startChild(t, "broker", "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0")
	if !strings.HasSuffix(p.http, "/metrics") {
		t.Fatalf("fleetmq broker serves its metrics on %q", p.http)
	}
	return p.addr, "http://" + p.http
}

// waitProcessors reads the processors from the metrics at url every
// 250 ms (a scrape is work for the server too) until they are want, and
// fails the test when within passes first or ended says the load did.
func waitProcessors(t *testing.T, url string, want int, within time.Duration, ended <-chan error) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	got := processors(t, url)
	for got != want {
		select {
		case err := <-ended:
			t.Fatalf("the load ended: %v", err)
		case <-deadline:
			t.Fatalf("the broker runs on %d processors after %v; want %d", got, within, want)
		case <-tick.C:
			got = processors(t, url)
		}
	}
}

// processors reads go_sched_gomaxprocs_threads from the metrics at url.
func processors(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_sched_gomaxprocs_threads "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("go_sched_gomaxprocs_threads %q", v)
			}
			return n
		}
	}
	t.Fatalf("no go_sched_gomaxprocs_threads in %s", url)
	return 0
}

// flood connects to addr as an MQTT 3.1.1 client and publishes QoS 0
// messages, a thousand a write followed by a PINGREQ whose answer it
// waits for (so that little is left to read when it stops), until stop is
// closed (at most 30 s).
func flood(addr string, stop <-chan struct{}) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	connect := []byte{0x10, 16, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 4, 'l', 'o', 'a', 'd'}
	if _, err := nc.Write(connect); err != nil {
		return err
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	connack := make([]byte, 4)
	if _, err := io.ReadFull(nc, connack); err != nil || connack[0] != 0x20 || connack[3] != 0 {
		return fmt.Errorf("CONNACK % x: %v", connack, err)
	}
	topic, payload := "t/load", []byte(`{"seq":1,"temp":21.5}`)
	var buf bytes.Buffer
	for range 1000 {
		buf.WriteByte(0x30)
		buf.WriteByte(byte(2 + len(topic) + len(payload)))
		buf.WriteByte(0)
		buf.WriteByte(byte(len(topic)))
		buf.WriteString(topic)
		buf.Write(payload)
	}
	buf.Write([]byte{0xC0, 0}) // PINGREQ
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return nil
		default:
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(buf.Bytes()); err != nil {
			return err
		}
		if _, err := io.ReadFull(nc, connack[:2]); err != nil || connack[0] != 0xD0 {
			return fmt.Errorf("PINGRESP % x: %v", connack[:2], err)
		}
	}
	return fmt.Errorf("not stopped in 30 s")
}
