package portal_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// TestOverview: the Overview shows the account's stored usage of today
// (messages, QoS mix, drops by reason, refusals), the last 14 days, the
// connected clients, and the QoS 2 pool: exhausted by real QoS 2
// publishes, it reports the demotion and when the pool resets. Another
// account's numbers never show.
func TestOverview(t *testing.T) {
	t.Parallel()
	e := start(t)
	if err := e.Store.PutPlan(e.ctx, fleetmq.Plan{Name: "tiny", MaxPublisherClients: 5, QoS2DailyPool: 3, HistoryRetentionDays: 7}); err != nil {
		t.Fatal(err)
	}
	a := e.account(t, "Acme", "tiny", fleetmq.AddOnQoS2)
	bo := e.account(t, "Bolt", "starter")
	two := 2
	for _, id := range []string{"pump-1", "pump-2"} {
		if _, err := e.Service.CreateClient(e.ctx, a.ID, control.ClientInput{ClientID: id, MaxPublishQoS: &two}); err != nil {
			t.Fatal(err)
		}
	}
	today := t0.Format(time.DateOnly)
	day := func(n int) string { return t0.AddDate(0, 0, -n).Format(time.DateOnly) }
	err := e.Store.AddUsage(e.ctx, []fleetmq.DailyUsage{
		{AccountID: a.ID, Day: today, Messages: [3]int64{60, 30, 0}, Refused: 2, Drops: map[string]int64{"queue_full": 7, "offline_qos0": 3}},
		{AccountID: a.ID, Day: day(1), Messages: [3]int64{1000, 200, 30}},
		{AccountID: a.ID, Day: day(13), Messages: [3]int64{4, 5, 6}},
		{AccountID: a.ID, Day: day(14), Messages: [3]int64{999999, 0, 0}}, // outside the 14 days
		{AccountID: bo.ID, Day: today, Messages: [3]int64{424242, 0, 0}, Drops: map[string]int64{"expired": 5151}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser(t)
	b.signIn(t, a)
	p := b.get(t, "/overview").want(t, http.StatusOK)
	p.has(t, `id="messages-today">90<`, `data-testid="mix-q0">60<`, `data-testid="mix-q1">30<`, `data-testid="mix-q2">0<`,
		"Q0 67%", "Q1 33%", "Q2 0%", `data-testid="drop-queue_full">7<`, `data-testid="drop-offline_qos0">3<`, "2 refused · 10 dropped",
		`id="connected-clients">0<`, `data-testid="registered-clients">2<`, `data-testid="pool-status">Normal<`, `data-testid="daily-chart"`,
		"<td>"+day(1)+"</td><td class=\"num\">1,000</td><td class=\"num\">200</td><td class=\"num\">30</td><td class=\"num\">1,230</td>",
		"<td>"+day(13)+"</td>", "2030-03-11 00:00 UTC").
		hasNot(t, "424,242", "5,151", "999,999", "<td>"+day(14)+"</td>", `data-testid="drops-empty"`)
	if n := p.count(`<rect class="q`); n < 6 {
		t.Fatalf("the daily chart has %d bars, want at least 6 (3 days with traffic)", n)
	}

	// Exhaust the pool of 3 with real QoS 2 state publishes.
	_, pw, err := e.Service.CreateCredential(e.ctx, a.ID, control.NewCredential{Kind: fleetmq.KindPublisher})
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := e.Store.Credentials(e.ctx, a.ID, fleetmq.KindPublisher)
	e.Sync(e.ctx)
	d := e.connect(t, "pump-1", cs[0].Username, pw)
	for i := 0; i < 5; i++ {
		publish(t, d, a.ID+"/pump-1/state/summary", 2, false, `{"n":1}`)
	}
	// Stored usage catches up within a reload interval; the page shows
	// what the store has.
	var u fleetmq.DailyUsage
	eventually(t, "the QoS 2 publishes to be metered into the store", func() bool {
		us, err := e.Store.Usage(e.ctx, a.ID, today, today)
		if err != nil || len(us) != 1 {
			return false
		}
		u = us[0]
		return u.Messages[2] == 3 && u.Messages[1] == 32
	})
	p = b.get(t, "/overview")
	p.has(t, `id="messages-today">95<`, `data-testid="mix-q2">3<`, `data-testid="mix-q1">32<`, `id="pool-used">3<`, `data-testid="pool-status">Demoted<`,
		`data-testid="demotion-notice"`, "treated as QoS 1 until the pool resets", `data-testid="pool-demotions">2<`, `id="connected-clients">1<`,
		"Used up: demoted", "2030-03-11 00:00 UTC</time> (in 11 hours)")
	if got := u.Messages[0] + u.Messages[1] + u.Messages[2]; !strings.Contains(p.Body, `id="messages-today">`+num(got)+`<`) {
		t.Fatalf("messages today on the page differ from the store's %d", got)
	}

	// The next UTC day: the pool is back, today is empty.
	e.clock.Add(11*time.Hour + 50*time.Minute) // 00:10 UTC
	b.get(t, "/overview").has(t, `data-testid="pool-status">Normal<`, `id="pool-used">0<`, `id="messages-today">0<`, `data-testid="drops-empty"`)

	// B: no add-on, its own numbers.
	bb := e.browser(t)
	bb.signIn(t, bo)
	bb.get(t, "/overview").has(t, `data-testid="pool-status">Add-on off<`, "Enable it under Subscriptions")
}

func num(n int64) string {
	s := itoa(int(n))
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
