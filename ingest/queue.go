package ingest

import (
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
	// ready lists the lanes with records in their turn order, from head.
	ready []*lane
	head  int
	// room is closed, and replaced, whenever the writer takes records:
	// publishers waiting for room try again.
	room chan struct{}
	// notify tells the writer that records were queued (capacity 1: one
	// signal stands for any number of records).
	notify chan struct{}
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
}

func (l *lane) len() int { return len(l.items) - l.head }

func newQueue(size, laneMax, turn int, gap time.Duration) *queue {
	return &queue{size: size, laneMax: laneMax, turn: turn, gap: gap, lanes: map[string]*lane{},
		room: make(chan struct{}), notify: make(chan struct{}, 1)}
}

// push queues it if there is room for its account, and otherwise returns
// the channel closed when the writer next takes records. It marks the
// record quiet when its account's previous record came more than gap
// before it (or never).
func (q *queue) push(it item) (ok bool, room <-chan struct{}) {
	q.mu.Lock()
	l := q.lanes[it.rec.AccountID]
	queued := 0
	if l != nil {
		queued = l.len()
	}
	if queued >= q.laneMax || (q.n >= q.size && queued >= quietReserve) {
		room = q.room
		q.mu.Unlock()
		return false, room
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
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return true, nil
}

// take moves up to max records into b, up to turn of an account at a
// time, lanes in turns. When several accounts have records waiting, the
// batch is one round of turns: a quiet account's record then waits for a
// commit of at most turn records of each other account, not for max of a
// flood's. It returns how many it took.
func (q *queue) take(b *batch, max int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	took := 0
	turns := -1 // one account waiting: as many turns as max allows
	if waiting := len(q.ready) - q.head; waiting > 1 {
		turns = waiting
	}
	for took < max && q.head < len(q.ready) && turns != 0 {
		turns--
		l := q.ready[q.head]
		q.ready[q.head] = nil
		q.head++
		k := min(l.len(), q.turn, max-took)
		for i := l.head; i < l.head+k; i++ {
			b.add(l.items[i])
			l.items[i] = item{}
		}
		l.head += k
		took += k
		if l.len() > 0 {
			q.ready = append(q.ready, l) // its next turn comes after the others'
			continue
		}
		// Empty: the lane stays for the account's next record (a steady
		// trickle allocates nothing), its memory only while small.
		l.items, l.head = l.items[:0], 0
		if cap(l.items) > keptLaneCap {
			l.items = nil
		}
	}
	if q.head == len(q.ready) {
		q.ready, q.head = q.ready[:0], 0
	} else if q.head > 64 && q.head > len(q.ready)/2 {
		q.ready = q.ready[:copy(q.ready, q.ready[q.head:])]
		q.head = 0
	}
	if took > 0 {
		q.n -= took
		close(q.room)
		q.room = make(chan struct{})
	}
	return took
}

// len returns the number of records queued.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}
