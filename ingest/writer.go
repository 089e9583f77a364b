// Package ingest turns accepted messages into stored history. It owns the
// path between the broker and the history store: a bounded queue filled on
// the publishers' connection goroutines and one writer goroutine that
// commits what is queued in groups (group commit), then acknowledges every
// message of the group to its publisher. The queue has a lane per account,
// bounded apart, and each group takes the accounts' records in turns, so
// one tenant's flood cannot stand between another's message and its
// acknowledgement.
//
// Acked means stored: a QoS 1 PUBACK or QoS 2 PUBREC goes out only after
// the record's group is committed. When the queue is full, Accept blocks for
// QoS 1/2 records, so the publisher's connection is not read until room
// frees up (back-pressure); QoS 0 records are dropped from history and
// counted (they are still delivered live), or wait like the others with
// QoS0Overload "wait". A failed commit is retried with bounded backoff and
// nothing of its group is acknowledged until it succeeds. Close stops
// accepting and commits everything queued.
package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// QoS 0 overload policies (Options.QoS0Overload).
const (
	// OverloadDrop drops a QoS 0 record from history when the queue is
	// full (the message is still delivered live) and counts it.
	OverloadDrop = "drop"
	// OverloadWait makes QoS 0 publishers wait for room like QoS 1/2.
	OverloadWait = "wait"
)

// Options configure a Writer. Zero fields take the defaults.
type Options struct {
	// QueueSize bounds the records waiting for the writer. Default 16384.
	QueueSize int
	// AccountQueueSize bounds the records of one account waiting for the
	// writer: a publisher whose account has this many queued waits (or
	// its QoS 0 record is dropped) as if the queue were full. Default a
	// quarter of QueueSize, at least min(QueueSize, 1024).
	AccountQueueSize int
	// MaxBatch bounds the records of one commit. Default 2048.
	MaxBatch int
	// Writers is how many commits may be in progress at once, each of
	// other accounts' records: an account's records are in one commit at
	// a time, in the order they were accepted, so its publishers'
	// acknowledgements keep their order. Default: what the store says it
	// takes (a HistoryWriters method: sqlstore says 1 on SQLite, which has
	// one writer, and its ingest connections on PostgreSQL, where a second
	// commit lets a quiet tenant's records go in beside a flood's instead
	// of after them), else 1.
	Writers int
	// AccountTurn is how many records of one account a batch takes before
	// the other accounts with records waiting have had their turn. Default
	// MaxBatch/8, at least 1. (An account with fewer than 32 records
	// queued is admitted even when the queue is full, so other tenants'
	// floods cannot make it wait for room.)
	AccountTurn int
	// MaxDelay is how long the writer may wait for more records to fill a
	// batch while records are streaming in: when it took more than one, or
	// its previous commit ended less than MaxDelay ago. A lone record after
	// a quiet spell is committed at once, and so is a batch holding the
	// record of an account that sent nothing in the MaxDelay before it: a
	// stream waits for its own company, never a quiet tenant. Default
	// 2 ms; negative: never wait.
	MaxDelay time.Duration
	// QoS0Overload is the policy for QoS 0 records when the queue is full:
	// OverloadDrop (default) or OverloadWait.
	QoS0Overload string
	// RetryMin and RetryMax bound the exponential backoff between attempts
	// of a failed commit. Defaults 10 ms and 2 s.
	RetryMin, RetryMax time.Duration
	// CommitDuration, if set, observes how long each successful commit
	// took, in seconds. Lag, if set, observes for every committed record
	// the seconds from its Accept to the end of its commit (the time it
	// added to its publisher's acknowledgement). Both are called on the
	// writer goroutine, after the group is acknowledged: they must not
	// block.
	CommitDuration, Lag Observer
	// NotStored, if set, is told of every record the store refused while
	// it took others (a poison record: set aside, refused to its
	// publisher, never retried).
	NotStored func(rec *fleetmq.Record, err error)
	Logger    *slog.Logger
}

// Observer takes observations in seconds; a prometheus.Histogram is one.
type Observer interface{ Observe(seconds float64) }

// Defaults.
const (
	DefaultQueueSize = 16384
	DefaultMaxBatch  = 2048
	DefaultMaxDelay  = 2 * time.Millisecond
)

// withDefaults fills zero fields.
func (o Options) withDefaults() Options {
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.AccountQueueSize == 0 {
		o.AccountQueueSize = max(o.QueueSize/4, min(o.QueueSize, 1024))
	}
	if o.AccountTurn == 0 {
		o.AccountTurn = max(o.MaxBatch/8, 1)
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.QoS0Overload == "" {
		o.QoS0Overload = OverloadDrop
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 10 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 2 * time.Second
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = o.RetryMin
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate checks the options (after defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.QueueSize < 1:
		return fmt.Errorf("ingest: queue size %d: must be at least 1", o.QueueSize)
	case o.MaxBatch < 1:
		return fmt.Errorf("ingest: batch size %d: must be at least 1", o.MaxBatch)
	case o.Writers < 0:
		return fmt.Errorf("ingest: writers %d: must be at least 1", o.Writers)
	case o.AccountQueueSize < 1:
		return fmt.Errorf("ingest: account queue size %d: must be at least 1", o.AccountQueueSize)
	case o.AccountTurn < 1:
		return fmt.Errorf("ingest: account turn %d: must be at least 1", o.AccountTurn)
	case o.QoS0Overload != OverloadDrop && o.QoS0Overload != OverloadWait:
		return fmt.Errorf("ingest: QoS 0 overload policy %q: must be %q or %q", o.QoS0Overload, OverloadDrop, OverloadWait)
	}
	return nil
}

// item is a queued record, its publisher's acknowledgement and when it
// was accepted.
type item struct {
	rec *fleetmq.Record
	ack Acker
	at  time.Time
	// quiet: the record's account sent nothing in the MaxDelay before it
	// (set by the queue). A batch holding a quiet record is committed
	// without waiting for company.
	quiet bool
}

// upkeeper is a history store with upkeep to do between two commits, after
// the first is acknowledged (sqlstore restarts SQLite's WAL there).
type upkeeper interface {
	AfterCommit(ctx context.Context)
}

// Writer is the ingest pipeline: a platform.Sink over a history store.
type Writer struct {
	opts   Options
	store  fleetmq.HistoryStore
	upkeep upkeeper // the store's upkeep between commits, if it has any
	log    *slog.Logger
	q      *queue

	// active counts Accept calls in progress, so that the drain at Close
	// also takes a record whose Accept raced with Close.
	active    atomic.Int64
	closed    atomic.Bool
	closing   chan struct{} // closed by Close: stop accepting, drain
	closeOnce sync.Once
	abortCtx  context.Context // cancelled when Close's deadline passes
	abort     context.CancelFunc
	done      chan struct{} // closed when every writer goroutine has ended

	written     atomic.Int64
	batches     atomic.Int64
	commitNanos atomic.Int64
	droppedQoS0 atomic.Int64
	storeErrors atomic.Int64
	acceptWaits atomic.Int64
	abandoned   atomic.Int64
	notStored   atomic.Int64
	inBatch     atomic.Int64 // records of the batches being committed
	// failing is set while the store refuses commits: since the first
	// failed attempt, with the last attempt's error; nil after a success.
	failing atomic.Pointer[failure]
	// dropsReported and dropsReportedAt belong to the first writer
	// goroutine
	// (reportDrops).
	dropsReported   int64
	dropsReportedAt time.Time
}

// New starts a Writer over store.
func New(store fleetmq.HistoryStore, opts Options) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.Writers == 0 {
		opts.Writers = 1
		if ws, ok := store.(interface{ HistoryWriters() int }); ok {
			opts.Writers = max(ws.HistoryWriters(), 1)
		}
	}
	w := &Writer{
		opts:    opts,
		store:   store,
		log:     opts.Logger,
		q:       newQueue(opts.QueueSize, opts.AccountQueueSize, opts.AccountTurn, opts.MaxDelay),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	w.upkeep, _ = store.(upkeeper)
	w.abortCtx, w.abort = context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range opts.Writers {
		wg.Go(func() { w.run(i == 0) })
	}
	go func() {
		wg.Wait()
		if n := w.q.len(); n > 0 { // Close's deadline passed before a writer took them
			w.abandoned.Add(int64(n))
		}
		close(w.done)
	}()
	return w, nil
}

// Accept implements platform.Sink. It queues the record and returns; the
// writer calls ack.Ack once the record is committed. When the queue, or
// the record's account's share of it, is full it blocks for a QoS 1/2
// record (and for QoS 0 under OverloadWait) until there is room;
// otherwise it drops the QoS 0 record from history. After Close it stores
// nothing and never blocks: the record is not acknowledged, so a QoS 1/2
// publisher sends it again when it reconnects.
func (w *Writer) Accept(rec *fleetmq.Record, ack Acker) {
	w.active.Add(1)
	defer w.active.Add(-1)
	if w.closed.Load() {
		w.abandoned.Add(1)
		return
	}
	it := item{rec: rec, ack: ack, at: time.Now()}
	if w.q.push(it, nil) {
		return
	}
	if rec.PublishedQoS == 0 && w.opts.QoS0Overload == OverloadDrop {
		w.droppedQoS0.Add(1)
		return
	}
	w.acceptWaits.Add(1)
	wake := make(chan struct{}, 1)
	for !w.q.push(it, wake) {
		select {
		case <-wake:
		case <-w.closing:
			w.abandoned.Add(1)
			return
		}
	}
}

// run is a writer goroutine (Options.Writers of them): take a batch,
// commit it, acknowledge it, give its accounts back. The first also
// reports the QoS 0 records dropped.
func (w *Writer) run(first bool) {
	b := &batch{
		recs: make([]*fleetmq.Record, 0, w.opts.MaxBatch),
		acks: make([]Acker, 0, w.opts.MaxBatch),
		ats:  make([]time.Time, 0, w.opts.MaxBatch),
	}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	draining := false
	var lastCommit time.Time
	for {
		if !w.first(b, &draining) {
			return
		}
		// Waiting a little for company costs the first record up to
		// MaxDelay of acknowledgement latency and saves a commit per
		// record under a steady stream (the commit, not the row, is what
		// costs at low rates). Only streams pay that wait: a batch with a
		// quiet account's record goes at once, so that another tenant's
		// stream never adds its batching delay to a quiet tenant's
		// acknowledgement.
		streaming := len(b.recs) > 1 || time.Since(lastCommit) < w.opts.MaxDelay
		if !draining && w.opts.MaxDelay > 0 && streaming && !b.quiet && len(b.recs) < w.opts.MaxBatch {
			w.linger(b, linger)
		}
		n := int64(len(b.recs))
		w.inBatch.Add(n)
		ok := w.commit(b)
		if !ok {
			// Close's deadline passed: what was not committed is not
			// acknowledged, and stays counted in inBatch for Close to
			// report (what is still queued is counted when every writer
			// has stopped).
			left := int64(len(b.recs))
			w.inBatch.Add(left - n)
			w.q.release(b)
			w.abandoned.Add(left)
			w.log.Warn("ingest: closed before these records were stored; they were not acknowledged", "records", len(b.recs)+w.q.len())
			return
		}
		w.inBatch.Add(-n)
		w.q.release(b)
		lastCommit = time.Now()
		b.reset()
		if w.upkeep != nil {
			w.upkeep.AfterCommit(w.abortCtx)
		}
		if first {
			w.reportDrops(lastCommit)
		}
	}
}

// dropReportEvery is how often at most the writer logs the QoS 0 records
// the overload policy kept out of history.
const dropReportEvery = 10 * time.Second

// reportDrops logs how many QoS 0 records were not stored since the last
// report (one line, however many): the first drops at once, then at most
// every dropReportEvery.
func (w *Writer) reportDrops(now time.Time) {
	n := w.droppedQoS0.Load()
	if n == w.dropsReported || now.Sub(w.dropsReportedAt) < dropReportEvery {
		return
	}
	w.log.Warn("ingest: QoS 0 messages delivered live but not stored: the history queue was full",
		"records", n-w.dropsReported, "queue", w.opts.QueueSize)
	w.dropsReported, w.dropsReportedAt = n, now
}

// observeCommit and observeLag give the latency observers a successful
// commit's duration and a stored record's lag (acceptance to commit end).
func (w *Writer) observeCommit(took time.Duration) {
	if o := w.opts.CommitDuration; o != nil {
		o.Observe(took.Seconds())
	}
}

func (w *Writer) observeLag(at, end time.Time) {
	if o := w.opts.Lag; o != nil {
		o.Observe(end.Sub(at).Seconds())
	}
}

// batch is the group being committed.
type batch struct {
	recs  []*fleetmq.Record
	acks  []Acker
	ats   []time.Time // when each record was accepted
	quiet bool        // it holds a quiet account's record (item.quiet)
	// group gathers the acknowledgements of a commit that can be written
	// together (groupAcker), flushed once they are all made.
	group broker.Acks
	lanes []*lane // the accounts whose records it holds (queue.release)
}

func (b *batch) add(it item) {
	b.recs = append(b.recs, it.rec)
	b.acks = append(b.acks, it.ack)
	b.ats = append(b.ats, it.at)
	b.quiet = b.quiet || it.quiet
}

func (b *batch) reset() {
	clear(b.recs)
	clear(b.acks)
	b.recs, b.acks, b.ats = b.recs[:0], b.acks[:0], b.ats[:0]
	b.quiet = false
}

// first waits for the first records of a batch and takes what is queued.
// It returns false when the writer is closed and everything accepted has
// been taken.
func (w *Writer) first(b *batch, draining *bool) bool {
	for {
		if w.q.takeOrIdle(b, w.opts.MaxBatch) > 0 {
			return true
		}
		if *draining {
			w.q.busy()
			if w.active.Load() > 0 {
				// An Accept that raced with Close may still be about to queue.
				runtime.Gosched()
				continue
			}
			if w.q.len() == 0 {
				return false
			}
			// What is left is in lanes another writer holds while its
			// commit goes on, retries included: wait for it to give them
			// back (or to take them itself) without spinning.
			select {
			case <-w.q.notify:
			case <-time.After(time.Millisecond):
			case <-w.abortCtx.Done():
				return false
			}
			continue
		}
		select {
		case <-w.q.notify:
		case <-w.closing:
			*draining = true
		}
		w.q.busy()
	}
}

// linger waits up to MaxDelay for more records to fill the batch, and no
// longer than until a quiet account's record is queued. The records that
// come meanwhile wait in the queue (pushes do not wake the writer for
// them, see queue.notify) and are taken when the wait ends.
func (w *Writer) linger(b *batch, t *time.Timer) {
	t.Reset(w.opts.MaxDelay)
	defer t.Stop()
	for len(b.recs) < w.opts.MaxBatch && !b.quiet {
		want := w.opts.MaxBatch - len(b.recs)
		w.q.linger(want)
		over := false
		select {
		case <-w.q.notify:
		case <-t.C:
			over = true
		case <-w.closing:
			over = true
		}
		w.q.takeLingered(b, want)
		if over {
			return
		}
	}
}

// commit stores the batch and answers every record's publisher: most
// often in one commit. When the store refuses the batch, parts of it are
// stored apart, halving down to single records (pass): whatever goes in is
// acknowledged at once; a single record the store refuses while it takes
// others in the same pass is poison (a value it cannot hold): it is set
// aside, refused to its publisher (Acker.Refuse), counted, logged and
// reported (Options.NotStored), never retried, so it holds back no one's
// acknowledgement. A pass that stores nothing means the store itself is
// failing: the rest is retried with backoff until it goes in. It returns
// false if Close's deadline passed first (the batch then holds what was
// not stored, unacknowledged).
func (w *Writer) commit(b *batch) bool {
	delay := w.opts.RetryMin
	for attempt := 1; ; attempt++ {
		p := w.pass(b.recs)
		end := time.Now()
		keep := 0
		for i, rec := range b.recs {
			switch {
			case p.whole || p.stored[i]:
				// Observed before the acknowledgement: a publisher that has
				// its PUBACK finds its record in the metrics.
				w.observeLag(b.ats[i], end)
				if a := b.acks[i]; a != nil {
					if ga, ok := a.(groupAcker); ok {
						ga.AckTo(&b.group)
					} else {
						a.Ack()
					}
				}
			case p.poison[i] != nil:
				w.setAside(rec, b.acks[i], p.poison[i])
			default:
				b.recs[keep], b.acks[keep], b.ats[keep] = rec, b.acks[i], b.ats[i]
				keep++
			}
		}
		b.group.Flush()
		clear(b.recs[keep:])
		clear(b.acks[keep:])
		b.recs, b.acks, b.ats = b.recs[:keep], b.acks[:keep], b.ats[:keep]
		if p.progress {
			if w.failing.Load() != nil {
				w.failing.Store(nil)
			}
			if attempt > 1 {
				w.log.Info("ingest: history batch stored after retries", "attempts", attempt)
			}
			if len(b.recs) == 0 {
				return true
			}
			continue // the rest, in a new pass
		}
		if w.abortCtx.Err() != nil {
			return false
		}
		since := p.start
		if f := w.failing.Load(); f != nil {
			since = f.since
		}
		w.failing.Store(&failure{since: since, err: p.err})
		w.log.Error("ingest: store history batch", "records", len(b.recs), "attempt", attempt, "retry_in", delay, "error", p.err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-w.abortCtx.Done():
			t.Stop()
			return false
		}
		delay = min(delay*2, w.opts.RetryMax)
	}
}

// passResult says what one pass over a batch did.
type passResult struct {
	start time.Time
	whole bool // the batch went in in one commit (stored and poison are nil)
	// stored marks what went in; poison holds the store's refusal of each
	// record to set aside.
	stored   []bool
	poison   []error
	progress bool  // something was stored or set aside
	err      error // the last refusal
}

// pass tries to store recs: whole, then, if the store refuses, in halves,
// recursively, within a budget of attempts that grows with the log of the
// batch (a store that fails whatever it is given costs a few attempts per
// pass, and one poison record about two per halving). A single record the
// store refuses is poison when the store refuses it again, alone, after
// taking others in the pass (a store that recovered in the middle of the
// pass takes it then), or when the store says the refusal is the record's
// fault (RecordError): a lone poison record has no others to show the
// store works.
func (w *Writer) pass(recs []*fleetmq.Record) passResult {
	p := passResult{start: time.Now()}
	if p.err = w.append(recs); p.err == nil {
		p.whole, p.progress = true, true
		return p
	}
	p.stored, p.poison = make([]bool, len(recs)), make([]error, len(recs))
	if len(recs) == 1 {
		p.poison[0] = p.err
	} else {
		budget := 4 * bits.Len(uint(len(recs)))
		mid := len(recs) / 2
		w.tryPart(recs, 0, mid, &p, &budget)
		w.tryPart(recs, mid, len(recs)-mid, &p, &budget)
	}
	stored := slices.Contains(p.stored, true)
	if stored {
		// A record refused while the store was failing, in the first
		// attempts of the pass, is not poison for others having gone in
		// after the store recovered: each is tried once more, alone, now
		// that the store takes records, and only a second refusal sets it
		// aside.
		for i, err := range p.poison {
			if err == nil || w.recordError(err) || w.transient(err) || w.abortCtx.Err() != nil {
				continue
			}
			if p.poison[i] = w.append(recs[i : i+1]); p.poison[i] == nil {
				p.stored[i] = true
			} else {
				p.err = p.poison[i]
			}
		}
	}
	for i, err := range p.poison {
		switch {
		case err == nil:
		case w.transient(err) || w.storeFault(err) || w.abortCtx.Err() != nil:
			// The store will take it later (a day being rewritten, a full
			// disk, a database restarting), or Close's deadline cut its
			// commit short: never the record's fault, so it is kept, in
			// order, unacknowledged.
			p.poison[i] = nil
		case stored || w.recordError(err):
			p.progress = true
		default:
			p.poison[i] = nil // the store is failing, not this record
		}
	}
	p.progress = p.progress || stored
	return p
}

// append makes one attempt to store recs, counting it.
func (w *Writer) append(recs []*fleetmq.Record) error {
	start := time.Now()
	if err := w.store.AppendHistory(w.abortCtx, recs); err != nil {
		w.storeErrors.Add(1)
		return err
	}
	took := time.Since(start)
	w.commitNanos.Add(int64(took))
	w.batches.Add(1)
	w.written.Add(int64(len(recs)))
	w.observeCommit(took)
	return nil
}

// tryPart stores all[off:off+n] in one commit, or else its halves; a
// single record it cannot store gets its refusal in p.poison.
func (w *Writer) tryPart(all []*fleetmq.Record, off, n int, p *passResult, budget *int) {
	if *budget <= 0 || w.abortCtx.Err() != nil {
		return
	}
	*budget--
	if err := w.append(all[off : off+n]); err != nil {
		p.err = err
		if n == 1 {
			p.poison[off] = err
			return
		}
		w.tryPart(all, off, n/2, p, budget)
		w.tryPart(all, off+n/2, n-n/2, p, budget)
		return
	}
	for i := off; i < off+n; i++ {
		p.stored[i] = true
	}
}

// recordError asks the store, when it can tell, whether err is the
// record's fault rather than the store's (sqlstore.Store.RecordError).
func (w *Writer) recordError(err error) bool {
	re, ok := w.store.(interface{ RecordError(error) bool })
	return ok && re.RecordError(err)
}

// storeFault asks the store, when it can tell, whether err is the store's
// own failure (sqlstore.Store.StoreFault: a full disk, an I/O error, a
// database that does not answer) whatever the record: such a record is
// never poison, even when smaller ones still went in.
func (w *Writer) storeFault(err error) bool {
	sf, ok := w.store.(interface{ StoreFault(error) bool })
	return ok && sf.StoreFault(err)
}

// transient asks the store, when it can tell, whether err says the store
// cannot take the record now but will (sqlstore.Store.TransientError: the
// record's day is being rewritten): such a record is never poison.
func (w *Writer) transient(err error) bool {
	te, ok := w.store.(interface{ TransientError(error) bool })
	return ok && te.TransientError(err)
}

// setAside refuses a poison record to its publisher and reports it.
func (w *Writer) setAside(rec *fleetmq.Record, a Acker, err error) {
	w.notStored.Add(1)
	w.log.Error("ingest: the store refused a message while it took others; it is not kept and its publisher is told",
		"account", rec.AccountID, "client_id", rec.ClientID, "topic", rec.Topic, "qos", rec.PublishedQoS, "error", err)
	if a != nil {
		a.Refuse(packet.ImplementationSpecificError, "the history store refused this message, so it was not kept")
	}
	if w.opts.NotStored != nil {
		w.opts.NotStored(rec, err)
	}
}

// failure is a run of failed commit attempts.
type failure struct {
	since time.Time // the first failed attempt began
	err   error     // the last attempt's
}

// Failing reports whether the store is refusing the writer's commits:
// since when its attempts have failed and the last attempt's error (a
// disk full, a database that does not answer). Nothing the writer holds
// is acknowledged meanwhile. It returns a nil error once a commit
// succeeds.
func (w *Writer) Failing() (since time.Time, err error) {
	if f := w.failing.Load(); f != nil {
		return f.since, f.err
	}
	return time.Time{}, nil
}

// Close stops accepting, commits and acknowledges everything queued, and
// stops the writer. If ctx ends first, the records not yet stored are left
// unacknowledged (their publishers send them again) and Close returns an
// error saying how many.
func (w *Writer) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		w.closed.Store(true)
		close(w.closing)
	})
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
	}
	w.abort()
	select {
	case <-w.done:
	case <-time.After(250 * time.Millisecond): // a store that ignores its context
	}
	pending := w.inBatch.Load() + int64(w.q.len())
	return fmt.Errorf("ingest: close: %d records not stored and not acknowledged: %w", pending, ctx.Err())
}

// Stats are the writer's counters since it started.
type Stats struct {
	Written       int64         // records committed
	Batches       int64         // commits (Written/Batches is the mean batch size)
	CommitTime    time.Duration // time spent in successful commits
	QueueDepth    int           // records waiting now
	QueueCapacity int
	DroppedQoS0   int64 // QoS 0 records not stored because the queue was full
	StoreErrors   int64 // failed commit attempts (each retried)
	AcceptWaits   int64 // Accept calls that found the queue full and waited
	// Abandoned counts records not stored because the writer was closed
	// (accepted after Close, or still unwritten at Close's deadline); none
	// of them was acknowledged.
	Abandoned int64
	// NotStored counts records the store refused while it took others:
	// refused to their publishers, never retried (Options.NotStored).
	NotStored int64
}

// Stats returns the counters.
func (w *Writer) Stats() Stats {
	return Stats{
		Written:       w.written.Load(),
		Batches:       w.batches.Load(),
		CommitTime:    time.Duration(w.commitNanos.Load()),
		QueueDepth:    w.q.len(),
		QueueCapacity: w.q.size,
		DroppedQoS0:   w.droppedQoS0.Load(),
		StoreErrors:   w.storeErrors.Load(),
		AcceptWaits:   w.acceptWaits.Load(),
		NotStored:     w.notStored.Load(),
		Abandoned:     w.abandoned.Load(),
	}
}
