package app_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/app"
)

// TestStalledExportsHoldNoStoreConnection: tenants open more whole-history
// exports than the store has connections and never read them; another
// tenant's QoS 1 messages are still acknowledged, its history pages still
// answer and /readyz stays 200, because an export holds a store connection
// only while it reads a batch, never while it waits on the socket. And one
// account runs at most history.RequestsPerAccount history requests at once.
func TestStalledExportsHoldNoStoreConnection(t *testing.T) {
	t.Parallel()
	p := startPlatform(t, func(c *app.Config) { c.HTTPListen = "127.0.0.1:0" })
	tokens := map[string]string{}
	newTenant := func(name string) *tenant {
		tn := p.newTenant(t, name, "starter", false, "dev1")
		if err := p.Service.SetAddOn(p.ctx, tn.ID, fleetmq.AddOnHistoryDownload, true); err != nil {
			t.Fatal(err)
		}
		_, tok, err := p.Service.CreateRESTToken(p.ctx, tn.ID, control.NewRESTToken{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[tn.ID] = tok
		return tn
	}
	// Three attackers with ~12 MB of history each: more than the sockets
	// of an export can buffer.
	var attackers []*tenant
	payload := `{"v":"` + strings.Repeat("x", 2000) + `"}`
	for a := range 3 {
		tn := newTenant(fmt.Sprintf("attacker%d", a))
		attackers = append(attackers, tn)
		for i := range 6 {
			var recs []*fleetmq.Record
			for j := range 1000 {
				recs = append(recs, &fleetmq.Record{AccountID: tn.ID, ClientID: "dev1", Topic: tn.topic("dev1", "telemetry/t"), Class: "telemetry",
					QoS: 1, PublishedQoS: 1, Payload: []byte(payload), Received: p.clock.Now().Add(time.Duration(i*1000+j) * time.Microsecond)})
			}
			if err := p.Store.AppendHistory(p.ctx, recs); err != nil {
				t.Fatal(err)
			}
		}
	}
	B := newTenant("B")
	p.synced(t)

	export := func(tn *tenant) int {
		nc, err := net.Dial("tcp", p.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		fmt.Fprintf(nc, "GET /api/v1/subscriber/history?format=ndjson HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", tokens[tn.ID])
		resp, err := http.ReadResponse(bufio.NewReaderSize(nc, 1024), nil)
		if err != nil {
			t.Fatalf("export: %v", err)
		}
		return resp.StatusCode // and read no more
	}
	for _, tn := range attackers { // 6 stalled exports; the SQLite store has 4 connections
		for range history.RequestsPerAccount {
			if code := export(tn); code != http.StatusOK {
				t.Fatalf("export: %d", code)
			}
		}
	}
	if code := export(attackers[0]); code != http.StatusTooManyRequests {
		t.Fatalf("a third history request of one account at once: %d, want 429", code)
	}

	dev := dialV5(t, p.MQTTAddr, "dev1", B.PubUser, B.PubPass)
	hc := &http.Client{Timeout: 5 * time.Second}
	for i := range 5 {
		start := time.Now()
		dev.Pub(t, B.topic("dev1", "event/e"), 1, fmt.Sprint(i)) // its PUBACK waits for the store
		req, _ := http.NewRequest("GET", "http://"+p.HTTPAddr+"/api/v1/subscriber/history?limit=10", nil)
		req.Header.Set("Authorization", "Bearer "+tokens[B.ID])
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("B's history page with the exports stalled: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("B's history page: %d", resp.StatusCode)
		}
		if code, body := readyz(t, p.HTTPAddr); code != http.StatusOK {
			t.Fatalf("/readyz with the exports stalled: %d %s", code, body)
		}
		t.Logf("B's publish, history page and readiness: %v", time.Since(start))
	}
}
