package portal_test

import (
	"bufio"
	"fmt"
	"html"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/web/portal"
)

var (
	olderRE   = regexp.MustCompile(`href="([^"]+)" id="history-older"`)
	historyRE = regexp.MustCompile(`"seq":(\d+)`)
)

// seqs lists the "seq" values of the history table, in page order.
func seqs(p *page) []string {
	i := strings.Index(p.Body, `data-testid="history-table"`)
	if i < 0 {
		return nil
	}
	var out []string
	for _, m := range historyRE.FindAllStringSubmatch(html.UnescapeString(p.Body[i:]), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDevicePage: a device page shows the client's live status, its
// retained state and latest message per topic, its history newest first
// in pages of 50 with cursors, and a chart of a numeric field over a
// chosen range; another account's records of the same client id never
// show.
func TestDevicePage(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter", fleetmq.AddOnQoS2)
	bo := e.account(t, "Bolt", "starter")
	for _, acc := range []string{a.ID, bo.ID} {
		if _, err := e.Service.CreateClient(e.ctx, acc, control.ClientInput{ClientID: "dev1"}); err != nil {
			t.Fatal(err)
		}
	}
	// 120 readings, one a minute up to t0, temperature = seq; B's too.
	var recs []*fleetmq.Record
	for i := 0; i < 120; i++ {
		at := t0.Add(-time.Duration(119-i) * time.Minute)
		recs = append(recs,
			&fleetmq.Record{AccountID: a.ID, ClientID: "dev1", Topic: a.ID + "/dev1/telemetry/temp", Class: "telemetry",
				Payload: []byte(fmt.Sprintf(`{"temperature":%d,"seq":%d}`, i, i)), Received: at},
			&fleetmq.Record{AccountID: bo.ID, ClientID: "dev1", Topic: bo.ID + "/dev1/telemetry/temp", Class: "telemetry",
				Payload: []byte(fmt.Sprintf(`{"temperature":%d,"seq":%d,"b":1}`, 1000+i, 1000+i)), Received: at})
	}
	if err := e.Store.AppendHistory(e.ctx, recs); err != nil {
		t.Fatal(err)
	}
	b := e.browser(t)
	b.signIn(t, a)

	p := b.get(t, "/clients/dev1").want(t, http.StatusOK).
		has(t, `data-testid="device-client-id">dev1<`, `data-testid="device-status"`, "Never connected", a.ID+"/dev1", `id="history-prefix-copy"`,
			`data-testid="latest-row"`, "telemetry/temp", `id="chart-form"`, `id="chart-field"`, `id="chart-range"`, `id="chart-submit"`).
		hasNot(t, `"b":1`, bo.ID)
	// History pages: 50, 50, 20, newest first, no overlap.
	var all []string
	for page := 0; ; page++ {
		got := seqs(p)
		if want := []int{50, 50, 20}[page]; len(got) != want {
			t.Fatalf("history page %d has %d rows, want %d: %v", page, len(got), want, got)
		}
		all = append(all, got...)
		m := olderRE.FindStringSubmatch(p.Body)
		if page == 2 {
			if m != nil {
				t.Fatal("the last page links to an older one")
			}
			p.has(t, "End of history", `id="history-newest"`)
			break
		}
		if m == nil {
			t.Fatalf("page %d has no Older link", page)
		}
		p = b.get(t, html.UnescapeString(strings.TrimSuffix(m[1], "#history"))).want(t, http.StatusOK)
	}
	for i, s := range all {
		if s != itoa(119-i) {
			t.Fatalf("history order: row %d is seq %s, want %d (newest first, each once)", i, s, 119-i)
		}
	}
	// A bad cursor shows the newest page.
	if got := seqs(b.get(t, "/clients/dev1?cursor=garbage").want(t, http.StatusOK)); len(got) != 50 || got[0] != "119" {
		t.Fatalf("with a bad cursor: %v", got)
	}
	// Class filter.
	b.get(t, "/clients/dev1?class=state").has(t, `data-testid="history-empty"`, "No stored messages of class state/")

	// The chart: the field found in the latest messages by default.
	ch := b.get(t, "/clients/dev1?range=6h").want(t, http.StatusOK)
	ch.has(t, `value="temperature"`, `data-testid="line-chart"`, `<path class="line"`, `<path class="band"`, `data-testid="chart-count">120<`)
	ch.has(t, "<option value=\"6h\" selected>")
	// The last hour: buckets of a minute from 11:21 to 12:21.
	h := b.get(t, "/clients/dev1?field=temperature&range=1h").has(t, `data-testid="chart-count">60<`)
	if n := h.count(`<circle class="point"`); n != 60 {
		t.Fatalf("1h chart has %d points, want 60 (one per minute)", n)
	}
	// Its values are 60 (at 11:21) to 119 (at 12:20), one per bucket.
	tbl := h.Body[strings.Index(h.Body, `data-testid="chart-table"`):]
	if !strings.Contains(tbl, `<td class="num">60</td>`) || !strings.Contains(tbl, `<td class="num">119</td>`) || strings.Contains(tbl, `<td class="num">59</td>`) {
		t.Fatalf("1h chart table:\n%s", tbl[:min(len(tbl), 3000)])
	}
	b.get(t, "/clients/dev1?field=seq&topic=telemetry/%23&range=24h").has(t, `data-testid="chart-count">120<`)
	b.get(t, "/clients/dev1?field=humidity&range=24h").has(t, `data-testid="chart-empty"`, "120 messages in the range have no number at this field")
	b.get(t, "/clients/dev1?field=a..b").has(t, `data-testid="chart-error"`, "The field name is not valid")
	b.get(t, "/clients/dev1?field=temperature&topic=%2B%2Fx%2F%23%23").has(t, `data-testid="chart-error"`, "The topic filter is not valid")
	// A range with more records than a chart reads asks for a shorter one.
	portal.SetChartScanBudget(t, 100)
	b.get(t, "/clients/dev1?field=temperature&range=24h").has(t, `data-testid="chart-error"`, "This range holds more than 100 records")
	b.get(t, "/clients/dev1?field=temperature&range=1h").has(t, `data-testid="chart-count">60<`)

	// A real device: connected, with a retained state message.
	_, pw, err := e.Service.CreateCredential(e.ctx, a.ID, control.NewCredential{Kind: fleetmq.KindPublisher})
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := e.Store.Credentials(e.ctx, a.ID, fleetmq.KindPublisher)
	e.Sync(e.ctx)
	d := e.connect(t, "dev1", cs[0].Username, pw)
	publish(t, d, a.ID+"/dev1/state/summary", 1, true, `{"mode":"auto","marker":"retained-state"}`)
	eventually(t, "the device page to show the device connected with its retained state", func() bool {
		p := b.get(t, "/clients/dev1")
		return strings.Contains(p.Body, `data-testid="retained-row"`) && strings.Contains(p.Body, "retained-state") &&
			strings.Contains(p.Body, "Connected since") && strings.Contains(p.Body, "MQTT 5.0 over tcp")
	})
	// The stored QoS 1 message is in the history now (acked means stored).
	b.get(t, "/clients/dev1?class=state").has(t, "retained-state", `data-testid="history-row"`).hasNot(t, `data-testid="history-empty"`)
	// B's page of its own dev1 shows B's only.
	bb := e.browser(t)
	bb.signIn(t, bo)
	bb.get(t, "/clients/dev1").has(t, `"b":1`, "Never connected").hasNot(t, "retained-state", a.ID)
}

// TestDevicePageSharesTheHistorySlots: an account's history requests are
// bounded across the REST API and the portal together. With its two slots
// taken by REST exports whose client reads nothing, the account's device
// page answers 429 "History is busy" (and reads no history); another
// account's device page is unaffected; once the exports end, the page
// answers again.
func TestDevicePageSharesTheHistorySlots(t *testing.T) {
	t.Parallel()
	e := start(t)
	a := e.account(t, "Acme", "starter", fleetmq.AddOnHistoryDownload)
	bo := e.account(t, "Bolt", "starter")
	var recs []*fleetmq.Record
	for _, acc := range []string{a.ID, bo.ID} {
		if _, err := e.Service.CreateClient(e.ctx, acc, control.ClientInput{ClientID: "dev1"}); err != nil {
			t.Fatal(err)
		}
		// Enough that an export does not fit in the socket buffers.
		payload := `{"v":"` + strings.Repeat("x", 2000) + `"}`
		for i := range 3000 {
			recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: "dev1", Topic: acc + "/dev1/telemetry/t", Class: "telemetry",
				Payload: []byte(payload), Received: t0.Add(-time.Duration(i) * time.Millisecond)})
		}
	}
	if err := e.Store.AppendHistory(e.ctx, recs); err != nil {
		t.Fatal(err)
	}
	_, token, err := e.Service.CreateRESTToken(e.ctx, a.ID, control.NewRESTToken{})
	if err != nil {
		t.Fatal(err)
	}
	var exports []net.Conn
	for range history.RequestsPerAccount {
		nc, err := net.Dial("tcp", e.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "GET /api/v1/subscriber/history?format=ndjson HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
		resp, err := http.ReadResponse(bufio.NewReaderSize(nc, 1024), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("export: %v %v", resp, err)
		}
		exports = append(exports, nc) // and read no more
	}

	ba := e.browser(t)
	ba.signIn(t, a)
	ba.get(t, "/clients/dev1").want(t, http.StatusTooManyRequests).has(t, "History is busy").hasNot(t, "telemetry/t")
	bb := e.browser(t)
	bb.signIn(t, bo)
	bb.get(t, "/clients/dev1").want(t, http.StatusOK).has(t, `data-testid="latest-row"`)

	for _, nc := range exports {
		nc.Close()
	}
	testkit.Eventually(t, waitFor, "the device page after the exports ended", func() bool {
		return ba.get(t, "/clients/dev1").Status == http.StatusOK
	})
}
