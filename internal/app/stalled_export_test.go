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
	"github.com/fleetmq/fleetmq/internal/app"
)

// TestStalledExportsHoldNoStoreConnection: one tenant opens more whole-
// history exports than the store has connections and never reads them;
// another tenant's QoS 1 messages are still acknowledged, its history
// pages still answer and /readyz stays 200, because an export holds a
// store connection only while it reads a batch, never while it waits on
// the socket.
func TestStalledExportsHoldNoStoreConnection(t *testing.T) {
	t.Parallel()
	p := startPlatform(t, func(c *app.Config) { c.HTTPListen = "127.0.0.1:0" })
	A := p.newTenant(t, "A", "starter", false, "dev1")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	tokens := map[string]string{}
	for _, tn := range []*tenant{A, B} {
		if err := p.Service.SetAddOn(p.ctx, tn.ID, fleetmq.AddOnHistoryDownload, true); err != nil {
			t.Fatal(err)
		}
		_, tok, err := p.Service.CreateRESTToken(p.ctx, tn.ID, control.NewRESTToken{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[tn.ID] = tok
	}
	// ~40 MB of A's history: far more than the sockets can buffer.
	payload := `{"v":"` + strings.Repeat("x", 2000) + `"}`
	for i := range 20 {
		var recs []*fleetmq.Record
		for j := range 1000 {
			recs = append(recs, &fleetmq.Record{AccountID: A.ID, ClientID: "dev1", Topic: A.topic("dev1", "telemetry/t"), Class: "telemetry",
				QoS: 1, PublishedQoS: 1, Payload: []byte(payload), Received: p.clock.Now().Add(time.Duration(i*1000+j) * time.Microsecond)})
		}
		if err := p.Store.AppendHistory(p.ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	p.synced(t)

	const stalled = 12 // the SQLite store has 4 connections, PostgreSQL 10
	for range stalled {
		nc, err := net.Dial("tcp", p.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		fmt.Fprintf(nc, "GET /api/v1/subscriber/history?format=ndjson HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", tokens[A.ID])
		resp, err := http.ReadResponse(bufio.NewReaderSize(nc, 1024), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("export: %v %v", resp, err)
		}
		// ... and read no more.
	}

	dev := dialV5(t, p.MQTTAddr, "dev1", B.PubUser, B.PubPass)
	hc := &http.Client{Timeout: 5 * time.Second}
	for i := range 5 {
		start := time.Now()
		dev.pub(t, B.topic("dev1", "event/e"), 1, fmt.Sprint(i)) // its PUBACK waits for the store
		req, _ := http.NewRequest("GET", "http://"+p.HTTPAddr+"/api/v1/subscriber/history?limit=10", nil)
		req.Header.Set("Authorization", "Bearer "+tokens[B.ID])
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("B's history page with A's exports stalled: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("B's history page: %d", resp.StatusCode)
		}
		if code, body := readyz(t, p.HTTPAddr); code != http.StatusOK {
			t.Fatalf("/readyz with A's exports stalled: %d %s", code, body)
		}
		t.Logf("B's publish, history page and readiness: %v", time.Since(start))
	}
}
