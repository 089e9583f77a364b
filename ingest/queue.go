package ingest

import (
	"slices"
	"sync"
	"time"
)

// queue holds accepted records until the writer takes them: one lane per
// account, taken in turns, so that one tenant's flood cannot stand
// between another tenant's record and its commit. Each batch the writer
// takes holds at most turn records of an account before every other
// account with records waiting has had its turn; a record of a quiet
// account therefore goes into the next commit, whatever another account
// has queued.
//
// Room is bounded three ways: at most size records in all, at most
// laneMax of one account (so a flood fills its own lane and waits or
// drops there), and yet an account with fewer than quietReserve records
// queued is admitted (up to laneMax), so that other tenants' floods
// filling the queue cannot make a quiet tenant wait (the queue may then
// hold up to quietReserve records per account beyond size).
//
// The lock is held for a few slice operations per record, as a channel's
// would be.
type queue struct {
	size, laneMax, turn int
	// gap is the longest pause between two records of an account that
	// still makes the second part of a stream (Options.MaxDelay): a record
	// after a longer pause is quiet (item.quiet).
	gap time.Duration

	mu    sync.Mutex
	n     int // records queued
	lanes map[string]*lane
	// ready lists the lanes with records in their turn order.
	ready []*lane
	// held and again are take's scratch lists, kept between calls.
	held, again []*lane
	// waiting are the publishers waiting for room, in arrival order: a
	// take of n records wakes the first n of them (not all: thousands of
	// devices may be waiting), each of which tries again and, if its
	// account's share is still full, waits again at the end.
	waiting []chan struct{}
	// notify tells the writer that records were queued (capacity 1: one
	// signal stands for any number of records). A push signals only when a
	// writer needs it: one is idle (waiting in Writer.first), or none is
	// lingering, or a lingering writer's batch can be filled (wants), or
	// the record is a quiet account's, which ends a linger. A stream's
	// records arriving during a linger wake no one: they are taken when
	// it ends, one wake-up per commit instead of one per record.
	notify chan struct{}
	idle   int   // writers waiting for records in first
	wants  []int // per lingering writer, how many records would fill its batch
}

// quietReserve is how many records an account may queue even when the
// queue is full.
const quietReserve = 32

// keptLaneCap is the most records' room an empty lane keeps.
const keptLaneCap = 256

// lane is one account's queued records, oldest first from head.
type lane struct {
	account string
	items   []item
	head    int
	last    time.Time // when the account's latest record was accepted
	// holder is the batch that holds some of the account's records while
	// a writer commits them, nil if none.
	holder *batch
}

// free reports whether b may take records of the lane.
func (l *lane) free(b *batch) bool { return l.holder == nil || l.holder == b }

func (l *lane) len() int { return len(l.items) - l.head }

func newQueue(size, laneMax, turn int, gap time.Duration) *queue {
	return &queue{size: size, laneMax: laneMax, turn: turn, gap: gap, lanes: map[string]*lane{},
		notify: make(chan struct{}, 1)}
}

// push queues it if there is room for its account and returns true.
// Otherwise it lines wake (capacity 1; nil: not) up among the publishers
// waiting for room, to be signalled when a take makes some, and returns
// false. It
// marks the record quiet when its account's previous record came more
// than gap before it (or never).
func (q *queue) push(it item, wake chan struct{}) bool {
	q.mu.Lock()
	l := q.lanes[it.rec.AccountID]
	queued := 0
	if l != nil {
		queued = l.len()
	}
	if queued >= q.laneMax || (q.n >= q.size && queued >= quietReserve) {
		if wake != nil {
			q.waiting = append(q.waiting, wake)
		}
		q.mu.Unlock()
		return false
	}
	if l == nil {
		l = &lane{account: it.rec.AccountID}
		q.lanes[l.account] = l
	}
	if l.len() == 0 {
		q.ready = append(q.ready, l)
	}
	if l.head > 0 && l.head >= len(l.items)/2 && len(l.items) == cap(l.items) {
		// Reuse the taken half rather than grow.
		n := copy(l.items, l.items[l.head:])
		clear(l.items[n:])
		l.items, l.head = l.items[:n], 0
	}
	it.quiet = it.at.Sub(l.last) > q.gap
	l.last = it.at
	l.items = append(l.items, it)
	q.n++
	signal := it.quiet || q.idle > 0 || len(q.wants) == 0 || q.n >= slices.Min(q.wants)
	q.mu.Unlock()
	if signal {
		q.signal()
	}
	return true
}

// signal tells a writer waiting on notify that records were queued.
func (q *queue) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// takeOrIdle is takeLocked with the lock, and when it takes nothing the writer counts as idle
// (pushes signal it) until it calls busy.
func (q *queue) takeOrIdle(b *batch, max int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	took := q.takeLocked(b, max)
	if took == 0 {
		q.idle++
	}
	return took
}

// busy ends the idle spell takeOrIdle began.
func (q *queue) busy() {
	q.mu.Lock()
	q.idle--
	q.mu.Unlock()
}

// linger tells pushes that a writer lingers over a batch that want more
// records would fill: they signal it only when the queue holds that many
// or a quiet account's record comes. It calls takeLingered when its wait
// ends.
func (q *queue) linger(want int) {
	q.mu.Lock()
	q.wants = append(q.wants, want)
	q.mu.Unlock()
}

// takeLingered ends the linger of the writer that wanted want and takes
// up to want records into b.
func (q *queue) takeLingered(b *batch, want int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.wants, want); i >= 0 {
		q.wants = slices.Delete(q.wants, i, i+1)
	}
	return q.takeLocked(b, want)
}

// takeLocked (q.mu held) moves up to max records into b, up to turn of
// an account at a time, lanes in turns. When several accounts have
// records waiting, the batch is one round of turns: a quiet account's record then waits for a
// commit of at most turn records of each other account, not for max of a
// flood's. A lane another batch holds (its records are being committed by
// another writer) keeps its place and gives nothing: an account's records
// are in one commit at a time, in order. It returns how many it took.
func (q *queue) takeLocked(b *batch, max int) int {
	// One pass is one round of turns; only an account alone with records
	// to give takes more turns, up to max.
	took, lanes := q.pass(b, max)
	for lanes == 1 && took < max {
		k, _ := q.pass(b, max-took)
		if k == 0 {
			break
		}
		took += k
	}
	if took > 0 {
		q.n -= took
		q.wake(took)
	}
	return took
}

// wake signals the first n publishers waiting for room (q.mu held). A
// signal to one that stopped waiting (the writer closed) is lost, which
// costs the others a take's delay, never their wake-up: they are still
// waiting, so records are queued and takes go on.
func (q *queue) wake(n int) {
	n = min(n, len(q.waiting))
	for _, c := range q.waiting[:n] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	rest := copy(q.waiting, q.waiting[n:])
	clear(q.waiting[rest:])
	q.waiting = q.waiting[:rest]
}

// pass goes once through the turn order, giving b a turn of each lane it
// may take from, and puts the lanes back in order: those passed over (held
// by another batch) at the front, those with records left after their
// turn at the back. It returns how many records it took, at most max, and
// from how many lanes.
func (q *queue) pass(b *batch, max int) (took, lanes int) {
	held, again := q.held[:0], q.again[:0]
	i := 0
	for ; i < len(q.ready) && took < max; i++ {
		l := q.ready[i]
		q.ready[i] = nil
		if !l.free(b) {
			held = append(held, l)
			continue
		}
		lanes++
		k := min(l.len(), q.turn, max-took)
		for j := l.head; j < l.head+k; j++ {
			b.add(l.items[j])
			l.items[j] = item{}
		}
		l.head += k
		took += k
		if l.holder != b {
			l.holder = b
			b.lanes = append(b.lanes, l)
		}
		if l.len() > 0 {
			again = append(again, l) // its next turn comes after the others'
			continue
		}
		// Empty: the lane stays for the account's next record (a steady
		// trickle allocates nothing), its memory only while small.
		l.items, l.head = l.items[:0], 0
		if cap(l.items) > keptLaneCap {
			l.items = nil
		}
	}
	// ready = held, the lanes not reached, again (i >= len(held): the
	// copies never overwrite what they have yet to move).
	was := len(q.ready)
	n := copy(q.ready, held)
	n += copy(q.ready[n:], q.ready[i:])
	q.ready = append(q.ready[:n], again...)
	if len(q.ready) < was {
		clear(q.ready[len(q.ready):was])
	}
	clear(held)
	clear(again)
	q.held, q.again = held[:0], again[:0]
	return took, lanes
}

// release gives back the lanes b holds once its records are committed (or
// given up): their accounts' next records may go into another writer's
// batch. A writer waiting for them is told.
func (q *queue) release(b *batch) {
	if len(b.lanes) == 0 {
		return
	}
	q.mu.Lock()
	more := false
	for _, l := range b.lanes {
		l.holder = nil
		more = more || l.len() > 0
	}
	q.mu.Unlock()
	clear(b.lanes)
	b.lanes = b.lanes[:0]
	if more {
		q.signal()
	}
}

// len returns the number of records queued.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}
