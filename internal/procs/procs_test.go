package procs

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// feed gives f the cores used in each tick and returns the processors
// after each (0 where they did not change).
func feed(f *fitter, used ...float64) []int {
	var out []int
	for _, u := range used {
		out = append(out, f.next(u, false))
	}
	return out
}

func repeat(u float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = u
	}
	return out
}

// TestLightLoadRunsOnOne: a server using a small part of a core stays on
// one processor; one that needs more gets all of them at the next tick.
func TestLightLoadRunsOnOne(t *testing.T) {
	f := newFitter(2, 20, 20)
	for i, p := range feed(f, repeat(0.15, 100)...) { // 4,000 msg/s through serve
		if p != 0 {
			t.Fatalf("tick %d at 0.15 cores: moved to %d processors; want to stay on 1", i, p)
		}
	}
	if p := f.next(0.9, false); p != 2 {
		t.Fatalf("a tick using 0.9 cores on one processor: %d processors; want 2", p)
	}
}

// TestProcessorsDoubleUpToTheMost: on a larger machine, load that keeps
// the processors busy doubles them tick by tick up to the most, not past.
func TestProcessorsDoubleUpToTheMost(t *testing.T) {
	f := newFitter(8, 20, 20)
	got := feed(f, 0.9, 1.9, 3.5, 7.9, 7.9)
	want := []int{2, 4, 8, 0, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("processors after each busy tick: %v; want %v", got, want)
		}
	}
}

// TestProcessorsGoOnlyAfterAQuietWindow: processors are taken away only
// after a whole window of low load, half at a time, and a load between
// the two thresholds keeps what it has (no flapping).
func TestProcessorsGoOnlyAfterAQuietWindow(t *testing.T) {
	f := newFitter(4, 20, 20)
	feed(f, 0.9, 1.9) // up to 4
	if f.procs != 4 {
		t.Fatalf("%d processors after two busy ticks; want 4", f.procs)
	}
	for i, p := range feed(f, repeat(0.3, 19)...) {
		if p != 0 {
			t.Fatalf("tick %d of a quiet window: %d processors; want to keep 4 until the window is over", i, p)
		}
	}
	if p := f.next(0.3, false); p != 2 {
		t.Fatalf("after a window at 0.3 cores on 4 processors: %d; want 2", p)
	}
	for i, p := range feed(f, repeat(0.5, 60)...) { // 25% of 2: between lowerAt and raiseAt
		if p != 0 {
			t.Fatalf("tick %d at 0.5 cores on 2 processors: moved to %d; want to keep 2", i, p)
		}
	}
	// From 0.5 down to 0.1 cores: the window's average falls under 0.4
	// at the sixth quiet tick ((14*0.5 + 6*0.1) / 20 = 0.38).
	got := feed(f, repeat(0.1, 20)...)
	for i, p := range got {
		if want := map[bool]int{true: 1, false: 0}[i == 5]; p != want {
			t.Fatalf("processors after each tick from 0.5 down to 0.1 cores on 2: %v; want 1 at the sixth", got)
		}
	}
}

// TestTheWindowsAverageDecides: processors go when the window's average
// is low, a short burst in it included, and stay when a burst lifts that
// average above the threshold.
func TestTheWindowsAverageDecides(t *testing.T) {
	window := func(quiet, burst float64) []float64 {
		used := append(repeat(quiet, 10), burst)
		return append(used, repeat(quiet, 9)...)
	}
	f := newFitter(2, 20, 20)
	f.next(0.9, false)            // on 2
	feed(f, window(0.05, 1.0)...) // average 0.0975, under 0.4
	if f.procs != 1 {
		t.Fatalf("%d processors after a quiet window with one busy tick; want 1", f.procs)
	}
	f = newFitter(2, 20, 20)
	f.next(0.9, false)
	for i, p := range feed(f, window(0.3, 3.0)...) { // average 0.435
		if p != 0 {
			t.Fatalf("tick %d: moved to %d processors; the window's average with its burst is above the threshold", i, p)
		}
	}
}

// TestALongWaitRaisesAndHolds: a tick in which a ready goroutine waited
// long for its one processor (held by a call into C) raises the
// processors however little CPU the process used. They go after a window
// without a long wait; when long waits come back soon after, the calm
// they need doubles each time, up to the most, and a server whose long
// waits stopped for a while starts from the window again.
func TestALongWaitRaisesAndHolds(t *testing.T) {
	f := newFitter(2, 20, 600)
	feed(f, repeat(0.1, 50)...)
	// held reports a long wait at 0.1 cores and counts the quiet ticks
	// until the processors go back to one.
	held := func() int {
		t.Helper()
		if p := f.next(0.1, true); p != 2 {
			t.Fatalf("a tick at 0.1 cores with a long wait on one processor: %d processors; want 2", p)
		}
		return quietUntil(t, f, 1)
	}
	var holds []int
	for range 7 {
		holds = append(holds, held())
	}
	if want := []int{20, 40, 80, 160, 320, 600, 600}; !slices.Equal(holds, want) {
		t.Fatalf("quiet ticks on 2 processors after long waits that came back at once: %v; want %v", holds, want)
	}
	feed(f, repeat(0.1, 1199)...) // 2 minutes without one: calm again
	if n := held(); n != 20 {
		t.Fatalf("quiet ticks on 2 processors after a long wait that came back 2 minutes later: %d; want the window, 20", n)
	}

	// Long waits on all processors (a load that needs them) hold them
	// for the calm period from the last one, and make it no longer.
	f = newFitter(2, 20, 600)
	f.next(0.1, true)
	for i := range 30 {
		if p := f.next(0.1, true); p != 0 {
			t.Fatalf("long wait %d on all processors: moved to %d", i, p)
		}
	}
	for i := range 19 {
		if p := f.next(0.1, false); p != 0 {
			t.Fatalf("quiet tick %d after a crowd of long waits: moved to %d processors", i, p)
		}
	}
	if p := f.next(0.1, false); p != 1 {
		t.Fatalf("a window after a crowd of long waits on all processors: %d; want 1", p)
	}
}

// TestOneReturnDoublesTheCalmOnce: on a larger machine the waits of one
// hold show in the ticks that raise the processors from one to all; they
// double the calm period once, not at each raise. A server whose long
// waits came back soon after a lowering, and that later used the CPU of
// all its processors long after its last lowering, needs only the window
// again.
func TestOneReturnDoublesTheCalmOnce(t *testing.T) {
	f := newFitter(8, 20, 600)
	quietFor := func() int { t.Helper(); return quietUntil(t, f, 4) }
	if got := feed2(f, true, true, true); !slices.Equal(got, []int{2, 4, 8}) {
		t.Fatalf("three ticks with long waits from one processor: %v; want 2, 4, 8", got)
	}
	if n := quietFor(); n != 20 {
		t.Fatalf("quiet ticks on 8 after the first long waits: %d; want the window, 20", n)
	}
	feed(f, repeat(0.1, 40)...) // 4, then 2, then 1: a window each
	if f.procs != 1 {
		t.Fatalf("%d processors after three quiet windows; want 1", f.procs)
	}
	if got := feed2(f, true, true, true); !slices.Equal(got, []int{2, 4, 8}) {
		t.Fatalf("three ticks with long waits soon after the lowering: %v; want 2, 4, 8", got)
	}
	if n := quietFor(); n != 40 {
		t.Fatalf("quiet ticks on 8 after long waits came back: %d; want 40 (doubled once, not at each raise)", n)
	}

	feed(f, repeat(0.1, 1300)...) // down to one, and long quiet there
	if p := f.next(0.9, false); p != 2 {
		t.Fatalf("a busy tick on one processor: %d processors; want 2", p)
	}
	feed2(f, true, true) // the spike's own long waits, on 4 and 8
	if n := quietFor(); n != 20 {
		t.Fatalf("quiet ticks on 8 after a spike long after the last lowering: %d; want the window, 20", n)
	}
}

// quietUntil gives f quiet ticks (0.1 cores, no long wait) until it
// lowers the processors, which must be to want, and returns how many it
// took.
func quietUntil(t *testing.T, f *fitter, want int) int {
	t.Helper()
	from := f.procs
	for n := 1; n <= 1000; n++ {
		switch p := f.next(0.1, false); p {
		case 0:
		case want:
			return n
		default:
			t.Fatalf("quiet tick %d on %d processors: moved to %d; want %d", n, from, p, want)
		}
	}
	t.Fatalf("still on %d processors 1,000 quiet ticks later", from)
	return 0
}

// feed2 gives f ticks at 0.1 cores, with a long wait where waited says,
// and returns the processors after each.
func feed2(f *fitter, waited ...bool) []int {
	var out []int
	for _, w := range waited {
		out = append(out, f.next(0.1, w))
	}
	return out
}

// TestLongWaitsAreCounted: goroutines kept waiting by one that holds the
// only processor are counted as long waits (the runtime samples one
// scheduling in eight, so the test makes a crowd wait until one is
// counted).
func TestLongWaitsAreCounted(t *testing.T) {
	runtime.GOMAXPROCS(1)
	defer runtime.SetDefaultGOMAXPROCS()
	waits := longWaits(waitLimit)
	before := waits()
	deadline := time.Now().Add(10 * time.Second)
	for waits() == before {
		if time.Now().After(deadline) {
			t.Fatalf("no long wait counted in 10 s of goroutines kept from their processor")
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() { defer wg.Done(); <-start }()
		}
		runtime.Gosched() // all of them waiting on start
		close(start)      // all of them ready
		for spin := time.Now(); time.Since(spin) < 3*waitLimit; {
		} // the processor held past the runtime's preemption
		wg.Wait()
	}
}

// TestCountFromTheLimit: only the buckets that start at the limit or
// later count.
func TestCountFromTheLimit(t *testing.T) {
	h := &metrics.Float64Histogram{
		Buckets: []float64{0, 0.001, 0.004, 0.016, math.Inf(1)},
		Counts:  []uint64{100, 10, 3, 1},
	}
	if n := countFrom(h, 0.004); n != 4 {
		t.Fatalf("waits from 4 ms: %d; want 4 (3 in [4 ms, 16 ms), 1 past it)", n)
	}
	if n := countFrom(h, 0.003); n != 4 {
		t.Fatalf("waits from 3 ms: %d; want 4 (the bucket [1 ms, 4 ms) holds shorter waits too)", n)
	}
}

// TestFitSetsTheProcessors: Fit starts the process on one processor,
// gives it more when its CPU time says it is busy (a raise for CPU,
// counted), and leaves it on all when it ends; an operator's GOMAXPROCS
// holds.
func TestFitSetsTheProcessors(t *testing.T) {
	var cpu atomic.Int64
	const tick = 5 * time.Millisecond
	busy0, wait0 := Raises()
	set, stop := startFit(t, Options{Most: 2, Tick: tick, Waits: func() uint64 { return 0 },
		CPU: func() time.Duration { return time.Duration(cpu.Add(int64(10 * tick))) }}) // ten cores busy
	for _, want := range []int{1, 2} {
		select {
		case got := <-set:
			if got != want {
				t.Fatalf("processors set to %d; want %d", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("processors never set to %d", want)
		}
	}
	stop()
	if busy, wait := Raises(); busy != busy0+1 || wait != wait0 {
		t.Fatalf("raises counted: cpu +%d, wait +%d; want cpu +1, wait +0", busy-busy0, wait-wait0)
	}
	// Ended (a server's shutdown): back on all processors.
	for last := 0; last != 2; {
		select {
		case last = <-set:
		default:
			t.Fatalf("processors set last to %d when Fit ended; want 2", last)
		}
	}

	t.Setenv("GOMAXPROCS", "2")
	Fit(context.Background(), Options{Most: 2, Set: func(n int) { t.Fatalf("processors set to %d although GOMAXPROCS is set", n) }})
}

// startFit runs Fit with o until stop, which waits for it to end, and
// sends each number of processors it sets on set.
func startFit(t *testing.T, o Options) (set <-chan int, stop func()) {
	t.Helper()
	ch := make(chan int, 16)
	o.Set = func(n int) { ch <- n }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Fit(ctx, o)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return ch, stop
}

// TestFitRaisesOnALongWait: Fit counts the long waits since its last
// reading: a process using little CPU gets the second processor at the
// tick after its first long wait, and not before (a raise for a wait,
// counted).
func TestFitRaisesOnALongWait(t *testing.T) {
	var cpu, waits atomic.Int64
	waits.Store(5) // long waits before Fit started do not count
	const tick = 5 * time.Millisecond
	set, stop := startFit(t, Options{Most: 2, Tick: tick,
		CPU:   func() time.Duration { return time.Duration(cpu.Add(int64(tick / 10))) }, // a tenth of a core
		Waits: func() uint64 { return uint64(waits.Load()) }})
	defer stop()
	if got := <-set; got != 1 {
		t.Fatalf("processors set first to %d; want 1", got)
	}
	select {
	case got := <-set:
		t.Fatalf("processors set to %d at a tenth of a core and no new long wait; want to stay on 1", got)
	case <-time.After(20 * tick):
	}
	busy0, wait0 := Raises()
	waits.Add(1)
	select {
	case got := <-set:
		if got != 2 {
			t.Fatalf("processors set to %d after a long wait; want 2", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("processors not raised in 5 s after a long wait")
	}
	if busy, wait := Raises(); busy != busy0 || wait != wait0+1 {
		t.Fatalf("raises counted: cpu +%d, wait +%d; want cpu +0, wait +1", busy-busy0, wait-wait0)
	}
}

// TestUnreadableCPUTimeIsSkipped: a reading that failed, or that went
// back, is no measure of the load (a tick of "negative" use would take
// processors away, and the next one would give them back).
func TestUnreadableCPUTimeIsSkipped(t *testing.T) {
	for _, tc := range []struct {
		cpu, last, wall time.Duration
		ok              bool
	}{
		{150 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, true},
		{-1, 100 * time.Millisecond, 100 * time.Millisecond, false},
		{90 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond, false},
		{150 * time.Millisecond, 100 * time.Millisecond, 0, false},
	} {
		used, ok := usage(tc.cpu, tc.last, tc.wall)
		if ok != tc.ok || (ok && used != 0.5) {
			t.Errorf("usage(%v, %v, %v) = %v, %v; want %v (0.5 cores when readable)", tc.cpu, tc.last, tc.wall, used, ok, tc.ok)
		}
	}
}

// TestProcessCPUCounts: the process's CPU time grows with work.
func TestProcessCPUCounts(t *testing.T) {
	before := processCPU()
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for processCPU()-before < 20*time.Millisecond {
		for i := range 1_000_000 {
			x += i
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time grew by %v in 5 s of work; want 20 ms", processCPU()-before)
		}
	}
	_ = x
}
