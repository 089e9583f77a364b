package platform

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// TestProblemLogBounds: repeats of a problem are one entry with a count
// and the latest detail; one account flooding distinct problems is capped
// at maxPendingPerAccount without taking another account's room; a failed
// flush's problems come back merged with the new ones.
func TestProblemLogBounds(t *testing.T) {
	l := &problemLog{seed: maphash.MakeSeed()}
	t0 := time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)
	p := fleetmq.ClientProblem{AccountID: "A", ClientID: "pump-17", Kind: fleetmq.ProblemPublishRefused, Topic: "A/pump-17/data/x", Reason: "topic_name_invalid", Detail: "first"}
	l.add(p, t0)
	p.Detail = "second"
	l.add(p, t0.Add(time.Second))
	for i := range maxPendingPerAccount + 100 {
		q := p
		q.AccountID, q.Topic = "noisy", fmt.Sprintf("noisy/dev/data/%d", i)
		l.add(q, t0)
	}
	b := p
	b.AccountID = "B"
	l.add(b, t0)

	got := l.take()
	per := map[string]int{}
	for _, q := range got {
		per[q.AccountID]++
		if q.AccountID == "A" && (q.Count != 2 || q.Detail != "second" || !q.First.Equal(t0) || !q.Last.Equal(t0.Add(time.Second))) {
			t.Fatalf("A's repeated problem: %+v", q)
		}
	}
	if per["A"] != 1 || per["B"] != 1 || per["noisy"] != maxPendingPerAccount {
		t.Fatalf("pending by account %v, want A 1, B 1, noisy %d", per, maxPendingPerAccount)
	}
	if n := l.overflown.Load(); n != 100 {
		t.Fatalf("overflown %d, want 100", n)
	}
	if again := l.take(); len(again) != 0 {
		t.Fatalf("a second take: %d problems", len(again))
	}

	// A failed flush puts them back, merged with a repeat since.
	l.add(p, t0.Add(time.Minute))
	l.restore(got)
	for _, q := range l.take() {
		if q.AccountID == "A" && (q.Count != 3 || !q.First.Equal(t0) || !q.Last.Equal(t0.Add(time.Minute))) {
			t.Fatalf("A's problem restored and repeated: %+v", q)
		}
	}
}
