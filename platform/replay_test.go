package platform

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// filtersFrom returns filters, each read from at.
func filtersFrom(at time.Time, filters ...string) []broker.ReplayFilter {
	out := make([]broker.ReplayFilter, len(filters))
	for i, f := range filters {
		out[i] = broker.ReplayFilter{Filter: f, From: at}
	}
	return out
}

// heldHistory is a HistoryStore whose queries of account "storm" wait
// until released, counting how many run at once; it returns recs.
type heldHistory struct {
	fleetmq.HistoryStore
	mu      sync.Mutex
	running int
	most    int
	release chan struct{}
	recs    []*fleetmq.Record
	asked   []*fleetmq.HistoryQuery
}

func (h *heldHistory) QueryHistory(ctx context.Context, q *fleetmq.HistoryQuery, fn func(*fleetmq.Record) error) error {
	h.mu.Lock()
	h.asked = append(h.asked, q)
	h.mu.Unlock()
	if q.AccountID == "storm" {
		h.mu.Lock()
		h.running++
		h.most = max(h.most, h.running)
		h.mu.Unlock()
		<-h.release
		h.mu.Lock()
		h.running--
		h.mu.Unlock()
	}
	for _, r := range h.recs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// TestReplay: a replay gives the QoS 1 and 2 records its filters match,
// as the messages they were (with the publisher as origin), at most max;
// one account's replays run ReplaysPerAccount at a time while another
// account's pass beside them.
func TestReplay(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	h := &heldHistory{release: make(chan struct{}), recs: []*fleetmq.Record{
		{AccountID: "calm", ClientID: "d1", Topic: "calm/d1/state/a", QoS: 1, Payload: []byte("one"), ContentType: "text/plain", Received: at},
		{AccountID: "calm", ClientID: "d1", Topic: "calm/d1/telemetry/x", QoS: 0, Payload: []byte("qos 0"), Received: at},
		{AccountID: "calm", ClientID: "d2", Topic: "calm/d2/event/b", QoS: 2, Payload: []byte("two"), Received: at},
		{AccountID: "calm", ClientID: "d3", Topic: "calm/d3/event/c", QoS: 1, Payload: []byte("not matched"), Received: at},
		{AccountID: "calm", ClientID: "d2", Topic: "calm/d2/event/d", QoS: 1, Payload: []byte("over max"), Received: at},
	}}
	replay := Replay(h, nil)
	var got []*broker.Message
	id := &broker.Identity{Namespace: "calm/cred", ClientID: "follower"}
	err := replay(context.Background(), id, filtersFrom(at, "calm/d1/#", "calm/d2/#"), 2, func(m *broker.Message) { got = append(got, m) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Payload) != "one" || string(got[1].Payload) != "two" {
		t.Fatalf("replayed %d messages: %v", len(got), got)
	}
	if m := got[0]; m.QoS != 1 || m.Origin != "calm\x00d1" || !m.Created.Equal(at) || m.Properties.ContentType != "text/plain" {
		t.Fatalf("replayed %+v: want QoS 1, origin calm\\x00d1, created %v, content type text/plain", m, at)
	}
	if q := h.asked[0]; q.AccountID != "calm" || !q.From.Equal(at) || !q.Ascending || q.TopicRegex == "" {
		t.Fatalf("asked the store %+v", q)
	}

	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			replay(context.Background(), &broker.Identity{Namespace: "storm"}, filtersFrom(at, "storm/#"), 10, func(*broker.Message) {})
		})
	}
	testkit.Eventually(t, 5*time.Second, "the storm's replays to reach the store", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.running == ReplaysPerAccount
	})
	done := make(chan error, 1)
	go func() {
		done <- replay(context.Background(), id, filtersFrom(at, "calm/#"), 10, func(*broker.Message) {})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("another account's replay waited behind the storm's")
	}
	// A replay whose wait ends (its CONNECT's bound) says so.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := replay(ctx, &broker.Identity{Namespace: "storm"}, filtersFrom(at, "storm/#"), 10, func(*broker.Message) {}); err == nil {
		t.Fatal("a replay that could not wait for its account's line returned no error")
	}
	close(h.release)
	wg.Wait()
	if h.most != ReplaysPerAccount {
		t.Fatalf("%d replays of one account ran at once, want %d", h.most, ReplaysPerAccount)
	}
}

// TestReplayCountsFromEachFiltersStart: a session's filters start at
// different times (one subscribed while its replay was pending); history
// (a SQLite store) holds, between the two starts, more messages on the
// later filter's topics than the replay's max, then one on the earlier
// filter's. The replay reads from the earlier start and skips, uncounted,
// what only the later filter matches from before its own: it brings the
// earlier filter's message and the later filter's message after its start.
func TestReplayCountsFromEachFiltersStart(t *testing.T) {
	ctx := context.Background()
	st, err := sqlstore.OpenSQLite(ctx, filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	rec := func(client, sub string, d time.Duration, payload string) *fleetmq.Record {
		return &fleetmq.Record{AccountID: "acct", ClientID: client, Topic: "acct/" + client + "/" + sub, Class: "event",
			QoS: 1, PublishedQoS: 1, Payload: []byte(payload), Received: at.Add(d)}
	}
	var recs []*fleetmq.Record
	for i := range 5 { // d2's, before acct/d2/# was subscribed
		recs = append(recs, rec("d2", "event/old", time.Second+time.Duration(i)*time.Millisecond, fmt.Sprint("old", i)))
	}
	recs = append(recs, rec("d1", "event/x", 2*time.Second, "missed"), rec("d2", "event/y", 4*time.Second, "new"))
	if err := st.AppendHistory(ctx, recs); err != nil {
		t.Fatal(err)
	}
	filters := []broker.ReplayFilter{{Filter: "acct/d1/#", From: at}, {Filter: "acct/d2/#", From: at.Add(3 * time.Second)}}
	var got []string
	err = Replay(st, nil)(ctx, &broker.Identity{Namespace: "acct/cred", ClientID: "follower"}, filters, 2, func(m *broker.Message) {
		got = append(got, string(m.Payload))
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[missed new]" {
		t.Fatalf("replayed %q, want [missed new] (max 2)", got)
	}
}

// TestSessionAccount: a session key's account, for a device's session and
// a subscriber credential's.
func TestSessionAccount(t *testing.T) {
	for key, want := range map[string]string{"acct\x00dev1": "acct", "acct/cred\x00follower": "acct", "acct": "acct"} {
		if got := SessionAccount(key); got != want {
			t.Errorf("SessionAccount(%q) = %q, want %q", key, got, want)
		}
	}
}

// slowHistory is a HistoryStore whose every query takes took (or until
// its context ends), counting how many run at once.
type slowHistory struct {
	fleetmq.HistoryStore
	took          time.Duration
	mu            sync.Mutex
	running, most int
}

func (h *slowHistory) QueryHistory(ctx context.Context, q *fleetmq.HistoryQuery, fn func(*fleetmq.Record) error) error {
	h.mu.Lock()
	h.running++
	h.most = max(h.most, h.running)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.running--
		h.mu.Unlock()
	}()
	t := time.NewTimer(h.took)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestReplayWaitIsNotBounded: a storm of one account's replays (a
// restarted server's clients all coming back) waits in the account's line
// as long as the replays before it take, longer than a read may: every
// replay reads what its session missed. A read slower than its bound
// fails.
func TestReplayWaitIsNotBounded(t *testing.T) {
	defer func(d time.Duration) { replayRead = d }(replayRead)
	replayRead = time.Second
	h := &slowHistory{took: 50 * time.Millisecond}
	replay := Replay(h, nil)
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	const storm = 25 * ReplaysPerAccount // the last in line waits 24 reads: 1.2 s
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		longest time.Duration
	)
	for range storm {
		wg.Go(func() {
			start := time.Now()
			err := replay(context.Background(), &broker.Identity{Namespace: "storm"}, filtersFrom(at, "storm/#"), 10, func(*broker.Message) {})
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			longest = max(longest, time.Since(start))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("a replay of the storm failed: %v", err)
		}
	}
	if longest <= replayRead || h.most != ReplaysPerAccount {
		t.Fatalf("the longest replay took %v (want more than the read bound %v), %d ran at once (want %d): the test does not cover a long wait",
			longest, replayRead, h.most, ReplaysPerAccount)
	}
	slow := &slowHistory{took: time.Hour}
	if err := Replay(slow, nil)(context.Background(), &broker.Identity{Namespace: "storm"}, filtersFrom(at, "storm/#"), 10, func(*broker.Message) {}); err == nil {
		t.Fatal("a read slower than its bound returned no error")
	}
}
