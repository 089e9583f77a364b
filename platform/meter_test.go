package platform

import (
	"reflect"
	"testing"
	"time"
)

func TestMeterCollectAndRestore(t *testing.T) {
	m := NewMeter()
	day := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	a := m.account("A")
	b := m.account("B")
	s := a.slot(day)
	s.messages[0].Add(5)
	s.messages[2].Add(2)
	s.bytes[2].Add(200)
	s.poolUsed.Add(2)
	s.drops[1].Add(3)
	b.slot(day).messages[1].Add(7)
	m.client("A", "dev1").count(day, 2)
	// The next UTC day goes to the other slot.
	a.slot(day.Add(13 * time.Hour)).demotions.Add(1)

	names := []string{"queue_full", "retained_burst"}
	daily, clients := m.Collect(names)
	want := []DailyDelta{
		{AccountID: "A", Day: "2026-11-22", Messages: [3]int64{5, 0, 2}, Bytes: [3]int64{0, 0, 200}, PoolUsed: 2, Drops: map[string]int64{"retained_burst": 3}},
		{AccountID: "A", Day: "2026-11-23", Demotions: 1},
		{AccountID: "B", Day: "2026-11-22", Messages: [3]int64{0, 7, 0}},
	}
	if !reflect.DeepEqual(daily, want) {
		t.Fatalf("daily:\n got %+v\nwant %+v", daily, want)
	}
	if len(clients) != 1 || clients[0] != (ClientDelta{AccountID: "A", ClientID: "dev1", Day: "2026-11-22", Messages: [3]int64{0, 0, 1}}) {
		t.Fatalf("clients: %+v", clients)
	}
	if d, c := m.Collect(names); len(d) != 0 || len(c) != 0 {
		t.Fatalf("second collect is not empty: %+v %+v", d, c)
	}
	// A failed flush puts the increments back.
	m.restore(daily, clients, names)
	again, cagain := m.Collect(names)
	if !reflect.DeepEqual(again, want) || !reflect.DeepEqual(cagain, clients) {
		t.Fatalf("after restore:\n got %+v %+v\nwant %+v %+v", again, cagain, want, clients)
	}
}

// onClaim runs f once, right after a's next claim of a slot for a new day.
func onClaim(a *accountMeter, f func()) {
	a.days.claimed = func() { a.days.claimed = nil; f() }
}

// TestMeterRolloverLosesNoIncrement: at a UTC midnight the first message
// of the new day claims the slot that held the day before yesterday.
// A message of another connection metered at the same instant, while the
// claim is under way, counts in the new day, and a flush that runs then
// reports every day's increments under their own day. The other account
// is untouched.
func TestMeterRolloverLosesNoIncrement(t *testing.T) {
	m := NewMeter()
	a, b := m.account("A"), m.account("B")
	dayBefore := time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)
	midnight := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC) // same slot as dayBefore
	a.slot(dayBefore).messages[1].Add(3)                      // not flushed yet (the store was down)
	b.slot(midnight).messages[0].Add(5)

	var during []DailyDelta
	onClaim(a, func() {
		a.slot(midnight).messages[1].Add(1) // another publisher, the same instant
		during, _ = m.Collect(nil)          // the flush ticks meanwhile
	})
	a.slot(midnight).messages[1].Add(1)
	after, _ := m.Collect(nil)

	got := map[string]int64{}
	for _, d := range append(during, after...) {
		got[d.AccountID+" "+d.Day] += d.Messages[1] + d.Messages[0]
	}
	want := map[string]int64{"A 2026-11-22": 3, "A 2026-11-24": 2, "B 2026-11-24": 5}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("metered messages by account and day:\n got %v\nwant %v", got, want)
	}
}
