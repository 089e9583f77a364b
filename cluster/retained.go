package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
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

// Retained is the broker.Retained of a node of a cluster: every node
// keeps all of the cluster's retained messages in memory (a
// broker.MemoryRetained, which Match, Sweep, Under and Len read), so a
// subscription on any node is answered at once from there.
//
// A message retained here is set locally at once (Set is on the
// publisher's path and does no I/O), then the writer goroutine sends it
// to the other nodes on NATS, which set it in their copies, and stores it
// in the database (fleetmq.RetainedStore, in batches), from which a node
// starting loads what the cluster retained before it came. A topic keeps
// the message created last, wherever it was set: the nodes and the
// database compare creation times, so a late copy never replaces a newer
// message.
//
// Bounds: at most SendQueue retained messages wait for the writer (Set
// then waits, as a publisher waits for a full subscriber queue); a write
// to the database that fails is retried with the next batch, up to
// SendQueue rows, beyond which the oldest are dropped and counted (the
// other nodes have them; a node starting later would not).
type Retained struct {
	*broker.MemoryRetained
	node  string
	nc    *nats.Conn
	store fleetmq.RetainedStore
	log   *slog.Logger

	out      chan *broker.Message
	done     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
	sub      *nats.Subscription

	lastSweep atomic.Int64 // Unix seconds of the last database sweep

	// Received counts messages set from other nodes; Unstored counts
	// rows the database did not take and that were dropped.
	Received, Unstored atomic.Int64
}

// sweepEvery is how often at most a node sweeps the database's retained
// messages (every node's copy is swept at each broker sweep).
const sweepEvery = time.Minute

// NewRetained loads the cluster's retained messages from the store and
// starts exchanging them with the other nodes. Without a store (bare
// brokers routed together) the nodes exchange what they retain while
// they run, and a node starting knows none of it.
func NewRetained(ctx context.Context, n *NATS, node string, store fleetmq.RetainedStore, now time.Time, log *slog.Logger) (*Retained, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Retained{MemoryRetained: broker.NewMemoryRetained(), node: node + "/" + strings.ToLower(rand.Text()[:8]),
		store: store, log: log, out: make(chan *broker.Message, SendQueue), done: make(chan struct{})}
	var err error
	if r.nc, err = n.Connect("retained", nats.NoEcho()); err != nil {
		return nil, err
	}
	// Listen before loading: what is set meanwhile is not missed, and the
	// creation times sort the two out.
	if r.sub, err = r.nc.Subscribe(retainedSubject, r.receive); err != nil {
		r.nc.Close()
		return nil, err
	}
	if err := r.sub.SetPendingLimits(ReceiveQueue, -1); err != nil {
		r.nc.Close()
		return nil, err
	}
	if err := r.nc.FlushTimeout(10 * time.Second); err != nil {
		r.nc.Close()
		return nil, err
	}
	if store == nil {
		r.wg.Add(1)
		go r.write()
		return r, nil
	}
	err = store.LoadRetained(ctx, now.UnixMicro(), func(row fleetmq.RetainedRow) error {
		m, err := broker.DecodeMessage(row.Message)
		if err != nil {
			log.Warn("cluster: a stored retained message does not decode; skipped", "topic", row.Topic, "error", err)
			return nil
		}
		r.setIfNewer(m)
		return nil
	})
	if err != nil {
		r.nc.Close()
		return nil, err
	}
	r.wg.Add(1)
	go r.write()
	return r, nil
}

// Set retains m here and hands it to the writer.
func (r *Retained) Set(m *broker.Message) {
	r.MemoryRetained.Set(m)
	select {
	case r.out <- m:
	case <-r.done:
	}
}

// setIfNewer sets m unless the topic holds a message created after it.
func (r *Retained) setIfNewer(m *broker.Message) {
	// A topic holds no wildcard: as a filter it matches itself alone.
	for _, cur := range r.MemoryRetained.Match(m.Topic, time.Time{}) {
		if cur.Topic == m.Topic && cur.Created.After(m.Created) {
			return
		}
	}
	r.MemoryRetained.Set(m)
}

func (r *Retained) receive(msg *nats.Msg) {
	b := msg.Data
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return
	}
	if string(b[k:k+int(n)]) == r.node {
		return
	}
	m, err := broker.DecodeMessage(b[k+int(n):])
	if err != nil {
		return
	}
	r.Received.Add(1)
	r.setIfNewer(m)
}

// write sends what was retained here to the other nodes, and stores it
// in batches.
func (r *Retained) write() {
	defer r.wg.Done()
	var buf []byte
	var rows []fleetmq.RetainedRow
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	flush := func() {
		if len(rows) == 0 || r.store == nil {
			rows = rows[:0]
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.store.PutRetained(ctx, rows)
		cancel()
		if err == nil {
			clear(rows)
			rows = rows[:0]
			return
		}
		if over := len(rows) - SendQueue; over > 0 {
			r.Unstored.Add(int64(over))
			rows = append(rows[:0], rows[over:]...)
		}
		r.log.Warn("cluster: retained messages not stored yet; retried with the next batch", "rows", len(rows), "error", err)
	}
	for {
		select {
		case m := <-r.out:
			buf = appendString(buf[:0], r.node)
			buf = broker.AppendMessage(buf, m)
			if err := r.nc.Publish(retainedSubject, buf); err != nil {
				r.log.Warn("cluster: a retained message could not be sent to the other nodes", "topic", m.Topic, "error", err)
			}
			rows = append(rows, retainedRow(m))
			if len(rows) >= 512 {
				flush()
			}
		case <-tick.C:
			flush()
		case <-r.done:
			for len(r.out) > 0 { // set before Close: stored, not sent
				m := <-r.out
				rows = append(rows, retainedRow(m))
			}
			flush()
			return
		}
	}
}

// retainedRow is m as the store keeps it.
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

// Sweep removes what expired, or is maxAge old, from this node's copy,
// and at most every minute from the database.
func (r *Retained) Sweep(now time.Time, maxAge time.Duration) int {
	n := r.MemoryRetained.Sweep(now, maxAge)
	if last := r.lastSweep.Load(); r.store != nil && now.Unix()-last >= int64(sweepEvery/time.Second) && r.lastSweep.CompareAndSwap(last, now.Unix()) {
		var before int64
		if maxAge > 0 {
			before = now.Add(-maxAge).UnixMicro()
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := r.store.SweepRetained(ctx, now.UnixMicro(), before); err != nil {
				r.log.Warn("cluster: sweep the stored retained messages", "error", err)
			}
		}()
	}
	return n
}

// Close stores what waits and stops.
func (r *Retained) Close() {
	r.stopOnce.Do(func() {
		close(r.done)
		r.wg.Wait()
		r.nc.Close()
	})
}
