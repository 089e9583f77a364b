package app_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
)

// TestPublishRatePlan: a device of an account whose plan allows 50
// messages/s that publishes QoS 0 as fast as it can gets about 50/s to
// its subscribers, stays connected, and a device of another account on
// the default plan keeps its QoS 1 acknowledgements prompt. Lowering the
// plan's account rate, then its per-client rate, applies to the connected
// device. The throttling is in the metrics.
func TestPublishRatePlan(t *testing.T) {
	p := startPlatform(t, func(c *app.Config) { c.MetricsListen = "127.0.0.1:0" })
	slow := fleetmq.Plan{Name: "slow", MaxPublisherClients: 2, HistoryRetentionDays: 1}
	rate, unlimited := 50, 0
	if err := p.Service.PutPlan(p.ctx, &slow, control.PlanRates{Publish: &rate, AccountPublish: &unlimited}); err != nil {
		t.Fatal(err)
	}
	A := p.newTenant(t, "A", "slow", false, "dev1")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	p.synced(t)

	other := dialV5(t, p.MQTTAddr, "dev1", B.PubUser, B.PubPass)
	ackLatency := func() (p50, p99 time.Duration) {
		t.Helper()
		var lat []time.Duration
		for range 50 {
			start := time.Now()
			other.Pub(t, B.topic("dev1", "event/door"), 1, "open")
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		return lat[len(lat)/2], lat[len(lat)*99/100]
	}
	base50, base99 := ackLatency()
	t.Logf("QoS 1 acknowledgements alone: p50 %v, p99 %v", base50, base99)

	sub := dialV5(t, p.MQTTAddr, "dash", A.SubUser, A.SubPass)
	sub.Sub(t, A.all(), 0)
	var got atomic.Int64
	go func() {
		for range sub.Msgs {
			got.Add(1)
		}
	}()
	dev := dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		m := &paho.Publish{Topic: A.topic("dev1", "telemetry/flow"), QoS: 0, Payload: []byte(`{"v":1}`)}
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			_, err := dev.Publish(ctx, m)
			cancel()
			if err != nil {
				return // the connection closed at the end of the test
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		dev.Conn.Close()
		<-done
	})
	rateOver := func(d time.Duration) float64 {
		t.Helper()
		eventually(t, "a message of the flooding device", func() bool { return got.Load() > 0 })
		start, n0 := time.Now(), got.Load()
		time.Sleep(d) // the measurement window, not a synchronisation
		return float64(got.Load()-n0) / time.Since(start).Seconds()
	}
	if r := rateOver(2 * time.Second); r < 25 || r > 100 {
		t.Fatalf("a device of a plan allowing 50 msg/s got %.0f msg/s through", r)
	}

	// Another account's device on the default plan is unaffected.
	p50, p99 := ackLatency()
	t.Logf("QoS 1 acknowledgements while the device is throttled: p50 %v, p99 %v", p50, p99)
	// Storing the throttled device's 50 messages/s costs something (much
	// under the race detector on a busy machine); unthrottled, its flood
	// put this p50 near a second.
	if p50 > 100*time.Millisecond || p99 > time.Second {
		t.Fatalf("another account's QoS 1 acknowledgements: p50 %v, p99 %v while a device is throttled; want p50 under 100ms, p99 under 1s", p50, p99)
	}

	// The plan's account rate goes down to 10/s: the connected device
	// follows.
	ten := 10
	if err := p.Service.PutPlan(p.ctx, &slow, control.PlanRates{AccountPublish: &ten}); err != nil {
		t.Fatal(err)
	}
	p.synced(t)
	if r := rateOver(2 * time.Second); r < 5 || r > 20 {
		t.Fatalf("after the plan's account rate went down to 10 msg/s, the connected device got %.0f msg/s through", r)
	}
	// Its per-client rate goes down to 4/s: the connected device follows
	// that too.
	four := 4
	if err := p.Service.PutPlan(p.ctx, &slow, control.PlanRates{Publish: &four}); err != nil {
		t.Fatal(err)
	}
	p.synced(t)
	if r := rateOver(2 * time.Second); r < 2 || r > 8 {
		t.Fatalf("after the plan's per-client rate went down to 4 msg/s, the connected device got %.0f msg/s through", r)
	}
	dev.StillConnected(t)

	fams := scrape(t, "http://"+p.MetricsAddr+"/metrics")
	if v, _ := sample(fams, "fleetmq_mqtt_publish_throttled_total"); v < 1 {
		t.Fatalf("fleetmq_mqtt_publish_throttled_total = %v", v)
	}
	if v, _ := sample(fams, "fleetmq_mqtt_publish_throttled_seconds_total"); v < 1 {
		t.Fatalf("fleetmq_mqtt_publish_throttled_seconds_total = %v, want the seconds the device waited", v)
	}
}
