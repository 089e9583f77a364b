// Package procs fits the number of processors the Go scheduler runs
// goroutines on (GOMAXPROCS) to the load of a server process.
//
// A server whose work arrives a message at a time, a few hundred
// microseconds apart, as a fleet's steady publishing does, pays on every
// message for the scheduler handing goroutines between threads: with two
// processors, the goroutine a packet readies wakes a sleeping thread
// (futex, epoll_pwait) while another just finished, and a context switch
// costs more than the message's own work. One processor runs the same
// work in one thread, as Mosquitto's event loop does: 15-25% less CPU per
// message at 4,000 msg/s (docs/benchmarks.md). A loaded server needs every
// core, and so does one whose single processor is held: a call into C
// (a SQLite commit) keeps its processor until the runtime's monitor takes
// it back, up to milliseconds later, and every goroutine ready meanwhile
// (another tenant's acknowledgement) waits. Fit watches the process's CPU
// time and how long ready goroutines waited to run: it runs on one
// processor while the process uses a small part of one core and nothing
// waited long, and on all of them as soon as either is no longer so.
package procs

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// tick is how often the CPU time and the long waits are read: a
	// burst waits at most about this long for more processors.
	tick = 100 * time.Millisecond
	// raiseAt: more processors (twice as many, up to the most) once a
	// tick used more than this share of the processors there are.
	raiseAt = 0.6
	// lowerAt: fewer (half as many, at least one) once the last window
	// used less than this share on average.
	lowerAt = 0.2
	// window is how long the load must stay low before processors are
	// taken away.
	window = 2 * time.Second
	// waitLimit: a goroutine that waited this long to run, once ready,
	// waited for a processor held elsewhere (a burst of a few hundred
	// packets on one processor waits a millisecond or two); a tick with
	// one raises the processors. The runtime's histogram counts from its
	// first bucket that starts at this or later (4.19 ms in Go 1.26).
	waitLimit = 4 * time.Millisecond
	// After a long wait, processors are taken away only once no
	// goroutine waited that long for a calm period: first the window,
	// then twice as long each time long waits on fewer processors come
	// back within twice that period of the processors' lowering, up to
	// mostCalm; once they have stayed away that long, the window again.
	// A server whose processor is held again and again (a tenant's store
	// writes go on) stays on all of them, each return to one costing
	// another tenant a tick's latency; one that had a burst (a crowd
	// connecting) goes back after the window.
	mostCalm = time.Minute
)

// Options are what Fit needs; the zero value fits the running process.
type Options struct {
	// Most is the number of processors under load (default: the
	// runtime's own default, which follows the CPU limit of the
	// process's cgroup and its CPU affinity, and is read again each time
	// the process goes back to it).
	Most int
	// CPU returns the process's CPU time so far (default: user and
	// system time of all its threads, from getrusage; negative when it
	// cannot be read).
	CPU func() time.Duration
	// Set sets the number of processors (default: runtime.GOMAXPROCS, and
	// the runtime's default for the most).
	Set func(int)
	// Waits returns how many times so far a ready goroutine waited at
	// least waitLimit to run (default: from the runtime's scheduling
	// latencies, which it samples).
	Waits func() uint64
	// Tick is how often the CPU time and the waits are read (default
	// 100 ms).
	Tick time.Duration
}

// Fit adjusts the number of processors until ctx ends, unless the
// operator set GOMAXPROCS in the environment (then that holds) or there is
// one processor only. It starts on one, and leaves the process on all of
// them when ctx ends (a server's shutdown: draining and saving).
//
// On all of them, the process runs on the runtime's default number
// (runtime.SetDefaultGOMAXPROCS), which the runtime keeps following the
// process's CPU limit as it changes; Fit takes the number it finds there
// as the most from then on.
func Fit(ctx context.Context, o Options) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	auto := o.Set == nil
	if o.Most == 0 {
		o.Most = runtime.GOMAXPROCS(0)
	}
	if o.CPU == nil {
		o.CPU = processCPU
	}
	if o.Waits == nil {
		o.Waits = longWaits(waitLimit)
	}
	if auto {
		o.Set = func(n int) {
			if n >= o.Most {
				runtime.SetDefaultGOMAXPROCS()
			} else {
				runtime.GOMAXPROCS(n)
			}
		}
	}
	if o.Tick <= 0 {
		o.Tick = tick
	}
	if o.Most <= 1 {
		return
	}
	f := newFitter(o.Most, int(window/o.Tick), int(mostCalm/o.Tick))
	o.Set(f.procs)
	defer func() { o.Set(o.Most) }()
	t := time.NewTicker(o.Tick)
	defer t.Stop()
	last, lastAt, waits := o.CPU(), time.Now(), o.Waits()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cpu, now := o.CPU(), time.Now()
		used, ok := usage(cpu, last, now.Sub(lastAt))
		if !ok {
			continue // unreadable: the next tick measures from the last reading
		}
		last, lastAt = cpu, now
		w := o.Waits()
		from := f.procs
		p := f.next(used, w > waits)
		waits = w
		if p == 0 {
			continue
		}
		if p > from {
			if f.forWait {
				raisedWait.Add(1)
			} else {
				raisedBusy.Add(1)
			}
		}
		o.Set(p)
		if auto && p == f.most {
			if m := runtime.GOMAXPROCS(0); m != f.most && m > 0 {
				o.Most, f.most, f.procs = m, m, m // the CPU limit changed
			}
		}
	}
}

// raisedBusy and raisedWait count the times Fit raised the processors
// for the CPU a tick used, and for a long wait in a tick that used little.
var raisedBusy, raisedWait atomic.Int64

// Raises returns how many times so far Fit raised the processors because
// a tick used more than its share of them (busy), and because a goroutine
// waited long for one in a tick that did not (wait).
func Raises() (busy, wait int64) { return raisedBusy.Load(), raisedWait.Load() }

// usage returns the cores used between two readings of the CPU time, wall
// apart, and false when cpu could not be read (negative, or less than
// last) or no time passed.
func usage(cpu, last, wall time.Duration) (float64, bool) {
	if cpu < 0 || cpu < last || wall <= 0 {
		return 0, false
	}
	return float64(cpu-last) / float64(wall), true
}

// fitter decides the number of processors from the cores used in each
// tick and whether a goroutine waited long in it.
type fitter struct {
	most, procs int
	recent      []float64 // the cores used in the last ticks, a ring
	at          int       // the next slot of recent
	filled      int       // the slots of recent written since procs changed
	calm        int       // the ticks without a long wait needed to lower
	mostCalm    int       // the most calm grows to
	sinceWait   int       // the ticks since the last one with a long wait
	sinceLower  int       // the ticks since the processors were lowered
	// fixed says calm was set for the raises since the last lowering
	// (the waits of one hold show in a tick or two after it: they double
	// calm once).
	fixed bool
	// forWait says the last raise was for a long wait in a tick that
	// used little CPU.
	forWait bool
}

// newFitter returns a fitter for most processors that lowers them after a
// window of ticks with little load, and after up to mostCalm ticks
// without a long wait.
func newFitter(most, window, mostCalm int) *fitter {
	window = max(window, 1)
	mostCalm = max(mostCalm, window)
	return &fitter{most: most, procs: 1, recent: make([]float64, window),
		calm: window, mostCalm: mostCalm, sinceWait: mostCalm, sinceLower: 2 * mostCalm}
}

// next takes the cores used in the tick that ended (CPU seconds per
// second) and whether a ready goroutine waited long to run in it, and
// returns the number of processors to run on from now, or 0 to keep the
// current number.
func (f *fitter) next(used float64, waited bool) int {
	f.recent[f.at] = used
	f.at = (f.at + 1) % len(f.recent)
	f.filled = min(f.filled+1, len(f.recent))
	f.sinceWait = min(f.sinceWait+1, f.mostCalm)
	f.sinceLower = min(f.sinceLower+1, 2*f.mostCalm)
	if waited {
		f.sinceWait = 0
	}
	p := f.procs
	busy := used > raiseAt*float64(p)
	switch {
	case p < f.most && (busy || waited):
		f.forWait = !busy
		if !f.fixed {
			f.fixed = true
			switch {
			case f.sinceLower >= 2*f.calm:
				f.calm = len(f.recent) // long since the last lowering: calm again
			case waited:
				f.calm = min(2*f.calm, f.mostCalm) // back soon: hold longer
			}
		}
		p = min(f.most, 2*p)
	case p > 1 && f.filled == len(f.recent) && f.sinceWait >= f.calm && f.average() < lowerAt*float64(p):
		p = max(1, p/2)
		f.sinceLower, f.fixed = 0, false
	default:
		return 0
	}
	f.procs, f.filled = p, 0
	return p
}

func (f *fitter) average() float64 {
	var sum float64
	for _, u := range f.recent {
		sum += u
	}
	return sum / float64(len(f.recent))
}

// schedLatencies is the runtime's histogram of how long ready goroutines
// waited to run (a sample of them).
const schedLatencies = "/sched/latencies:seconds"

// longWaits returns a function that counts the sampled waits of at least
// limit so far (the buckets that start at limit or later), or 0 when the
// runtime does not have the metric. The function reuses its sample: one
// goroutine calls it.
func longWaits(limit time.Duration) func() uint64 {
	sample := []metrics.Sample{{Name: schedLatencies}}
	return func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindFloat64Histogram {
			return 0
		}
		return countFrom(sample[0].Value.Float64Histogram(), limit.Seconds())
	}
}

// countFrom returns the counts of h's buckets whose lower bound is at
// least from.
func countFrom(h *metrics.Float64Histogram, from float64) uint64 {
	var n uint64
	for i, c := range h.Counts {
		if h.Buckets[i] >= from {
			n += c
		}
	}
	return n
}

// processCPU returns the user and system CPU time the process used so
// far, or -1 when it cannot be read.
func processCPU() time.Duration {
	d, err := CPUTime()
	if err != nil {
		return -1
	}
	return d
}

// CPUTime returns the CPU time this process has used so far, user and
// system, all its threads.
func CPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
