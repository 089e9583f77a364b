package platform

import (
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestExpiryWatch: between snapshots, Run walks the sessions only when a
// credential has expired since its last walk (judged by the time read
// before the walk began, so one expiring during a walk is walked for
// again), once more after a walk for a new snapshot, at least every
// expiryBackstop, and at its first full interval.
func TestExpiryWatch(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC))
	t0 := clk.Now()
	snap := &Snapshot{Creds: map[string]*Credential{
		"never":  {ID: "c0", Username: "never"},
		"soon":   {ID: "c1", Username: "soon", ExpiresAt: t0.Add(time.Hour)},
		"during": {ID: "c2", Username: "during", ExpiresAt: t0.Add(time.Hour + 50*time.Millisecond)},
		"later":  {ID: "c3", Username: "later", ExpiresAt: t0.Add(3 * time.Hour)},
		"before": {ID: "c4", Username: "before", ExpiresAt: t0.Add(-time.Hour)},
	}}
	// run is Run's own clock, which the backstop goes by.
	run := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var e expiryWatch
	check := func(what string, s *Snapshot, want bool) {
		t.Helper()
		if got := e.due(s, clk.Now(), run); got != want {
			t.Fatalf("%s: due %v, want %v", what, got, want)
		}
	}
	// walk is one check of every session that takes d.
	walk := func(s *Snapshot, changed bool, d time.Duration) {
		at := clk.Now()
		clk.Add(d)
		e.walked(s, at, run, changed)
	}
	tick := func(d time.Duration) { clk.Add(d); run = run.Add(d) }

	check("the first full interval", snap, true)
	walk(snap, false, 0)
	check("once more, for the snapshot it first saw", snap, true)
	walk(snap, false, 0)
	check("nothing expired since", snap, false)
	tick(time.Second)
	check("a second later", snap, false)

	clk.Set(t0.Add(time.Hour - time.Second))
	check("a second before the first expiry", snap, false)
	clk.Add(time.Second)
	check("at the first expiry", snap, true)
	walk(snap, false, 100*time.Millisecond) // "during" expires while it runs
	check("an expiry during the walk", snap, true)
	walk(snap, false, 0)
	check("walked", snap, false)
	tick(30 * time.Second)
	check("half a backstop later", snap, false)
	tick(30 * time.Second)
	check("a backstop later", snap, true)
	walk(snap, false, 0)

	clk.Set(t0.Add(3 * time.Hour))
	check("at the last expiry", snap, true)
	walk(snap, false, 0)
	clk.Add(24 * time.Hour)
	check("no expiry left", snap, false)

	next := &Snapshot{Creds: snap.Creds}
	check("another snapshot", next, true)
	walk(next, true, 0)
	check("once more after the walk for a new snapshot (clients authenticated against the old one)", next, true)
	walk(next, false, 0)
	check("then not", next, false)
}
