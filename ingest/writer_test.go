package ingest_test

// Tests of the ingest writer on a real SQLite store: group commit, every
// record stored once with all its fields, acknowledgements only after the
// commit, back-pressure, the QoS 0 overload policy, the drain at Close and
// retries after store errors. SQLite's write lock, taken from a second
// connection with BEGIN IMMEDIATE, stands in for a slow or stuck disk.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// absence is how long a test watches for something that must not happen
// (an ack while the database is locked, an Accept returning while the
// queue is full). It is an observation window, not synchronisation.
const absence = 100 * time.Millisecond

// TestGroupCommit: records queued while a commit waits are written in a
// few large commits, not one commit per record.
func TestGroupCommit(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	w := newWriter(t, spy, ingest.Options{})
	release := db.lockDB(t)

	const n = 1000
	acks := make([]*ack, n)
	for i := range acks {
		acks[i] = &ack{}
		w.Accept(rec(acctA, 1), acks[i])
	}
	spy.waitEntered(t)
	release()
	eventually(t, "all records acknowledged", func() bool { return acked(t, acks) == n })

	st := w.Stats()
	if st.Written != n {
		t.Errorf("written %d, want %d", st.Written, n)
	}
	// The first commit took what had arrived when the writer woke; the
	// second everything queued behind it.
	if st.Batches > 2 {
		t.Errorf("%d records in %d commits, want at most 2", n, st.Batches)
	}
	if got := db.count(t, acctA); got != n {
		t.Errorf("history has %d records, want %d", got, n)
	}
	t.Logf("%d records, %d commits, %v committing", st.Written, st.Batches, st.CommitTime)
}

// TestStoredOnceWithAllFields: many publishers of two accounts at once;
// every record is stored exactly once, in its own account, with every
// field as accepted, and each publisher's records keep their order.
func TestStoredOnceWithAllFields(t *testing.T) {
	db := openDB(t)
	w := newWriter(t, db.Store, ingest.Options{QueueSize: 64, MaxBatch: 50})

	const publishers, per = 8, 150
	want := map[string][]*fleetmq.Record{}
	var all []*ack
	type pub struct {
		recs []*fleetmq.Record
		acks []*ack
	}
	pubs := make([]pub, publishers)
	for p := range pubs {
		account := acctA
		if p%2 == 1 {
			account = acctB
		}
		for i := range per {
			r := rec(account, byte(i%3))
			r.ClientID = "dev" + string(rune('a'+p))
			r.Topic = account + "/" + r.ClientID + "/event/e" + string(rune('0'+i%10))
			r.Class = "event"
			r.PublishedQoS = 2
			r.Retain = i%5 == 0
			switch i % 4 {
			case 0:
				r.ContentType = "application/json"
				r.PayloadFormat = 1
				r.UserProperties = []fleetmq.UserProperty{{Key: "site", Value: "north"}, {Key: "site", Value: "south"}}
				r.StationControllerDeviceID = "sc-" + r.ClientID
			case 1:
				r.Payload = append([]byte{0, 0xff, 0x80}, r.Payload...) // binary
			case 2:
				r.Payload = append(r.Payload[:0:0], r.Payload...)
			}
			pubs[p].recs = append(pubs[p].recs, r)
			a := &ack{}
			pubs[p].acks = append(pubs[p].acks, a)
			all = append(all, a)
			want[account] = append(want[account], r)
		}
	}
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, r := range pubs[p].recs {
				w.Accept(r, pubs[p].acks[i])
			}
		}()
	}
	wg.Wait()
	eventually(t, "all records acknowledged", func() bool { return acked(t, all) == len(all) })

	for _, account := range []string{acctA, acctB} {
		got := db.records(t, account)
		if len(got) != len(want[account]) {
			t.Fatalf("account %s: %d records stored, want %d", account, len(got), len(want[account]))
		}
		byID := map[int64]*fleetmq.Record{}
		for _, g := range got {
			if g.AccountID != account || !strings.HasPrefix(g.Topic, account+"/") {
				t.Fatalf("account %s holds a record of %s (%s)", account, g.AccountID, g.Topic)
			}
			byID[g.ID] = g
		}
		for _, r := range want[account] {
			g := byID[r.ID]
			if g == nil {
				t.Fatalf("record id %d (%q) not stored", r.ID, r.Payload)
			}
			delete(byID, r.ID)
			if !bytes.Equal(g.Payload, r.Payload) {
				t.Errorf("id %d: payload %q, want %q", r.ID, g.Payload, r.Payload)
			}
			gc, rc := *g, *r
			gc.Payload, rc.Payload = nil, nil
			if !gc.Received.Equal(rc.Received) {
				t.Errorf("id %d: received %v, want %v", r.ID, gc.Received, rc.Received)
			}
			gc.Received, rc.Received = time.Time{}, time.Time{}
			if !reflect.DeepEqual(gc, rc) {
				t.Errorf("id %d:\n got  %+v\n want %+v", r.ID, gc, rc)
			}
		}
	}
	// Group commit keeps each publisher's order: ids increase in Accept
	// order.
	for p := range pubs {
		for i := 1; i < len(pubs[p].recs); i++ {
			if a, b := pubs[p].recs[i-1].ID, pubs[p].recs[i].ID; a >= b {
				t.Fatalf("publisher %d: record %d has id %d after id %d", p, i, b, a)
			}
		}
	}
	if st := w.Stats(); st.Batches >= int64(len(all)) || st.DroppedQoS0 != 0 {
		t.Errorf("stats %+v: want fewer commits than records and no drops", st)
	}
}

// TestAckOnlyAfterCommit: while SQLite's write lock is held elsewhere no
// acknowledgement goes out; once it is released every record is acked,
// and at the moment of its ack each record is visible to another
// connection.
func TestAckOnlyAfterCommit(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	w := newWriter(t, spy, ingest.Options{})
	release := db.lockDB(t)

	const n = 20
	acks := make([]*ack, n)
	var mu sync.Mutex
	var notVisible []string
	for i := range acks {
		r := rec(acctA, 1+byte(i%2))
		a := &ack{}
		a.hook = func() {
			ok, err := db.stored(acctA, r.Payload)
			if err != nil || !ok {
				mu.Lock()
				notVisible = append(notVisible, string(r.Payload))
				mu.Unlock()
			}
		}
		acks[i] = a
		w.Accept(r, a)
	}
	spy.waitEntered(t)
	var k int
	if testkit.Within(absence, func() bool { k = acked(t, acks); return k != 0 }) {
		t.Fatalf("%d records acknowledged while the database was locked", k)
	}
	if got := db.count(t, acctA); got != 0 {
		t.Fatalf("%d records visible while the database was locked", got)
	}
	release()
	eventually(t, "acknowledgements after the lock is released", func() bool { return acked(t, acks) == n })
	if len(notVisible) > 0 {
		t.Errorf("acknowledged before visible in the store: %v", notVisible)
	}
	if got := db.count(t, acctA); got != n {
		t.Errorf("history has %d records, want %d", got, n)
	}
}

// TestBackPressure: with the queue full, Accept of a QoS 1 record blocks
// (the publisher's connection is not read) until the writer frees room;
// nothing is dropped.
func TestBackPressure(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	w := newWriter(t, spy, ingest.Options{QueueSize: 4})
	release := db.lockDB(t)

	var acks []*ack
	accept := func(r *fleetmq.Record) <-chan struct{} {
		a := &ack{}
		acks = append(acks, a)
		return acceptAsync(w, r, a)
	}
	// The writer takes the first record and waits for the lock inside its
	// commit; then four records fill the queue without blocking.
	returned(t, "first record", accept(rec(acctA, 1)))
	spy.waitEntered(t)
	for i := range 4 {
		returned(t, "record filling the queue", accept(rec(acctA, byte(i%3))))
	}
	if st := w.Stats(); st.QueueDepth != 4 || st.QueueCapacity != 4 {
		t.Fatalf("queue %d of %d, want 4 of 4", st.QueueDepth, st.QueueCapacity)
	}
	blocked := accept(rec(acctA, 1))
	eventually(t, "the sixth Accept to wait for room", func() bool { return w.Stats().AcceptWaits == 1 })
	select {
	case <-blocked:
		t.Fatal("Accept of a QoS 1 record returned with the queue full")
	case <-time.After(absence):
	}
	release()
	returned(t, "the blocked record once the writer freed room", blocked)
	eventually(t, "all six acknowledged", func() bool { return acked(t, acks) == 6 })
	if got := db.count(t, acctA); got != 6 {
		t.Errorf("history has %d records, want 6", got)
	}
	if st := w.Stats(); st.DroppedQoS0 != 0 {
		t.Errorf("dropped %d, want 0", st.DroppedQoS0)
	}
}

// TestManyWaitingPublishersAllGetThrough: hundreds of publishers of two
// accounts waiting for room in a queue of 8 (a take wakes as many of them
// as it made room for, not all) all get their records stored and
// acknowledged, each once.
func TestManyWaitingPublishersAllGetThrough(t *testing.T) {
	db := openDB(t)
	w := newWriter(t, db.Store, ingest.Options{QueueSize: 8, AccountQueueSize: 8, MaxBatch: 4})
	const publishers, each = 300, 4
	acks := make([]*ack, publishers*each)
	var done []<-chan struct{}
	for p := range publishers {
		account := []string{acctA, acctB}[p%2]
		for i := range each {
			a := &ack{}
			acks[p*each+i] = a
			done = append(done, acceptAsync(w, rec(account, 1), a))
		}
	}
	for _, d := range done {
		returned(t, "a waiting publisher's Accept", d)
	}
	eventually(t, "every record acknowledged", func() bool { return acked(t, acks) == len(acks) })
	if a, b := db.count(t, acctA), db.count(t, acctB); a+b != len(acks) || a != b {
		t.Fatalf("history has %d and %d records, want %d each", a, b, len(acks)/2)
	}
	if w.Stats().AcceptWaits == 0 {
		t.Fatal("no publisher waited: the test does not cover waiting")
	}
}

// TestQoS0Overload: with the queue full, a QoS 0 record is dropped from
// history at once and counted under the default policy, and waits for
// room (then is stored) under "wait".
func TestQoS0Overload(t *testing.T) {
	for _, policy := range []string{ingest.OverloadDrop, ingest.OverloadWait} {
		t.Run(policy, func(t *testing.T) {
			db := openDB(t)
			spy := newSpy(db.Store)
			log, sink := testkit.NewLog()
			opts := ingest.Options{QueueSize: 2, Logger: log}
			if policy == ingest.OverloadWait {
				opts.QoS0Overload = policy
			}
			w := newWriter(t, spy, opts)
			release := db.lockDB(t)
			w.Accept(rec(acctA, 1), nil)
			spy.waitEntered(t)
			w.Accept(rec(acctA, 1), nil)
			w.Accept(rec(acctA, 1), nil)

			over := rec(acctA, 0)
			done := acceptAsync(w, over, nil)
			if policy == ingest.OverloadDrop {
				returned(t, "QoS 0 on a full queue", done)
				if st := w.Stats(); st.DroppedQoS0 != 1 || st.AcceptWaits != 0 {
					t.Fatalf("stats %+v: want 1 QoS 0 drop and no wait", st)
				}
			} else {
				eventually(t, "the QoS 0 Accept to wait", func() bool { return w.Stats().AcceptWaits == 1 })
				select {
				case <-done:
					t.Fatal("QoS 0 Accept returned with the queue full under \"wait\"")
				case <-time.After(absence):
				}
			}
			release()
			returned(t, "QoS 0 Accept after release", done)
			eventually(t, "the QoS 1 records stored", func() bool { return w.Stats().Written >= 3 })
			// A later QoS 0 record (room now) is stored: the drop was only
			// for the overload.
			after := rec(acctA, 0)
			w.Accept(after, nil)
			eventually(t, "the later QoS 0 record stored", func() bool {
				ok, err := db.stored(acctA, after.Payload)
				return err == nil && ok
			})
			stored, err := db.stored(acctA, over.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if want := policy == ingest.OverloadWait; stored != want {
				t.Errorf("overload QoS 0 record stored: %v, want %v", stored, want)
			}
			if want := map[bool]int{true: 5, false: 4}[policy == ingest.OverloadWait]; db.count(t, acctA) != want {
				t.Errorf("history has %d records, want %d", db.count(t, acctA), want)
			}
			// The drop is in the log, once, with how many.
			const msg = "ingest: QoS 0 messages delivered live but not stored: the history queue was full"
			if policy == ingest.OverloadDrop {
				eventually(t, "the drop logged", func() bool { return len(sink.Lines(msg)) > 0 })
			}
			lines := sink.Lines(msg)
			if want := map[bool]int{true: 0, false: 1}[policy == ingest.OverloadWait]; len(lines) != want || want == 1 && lines[0]["records"] != float64(1) {
				t.Errorf("drop log lines %v, want %d with records=1", lines, want)
			}
		})
	}
}

// TestCloseDrains: Close commits and acknowledges everything queued before
// it returns; Accept after Close returns at once and neither stores nor
// acknowledges.
func TestCloseDrains(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	w := newWriter(t, spy, ingest.Options{MaxBatch: 16})
	release := db.lockDB(t)
	const n = 300
	acks := make([]*ack, n)
	for i := range acks {
		acks[i] = &ack{}
		w.Accept(rec(acctB, byte(i%3)), acks[i])
	}
	spy.waitEntered(t)
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		closed <- w.Close(ctx)
	}()
	// Close does not return while the queue holds unwritten records.
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with records still queued", err)
	case <-time.After(absence):
	}
	release()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Close did not return")
	}
	if k := acked(t, acks); k != n {
		t.Fatalf("%d of %d acknowledged when Close returned", k, n)
	}
	if got := db.count(t, acctB); got != n {
		t.Fatalf("history has %d records, want %d", got, n)
	}

	late := []*ack{{}, {}}
	returned(t, "QoS 1 after Close", acceptAsync(w, rec(acctB, 1), late[0]))
	returned(t, "QoS 0 after Close", acceptAsync(w, rec(acctB, 0), late[1]))
	if k := acked(t, late); k != 0 {
		t.Errorf("%d records acknowledged after Close", k)
	}
	if st := w.Stats(); st.Abandoned != 2 || st.Written != n {
		t.Errorf("stats %+v: want %d written and 2 abandoned", st, n)
	}
	if got := db.count(t, acctB); got != n {
		t.Errorf("history has %d records after late Accepts, want %d", got, n)
	}
}

// TestCloseDeadline: when Close's deadline passes with the database still
// locked, Close returns an error and the unwritten records are not
// acknowledged; Accept never blocks after Close, even on a full queue.
func TestCloseDeadline(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	w := newWriter(t, spy, ingest.Options{QueueSize: 2})
	db.lockDB(t)
	acks := []*ack{{}, {}, {}, {}}
	w.Accept(rec(acctA, 1), acks[0])
	spy.waitEntered(t)
	w.Accept(rec(acctA, 1), acks[1])
	w.Accept(rec(acctA, 2), acks[2])
	blocked := acceptAsync(w, rec(acctA, 1), acks[3])
	eventually(t, "an Accept waiting for room", func() bool { return w.Stats().AcceptWaits == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := w.Close(ctx)
	if err == nil {
		t.Fatal("Close returned nil with records unwritten")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v after a 200 ms deadline", took)
	}
	returned(t, "the Accept blocked at Close", blocked)
	if k := acked(t, acks); k != 0 {
		t.Errorf("%d unwritten records acknowledged", k)
	}
	t.Logf("close: %v; stats %+v", err, w.Stats())
}

// TestStoreErrorRetried: a failing store is retried with backoff; nothing
// is acknowledged while it fails, and once it works every record is
// written once and acknowledged once.
func TestStoreErrorRetried(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	spy.failFirst = 3
	const n = 50
	acks := make([]*ack, n)
	for i := range acks {
		acks[i] = &ack{}
	}
	var early atomic.Int32
	spy.onFail = func() {
		for _, a := range acks {
			early.Add(a.n.Load())
		}
	}
	w := newWriter(t, spy, ingest.Options{RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond})
	for i := range acks {
		w.Accept(rec(acctA, 1), acks[i])
	}
	eventually(t, "all acknowledged after the failures", func() bool { return acked(t, acks) == n })
	if e := early.Load(); e != 0 {
		t.Errorf("%d acknowledgements while the store was failing", e)
	}
	st := w.Stats()
	if st.StoreErrors != 3 {
		t.Errorf("store errors %d, want 3", st.StoreErrors)
	}
	if st.Written != n {
		t.Errorf("written %d, want %d", st.Written, n)
	}
	if got := db.count(t, acctA); got != n {
		t.Errorf("history has %d records, want %d (each once)", got, n)
	}
}

// TestOptions: defaults and refusals.
func TestOptions(t *testing.T) {
	for _, o := range []ingest.Options{{QueueSize: -1}, {MaxBatch: -5}, {QoS0Overload: "block"}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
		if _, err := ingest.New(nil, o); err == nil {
			t.Errorf("New(%+v): accepted", o)
		}
	}
	db := openDB(t)
	w := newWriter(t, db.Store, ingest.Options{})
	if c := w.Stats().QueueCapacity; c != ingest.DefaultQueueSize {
		t.Errorf("default queue capacity %d, want %d", c, ingest.DefaultQueueSize)
	}
}

// recorder is an ingest.Observer that keeps its observations.
type recorder struct {
	mu  sync.Mutex
	obs []float64
}

func (r *recorder) Observe(s float64) {
	r.mu.Lock()
	r.obs = append(r.obs, s)
	r.mu.Unlock()
}

func (r *recorder) seconds() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]float64(nil), r.obs...)
}

// TestLatencyObserved: every commit's duration is observed once, and every
// record's lag from Accept to the end of its commit once; a record queued
// behind a stuck commit shows the wait in its lag, not in its own commit's
// duration.
func TestLatencyObserved(t *testing.T) {
	db := openDB(t)
	spy := newSpy(db.Store)
	var commits, lags recorder
	w := newWriter(t, spy, ingest.Options{CommitDuration: &commits, Lag: &lags, MaxDelay: -1})
	release := db.lockDB(t)

	a, b := &ack{}, &ack{}
	w.Accept(rec(acctA, 1), a)
	spy.waitEntered(t) // the first commit waits for the lock, holding a alone
	w.Accept(rec(acctA, 1), b)
	acceptedB := time.Now()
	if testkit.Within(absence, func() bool { return a.n.Load()+b.n.Load() != 0 }) {
		t.Fatal("acknowledged while the database was locked")
	}
	stuck := time.Since(acceptedB).Seconds()
	release()
	eventually(t, "both records acknowledged", func() bool { return a.n.Load() == 1 && b.n.Load() == 1 })
	eventually(t, "both groups observed", func() bool { return len(lags.seconds()) == 2 })

	c, l := commits.seconds(), lags.seconds()
	if st := w.Stats(); len(c) != 2 || st.Batches != 2 || st.Written != 2 {
		t.Fatalf("commit durations %v for %d commits of %d records, want one per commit (2)", c, st.Batches, st.Written)
	}
	if c[0] < stuck || l[0] < stuck {
		t.Errorf("the stuck commit: took %.3fs, lag %.3fs; the lock was held %.3fs", c[0], l[0], stuck)
	}
	if l[1]-c[1] < stuck {
		t.Errorf("the record queued behind it: lag %.3fs, commit %.3fs; it waited %.3fs in the queue", l[1], c[1], stuck)
	}
}

// TestFailingWhileStoreFull: a SQLite store that cannot grow (a full disk)
// makes Failing report the store's error, and since when, while nothing is
// acknowledged; once it can grow again, the same group is stored once,
// acknowledged, and Failing clears.
func TestFailingWhileStoreFull(t *testing.T) {
	db := openDB(t)
	w := newWriter(t, db.Store, ingest.Options{RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond})
	if since, err := w.Failing(); err != nil || !since.IsZero() {
		t.Fatalf("a new writer is failing: %v since %v", err, since)
	}
	start := time.Now()
	db.SetMaxPages(1) // no page beyond those it has
	var acks []*ack
	for {
		if _, err := w.Failing(); err != nil {
			break
		}
		if len(acks) == 10000 {
			t.Fatal("10000 records of 4 KiB stored in a database that may not grow")
		}
		r := rec(acctA, 1)
		r.Payload = append(r.Payload, make([]byte, 4096)...)
		a := &ack{}
		acks = append(acks, a)
		w.Accept(r, a)
		eventually(t, "the record acknowledged or the writer failing", func() bool {
			_, err := w.Failing()
			return a.n.Load() == 1 || err != nil
		})
	}
	since, err := w.Failing()
	if !strings.Contains(err.Error(), "database or disk is full") || since.Before(start) || since.After(time.Now()) {
		t.Fatalf("Failing: %v since %v; want the store's 'full' error since the test began (%v)", err, since, start)
	}
	if got := acked(t, acks); got != len(acks)-1 {
		t.Fatalf("%d of %d records acknowledged while the store refuses the last", got, len(acks))
	}
	// Later failures keep the first one's time.
	eventually(t, "another failed attempt", func() bool { return w.Stats().StoreErrors >= 3 })
	if s, _ := w.Failing(); !s.Equal(since) {
		t.Fatalf("failing since %v after more attempts, was %v", s, since)
	}

	db.SetMaxPages(0)
	eventually(t, "every record acknowledged after the disk has room", func() bool { return acked(t, acks) == len(acks) })
	if since, err := w.Failing(); err != nil || !since.IsZero() {
		t.Fatalf("still failing after a commit succeeded: %v since %v", err, since)
	}
	if got := db.count(t, acctA); got != len(acks) {
		t.Fatalf("history has %d records, want %d (each once)", got, len(acks))
	}
}

// TestPoisonRecordsSetAside: records the store refuses while it takes the
// others in their batch (a trigger refuses them here, on real SQLite) are
// refused to their publishers, counted and reported, never retried; every
// other record of the batch is stored and acknowledged once, and records
// after it flow as before. A store that refuses everything is not taken
// for poison (TestFailingWhileStoreFull).
func TestPoisonRecordsSetAside(t *testing.T) {
	db := openDB(t)
	// On the tables of today's records and tomorrow's (a run across midnight).
	for i, at := range []time.Time{time.Now(), time.Now().Add(24 * time.Hour)} {
		table, err := db.HistoryTable(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.DB().Exec(fmt.Sprintf(`CREATE TRIGGER poison%d BEFORE INSERT ON %s
			WHEN NEW.topic LIKE '%%/poison/%%' BEGIN SELECT RAISE(ABORT, 'poison record'); END`, i, table)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var reported []string
	spy := newSpy(db.Store)
	w := newWriter(t, spy, ingest.Options{NotStored: func(r *fleetmq.Record, err error) {
		mu.Lock()
		reported = append(reported, r.Topic+": "+err.Error())
		mu.Unlock()
	}})
	release := db.lockDB(t) // the records gather into one batch

	const n = 100
	poison := map[int]bool{10: true, 11: true, 57: true}
	acks := make([]*ack, n)
	for i := range acks {
		r := rec(acctA, 1)
		if poison[i] {
			r.Topic = acctA + "/dev1/poison/x"
		}
		acks[i] = &ack{}
		w.Accept(r, acks[i])
	}
	spy.waitEntered(t)
	release()
	eventually(t, "every record answered", func() bool {
		answered := 0
		for _, a := range acks {
			answered += int(a.n.Load() + a.refused.Load())
		}
		return answered == n
	})
	for i, a := range acks {
		if want := poison[i]; a.refused.Load() != b2i(want) || a.n.Load() != b2i(!want) {
			t.Fatalf("record %d (poison %v): %d acks, %d refusals", i, want, a.n.Load(), a.refused.Load())
		}
	}
	if st := w.Stats(); st.NotStored != 3 || st.Written != n-3 {
		t.Fatalf("stats %+v, want 3 not stored and %d written", st, n-3)
	}
	if got := db.count(t, acctA); got != n-3 {
		t.Fatalf("history holds %d records, want %d", got, n-3)
	}
	mu.Lock()
	if len(reported) != 3 || !strings.Contains(reported[0], "poison record") {
		t.Fatalf("reported %q", reported)
	}
	mu.Unlock()

	after := &ack{}
	w.Accept(rec(acctA, 1), after)
	eventually(t, "a later record acknowledged", func() bool { return after.n.Load() == 1 })
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// upkeepStore is a store with upkeep between commits; at each
// AfterCommit it records how many records had been committed and how many
// acknowledged.
type upkeepStore struct {
	fleetmq.HistoryStore
	acks      []*ack
	committed atomic.Int64
	calls     chan [2]int
}

func (s *upkeepStore) AppendHistory(ctx context.Context, recs []*fleetmq.Record) error {
	err := s.HistoryStore.AppendHistory(ctx, recs)
	if err == nil {
		s.committed.Add(int64(len(recs)))
	}
	return err
}

func (s *upkeepStore) AfterCommit(context.Context) {
	acked := 0
	for _, a := range s.acks {
		acked += int(a.n.Load())
	}
	s.calls <- [2]int{int(s.committed.Load()), acked}
}

// TestUpkeepAfterAcknowledgements: a store's upkeep between commits (SQLite
// finishing a WAL checkpoint) runs after the commit's acknowledgements,
// so it delays no publisher of the group just stored.
func TestUpkeepAfterAcknowledgements(t *testing.T) {
	db := openDB(t)
	s := &upkeepStore{HistoryStore: db.Store, acks: make([]*ack, 20), calls: make(chan [2]int, 20)}
	for i := range s.acks { // all made before the writer reads them
		s.acks[i] = &ack{}
	}
	w := newWriter(t, s, ingest.Options{MaxBatch: 4, MaxDelay: -1})
	for _, a := range s.acks {
		w.Accept(rec(acctA, 1), a)
	}
	for seen := 0; seen < len(s.acks); {
		select {
		case c := <-s.calls:
			if c[0] != c[1] {
				t.Fatalf("upkeep ran with %d records committed and %d acknowledged", c[0], c[1])
			}
			seen = c[0]
		case <-time.After(waitFor):
			t.Fatal("no upkeep after a commit")
		}
	}
}

// flakyStore passes its first commit once the test opens the gate, then
// refuses the attempts numbered in fail (1-based), as a database that
// goes away for a moment does.
type flakyStore struct {
	fleetmq.HistoryStore
	gate    chan struct{}
	entered chan struct{}
	fail    map[int32]bool
	calls   atomic.Int32
}

func (s *flakyStore) AppendHistory(ctx context.Context, recs []*fleetmq.Record) error {
	n := s.calls.Add(1)
	if n == 1 {
		close(s.entered)
		<-s.gate
	}
	if s.fail[n] {
		return errors.New("connection reset by peer")
	}
	return s.HistoryStore.AppendHistory(ctx, recs)
}

// TestStoreRecoveringMidPassSetsNothingAside: when the store fails the
// first attempts at a group and then recovers while the writer is storing
// the group's halves, a record refused during the failure is tried again
// alone and stored: it is not taken for poison because others went in
// after the store came back. Every record is stored and acknowledged.
func TestStoreRecoveringMidPassSetsNothingAside(t *testing.T) {
	db := openDB(t)
	// Attempt 1 stores r0; the group r1-r4 then meets: 2 (whole) fail,
	// 3 (r1-r2) fail, 4 (r1) fail, 5 (r2) and 6 (r3-r4) pass.
	s := &flakyStore{HistoryStore: db.Store, gate: make(chan struct{}), entered: make(chan struct{}),
		fail: map[int32]bool{2: true, 3: true, 4: true}}
	w := newWriter(t, s, ingest.Options{MaxDelay: -1})
	acks := make([]*ack, 5)
	for i := range acks {
		acks[i] = &ack{}
	}
	w.Accept(rec(acctA, 1), acks[0])
	<-s.entered
	for _, a := range acks[1:] {
		w.Accept(rec(acctA, 1), a)
	}
	close(s.gate)
	eventually(t, "every record acknowledged or refused", func() bool {
		n := 0
		for _, a := range acks {
			n += int(a.n.Load() + a.refused.Load())
		}
		return n == len(acks)
	})
	for i, a := range acks {
		if a.refused.Load() != 0 {
			t.Fatalf("record %d refused as poison after a passing store failure", i)
		}
	}
	if st := w.Stats(); st.NotStored != 0 || st.Written != 5 {
		t.Fatalf("written %d, set aside %d; want 5 and 0", st.Written, st.NotStored)
	}
	if got := db.count(t, acctA); got != 5 {
		t.Fatalf("history has %d records, want 5", got)
	}
}
