package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestServersFitTheirProcessors: "fleetmq broker" runs on one processor
// while idle, on two once a client floods it, and on one again when the
// flood ends (package procs); with GOMAXPROCS in its environment it runs on
// that many whatever the load. The processors are read from its metrics.
func TestServersFitTheirProcessors(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to fit")
	}
	mqtt, metrics := startBrokerProcess(t)
	testkit.Eventually(t, 10*time.Second, "one processor while idle", func() bool { return processors(t, metrics) == 1 })

	stop := make(chan struct{})
	flooded := make(chan error, 1)
	go func() { flooded <- flood(mqtt, stop) }()
	testkit.Eventually(t, 15*time.Second, "two processors under a flood", func() bool {
		select {
		case err := <-flooded:
			t.Fatalf("the flood ended: %v", err)
		default:
		}
		return processors(t, metrics) == 2
	})
	close(stop)
	if err := <-flooded; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, "one processor after the flood", func() bool { return processors(t, metrics) == 1 })

	t.Setenv("GOMAXPROCS", "2")
	_, metrics = startBrokerProcess(t)
	if n := processors(t, metrics); n != 2 {
		t.Fatalf("with GOMAXPROCS=2 the broker runs on %d processors", n)
	}
}

// startBrokerProcess runs "fleetmq broker" with its metrics in a child process
// and returns its MQTT address and its metrics URL.
func startBrokerProcess(t *testing.T) (mqtt, metrics string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "broker", "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "mqtt://") {
				lines <- sc.Text()
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case line := <-lines:
		for _, f := range strings.Fields(line) {
			if a, ok := strings.CutPrefix(f, "mqtt://"); ok {
				mqtt = a
			}
			if strings.HasPrefix(f, "http://") {
				metrics = f
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fleetmq broker did not listen")
	}
	if mqtt == "" || !strings.HasSuffix(metrics, "/metrics") {
		t.Fatalf("fleetmq broker listens on mqtt %q, metrics %q", mqtt, metrics)
	}
	return mqtt, metrics
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
// messages, a thousand a write, until stop is closed (at most 30 s).
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
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return nil
		default:
		}
		nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	return fmt.Errorf("not stopped in 30 s")
}
