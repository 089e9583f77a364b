package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// chunkSink stores problems and usage in memory, remembering how many rows
// each write carried, and refuses the writes numbered in fail.
type chunkSink struct {
	// slow, when set, is advanced by 100 ms per write: a store whose write
	// lock is held by long history commits.
	slow     *testkit.Clock
	fail     map[int]bool // 1-based write numbers to refuse
	writes   int
	sizes    []int
	problems map[string]int64 // topic → count
	messages map[string]int64 // account or account/client → QoS 1 messages
}

func (s *chunkSink) write(n int) error {
	s.writes++
	if s.slow != nil {
		s.slow.Add(100 * time.Millisecond)
	}
	if s.fail[s.writes] {
		return errors.New("disk full")
	}
	s.sizes = append(s.sizes, n)
	return nil
}

func (s *chunkSink) AddProblems(_ context.Context, ps []fleetmq.ClientProblem) error {
	if err := s.write(len(ps)); err != nil {
		return err
	}
	for _, p := range ps {
		s.problems[p.Topic] += p.Count
	}
	return nil
}

func (s *chunkSink) AddUsage(_ context.Context, daily []DailyDelta, clients []ClientDelta) error {
	if err := s.write(len(daily) + len(clients)); err != nil {
		return err
	}
	for _, d := range daily {
		s.messages[d.AccountID] += d.Messages[1]
	}
	for _, c := range clients {
		s.messages[c.AccountID+"/"+c.ClientID] += c.Messages[1]
	}
	return nil
}

// TestFlushInShortWrites: a flush of many problems and many clients' usage
// is written as several writes of at most flushChunk rows each (on SQLite
// each write holds the one write lock that history commits wait for), and
// a write that fails in the middle loses nothing and counts nothing twice:
// the next flush writes exactly what the failed one did not.
func TestFlushInShortWrites(t *testing.T) {
	now := time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)
	p := NewPolicy(Options{Now: func() time.Time { return now }}, &Snapshot{})
	const problems, clients = 3*flushChunk + 5, 2*flushChunk + 7
	for i := range problems {
		p.problems.add(fleetmq.ClientProblem{AccountID: "A", ClientID: "pump", Kind: fleetmq.ProblemPublishRefused,
			Topic: fmt.Sprintf("A/pump/state/%d", i), Reason: "quota_exceeded"}, now)
	}
	for i := range clients {
		account := []string{"A", "B"}[i%2]
		p.meter.client(account, fmt.Sprintf("dev-%d", i)).count(now, 1)
		p.meter.account(account).slot(now).messages[1].Add(1)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Problems: writes 1-4; usage: writes 5-8. The second of each fails.
	s := &chunkSink{fail: map[int]bool{2: true, 6: true}, problems: map[string]int64{}, messages: map[string]int64{}}
	p.flush(context.Background(), s, log)
	for _, n := range s.sizes {
		if n > flushChunk || n == 0 {
			t.Fatalf("a write of %d rows, want 1 to %d (all: %v)", n, flushChunk, s.sizes)
		}
	}
	if len(s.problems) != flushChunk {
		t.Fatalf("after the failed flush %d problems stored, want the first write's %d", len(s.problems), flushChunk)
	}
	s.fail = nil
	p.flush(context.Background(), s, log)
	for _, n := range s.sizes {
		if n > flushChunk || n == 0 {
			t.Fatalf("a write of %d rows, want 1 to %d (all: %v)", n, flushChunk, s.sizes)
		}
	}
	if len(s.problems) != problems {
		t.Fatalf("%d distinct problems stored, want %d", len(s.problems), problems)
	}
	for topic, n := range s.problems {
		if n != 1 {
			t.Fatalf("problem %s counted %d times, want once", topic, n)
		}
	}
	if s.messages["A"]+s.messages["B"] != clients {
		t.Fatalf("accounts' usage %d+%d messages, want %d", s.messages["A"], s.messages["B"], clients)
	}
	for i := range clients {
		k := []string{"A", "B"}[i%2] + fmt.Sprintf("/dev-%d", i)
		if s.messages[k] != 1 {
			t.Fatalf("client %s: %d messages stored, want 1", k, s.messages[k])
		}
	}
}

// TestFlushGrowsWritesBehindSlowCommits: when each usage write waits long
// for the store (here 100 ms, as behind long history commits), the writes
// grow, doubling up to flushChunkMax rows, so that 5,000 clients' usage is
// written in a handful of writes, every client's exactly once; with a
// store that answers at once they stay at flushChunk (TestFlushInShortWrites).
func TestFlushGrowsWritesBehindSlowCommits(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC))
	p := NewPolicy(Options{Now: clk.Now}, &Snapshot{})
	const clients = 5000
	for i := range clients {
		p.meter.client("A", fmt.Sprintf("dev-%d", i)).count(clk.Now(), 1)
	}
	s := &chunkSink{slow: clk, problems: map[string]int64{}, messages: map[string]int64{}}
	p.flush(context.Background(), s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	want := []int{32, 64, 128, 256, 512, 1024, 1024, 1024, 1024}
	if len(s.sizes) != len(want) || s.sizes[0] != want[0] || s.sizes[5] != flushChunkMax {
		t.Fatalf("write sizes %v, want doubling from %d to %d (%v)", s.sizes, flushChunk, flushChunkMax, want)
	}
	for i := range clients {
		if n := s.messages[fmt.Sprintf("A/dev-%d", i)]; n != 1 {
			t.Fatalf("client dev-%d: %d messages stored, want 1", i, n)
		}
	}
}

// onceSink is a chunkSink that applies each usage write at most once per
// id; lost lists the (1-based) writes that it applies but reports as
// failed, as a commit whose reply the connection lost.
type onceSink struct {
	chunkSink
	lost    map[int]bool
	applied map[string]bool
}

func (s *onceSink) AddUsageOnce(ctx context.Context, id string, daily []DailyDelta, clients []ClientDelta) error {
	if s.applied[id] {
		return nil
	}
	if err := s.chunkSink.AddUsage(ctx, daily, clients); err != nil {
		return err
	}
	s.applied[id] = true
	return s.lostReply()
}

// AddUsage loses replies too, for a flush that would not use the ids.
func (s *onceSink) AddUsage(ctx context.Context, daily []DailyDelta, clients []ClientDelta) error {
	if err := s.chunkSink.AddUsage(ctx, daily, clients); err != nil {
		return err
	}
	return s.lostReply()
}

func (s *onceSink) lostReply() error {
	if s.lost[s.writes] {
		return errors.New("connection reset after commit")
	}
	return nil
}

// TestUsageWriteSentAgainOnce: with a store that applies a usage write at
// most once per id, a write that went through but reported an error is
// sent again as it was and counted once; a write that failed is counted
// once too; every client's usage arrives exactly once.
func TestUsageWriteSentAgainOnce(t *testing.T) {
	now := time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)
	p := NewPolicy(Options{Now: func() time.Time { return now }}, &Snapshot{})
	const clients = 3*flushChunk + 5
	for i := range clients {
		p.meter.client("A", fmt.Sprintf("dev-%d", i)).count(now, 1)
		p.meter.account("A").slot(now).messages[1].Add(1)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Write 2 goes through but is reported failed; in the next flush, the
	// first write (the one sent again) fails outright.
	s := &onceSink{chunkSink: chunkSink{problems: map[string]int64{}, messages: map[string]int64{}}, lost: map[int]bool{2: true}, applied: map[string]bool{}}
	p.flush(context.Background(), s, log)
	s.fail = map[int]bool{3: true}
	p.flush(context.Background(), s, log)
	s.fail = nil
	p.flush(context.Background(), s, log)
	for i := range clients {
		if n := s.messages[fmt.Sprintf("A/dev-%d", i)]; n != 1 {
			t.Fatalf("client dev-%d: %d messages stored, want 1 (writes %v)", i, n, s.sizes)
		}
	}
	if s.messages["A"] != clients {
		t.Fatalf("account usage %d messages, want %d", s.messages["A"], clients)
	}
}

// daySink records the per-client rows it is given, by client and day.
type daySink struct{ clients map[string]int64 }

func (s *daySink) AddUsage(_ context.Context, _ []DailyDelta, clients []ClientDelta) error {
	for _, c := range clients {
		s.clients[c.AccountID+"/"+c.ClientID+" "+c.Day] += c.Messages[1]
	}
	return nil
}

// TestClientUsageAcrossMidnight: per-client usage held over UTC midnight
// by a flush that leaves it (ClientUsageEvery) is written later under the
// day each message was counted in, for each of two accounts.
func TestClientUsageAcrossMidnight(t *testing.T) {
	now := time.Date(2030, 3, 10, 23, 59, 30, 0, time.UTC)
	p := NewPolicy(Options{Now: func() time.Time { return now }}, &Snapshot{})
	s := &daySink{clients: map[string]int64{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p.meter.client("A", "dev1").count(now, 1)
	p.meter.client("B", "dev1").count(now, 1)
	p.flushPart(context.Background(), s, log, false)
	now = now.Add(time.Minute) // 00:00:30 the next day
	p.meter.client("A", "dev1").count(now, 1)
	p.meter.client("A", "dev1").count(now, 1)
	p.flushPart(context.Background(), s, log, false)
	if len(s.clients) != 0 {
		t.Fatalf("per-client rows before their flush: %v", s.clients)
	}
	p.flushPart(context.Background(), s, log, true)
	want := map[string]int64{"A/dev1 2030-03-10": 1, "B/dev1 2030-03-10": 1, "A/dev1 2030-03-11": 2}
	if !maps.Equal(s.clients, want) {
		t.Fatalf("per-client rows %v, want %v", s.clients, want)
	}
}
