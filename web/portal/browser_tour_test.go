package portal_test

// The screenshot tour: an account that looks used (a small water utility
// with five registered pumps, tanks and meters, two weeks of real MQTT
// traffic driven through the test clock, tokens used by scripts, a QoS 2
// pool used up today), visited page by page in Chromium at a desktop and
// a phone width. Every page must fit its width; the screenshots go to
// docs/screenshots/ with FLEETMQ_UPDATE_SCREENSHOTS=1 (README.md shows
// them).

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// tourDays is how many days of traffic the tour's account has had (the
// Overview charts 14).
const tourDays = 13

// fieldDevice is a device of the tour's fleet: it publishes telemetry at
// QoS 0, its retained state at QoS 1 and, with Max QoS 2, events at QoS 2.
type fieldDevice struct {
	id, kind string // kind: pump, tank, meter
	qos2     bool
	d        *mqtttest.V5
	rng      *rand.Rand
	level    float64 // tank level
	cycles   int
	ota      int     // firmware rollout progress, percent
	total    float64 // meter reading, m³
}

// pub publishes and waits for the acknowledgement (QoS 1 and 2: the
// message is stored). It returns an error: devices publish concurrently,
// away from the test's goroutine.
func (f *fieldDevice) pub(topic string, qos byte, retain bool, payload string) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	r, err := f.d.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: []byte(payload)})
	if err == nil && qos > 0 && (r == nil || r.ReasonCode >= 0x80) {
		err = fmt.Errorf("reason code %+v", r)
	}
	if err != nil {
		return fmt.Errorf("%s: publish %s: %w", f.id, topic, err)
	}
	return nil
}

// daylight is -1 at 03:00 and 1 at 15:00: the daily cycle of the fleet.
func daylight(t time.Time) float64 {
	h := float64(t.Hour()) + float64(t.Minute())/60
	return math.Sin((h - 9) / 24 * 2 * math.Pi)
}

// reading publishes a telemetry reading at QoS 0, most of the time: a
// reading every 5 minutes on weekdays in the daytime, fewer at night and
// at the weekend (load scales them). It returns the messages published.
func (f *fieldDevice) reading(acc string, now time.Time, load float64) (int, error) {
	p := 1.0
	if wd := now.Weekday(); wd == time.Saturday || wd == time.Sunday {
		p = 0.4
	} else if now.Hour() < 7 || now.Hour() >= 19 {
		p = 0.55
	}
	if f.rng.Float64() > p*load {
		return 0, nil
	}
	day := daylight(now)
	var topic, payload string
	switch f.kind {
	case "pump":
		topic, payload = "telemetry/flow", fmt.Sprintf(`{"flow_lpm":%.1f,"pressure_bar":%.2f,"motor":{"temp_c":%.1f}}`,
			math.Max(0, 180+70*day+f.rng.NormFloat64()*9), 3.1+0.5*day+f.rng.NormFloat64()*0.06, 41+9*day+f.rng.NormFloat64()*0.8)
	case "tank":
		f.level = math.Min(97, math.Max(18, f.level-0.4*day+f.rng.NormFloat64()*0.1))
		topic, payload = "telemetry/level", fmt.Sprintf(`{"level_pct":%.1f,"temp_c":%.1f}`, f.level, 9+2*day+f.rng.NormFloat64()*0.2)
	default:
		f.total += 0.03 * (1.2 + day)
		topic, payload = "telemetry/flow", fmt.Sprintf(`{"flow_lpm":%.1f,"total_m3":%.2f}`, math.Max(0, 340+110*day+f.rng.NormFloat64()*15), f.total)
	}
	return 1, f.pub(acc+"/"+f.id+"/"+topic, 0, false, payload)
}

// wrapUp ends a half hour of the device's traffic: every 2 hours an event,
// during a firmware rollout its progress events, and its retained state,
// last, at QoS 1: the acknowledgement means the broker has metered all the
// device sent before. It returns the messages published.
func (f *fieldDevice) wrapUp(acc string, now time.Time, n int, rollout bool) (int, error) {
	prefix := acc + "/" + f.id + "/"
	sent := 0
	for i := 0; rollout && f.kind == "pump" && f.ota < 100 && i < 13; i++ {
		f.ota += 2
		if err := f.pub(prefix+"event/ota", 2, false, fmt.Sprintf(`{"event":"ota_progress","fw":"2.5.0","pct":%d}`, f.ota)); err != nil {
			return sent, err
		}
		sent++
	}
	if f.qos2 && n%4 == 0 {
		f.cycles++
		if err := f.pub(prefix+"event/cycle", 2, false, fmt.Sprintf(`{"event":"cycle_done","cycle":%d}`, f.cycles)); err != nil {
			return sent, err
		}
		sent++
	}
	fw := "2.4.1"
	if f.ota >= 100 {
		fw = "2.5.0"
	}
	state := fmt.Sprintf(`{"mode":"auto","running":%v,"fw":%q,"uptime_h":%d}`, daylight(now) > -0.6, fw, n/2)
	if err := f.pub(prefix+"state/summary", 1, true, state); err != nil {
		return sent, err
	}
	return sent + 1, nil
}

// TestBrowserScreenshots visits every page of a used account at a desktop
// width (1280x800) and a phone width (390x844), checks that each fits its
// width and shows the account's data, and writes the screenshots.
func TestBrowserScreenshots(t *testing.T) {
	testkit.NeedChromium(t)
	e := start(t)
	ctx := e.ctx
	today := t0.Truncate(24 * time.Hour)
	e.clock.Add(-t0.Sub(today.AddDate(0, 0, -tourDays).Add(8 * time.Hour))) // 13 days ago, 08:00

	// The account, as its operator and owner set it up 13 days ago.
	if err := e.Store.PutPlan(ctx, fleetmq.Plan{Name: "pilot", MaxPublisherClients: 10, QoS2DailyPool: 100, HistoryRetentionDays: 30}); err != nil {
		t.Fatal(err)
	}
	acc, _, err := e.Service.CreateAccount(ctx, control.NewAccount{Name: "Acme Water", OwnerEmail: "ops@acme-water.example", Plan: "pilot"})
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{ID: acc.ID, Email: "ops@acme-water.example", Password: "pumps all the way down"}
	if _, err := e.Store.SetOwnerPasswordHash(ctx, acc.ID, cheapHash(t, o.Password)); err != nil {
		t.Fatal(err)
	}
	for _, x := range []fleetmq.AddOn{fleetmq.AddOnQoS2, fleetmq.AddOnMgmtREST} {
		if err := e.Service.SetAddOn(ctx, acc.ID, x, true); err != nil {
			t.Fatal(err)
		}
	}
	clients := []struct {
		id, label string
		max       int
	}{
		{"pump-17", "Pump 17, north field", 2}, {"pump-18", "Pump 18, south field", 2}, {"tank-3", "Tank 3 level sensor", 2},
		{"meter-42", "Flow meter 42", 1}, {"valve-9", "Valve 9 (spare, not installed)", 1},
	}
	for _, c := range clients {
		if _, err := e.Service.CreateClient(ctx, acc.ID, control.ClientInput{ClientID: c.id, Label: &c.label, MaxPublishQoS: &c.max}); err != nil {
			t.Fatal(err)
		}
	}
	fleet, pw, err := e.Service.CreateCredential(ctx, acc.ID, control.NewCredential{Kind: fleetmq.KindPublisher, Label: "field fleet 2030"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Service.CreateCredential(ctx, acc.ID, control.NewCredential{Kind: fleetmq.KindSubscriber, Label: "grafana dashboard"}); err != nil {
		t.Fatal(err)
	}
	_, export, err := e.Service.CreateRESTToken(ctx, acc.ID, control.NewRESTToken{Label: "nightly export"})
	if err != nil {
		t.Fatal(err)
	}
	ninety := 90
	_, deploy, err := e.Service.CreateRESTToken(ctx, acc.ID, control.NewRESTToken{Label: "CI deploy", ExpiresInDays: &ninety})
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := e.Service.CreateRESTToken(ctx, acc.ID, control.NewRESTToken{Label: "bench script"})
	if err != nil {
		t.Fatal(err)
	}
	e.Sync(ctx)

	// Two weeks of traffic, half an hour at a time.
	var devs []*fieldDevice
	for i, c := range clients[:4] {
		kind := map[string]string{"pump-17": "pump", "pump-18": "pump", "tank-3": "tank", "meter-42": "meter"}[c.id]
		devs = append(devs, &fieldDevice{id: c.id, kind: kind, qos2: c.max == 2, level: 70, total: 18240,
			d: e.connect(t, c.id, fleet.Username, pw), rng: rand.New(rand.NewPCG(uint64(i), 42))})
	}
	perDay := map[string]int64{}
	var published int64 // by all devices, since the start
	dice := rand.New(rand.NewPCG(7, 7))
	load := 1.0
	for n := 0; e.clock.Now().Before(t0.Add(-20 * time.Minute)); n++ {
		now := e.clock.Now() // on the hour or the half hour
		day := now.Format(time.DateOnly)
		switch {
		case now.Hour() == 0 && now.Minute() == 0:
			load = 0.8 + 0.3*dice.Float64() // some days are busier
		case now.Hour() == 2 && now.Minute() == 0:
			e.apiAnswers(t, "/usage", export, http.StatusOK, "") // the nightly export runs
		case now.Equal(today.AddDate(0, 0, -3).Add(14 * time.Hour)):
			e.apiAnswers(t, "/publishers", deploy, http.StatusOK, "")
		case now.Equal(today.AddDate(0, 0, -6).Add(10 * time.Hour)):
			if err := e.Service.SetAddOn(ctx, acc.ID, fleetmq.AddOnHistoryDownload, true); err != nil {
				t.Fatal(err)
			}
			if err := e.Service.RevokeRESTToken(ctx, acc.ID, old.ID); err != nil {
				t.Fatal(err)
			}
		case now.Equal(today.AddDate(0, 0, -2).Add(16 * time.Hour)):
			if err := e.Service.SetAddOn(ctx, acc.ID, fleetmq.AddOnHistoryDownload, false); err != nil {
				t.Fatal(err)
			}
		case now.Equal(today.Add(9*time.Hour + 30*time.Minute)):
			devs[2].d.Disconnect(&paho.Disconnect{}) // tank-3 loses its link this morning
			devs = append(devs[:2], devs[3:]...)
		}
		// Readings every 5 minutes, at QoS 0 (the broker stamps them
		// when it reads them).
		for sub := range 6 {
			if sub > 0 {
				e.clock.Add(5 * time.Minute)
			}
			for _, f := range devs {
				k, err := f.reading(acc.ID, e.clock.Now(), load)
				if err != nil {
					t.Fatal(err)
				}
				perDay[day] += int64(k)
				published += int64(k)
			}
			// The broker has read them before the clock moves on.
			tourAccepted(t, e, published)
		}
		// Then, at :25 or :55, events and the state, from every device at
		// once. In the nightly maintenance window today a firmware
		// rollout's progress events at QoS 2 use up the pool.
		rollout := !now.Before(today.Add(3*time.Hour)) && now.Before(today.Add(5*time.Hour))
		counts := make([]int, len(devs))
		errs := make([]error, len(devs))
		var wg sync.WaitGroup
		for i, f := range devs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				counts[i], errs[i] = f.wrapUp(acc.ID, e.clock.Now(), n, rollout)
			}()
		}
		wg.Wait()
		for i := range devs {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			perDay[day] += int64(counts[i])
			published += int64(counts[i])
		}
		e.clock.Add(5 * time.Minute)
		if next := e.clock.Now().Format(time.DateOnly); next != day {
			// The day is over: its usage reaches the store before the
			// next one starts (the meter keeps two days).
			tourUsage(t, e, acc.ID, day, perDay[day])
		}
	}
	e.clock.Add(t0.Sub(e.clock.Now()))
	tourUsage(t, e, acc.ID, today.Format(time.DateOnly), perDay[today.Format(time.DateOnly)])
	msgsToday := num(perDay[today.Format(time.DateOnly)])

	// Desktop.
	b := e.chrome(t)
	pages := []string{}
	visit := func(path string) {
		t.Helper()
		pages = append(pages, path)
		b.fitsWidth(path)
		b.tablesFit(path)
	}
	b.open("/signin")
	b.fill("E-mail address", o.Email)
	visit("/signin")
	b.shot("signin")
	b.fill("Password", o.Password)
	b.press("", "Sign in")
	b.wantPath("/overview")
	b.has(`[data-testid="pool-status"]`, "Demoted")
	b.has("#messages-today", msgsToday)
	b.has("#pool-used", "100")
	b.has("#connected-clients", "3")
	b.has(`[data-testid="drops-empty"]`, "No drops today")
	if bars := eval[int](b, "count the bars", `document.querySelectorAll('[data-testid="daily-chart"] rect[class^="q"]').length`); bars < 3*tourDays {
		t.Fatalf("the daily chart has %d bars, want 3 for each of %d days", bars, tourDays)
	}
	visit("/overview")
	b.shot("overview")

	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	b.has(`[data-client-id="pump-17"]`, "Pump 17, north field", "QoS 2", "Connected")
	b.has(`[data-client-id="tank-3"]`, "Offline")
	b.has(`[data-client-id="valve-9"]`, "Never connected", "No traffic today")
	b.has(`[data-testid="clients-count"]`, "5 of 10 registered")
	visit("/clients")
	b.shot("clients")

	// A device page, its chart set to a week of pressure.
	b.press(`[data-client-id="pump-17"]`, "pump-17")
	b.wantPath("/clients/pump-17")
	b.fill("Field", "pressure_bar")
	b.choose("Range", "Last 7 days")
	b.press("#chart-form", "Show")
	b.has(`[data-testid="chart-stats"]`, "Values")
	b.has(`[data-testid="latest-state"]`, "state/summary", "retained")
	b.has(`[data-testid="history"]`, "telemetry/flow", "state/summary")
	if n := eval[int](b, "count the chart's points", `document.querySelectorAll('[data-testid="line-chart"] circle, [data-testid="line-chart"] path.line').length`); n == 0 {
		t.Fatal("the device chart draws no line")
	}
	visit(b.path())
	b.shotTop("device", 2200) // the chart and the newest history

	// Credentials: a subscriber password for an alerting service.
	b.press(`nav[aria-label="Main"]`, "MQTT Clients")
	b.press(`nav[aria-label="MQTT Clients"]`, "Credentials")
	b.click("#sub-credentials", "Create a subscriber password")
	b.fill("Label", "alerts service")
	b.fill("Expires in (days)", "365")
	b.fill("Topic filters", acc.ID+"/+/event/#")
	b.press("#create-sub-form", "Create")
	b.has("h1", "Subscriber MQTT password created")
	b.has(`[data-testid="created-example"]`, "mosquitto_sub", b.text("#credential-password"))
	visit("/credentials (created)")
	b.shot("credential-created")
	b.press("", "I have copied it")
	b.has("#sub-credentials", "alerts service", "grafana dashboard", acc.ID+"/+/event/#")
	visit("/credentials")
	b.shot("credentials")

	b.press(`nav[aria-label="Main"]`, "Subscriptions")
	b.has(`[data-testid="plan-card"]`, "Pilot", "100 messages per UTC day")
	b.has(`#changes`, "Programmatic History Download")
	visit("/subscriptions")
	b.shot("subscriptions")

	b.press(`nav[aria-label="Main"]`, "Settings")
	b.has(`[data-testid="profile"]`, acc.ID, "Acme Water", o.Email)
	visit("/settings")
	b.shot("settings")

	// REST API tokens: one more, for a dashboard.
	b.press(`nav[aria-label="Settings"]`, "REST API tokens")
	b.fill("Label", "grafana dashboard")
	b.fill("Expires in (days)", "180")
	b.press("#new-token", "Create token")
	b.has("h1", "Your new REST API token")
	visit("/settings/tokens (created)")
	b.shot("token-created")
	b.press("", "I have copied it")
	b.has(`[data-testid="tokens-table"]`, "nightly export", "CI deploy", "bench script", "Revoked", "grafana dashboard")
	b.has(`[data-testid="tokens-active"]`, "3 of 10 active")
	visit("/settings/tokens")
	b.shot("tokens")

	// A phone: every page fits its width.
	b.do("set a phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch))
	for _, path := range []string{"/overview", "/clients", "/clients/pump-17?field=pressure_bar&range=7d", "/credentials", "/subscriptions",
		"/settings", "/settings/tokens", "/clients/pump-17/edit"} {
		if st := b.open(path); st != http.StatusOK {
			t.Fatalf("%s at 390 px: status %d", path, st)
		}
		b.fitsWidth(path + " at 390 px")
		switch path {
		case "/overview":
			b.shot("overview-narrow")
		case "/clients":
			b.shot("clients-narrow")
		}
	}
	b.press("", "Sign out")
	b.fitsWidth("/signin at 390 px")
	t.Logf("visited at 1280 px: %v", pages)
}

// tourAccepted waits until the broker has accepted n messages since the
// start: a QoS 0 publish is on its way when Publish returns.
func tourAccepted(t *testing.T, e *env, n int64) {
	t.Helper()
	testkit.CheckFor(t, waitFor, func() error {
		tot := e.Policy.Totals().Effective
		if got := tot[0] + tot[1] + tot[2]; got < n {
			return fmt.Errorf("the broker accepted %d messages, want %d", got, n)
		}
		return nil
	})
}

// tourUsage waits until the store has the account's usage of day, on
// which the devices published want messages.
func tourUsage(t *testing.T, e *env, accountID, day string, want int64) {
	t.Helper()
	testkit.CheckFor(t, waitFor, func() error {
		u, err := e.Store.Usage(e.ctx, accountID, day, day)
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		if len(u) == 1 {
			got = u[0].Messages[0] + u[0].Messages[1] + u[0].Messages[2]
		}
		if got != want {
			return fmt.Errorf("usage of %s in the store: %d messages, want the %d the devices published", day, got, want)
		}
		return nil
	})
}
