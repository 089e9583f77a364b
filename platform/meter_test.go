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
