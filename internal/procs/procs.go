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
// core. Fit watches the process's CPU time and runs on one processor
// while it uses a small part of one core, and on all of them as soon as
// it uses more.
package procs

import (
	"context"
	"os"
	"runtime"
	"syscall"
	"time"
)

const (
	// tick is how often the CPU time is read: a burst waits at most
	// about this long for more processors.
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
)

// Options are what Fit needs; the zero value fits the running process.
type Options struct {
	// Most is the number of processors under load (default: the
	// runtime's GOMAXPROCS at start, which follows the CPU limit of the
	// process's cgroup and its CPU affinity).
	Most int
	// CPU returns the process's CPU time so far (default: user and
	// system time of all its threads, from getrusage).
	CPU func() time.Duration
	// Set sets the number of processors (default runtime.GOMAXPROCS).
	Set func(int)
	// Tick is how often the CPU time is read (default 100 ms).
	Tick time.Duration
}

// Fit adjusts the number of processors until ctx ends, unless the
// operator set GOMAXPROCS in the environment (then that holds) or there is
// one processor only. It starts on one, and leaves the process on all of
// them when ctx ends (a server's shutdown: draining and saving).
func Fit(ctx context.Context, o Options) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if o.Most == 0 {
		o.Most = runtime.GOMAXPROCS(0)
	}
	if o.CPU == nil {
		o.CPU = processCPU
	}
	if o.Set == nil {
		o.Set = func(n int) { runtime.GOMAXPROCS(n) }
	}
	if o.Tick == 0 {
		o.Tick = tick
	}
	if o.Most <= 1 {
		return
	}
	f := newFitter(o.Most, int(window/o.Tick))
	o.Set(f.procs)
	defer o.Set(o.Most)
	t := time.NewTicker(o.Tick)
	defer t.Stop()
	last, lastAt := o.CPU(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cpu := o.CPU()
			wall := now.Sub(lastAt)
			if wall <= 0 {
				continue
			}
			if p := f.next(float64(cpu-last) / float64(wall)); p != 0 {
				o.Set(p)
			}
			last, lastAt = cpu, now
		}
	}
}

// fitter decides the number of processors from the cores used in each
// tick.
type fitter struct {
	most, procs int
	recent      []float64 // the cores used in the last ticks, a ring
	at          int       // the next slot of recent
	filled      int       // the slots of recent written since procs changed
}

func newFitter(most, ticks int) *fitter {
	return &fitter{most: most, procs: 1, recent: make([]float64, max(ticks, 1))}
}

// next takes the cores used in the tick that ended (CPU seconds per
// second) and returns the number of processors to run on from now, or 0
// to keep the current number.
func (f *fitter) next(used float64) int {
	f.recent[f.at] = used
	f.at = (f.at + 1) % len(f.recent)
	f.filled = min(f.filled+1, len(f.recent))
	p := f.procs
	switch {
	case p < f.most && used > raiseAt*float64(p):
		p = min(f.most, 2*p)
	case p > 1 && f.filled == len(f.recent) && f.average() < lowerAt*float64(p):
		p = max(1, p/2)
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

// processCPU returns the user and system CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
