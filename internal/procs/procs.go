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
	// Tick is how often the CPU time is read (default 100 ms).
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
	f := newFitter(o.Most, int(window/o.Tick))
	o.Set(f.procs)
	defer func() { o.Set(o.Most) }()
	t := time.NewTicker(o.Tick)
	defer t.Stop()
	last, lastAt := o.CPU(), time.Now()
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
		p := f.next(used)
		if p == 0 {
			continue
		}
		o.Set(p)
		if auto && p == f.most {
			if m := runtime.GOMAXPROCS(0); m != f.most && m > 0 {
				o.Most, f.most, f.procs = m, m, m // the CPU limit changed
			}
		}
	}
}

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
