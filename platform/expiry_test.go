package platform

import (
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestExpiryWatch: between snapshots, Run walks the sessions only when a
// credential has expired since its last walk: at the first expiry, then
// not again until the next one, and at once for a new snapshot.
func TestExpiryWatch(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC))
	t0 := clk.Now()
	snap := &Snapshot{Creds: map[string]*Credential{
		"never":  {ID: "c0", Username: "never"},
		"soon":   {ID: "c1", Username: "soon", ExpiresAt: t0.Add(time.Hour)},
		"later":  {ID: "c2", Username: "later", ExpiresAt: t0.Add(3 * time.Hour)},
		"before": {ID: "c3", Username: "before", ExpiresAt: t0.Add(-time.Hour)},
	}}
	p := NewPolicy(Options{Now: clk.Now}, snap)
	var e expiryWatch
	e.after(p)
	check := func(what string, want bool) {
		t.Helper()
		if got := e.due(p); got != want {
			t.Fatalf("%s: due %v, want %v", what, got, want)
		}
	}
	check("nothing expired since", false)
	clk.Add(time.Hour - time.Second)
	check("a second before the first expiry", false)
	clk.Add(time.Second)
	check("at the first expiry", true)
	e.after(p)
	check("walked", false)
	clk.Add(time.Hour)
	check("between the two expiries", false)
	clk.Add(time.Hour)
	check("at the second expiry", true)
	e.after(p)
	clk.Add(24 * time.Hour)
	check("no expiry left", false)
	p.snap.Store(&Snapshot{Creds: snap.Creds})
	check("another snapshot", true)
}
