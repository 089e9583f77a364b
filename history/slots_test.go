package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestSlotsRequestsPerAccount: an account runs RequestsPerAccount history
// requests at once; one more is refused (with no wait to tell: it waits for
// a request to end), another account is not affected, and a release frees
// the slot (a second release changes nothing).
func TestSlotsRequestsPerAccount(t *testing.T) {
	var s history.Slots
	var releases []func()
	for range history.RequestsPerAccount {
		release, _, ok := s.Take("A")
		if !ok {
			t.Fatal("a slot of A refused below the bound")
		}
		releases = append(releases, release)
	}
	if _, retry, ok := s.Take("A"); ok || retry != 0 {
		t.Fatalf("one request more than the bound: ok %v retry %v, want refused with no retry time", ok, retry)
	}
	if release, _, ok := s.Take("B"); !ok {
		t.Fatal("B refused while A's slots are taken")
	} else {
		release()
	}
	releases[0]()
	releases[0]()
	if _, _, ok := s.Take("A"); !ok {
		t.Fatal("A refused after one of its requests ended")
	}
	if _, _, ok := s.Take("A"); ok {
		t.Fatal("a second release of the same slot freed another")
	}
}

// TestSlotsStoreTime: an account's reads spend store time from a credit of
// StoreTimeBurst earned back at one second per second; with the credit
// spent, its next request is refused with the time until it is positive
// again, another account is unaffected, and the credit never grows past
// the burst however long the account is quiet.
func TestSlotsStoreTime(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC))
	s := &history.Slots{Now: clk.Now}
	s.Charge("A", history.StoreTimeBurst+time.Second) // 1 s in debt
	_, retry, ok := s.Take("A")
	if ok || retry < time.Second || retry > time.Second+10*time.Millisecond {
		t.Fatalf("A in debt by 1 s: ok %v retry %v, want refused for about 1 s", ok, retry)
	}
	if release, _, ok := s.Take("B"); !ok {
		t.Fatal("B refused for A's store time")
	} else {
		release()
	}
	clk.Add(600 * time.Millisecond)
	if _, retry, ok := s.Take("A"); ok || retry < 400*time.Millisecond || retry > 410*time.Millisecond {
		t.Fatalf("0.6 s later: ok %v retry %v, want refused for 0.4 s", ok, retry)
	}
	clk.Add(500 * time.Millisecond)
	release, _, ok := s.Take("A")
	if !ok {
		t.Fatal("A refused once its credit was earned back")
	}
	release()
	clk.Add(time.Hour)
	s.Charge("A", history.StoreTimeBurst+time.Millisecond)
	if _, _, ok := s.Take("A"); ok {
		t.Fatal("an hour of quiet gave A more credit than the burst")
	}
}

// slowStore is a history store whose reads take cost on the test clock.
type slowStore struct {
	fleetmq.HistoryStore
	clk  *testkit.Clock
	cost time.Duration
}

func (s slowStore) QueryHistory(ctx context.Context, q *fleetmq.HistoryQuery, fn func(*fleetmq.Record) error) error {
	s.clk.Add(s.cost)
	return nil
}

// TestChargedStore: the time a read spends in the store is charged to the
// account whose request it serves, and to no other. Reads one after the
// other that each take less than StoreTimeBurst earn back what they spend;
// one that takes longer leaves the account in debt.
func TestChargedStore(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC))
	s := &history.Slots{Now: clk.Now}
	read := func(cost time.Duration) {
		t.Helper()
		st := s.Charged("A", slowStore{clk: clk, cost: cost})
		if err := st.QueryHistory(context.Background(), &fleetmq.HistoryQuery{AccountID: "A"}, func(*fleetmq.Record) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		read(1500 * time.Millisecond)
		if release, _, ok := s.Take("A"); !ok {
			t.Fatal("A refused after reads of 1.5 s one after the other")
		} else {
			release()
		}
	}
	read(history.StoreTimeBurst + time.Second)
	if _, retry, ok := s.Take("A"); ok || retry < time.Second {
		t.Fatalf("after a read of the burst and 1 s more: ok %v retry %v, want refused for 1 s", ok, retry)
	}
	if release, _, ok := s.Take("B"); !ok {
		t.Fatal("B charged for A's reads")
	} else {
		release()
	}
}
