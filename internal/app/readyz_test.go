package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/app"
)

// readyz returns /readyz's status and body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestReadyzWhileStoreRefusesWrites: while the SQLite store cannot grow (a
// full disk), /readyz answers 503 saying why and the device's QoS 1
// publish waits for its PUBACK; once the store has room, /readyz is 200
// again, the waiting publish is acknowledged, and every acknowledged
// message is in history once.
func TestReadyzWhileStoreRefusesWrites(t *testing.T) {
	p := startPlatform(t, func(c *app.Config) { c.HTTPListen = "127.0.0.1:0" })
	tn := p.newTenant(t, "acme", "starter", false, "pump-17")
	p.synced(t)
	if code, body := readyz(t, p.HTTPAddr); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz before: %d %q", code, body)
	}
	dev := dialV5(t, p.MQTTAddr, "pump-17", tn.PubUser, tn.PubPass)
	topic := tn.topic("pump-17", "telemetry/load")

	// The device publishes numbered QoS 1 messages, each after the
	// previous one's PUBACK, until told to stop.
	var (
		mu       sync.Mutex
		acked    = map[string]bool{}
		errs     = make(chan error, 1)
		stop     = make(chan struct{})
		ended    = make(chan struct{})
		stopOnce sync.Once
	)
	halt := func() { stopOnce.Do(func() { close(stop) }); <-ended }
	defer halt()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	go func() {
		defer close(ended)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			payload := fmt.Sprintf("%d %s", i, strings.Repeat("x", 2048))
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			r, err := dev.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)})
			cancel()
			if err != nil || r == nil || r.ReasonCode != 0 {
				errs <- fmt.Errorf("publish %d: %v (response %+v)", i, err, r)
				return
			}
			mu.Lock()
			acked[payload] = true
			mu.Unlock()
		}
	}()
	eventually(t, "a few messages acknowledged", func() bool { return ackedCount() >= 5 })

	p.Store.SetMaxPages(1) // the disk is full
	var body string
	eventually(t, "/readyz to answer 503", func() bool {
		var code int
		code, body = readyz(t, p.HTTPAddr)
		return code == http.StatusServiceUnavailable
	})
	if !strings.HasPrefix(body, "store refuses writes: sqlstore: append history: database or disk is full") {
		t.Fatalf("/readyz body while the disk is full: %q", body)
	}
	if code, body := readyz(t, p.HTTPAddr); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz a moment later, the disk still full: %d %q", code, body)
	}
	// The publish in flight is not acknowledged while the store refuses it.
	before, attempts := ackedCount(), p.Ingest.Stats().StoreErrors
	eventually(t, "two more failed commit attempts", func() bool { return p.Ingest.Stats().StoreErrors >= attempts+2 })
	if n := ackedCount(); n != before {
		t.Fatalf("%d messages acknowledged while the store refused writes", n-before)
	}

	p.Store.SetMaxPages(0) // room again
	eventually(t, "/readyz to answer 200 again", func() bool {
		code, _ := readyz(t, p.HTTPAddr)
		return code == http.StatusOK
	})
	eventually(t, "the waiting publish acknowledged, and more", func() bool { return ackedCount() >= before+5 })
	halt()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	seen := map[string]int{}
	for _, r := range p.storedHistory(t, tn.ID) {
		seen[string(r.Payload)]++
	}
	mu.Lock()
	defer mu.Unlock()
	for payload := range acked {
		if seen[payload] != 1 {
			t.Fatalf("acknowledged message %.8q... is in history %d times, want once", payload, seen[payload])
		}
	}
}
