package platform

import (
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

func TestStripPrefix(t *testing.T) {
	tests := []struct {
		prefix, in, out string
		ok              bool
	}{
		{"", "a/b", "a/b", true},
		{"legacy", "legacy/a/b", "a/b", true},
		{"legacy/site", "legacy/site/a/#", "a/#", true},
		{"legacy", "legacyx/a", "", false},
		{"legacy", "legacy", "", false},
		{"legacy", "a/legacy/b", "", false},
	}
	for _, tt := range tests {
		got, ok := StripPrefix(tt.prefix, tt.in)
		if got != tt.out || ok != tt.ok {
			t.Errorf("StripPrefix(%q, %q) = %q, %v; want %q, %v", tt.prefix, tt.in, got, ok, tt.out, tt.ok)
		}
	}
}

func TestEffectiveQoS(t *testing.T) {
	tests := []struct {
		name      string
		published byte
		class     string
		addOn     bool
		poolLeft  bool
		want      byte
		demoted   bool
		takes     bool
	}{
		{"qos0 stays 0", 0, fleetmq.ClassState, true, true, 0, false, false},
		{"qos1 stays 1", 1, fleetmq.ClassTelemetry, false, false, 1, false, false},
		{"qos2 state with add-on and pool", 2, fleetmq.ClassState, true, true, 2, false, true},
		{"qos2 event with add-on and pool", 2, fleetmq.ClassEvent, true, true, 2, false, true},
		{"qos2 state, pool used up: demoted", 2, fleetmq.ClassState, true, false, 1, true, true},
		{"qos2 without add-on is 1", 2, fleetmq.ClassState, false, true, 1, false, false},
		{"qos2 telemetry is 1 even with add-on", 2, fleetmq.ClassTelemetry, true, true, 1, false, false},
		{"qos2 sample is 1", 2, fleetmq.ClassSample, true, true, 1, false, false},
	}
	for _, tt := range tests {
		took := false
		got, demoted := EffectiveQoS(tt.published, tt.class, tt.addOn, func() bool { took = true; return tt.poolLeft })
		if got != tt.want || demoted != tt.demoted || took != tt.takes {
			t.Errorf("%s: got qos %d demoted %v took %v; want %d %v %v", tt.name, got, demoted, took, tt.want, tt.demoted, tt.takes)
		}
	}
}

func TestPoolResetsAtUTCMidnight(t *testing.T) {
	var p Pool
	day1 := time.Date(2026, 11, 22, 23, 59, 58, 0, time.UTC)
	for i := 0; i < 3; i++ {
		if !p.Take(day1, 3) {
			t.Fatalf("take %d of a pool of 3 refused", i+1)
		}
	}
	if p.Take(day1, 3) {
		t.Fatal("fourth take of a pool of 3 allowed")
	}
	st := p.State(day1, 3)
	if !st.Demoted || st.Used != 3 || st.Demotions != 1 || !st.ResetsAt.Equal(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("state before midnight: %+v", st)
	}
	day2 := day1.Add(3 * time.Second) // 00:00:01 next day
	if st := p.State(day2, 3); st.Demoted || st.Used != 0 {
		t.Fatalf("state after midnight: %+v", st)
	}
	if !p.Take(day2, 3) {
		t.Fatal("take after UTC midnight refused")
	}
	// A time zone east of UTC must not reset early.
	east := time.FixedZone("UTC+9", 9*3600)
	var q Pool
	q.Take(time.Date(2026, 11, 23, 1, 0, 0, 0, east), 1)      // 2026-11-22 16:00 UTC
	if q.Take(time.Date(2026, 11, 23, 8, 0, 0, 0, east), 1) { // 23:00 UTC, same UTC day
		t.Fatal("pool reset on a local date change instead of UTC midnight")
	}
}
