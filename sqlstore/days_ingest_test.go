package sqlstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// outcome records what the ingest writer told a publisher.
type outcome struct {
	mu      sync.Mutex
	acked   bool
	refused string
}

func (o *outcome) Ack() { o.mu.Lock(); o.acked = true; o.mu.Unlock() }
func (o *outcome) Refuse(_ packet.ReasonCode, reason string) {
	o.mu.Lock()
	o.refused = reason
	o.mu.Unlock()
}
func (o *outcome) state() (bool, string) { o.mu.Lock(); defer o.mu.Unlock(); return o.acked, o.refused }

// TestLateRecordWaitsForAReorder: on PostgreSQL, a record of a day being
// reordered (the day closed to changes) is neither acknowledged nor
// refused while the day is closed, and is stored and acknowledged once the
// reordered day is in place, and so is a record of today accepted after
// it (stored meanwhile when the two share a batch, after it otherwise: the
// writer keeps records in order).
func TestLateRecordWaitsForAReorder(t *testing.T) {
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	day := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	const acc = "a1111111-1111-4111-8111-111111111111"
	rec := func(at time.Time) *fleetmq.Record {
		return &fleetmq.Record{AccountID: acc, ClientID: "c", Topic: acc + "/c/state/x", Class: "state", QoS: 1, PublishedQoS: 1,
			Payload: []byte(at.Format(time.RFC3339)), Received: at}
	}
	if err := st.AppendHistory(ctx, []*fleetmq.Record{rec(day)}); err != nil {
		t.Fatal(err)
	}
	// Close the day as a reorder's first step does.
	if _, err := st.DB().ExecContext(ctx, `CREATE TRIGGER history_day_closed BEFORE INSERT OR UPDATE OR DELETE ON history_d20261001
		FOR EACH ROW EXECUTE FUNCTION history_day_closed()`); err != nil {
		t.Fatal(err)
	}
	w, err := ingest.New(st, ingest.Options{RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	late, today := &outcome{}, &outcome{}
	w.Accept(rec(day.Add(time.Minute)), late)
	w.Accept(rec(day.Add(48*time.Hour)), today)
	// The writer retries the closed day's record for a while, telling its
	// publisher nothing.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if acked, refused := late.state(); acked || refused != "" {
			t.Fatalf("the late record while its day is closed: acknowledged %v, refused %q", acked, refused)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n, err := st.ReorderHistoryDays(ctx, day.Add(24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("ReorderHistoryDays: %d, %v", n, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		la, lr := late.state()
		ta, tr := today.state()
		if lr != "" || tr != "" {
			t.Fatalf("refused: late %q, today %q", lr, tr)
		}
		if la && ta {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the records were not acknowledged after the reorder")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Close(cctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = st.QueryHistory(ctx, &fleetmq.HistoryQuery{AccountID: acc, ClientID: "c", Ascending: true}, func(r *fleetmq.Record) error {
		got = append(got, string(r.Payload))
		return nil
	})
	if err != nil || len(got) != 3 {
		t.Fatalf("history holds %v, %v; want the day's record, the late one and today's", got, err)
	}
}
