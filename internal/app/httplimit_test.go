package app_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/app"
)

// TestHTTPConnectionsAreBounded: idle HTTP connections from one address
// beyond its share are closed at once (and counted), the others keep
// working, a place freed is free again, and MQTT devices still connect.
func TestHTTPConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	p := startPlatform(t, func(c *app.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.HTTPLimits = app.HTTPLimits{MaxConns: 100, MaxConnsPerAddr: 5}
	})
	A := p.newTenant(t, "A", "starter", false, "dev1")
	p.synced(t)

	var idle []net.Conn
	for range 5 {
		nc, err := net.Dial("tcp", p.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		idle = append(idle, nc)
	}
	over, err := net.Dial("tcp", p.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	over.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := io.ReadAll(over); err != nil {
		t.Fatalf("the sixth idle connection from one address was not closed: %v", err)
	}
	eventually(t, "the refusal counted", func() bool {
		_, perAddr := httpRefused(p)
		return perAddr == 1
	})

	dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass) // MQTT is not touched

	idle[0].Close() // a place frees up
	eventually(t, "a request to get through once a place is free", func() bool {
		resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + p.HTTPAddr + "/livez")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// httpRefused reads fleetmq_http_connections_refused_total from the
// platform's registry.
func httpRefused(p *platform) (total, perAddr float64) {
	fams, err := p.Metrics.Gather()
	if err != nil {
		return -1, -1
	}
	for _, f := range fams {
		if f.GetName() != "fleetmq_http_connections_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			switch m.GetLabel()[0].GetValue() {
			case "total":
				total = m.GetCounter().GetValue()
			case "per_address":
				perAddr = m.GetCounter().GetValue()
			}
		}
	}
	return total, perAddr
}
