package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestServersFitTheirProcessors: "fleetmq broker" runs on one processor
// while idle, on two or more once a client floods it, and on one again
// when the flood ends (package procs); with GOMAXPROCS in its environment
// it runs on that many whatever the load; with FLEETMQ_FIT_PROCESSORS=0
// (or false, off) on all of them. The processors are read from its
// metrics.
func TestServersFitTheirProcessors(t *testing.T) {
	if runtime.NumCPU() < 2 || (os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < 2) {
		t.Skip("one CPU (or a CPU limit of one): nothing to fit")
	}
	t.Setenv("GOMAXPROCS", "") // the operator's setting would hold in the broker
	t.Setenv(fitEnv, "")
	mqtt, metrics := startBrokerProcess(t)
	waitProcessors(t, metrics, 1, false, 10*time.Second, nil)

	load, _ := mqtttest.ConnectRaw(t, mqtt, &packet.Connect{ClientID: "load", KeepAlive: 60, CleanStart: true, ProtocolLevel: packet.Version311})
	stop := make(chan struct{})
	flooded := make(chan error, 1)
	go func() { flooded <- flood(load, stop) }()
	waitProcessors(t, metrics, 2, true, 15*time.Second, flooded)
	raised := metricValue(t, metrics, `fleetmq_processor_raises_total{reason="cpu"}`) +
		metricValue(t, metrics, `fleetmq_processor_raises_total{reason="wait"}`)
	if raised < 1 {
		t.Errorf("the broker runs on more processors, and its metrics count %v raises", raised)
	}
	close(stop)
	if err := <-flooded; err != nil {
		t.Fatal(err)
	}
	waitProcessors(t, metrics, 1, false, 30*time.Second, nil)

	for _, off := range []string{"0", "false", "off"} {
		t.Setenv(fitEnv, off)
		_, metrics = startBrokerProcess(t)
		if n := processors(t, metrics); n < 2 {
			t.Fatalf("with %s=%s the broker runs on %d processors; want all of them", fitEnv, off, n)
		}
	}

	t.Setenv(fitEnv, "")
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
// 250 ms (a scrape is work for the server too) until they are want (at
// least want, with atLeast: a load raises them by doubling, and a machine
// with more than two CPUs may pass two between two scrapes), and fails the
// test when within passes first or ended says the load did.
func waitProcessors(t *testing.T, url string, want int, atLeast bool, within time.Duration, ended <-chan error) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	got := processors(t, url)
	for got != want && !(atLeast && got > want) {
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
	return int(metricValue(t, url, "go_sched_gomaxprocs_threads"))
}

// metricValue reads the sample named (with its labels, as exposed) from
// the metrics at url.
func metricValue(t *testing.T, url, sample string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s %q", sample, v)
			}
			return n
		}
	}
	t.Fatalf("no %s in %s", sample, url)
	return 0
}

// flood publishes QoS 0 messages on c, a thousand a write followed by a
// PINGREQ whose answer it waits for (so that little is left to read when
// it stops), until stop is closed (at most 30 s).
func flood(c *mqtttest.Raw, stop <-chan struct{}) error {
	pub := &packet.Publish{Topic: "t/load", Payload: []byte(`{"seq":1,"temp":21.5}`)}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return nil
		default:
		}
		c.Conn.SetDeadline(time.Now().Add(10 * time.Second))
		for range 1000 {
			if err := c.Send(pub, false); err != nil {
				return err
			}
		}
		if err := c.Send(&packet.Pingreq{}, true); err != nil {
			return err
		}
		if p, err := c.ReadPacket(); err != nil || p.Type() != packet.PINGRESP {
			return fmt.Errorf("the answer to PINGREQ: %v, %v", p, err)
		}
	}
	return fmt.Errorf("not stopped in 30 s")
}
