package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho/session/state"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"
)

// soakSchedule is the fleet's timing at scale 1, multiplied by -scale.
type soakSchedule struct {
	fast    time.Duration // devices that publish every few seconds
	minute  time.Duration // devices that publish every minute (the idle subscribers' gap)
	burst   time.Duration // devices that publish in bursts
	flapOn  time.Duration // reconnecting devices: connected this long,
	flapOff time.Duration // then offline this long
	// Persistent subscribers disconnect every subCycle and resume after
	// subOffline: what was published meanwhile must come on resume.
	subCycle, subOffline time.Duration
	// The slow reader reads one message per slowDelay and stops reading
	// for slowPause (twice the write timeout) every slowPauseEvery.
	slowDelay, slowPause, slowPauseEvery time.Duration
	backoff                              time.Duration // before reconnecting after a lost connection
}

func newSchedule(scale float64, writeTimeout time.Duration) soakSchedule {
	d := func(base time.Duration) time.Duration { return time.Duration(float64(base) * scale) }
	return soakSchedule{
		fast: d(2 * time.Second), minute: d(time.Minute), burst: d(30 * time.Second),
		flapOn: d(20 * time.Second), flapOff: d(5 * time.Second),
		subCycle: d(45 * time.Second), subOffline: d(3 * time.Second),
		slowDelay: d(20 * time.Millisecond), slowPause: 2 * writeTimeout, slowPauseEvery: d(90*time.Second) + 2*writeTimeout,
		backoff: max(d(time.Second), 100*time.Millisecond),
	}
}

// sendSpec is one message of a device's round.
type sendSpec struct {
	class string
	qos   byte
}

// deviceSpec is one publishing device.
type deviceSpec struct {
	id        string
	version   byte
	keepAlive uint16
	every     time.Duration
	burst     int // messages per round; 0: one of each send
	sends     []sendSpec
	// flap: disconnect after flapOn, reconnect after flapOff; abrupt
	// closes the socket without DISCONNECT.
	flap, abrupt bool
}

// subSpec is one subscriber.
type subSpec struct {
	name       string
	version    byte // 4 or 5; lean is the slow reader (v5, the harness's own client)
	lean       bool
	keepAlive  uint16
	qos        byte
	filter     string // under the topic root
	persistent bool
	cycle      bool // disconnect and resume every subCycle
}

// idleKeepAlive is the keep alive of the idle subscribers that have one:
// the gap between their messages (schedule.minute) must exceed 1.5 times
// it, and the write timeout.
const idleKeepAlive = 5

// sessionExpiry is the persistent sessions' expiry (v5), far beyond any
// offline period of the run.
const sessionExpiry = 3600

var (
	fastSends  = []sendSpec{{"state", 2}, {"telemetry", 1}, {"sample", 0}}
	burstSends = []sendSpec{{"telemetry", 1}, {"state", 2}}
	flapSends  = []sendSpec{{"event", 1}, {"state", 2}}
)

// soakDevices is the fleet's devices.
func soakDevices(s soakSchedule, burst int) []deviceSpec {
	return []deviceSpec{
		{id: "fast-0", version: 5, keepAlive: 60, every: s.fast, sends: fastSends},
		{id: "fast-1", version: 4, keepAlive: 5, every: s.fast, sends: fastSends},
		{id: "fast-2", version: 5, keepAlive: 600, every: s.fast, sends: fastSends},
		{id: "fast-3", version: 4, keepAlive: 0, every: s.fast, sends: fastSends},
		{id: "minute-0", version: 5, keepAlive: 5, every: s.minute, sends: []sendSpec{{"event", 1}}},
		{id: "minute-1", version: 4, keepAlive: 600, every: s.minute, sends: []sendSpec{{"state", 2}}},
		{id: "minute-2", version: 5, keepAlive: 0, every: s.minute, sends: []sendSpec{{"telemetry", 1}}},
		{id: "burst-0", version: 5, keepAlive: 60, every: s.burst, burst: burst, sends: burstSends},
		{id: "burst-1", version: 4, keepAlive: 60, every: s.burst, burst: burst, sends: burstSends},
		{id: "flap-0", version: 5, keepAlive: 5, every: s.fast, sends: flapSends, flap: true},
		{id: "flap-1", version: 4, keepAlive: 60, every: s.fast, sends: flapSends, flap: true},
		{id: "flap-2", version: 5, keepAlive: 0, every: s.fast, sends: flapSends, flap: true, abrupt: true},
	}
}

// soakSubscribers is the fleet's subscribers.
func soakSubscribers() []subSpec {
	return []subSpec{
		{name: "all-v5-q2", version: 5, keepAlive: 60, qos: 2, filter: "#"},
		{name: "all-v5-q1-persistent", version: 5, keepAlive: 5, qos: 1, filter: "#", persistent: true, cycle: true},
		{name: "state-v5-q2-persistent", version: 5, keepAlive: 600, qos: 2, filter: "+/state/#", persistent: true, cycle: true},
		{name: "all-v3-q2-persistent", version: 4, keepAlive: 60, qos: 2, filter: "#", persistent: true, cycle: true},
		{name: "telemetry-v3-q1", version: 4, keepAlive: 600, qos: 1, filter: "+/telemetry/#"},
		{name: "all-v3-q0", version: 4, keepAlive: 0, qos: 0, filter: "#"},
		{name: "idle-v5-ka5", version: 5, keepAlive: idleKeepAlive, qos: 1, filter: "minute-0/#"},
		{name: "idle-v3-ka5-persistent", version: 4, keepAlive: idleKeepAlive, qos: 2, filter: "minute-1/#", persistent: true},
		{name: "idle-v5-ka0-persistent", version: 5, keepAlive: 0, qos: 2, filter: "minute-2/#", persistent: true},
		{name: "slow-reader", version: 5, lean: true, keepAlive: 60, qos: 1, filter: "#", persistent: true},
	}
}

// fleet runs the devices and subscribers against one broker.
type fleet struct {
	addr       string
	root       string // topic root: the account id on the platform
	pubUser    string
	pubPass    string
	subUser    string
	subPass    string
	size       int
	sched      soakSchedule
	led        *ledger
	nameSuffix string // makes client ids unique per run on a shared broker

	connectFailures atomic.Int64
	refused         atomic.Int64

	mu       sync.Mutex
	problems []string // the first few connect failures and refusals
}

// problem records a connect failure or refusal, for the report.
func (f *fleet) problem(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.problems) < 10 {
		f.problems = append(f.problems, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	}
}

// pause waits d, or until ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// maxAttempts bounds every member's connections, whatever the duration.
const maxAttempts = 100_000

// runDevice publishes d's schedule until ctx ends.
func (f *fleet) runDevice(ctx context.Context, d deviceSpec) {
	// Spread the fleet's rounds over the period.
	next := time.Now().Add(time.Duration(rand.Int64N(int64(d.every))))
	for attempt := 0; attempt < maxAttempts && ctx.Err() == nil; attempt++ {
		rec := &connRecord{client: d.id, role: "device", version: d.version, opened: time.Now()}
		f.led.addConn(rec)
		c, _, err := dialSoak(ctx, dialSpec{addr: f.addr, clientID: d.id, username: f.pubUser, password: f.pubPass,
			version: d.version, keepAlive: d.keepAlive, clean: true, rec: rec}, nil, nil)
		if err != nil {
			rec.finish(endHarness, 0, "connect failed")
			if ctx.Err() == nil {
				f.connectFailures.Add(1)
				f.problem("device %s: %v", d.id, err)
			}
			pause(ctx, f.sched.backoff)
			continue
		}
		var offline <-chan time.Time
		var flapTimer *time.Timer
		if d.flap {
			flapTimer = time.NewTimer(f.sched.flapOn)
			offline = flapTimer.C
		}
		lost := false
	rounds:
		for {
			t := time.NewTimer(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				break rounds
			case <-c.done():
				t.Stop()
				lost = true
				break rounds
			case <-offline:
				t.Stop()
				break rounds
			case <-t.C:
			}
			next = next.Add(d.every)
			if now := time.Now(); next.Before(now) {
				next = now.Add(d.every) // a late round does not bunch up the next ones
			}
			if !f.round(ctx, c, d) {
				lost = true
				break rounds
			}
		}
		if flapTimer != nil {
			flapTimer.Stop()
		}
		switch {
		case lost:
			select {
			case <-c.done():
			default:
				c.disconnect() // a publish failed on a live connection: start afresh
			}
			pause(ctx, f.sched.backoff)
		case d.abrupt && ctx.Err() == nil:
			c.drop()
		default:
			c.disconnect()
		}
		if d.flap && !lost && !pause(ctx, f.sched.flapOff) {
			return
		}
	}
}

// round publishes one round of d's messages; it reports false when the
// connection ended.
func (f *fleet) round(ctx context.Context, c soakConn, d deviceSpec) bool {
	n := d.burst
	if n == 0 {
		n = len(d.sends)
	}
	// A burst keeps up to 16 publishes in flight; a plain round sends one
	// after the other.
	inflight := 1
	if d.burst > 0 {
		inflight = 16
	}
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var ended atomic.Bool
	for i := range n {
		s := d.sends[i%len(d.sends)]
		sem <- struct{}{}
		if ended.Load() || ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			tp := f.root + "/" + d.id + "/" + s.class + "/soak"
			id, payload := f.led.begin(d.id, tp, s.qos, f.size)
			// The publish is not tied to ctx: once written, it waits for
			// its acknowledgement even when the run is ending.
			err := c.publish(context.Background(), tp, s.qos, payload)
			switch {
			case err == nil:
				f.led.acked(id)
			case errors.Is(err, errRefused):
				f.led.failed(id)
				f.refused.Add(1)
				f.problem("device %s: %v", d.id, err)
			default:
				f.led.failed(id)
				ended.Store(true)
			}
		}()
	}
	wg.Wait()
	select {
	case <-c.done():
		return false
	default:
		return !ended.Load()
	}
}

// runSubscriber keeps s subscribed until stop ends; while run lasts, a
// cycling subscriber disconnects and resumes every subCycle. ready is
// called once, after the first subscription is in place (or failed).
func (f *fleet) runSubscriber(run, stop context.Context, s subSpec, b *subBook, ready func()) {
	var once sync.Once
	defer once.Do(ready)
	var v5state *state.State
	var v3store mqtt3.Store
	if s.persistent {
		v5state = state.NewInMemory()
		v3store = mqtt3.NewMemoryStore()
		// Start from an empty session: 3.1.1 has no separate expiry, so
		// a clean connect and a disconnect discard what a previous run
		// left; v5 does it with Clean Start on the first connect.
		if s.version == 4 && !f.resetV3(stop, s) {
			return
		}
	}
	clientID := s.name + f.nameSuffix
	fresh := true // no session expected at the broker
	for attempt := 0; attempt < maxAttempts && stop.Err() == nil; attempt++ {
		rec := &connRecord{client: clientID, role: "subscriber", version: s.version, opened: time.Now()}
		f.led.addConn(rec)
		f.led.connected(b)
		clean := !s.persistent || (fresh && s.version == 5)
		spec := dialSpec{addr: f.addr, clientID: clientID, username: f.subUser, password: f.subPass, version: s.version,
			keepAlive: s.keepAlive, clean: clean, rec: rec,
			onMessage: func(p []byte, qos byte, dup bool) { f.led.receive(b, p, qos, dup) }}
		if s.persistent {
			spec.expiry = sessionExpiry
		}
		c, present, err := dialSoak(stop, spec, v5state, v3store)
		if err != nil {
			rec.finish(endHarness, 0, "connect failed")
			if stop.Err() == nil {
				f.connectFailures.Add(1)
				f.problem("subscriber %s: %v", s.name, err)
			}
			pause(stop, f.sched.backoff)
			continue
		}
		if !present {
			if err := c.subscribe(stop, f.root+"/"+s.filter, s.qos); err != nil {
				if errors.Is(err, errRefused) {
					f.refused.Add(1)
				}
				f.problem("subscriber %s: %v", s.name, err)
				c.disconnect()
				pause(stop, f.sched.backoff)
				continue
			}
		}
		f.led.subscribed(b, present, s.persistent && !fresh && !present)
		fresh = false
		once.Do(ready)

		// While the run lasts, a cycling subscriber disconnects after
		// subCycle; during the drain every subscriber stays until stop.
		var cycle <-chan time.Time
		var cycleTimer *time.Timer
		if s.cycle && run.Err() == nil {
			cycleTimer = time.NewTimer(f.sched.subCycle)
			cycle = cycleTimer.C
		}
		var lost, cycled bool
		select {
		case <-c.done():
			lost = true
		case <-cycle:
			cycled = true
		case <-stop.Done():
		}
		if cycleTimer != nil {
			cycleTimer.Stop()
		}
		switch {
		case lost:
			f.led.lostConnection(b)
			pause(stop, f.sched.backoff)
		case cycled:
			c.disconnect()
			pause(stop, f.sched.subOffline)
		default:
			c.disconnect()
			return
		}
	}
}

// resetV3 discards a 3.1.1 persistent session a previous run may have
// left: one clean connection, closed at once.
func (f *fleet) resetV3(ctx context.Context, s subSpec) bool {
	rec := &connRecord{client: s.name + f.nameSuffix, role: "subscriber", version: 4, opened: time.Now()}
	f.led.addConn(rec)
	c, _, err := dialSoak(ctx, dialSpec{addr: f.addr, clientID: s.name + f.nameSuffix, username: f.subUser, password: f.subPass,
		version: 4, keepAlive: s.keepAlive, clean: true, rec: rec}, nil, nil)
	if err != nil {
		rec.finish(endHarness, 0, "connect failed")
		f.connectFailures.Add(1)
		f.problem("subscriber %s: %v", s.name, err)
		return false
	}
	c.disconnect()
	return pause(ctx, f.sched.backoff) // let the server see it leave
}
