package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// retainedSubject carries the retained messages set on one node to the
// others.
const retainedSubject = "fleetmq.retained"

// retainedVersion is the layout of a retained message between nodes: this
// version (a byte), the sending node's name (appendString), then the
// message (broker.AppendMessage). A node drops, and counts in Malformed,
// one of a version it does not read.
const retainedVersion = 1

// Retained is the broker.Retained of a node of a cluster: every node
// keeps all of the cluster's retained messages in memory (a
// broker.MemoryRetained, which Match, Sweep, Under and Len read), so a
// subscription on any node is answered at once from there.
//
// A topic keeps the message created last, wherever it was set: every
// node, and the database, compares creation times, so a late or older
// copy never replaces a newer message, and the cluster ends with the
// same message everywhere whatever the order the copies arrive in. A
// clear is a message too: it leaves a tombstone (kept an hour in memory,
// in the database until swept) so that an older copy arriving after it
// does not bring the topic back.
//
// A message retained here is set locally at once (Set is on the
// publisher's path and does no I/O), then the sender goroutine publishes
// it on NATS to the other nodes and hands it to the store goroutine,
// which writes it to the database (fleetmq.RetainedStore) in batches. A
// node starting loads the database, and loads it again a few seconds
// later and whenever its embedded NATS gains a route: what another node
// retained before this node's interest reached it is in the database by
// then.
//
// Bounds: at most SendQueue messages wait for the sender (Set then waits,
// as a publisher waits for a full subscriber queue), and at most
// SendQueue rows for the database: when it is slow or down, the oldest
// rows are dropped and counted (Unstored; the running nodes have them, a
// node starting later would not), and the sender is never held up.
type Retained struct {
	*broker.MemoryRetained
	node  string
	nats  *NATS
	nc    *nats.Conn
	store fleetmq.RetainedStore
	log   *slog.Logger

	// stripes, by topic: a compare-and-set of one topic at a time, and
	// the tombstones of the topics cleared (by the clear's creation
	// time), with no lock shared by all topics on the publishing path.
	stripes [64]stripe
	seed    maphash.Seed

	out      chan *broker.Message
	rowsMu   sync.Mutex
	rows     []fleetmq.RetainedRow // waiting for the database
	rowsKick chan struct{}
	done     chan struct{} // Close began
	sendDone chan struct{} // the sender has sent what was queued
	sent     chan struct{} // closed after sendDone: the last store

	wg       sync.WaitGroup
	stopOnce sync.Once
	sub      *nats.Subscription

	lastSweep atomic.Int64 // Unix seconds of the last database sweep

	ctx     context.Context // ends at Close: reloads and sweeps stop
	cancel  context.CancelFunc
	closeMu sync.Mutex // orders a sweep's start with Close
	closed  bool

	// Received counts messages set from other nodes; Unstored counts
	// rows dropped because the database did not take them in time;
	// Malformed counts messages from other nodes that did not decode (a
	// layout version this node does not read among them).
	Received, Unstored, Malformed atomic.Int64
}

// stripe is the topics of one of Retained.stripes.
type stripe struct {
	mu    sync.Mutex
	tombs map[string]time.Time
}

// sweepEvery is how often at most a node sweeps the database's retained
// messages (every node's copy is swept at each broker sweep).
const sweepEvery = time.Minute

// tombstoneAge is how long a clear is remembered.
const tombstoneAge = time.Hour

// NewRetained loads the cluster's retained messages from the store and
// starts exchanging them with the other nodes. Without a store (bare
// brokers routed together) the nodes exchange what they retain while
// they run, and a node starting knows none of it.
func NewRetained(ctx context.Context, n *NATS, node string, store fleetmq.RetainedStore, now time.Time, log *slog.Logger) (*Retained, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Retained{MemoryRetained: broker.NewMemoryRetained(), node: node + "/" + strings.ToLower(rand.Text()[:8]),
		nats: n, store: store, log: log, seed: maphash.MakeSeed(),
		out: make(chan *broker.Message, SendQueue), rowsKick: make(chan struct{}, 1), done: make(chan struct{}),
		sendDone: make(chan struct{}), sent: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	var err error
	if r.nc, err = n.Connect("retained", nats.NoEcho()); err != nil {
		return nil, err
	}
	// Listen before loading: what is set meanwhile is not missed, and the
	// creation times sort the two out.
	if r.sub, err = r.nc.Subscribe(retainedSubject, r.receive); err == nil {
		err = r.sub.SetPendingLimits(ReceiveQueue, 64<<20)
	}
	if err == nil {
		err = r.nc.FlushTimeout(10 * time.Second)
	}
	if err == nil && store != nil {
		err = r.load(ctx, now)
	}
	if err != nil {
		r.cancel()
		r.nc.Close()
		return nil, err
	}
	r.wg.Add(1)
	go r.send()
	if store != nil {
		r.wg.Add(2)
		go r.write()
		go r.reconcile()
	}
	return r, nil
}

// load sets every stored message newer than what this node holds.
func (r *Retained) load(ctx context.Context, now time.Time) error {
	return r.store.LoadRetained(ctx, now.UnixMicro(), func(row fleetmq.RetainedRow) error {
		if len(row.Message) == 0 {
			r.setIfNewer(&broker.Message{Topic: row.Topic, Created: time.UnixMicro(row.Created)}) // a clear
			return nil
		}
		m, err := broker.DecodeMessage(row.Message)
		if err != nil {
			r.log.Warn("cluster: a stored retained message does not decode; skipped", "topic", row.Topic, "error", err)
			return nil
		}
		r.setIfNewer(m)
		return nil
	})
}

// reconcile loads the database again 2 s after start, and 2 s after
// each time the embedded NATS gains a route.
func (r *Retained) reconcile() {
	defer r.wg.Done()
	routes := r.nats.Routes()
	due := time.Now().Add(2 * time.Second)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.done:
			return
		case now := <-tick.C:
			if n := r.nats.Routes(); n > routes {
				due = now.Add(2 * time.Second)
				routes = n
			} else if n < routes {
				routes = n
			}
			if due.IsZero() || now.Before(due) {
				continue
			}
			due = time.Time{}
			ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
			if err := r.load(ctx, now); err != nil && r.ctx.Err() == nil {
				r.log.Warn("cluster: load the stored retained messages again", "error", err)
			}
			cancel()
		}
	}
}

// Set retains m here, unless a newer message of its topic is held, and
// hands it to the sender.
func (r *Retained) Set(m *broker.Message) {
	r.setIfNewer(m)
	select {
	case <-r.done:
		return // closed: nothing more goes out
	default:
	}
	select {
	case r.out <- m:
	case <-r.done:
	}
}

// setIfNewer sets m (or clears its topic, for an empty payload) unless the
// topic holds a message, or a clear, created after it; then the room
// reserved for m (MemoryRetained.Reserve) is given back.
func (r *Retained) setIfNewer(m *broker.Message) bool {
	st := &r.stripes[maphash.String(r.seed, m.Topic)%uint64(len(r.stripes))]
	st.mu.Lock()
	defer st.mu.Unlock()
	cleared, ok := st.tombs[m.Topic]
	if ok && cleared.After(m.Created) {
		r.MemoryRetained.Release(m)
		return false
	}
	if cur := r.MemoryRetained.Get(m.Topic); cur != nil && cur.Created.After(m.Created) {
		r.MemoryRetained.Release(m)
		return false
	}
	switch {
	case len(m.Payload) == 0:
		if st.tombs == nil {
			st.tombs = make(map[string]time.Time)
		}
		st.tombs[m.Topic] = m.Created
	case ok:
		delete(st.tombs, m.Topic)
	}
	r.MemoryRetained.Set(m)
	return true
}

func (r *Retained) receive(msg *nats.Msg) {
	node, m, err := decodeRetained(msg.Data)
	if err != nil {
		r.Malformed.Add(1)
		return
	}
	if node == r.node {
		return
	}
	r.Received.Add(1)
	r.setIfNewer(m)
}

// appendRetained appends the layout of m, retained on node, to b.
func appendRetained(b []byte, node string, m *broker.Message) []byte {
	b = append(b, retainedVersion)
	b = appendString(b, node)
	return broker.AppendMessage(b, m)
}

var errRetained = errors.New("cluster: malformed retained message")

// decodeRetained reads what appendRetained wrote.
func decodeRetained(b []byte) (node string, m *broker.Message, err error) {
	if len(b) == 0 || b[0] != retainedVersion {
		return "", nil, errRetained
	}
	node, rest, ok := readString(b[1:])
	if !ok {
		return "", nil, errRetained
	}
	if m, err = broker.DecodeMessage(rest); err != nil {
		return "", nil, err
	}
	return node, m, nil
}

// send publishes what was retained here to the other nodes and queues it
// for the database.
func (r *Retained) send() {
	defer r.wg.Done()
	defer close(r.sendDone)
	var buf []byte
	publish := func(m *broker.Message) {
		buf = appendRetained(buf[:0], r.node, m)
		if err := r.nc.Publish(retainedSubject, buf); err != nil {
			r.log.Warn("cluster: a retained message could not be sent to the other nodes", "topic", m.Topic, "error", err)
		}
		r.queueRow(retainedRow(m))
	}
	for {
		select {
		case m := <-r.out:
			publish(m)
		case <-r.done:
			for len(r.out) > 0 { // set before Close: sent and stored too
				publish(<-r.out)
			}
			r.nc.FlushTimeout(5 * time.Second)
			return
		}
	}
}

// queueRow adds a row for the database, dropping the oldest beyond
// SendQueue.
func (r *Retained) queueRow(row fleetmq.RetainedRow) {
	if r.store == nil {
		return
	}
	r.rowsMu.Lock()
	r.rows = append(r.rows, row)
	if over := len(r.rows) - SendQueue; over > 0 {
		r.Unstored.Add(int64(over))
		r.rows = append(r.rows[:0], r.rows[over:]...)
	}
	n := len(r.rows)
	r.rowsMu.Unlock()
	if n >= 512 {
		select {
		case r.rowsKick <- struct{}{}:
		default:
		}
	}
}

// write stores the queued rows every 100 ms (at once when 512 wait),
// backing off up to 5 s while the database fails. After Close it stores
// what is left, once.
func (r *Retained) write() {
	defer r.wg.Done()
	wait := 100 * time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		last := false
		select {
		case <-t.C:
		case <-r.rowsKick:
		case <-r.sent:
			last = true
		}
		r.rowsMu.Lock()
		rows := r.rows
		r.rows = nil
		r.rowsMu.Unlock()
		if len(rows) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := r.store.PutRetained(ctx, rows)
			cancel()
			if err != nil && last {
				r.Unstored.Add(int64(len(rows)))
				r.log.Warn("cluster: retained messages not stored at shutdown", "rows", len(rows), "error", err)
			} else if err != nil {
				r.log.Warn("cluster: retained messages not stored yet; tried again", "rows", len(rows), "error", err)
				r.rowsMu.Lock()
				r.rows = append(rows, r.rows...)
				if over := len(r.rows) - SendQueue; over > 0 {
					r.Unstored.Add(int64(over))
					r.rows = r.rows[over:]
				}
				r.rowsMu.Unlock()
				wait = min(2*wait, 5*time.Second)
			} else {
				wait = 100 * time.Millisecond
			}
		}
		if last {
			return
		}
		t.Reset(wait)
	}
}

// Sweep removes what expired, or is maxAge old, from this node's copy and
// its tombstones, and at most every minute from the database.
func (r *Retained) Sweep(now time.Time, maxAge time.Duration) int {
	n := r.MemoryRetained.Sweep(now, maxAge)
	for i := range r.stripes {
		st := &r.stripes[i]
		st.mu.Lock()
		for topic, at := range st.tombs {
			if now.Sub(at) > tombstoneAge {
				delete(st.tombs, topic)
			}
		}
		st.mu.Unlock()
	}
	last := r.lastSweep.Load()
	if r.store == nil || now.Unix()-last < int64(sweepEvery/time.Second) || !r.lastSweep.CompareAndSwap(last, now.Unix()) {
		return n
	}
	var before int64
	if maxAge > 0 {
		before = now.Add(-maxAge).UnixMicro()
	}
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed {
		return n
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		defer cancel()
		if _, err := r.store.SweepRetained(ctx, now.UnixMicro(), before, now.Add(-tombstoneAge).UnixMicro()); err != nil {
			r.log.Warn("cluster: sweep the stored retained messages", "error", err)
		}
	}()
	return n
}

// Close sends and stores what waits, and stops.
func (r *Retained) Close() {
	r.stopOnce.Do(func() {
		r.closeMu.Lock()
		r.closed = true
		r.closeMu.Unlock()
		r.cancel()
		close(r.done)
		<-r.sendDone
		close(r.sent)
		r.wg.Wait()
		r.nc.Close()
	})
}

// retainedRow is m as the store keeps it: a clear is a row without a
// message (a tombstone).
func retainedRow(m *broker.Message) fleetmq.RetainedRow {
	row := fleetmq.RetainedRow{Topic: m.Topic, Created: m.Created.UnixMicro()}
	if len(m.Payload) > 0 {
		row.Message = broker.AppendMessage(nil, m)
		if !m.Expiry.IsZero() {
			row.Expiry = m.Expiry.UnixMicro()
		}
	}
	return row
}
