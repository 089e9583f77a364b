package broker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Publish rates. A connection whose Limits set a PublishRate or
// PublishBytesRate, or whose Identity has a GroupLimiter, takes tokens for
// every PUBLISH it reads, before the PUBLISH is handled: one message and
// the bytes of its topic (as sent) and payload, from its own buckets and
// from its group's. When a bucket is short, the reader stops reading for
// as long as it takes the bucket to refill: nothing more is read from that
// connection meanwhile (the kernel's receive window then pushes back on the
// client), and no other connection waits for it, except those of the same
// group, which share its group's buckets.
//
// A bucket holds one second's worth of tokens (at least one message). A
// take may leave it in debt: a message larger than a second's worth of
// bytes still passes, and the connection then waits until the debt is
// paid, so the long-run rate holds whatever the message sizes.

// clockBase anchors the monotonic clock the buckets run on.
var clockBase = time.Now()

// nanotime is monotonic nanoseconds since clockBase.
func nanotime() int64 { return int64(time.Since(clockBase)) }

// bucket is a token bucket (not safe for concurrent use). rate 0 means
// unlimited.
type bucket struct {
	rate   float64 // tokens per second
	burst  float64
	tokens float64 // may be negative: debt
	last   int64   // nanotime of the last refill
}

// setRate changes the rate at now; the bucket keeps what it holds, up to
// the new burst (a new bucket starts full).
func (b *bucket) setRate(rate float64, now int64) {
	if rate <= 0 {
		*b = bucket{}
		return
	}
	fresh := b.rate <= 0
	b.refill(now)
	b.rate, b.burst = rate, max(rate, 1)
	if fresh {
		b.tokens = b.burst
	}
	b.tokens = min(b.tokens, b.burst)
	b.last = now
}

func (b *bucket) refill(now int64) {
	if d := now - b.last; d > 0 && b.rate > 0 {
		b.tokens = min(b.burst, b.tokens+float64(d)*b.rate/1e9)
	}
	b.last = now
}

// take takes n tokens at now and returns how long until the bucket is
// out of debt (0: at once).
func (b *bucket) take(n float64, now int64) time.Duration {
	if b.rate <= 0 {
		return 0
	}
	b.refill(now)
	b.tokens -= n
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * 1e9)
}

// rateBuckets are the message and byte buckets of one publish limit.
type rateBuckets struct{ msgs, bytes bucket }

func (r *rateBuckets) set(messages, bytes float64, now int64) {
	r.msgs.setRate(messages, now)
	r.bytes.setRate(bytes, now)
}

func (r *rateBuckets) take(n int, now int64) time.Duration {
	return max(r.msgs.take(1, now), r.bytes.take(float64(n), now))
}

// RateLimiter is a publish limit shared by a group of connections (for
// example all the connections of one account): PUBLISH packets per second
// and their bytes (topic and payload) per second, 0 meaning unlimited.
// It is safe for concurrent use; its lock is held only to take tokens,
// never while a connection waits.
type RateLimiter struct {
	mu sync.Mutex
	b  rateBuckets
	// taken counts the PUBLISH packets that took tokens and takenBytes
	// their bytes, waited those that then had to wait (Usage).
	taken, takenBytes, waited uint64
}

// NewRateLimiter returns a limiter of messages and bytes per second.
func NewRateLimiter(messages, bytes float64) *RateLimiter {
	l := &RateLimiter{}
	l.b.set(messages, bytes, nanotime())
	return l
}

// SetRates changes the rates; connections of the group see them from
// their next PUBLISH.
func (l *RateLimiter) SetRates(messages, bytes float64) {
	l.mu.Lock()
	l.b.set(messages, bytes, nanotime())
	l.mu.Unlock()
}

// Rates returns the messages and bytes per second.
func (l *RateLimiter) Rates() (messages, bytes float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.msgs.rate, l.b.bytes.rate
}

func (l *RateLimiter) take(n int, now int64) time.Duration {
	l.mu.Lock()
	d := l.b.take(n, now)
	l.taken++
	l.takenBytes += uint64(n)
	if d > 0 {
		l.waited++
	}
	l.mu.Unlock()
	return d
}

// Usage returns the PUBLISH packets the group has sent through the
// limiter since it was made, their bytes, and how many of them had to wait
// for it: what a cluster's nodes compare to share a group's rates (the
// counts only grow).
func (l *RateLimiter) Usage() (taken, bytes, waited uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken, l.takenBytes, l.waited
}

// throttle is a connection's publish limits: its own buckets (owned by
// the reader) and its group's limiter.
type throttle struct {
	own     rateBuckets
	hasOwn  bool
	applied *clientRates // the rates own is at
	group   *RateLimiter
	timer   *time.Timer // created at the first wait
}

// clientRates are a connection's own publish rates: messages and bytes
// per second.
type clientRates struct{ messages, bytes float64 }

// setThrottle sets up the connection's publish limits at CONNECT.
func (c *conn) setThrottle(id *Identity) {
	r := &clientRates{id.Limits.PublishRate, id.Limits.PublishBytesRate}
	c.rates.Store(r)
	if r.messages <= 0 && r.bytes <= 0 && id.GroupLimiter == nil {
		return
	}
	c.throttle = &throttle{group: id.GroupLimiter}
	c.throttle.apply(r)
}

// apply brings the connection's own buckets to r.
func (t *throttle) apply(r *clientRates) {
	t.own.set(r.messages, r.bytes, nanotime())
	t.hasOwn = r.messages > 0 || r.bytes > 0
	t.applied = r
}

// SetPublishRates changes the per-connection publish rates
// (Limits.PublishRate and PublishBytesRate) of the connected clients for
// which rates reports ok: each is held to its new rates from its next
// PUBLISH. It reports how many connections' rates changed. Use it when
// the plan behind a Limits changes. rates is called with the server's
// lock held: it must be quick and must not call the server.
func (s *Server) SetPublishRates(rates func(id *Identity) (messages, bytes float64, ok bool)) int {
	n := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		id := c.identity()
		if id == nil || c.ending.Load() != nil {
			continue
		}
		m, b, ok := rates(id)
		if cur := c.rates.Load(); !ok || cur != nil && cur.messages == m && cur.bytes == b {
			continue
		}
		c.rates.Store(&clientRates{m, b})
		n++
	}
	return n
}

// throttlePublish takes the tokens for p and, when a bucket is short,
// waits until it has refilled, reading nothing meanwhile. What the packets
// handled so far produced (acknowledgements, messages routed to others)
// is flushed first, and the keep alive is extended over the wait, so a
// throttled client is not disconnected for the silence the wait causes. It
// returns errEnded when the connection ends during the wait.
func (c *conn) throttlePublish(p *packet.Publish) error {
	t, r := c.throttle, c.rates.Load()
	if t == nil {
		if r == nil || r.messages <= 0 && r.bytes <= 0 {
			return nil
		}
		t = &throttle{} // rates given since CONNECT
		c.throttle = t
	}
	if r != t.applied {
		t.apply(r)
	}
	n := len(p.Topic) + len(p.Payload)
	now := nanotime()
	var wait time.Duration
	limit := "client"
	if t.hasOwn {
		wait = t.own.take(n, now)
	}
	if t.group != nil {
		if g := t.group.take(n, now); g > wait {
			wait, limit = g, "group"
		}
	}
	if wait <= 0 {
		return nil
	}
	c.flushInline()
	c.flushes.flush()
	start := time.Now()
	if until := start.Add(wait).UnixNano(); until > c.lastRead.Load() {
		// The watchdog counts silence from lastRead: none is counted
		// before the wait ends.
		c.lastRead.Store(until)
	}
	c.logThrottled(p, limit, wait)
	if t.timer == nil {
		t.timer = time.NewTimer(wait)
	} else {
		t.timer.Reset(wait)
	}
	var err error
	select {
	case <-t.timer.C:
	case <-c.endc:
		t.timer.Stop()
		err = errEnded
	}
	c.srv.stats.publishThrottled.Add(1)
	c.srv.stats.publishThrottledNanos.Add(int64(time.Since(start)))
	return err
}

// logThrottled logs a PUBLISH that waits for its connection's publish
// rate (rate-limited like every event-log line of a client).
func (c *conn) logThrottled(p *packet.Publish, limit string, wait time.Duration) {
	sup, ok := c.srv.events.admit(c.logb, evThrottled, slog.LevelInfo)
	if !ok {
		return
	}
	var msgs, bytes float64
	if limit == "client" {
		msgs, bytes = c.throttle.own.msgs.rate, c.throttle.own.bytes.rate
	} else {
		msgs, bytes = c.throttle.group.Rates()
	}
	c.srv.events.emit(slog.LevelInfo, "publish throttled", sup, c.connAttrs(slog.String("topic", p.Topic),
		slog.String("limit", limit), slog.Float64("messages_per_second", msgs), slog.Float64("bytes_per_second", bytes),
		slog.Duration("wait", wait))...)
}
