package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"
)

// The soak: a mixed fleet (devices publishing every few seconds, every
// minute and in bursts, devices that reconnect, subscribers in 3.1.1 and 5
// at QoS 0, 1 and 2 with clean and persistent sessions, idle subscribers,
// a slow reader, keep alives of 0, 5, 60 and 600 s) runs against one broker
// for a set time, and the run fails on any loss of an acknowledged QoS 1/2
// message, any duplicate the protocol does not allow, any connection
// closed without a stated reason, and memory or goroutines that do not
// stay flat. docs/benchmarks.md ("Soak") describes the fleet and the
// figures of the long runs.

// SoakConfig describes one soak run.
type SoakConfig struct {
	// Target is "serve" (the harness starts fleetmq serve on a fresh data
	// directory), "broker" (fleetmq broker) or "addr" (a broker at Addr).
	Target   string
	Fleetmq  string // the fleetmq binary (serve, broker)
	Duration time.Duration
	// Scale multiplies every period of the fleet's schedule and the
	// default timeouts: 0.25 runs the schedule four times as fast.
	Scale float64
	// WriteTimeout and ConnectTimeout are the server's: passed to serve
	// and broker (default 30 s and 10 s times Scale, at least 1 s), stated
	// for addr.
	WriteTimeout   time.Duration
	ConnectTimeout time.Duration
	// Drain is how long the harness waits after the run for owed messages
	// without any arriving.
	Drain time.Duration
	// Sample is how often the server's memory and goroutines are read
	// (default: Duration/120, within 1-30 s).
	Sample time.Duration
	Size   int // payload bytes
	Burst  int // messages per burst
	// RSSGrowth and RSSSlackMiB bound the growth of the server's resident
	// memory: the median of the second half of the run may exceed the
	// first half's (after the first 10%) by RSSGrowth (a fraction) plus
	// RSSSlackMiB.
	RSSGrowth   float64
	RSSSlackMiB float64
	ServerLog   string // also write the server's log here
	KeepData    bool   // keep serve's data directory

	// The broker at Addr (Target "addr").
	Addr        string
	PID         int    // its process, for memory figures (0: none)
	MetricsURL  string // its /metrics, for goroutine figures ("" : none)
	Account     string // topic root: the account id on a fleetmq platform
	PubUsername string
	PubPassword string
	SubUsername string
	SubPassword string

	progress io.Writer // progress lines during the run (nil: none)
}

// scaled is d times the scale.
func (c *SoakConfig) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.Scale)
}

func (c *SoakConfig) fill() error {
	if c.Target == "" {
		c.Target = "serve"
	}
	if c.Scale <= 0 {
		c.Scale = 1
	}
	if c.Duration <= 0 {
		c.Duration = 2 * time.Minute
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = max(c.scaled(30*time.Second), time.Second)
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = max(c.scaled(10*time.Second), time.Second)
	}
	if c.Drain <= 0 {
		c.Drain = time.Minute
	}
	if c.Sample <= 0 {
		c.Sample = min(max(c.Duration/120, time.Second), 30*time.Second)
	}
	if c.Size < soakHeader {
		c.Size = 64
	}
	if c.Burst <= 0 {
		c.Burst = 100
	}
	if c.RSSGrowth == 0 {
		c.RSSGrowth = 0.05
	}
	if c.RSSSlackMiB == 0 {
		c.RSSSlackMiB = 8
	}
	switch c.Target {
	case "serve", "broker":
		if c.Fleetmq == "" {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("-fleetmq: %w", err)
			}
			c.Fleetmq = exe
		}
	case "addr":
		if c.Addr == "" {
			return errors.New("-target addr needs -addr")
		}
		if c.Account == "" {
			c.Account = "soak"
		}
	default:
		return fmt.Errorf("-target %q: want serve, broker or addr", c.Target)
	}
	// Every idle period must outlast the server's timeouts: the idle
	// subscribers' gap (the minute devices' period) exceeds the write
	// timeout and 1.5 times their keep alive, and the slow reader's pause
	// is twice the write timeout.
	gap := newSchedule(c.Scale, c.WriteTimeout).minute
	if ka := time.Duration(idleKeepAlive) * time.Second * 3 / 2; gap <= c.WriteTimeout || gap <= ka {
		return fmt.Errorf("the idle subscribers' gap %v (1m x -scale %g) must exceed the write timeout %v and 1.5 x their keep alive (%v): raise -scale or lower -write-timeout",
			gap, c.Scale, c.WriteTimeout, ka)
	}
	if c.Duration < 2*gap {
		return fmt.Errorf("-duration %v: at least two idle gaps (%v) so the idle subscribers idle", c.Duration, 2*gap)
	}
	return nil
}

// soakSample is one reading of the server's memory and goroutines.
type soakSample struct {
	At         time.Duration `json:"at"` // since the fleet started
	RSSKiB     int64         `json:"rss_kib,omitempty"`
	AnonKiB    int64         `json:"anon_kib,omitempty"`
	FileKiB    int64         `json:"file_kib,omitempty"`
	HeapBytes  float64       `json:"heap_bytes,omitempty"`
	Goroutines float64       `json:"goroutines,omitempty"`
	Conns      float64       `json:"conns,omitempty"`
	Queued     float64       `json:"queued,omitempty"`
}

// SoakResult is what a soak measured; Failures is empty when it passed.
type SoakResult struct {
	Target         string  `json:"target"`
	Seconds        float64 `json:"seconds"`
	Scale          float64 `json:"scale"`
	WriteTimeout   string  `json:"write_timeout"`
	ConnectTimeout string  `json:"connect_timeout"`
	Devices        int     `json:"devices"`
	Subscribers    int     `json:"subscribers"`
	soakTally

	Connections     int `json:"connections"`
	ClosedByHarness int `json:"closed_by_harness"`
	// ServerCloses counts connections the server closed, by reason;
	// Provoked those the canaries provoked, Unprovoked the closes of
	// well-behaved fleet clients (stated, but not expected).
	ServerCloses map[string]int `json:"server_closes"`
	Provoked     map[string]int `json:"provoked"`
	Unprovoked   map[string]int `json:"unprovoked"`
	Unexplained  int            `json:"unexplained"`
	// PingTimeouts counts connections the client ended itself because no
	// PINGRESP came within its keep alive: not closed by the server, but
	// a sign the server (or the machine) stalled.
	PingTimeouts        int      `json:"ping_timeouts"`
	UnexplainedExamples []string `json:"unexplained_examples,omitempty"`
	ConnectFailures     int64    `json:"connect_failures"`
	Refused             int64    `json:"refused"`
	Problems            []string `json:"problems,omitempty"`

	// ServerDisconnects is the server's own count of ended connections
	// (its metrics), by "who/reason"; ServerDrops the messages it did
	// not deliver, by reason (metrics, else its log).
	ServerDisconnects map[string]int64 `json:"server_disconnects,omitempty"`
	ServerDrops       map[string]int64 `json:"server_drops,omitempty"`
	ServerErrors      int64            `json:"server_errors"`
	LogSuppressed     int64            `json:"log_suppressed,omitempty"`

	RSS           [3]int64     `json:"rss_kib_first_last_max"`
	RSSHalvesKiB  [2]int64     `json:"rss_kib_median_halves"`
	AnonHalvesKiB [2]int64     `json:"anon_kib_median_halves"`
	HeapHalvesMiB [2]float64   `json:"heap_mib_median_halves"`
	RSSAllowedKiB int64        `json:"rss_kib_allowed"`
	Goroutines    [3]float64   `json:"goroutines_baseline_max_after"`
	Samples       []soakSample `json:"samples,omitempty"`

	Failures []string `json:"failures"`
}

// goroutineSlack is how many more goroutines than before the fleet came
// the server may have once every client has left: its own background work
// (a state save, a commit, a retention pass) may be running.
const goroutineSlack = 10

// RunSoak runs the soak and reports what it found; the error is for a run
// that could not be made (a broker that does not start), not for a
// failed check.
func RunSoak(ctx context.Context, cfg SoakConfig) (*SoakResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	progress := cfg.progress
	if progress == nil {
		progress = io.Discard
	}
	sched := newSchedule(cfg.Scale, cfg.WriteTimeout)
	devices := soakDevices(sched, cfg.Burst)
	subs := soakSubscribers()
	target, err := startSoakTarget(ctx, &cfg, soakDeviceIDs(devices))
	if err != nil {
		return nil, err
	}
	defer target.stop()

	nonce := rand.Uint64()
	led := newLedger(nonce)
	f := &fleet{addr: target.addr, root: target.root, pubUser: target.pubUser, pubPass: target.pubPass,
		subUser: target.subUser, subPass: target.subPass, size: cfg.Size, sched: sched, led: led}
	if target.kind == "addr" {
		// Subscribers and canaries of this run, apart from any other's on
		// a shared broker (devices keep their registered ids).
		f.nameSuffix = fmt.Sprintf("-%04x", uint16(nonce))
	}

	res := &SoakResult{Target: cfg.Target, Scale: cfg.Scale, WriteTimeout: cfg.WriteTimeout.String(),
		ConnectTimeout: cfg.ConnectTimeout.String(), Devices: len(devices), Subscribers: len(subs)}
	if m, err := target.metrics(ctx); err == nil {
		res.Goroutines[0] = m["go_goroutines"]
	}

	// The sampler reads memory and goroutines until the server stops.
	start := time.Now()
	sampler := newSampler(target, start)
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go func() { defer close(samplerDone); sampler.run(ctx, cfg.Sample, stopSampler) }()

	// Subscribers first: every message of the run has them in place.
	runCtx, endRun := context.WithTimeout(ctx, cfg.Duration)
	defer endRun()
	stopCtx, stopSubs := context.WithCancel(context.Background())
	defer stopSubs()
	var subsWG, devsWG sync.WaitGroup
	var ready sync.WaitGroup
	for _, s := range subs {
		// paho.golang and the harness's client keep QoS 2 receive state
		// across reconnects; paho.mqtt.golang does not.
		b := &subBook{name: s.name, filter: target.root + "/" + s.filter, qos: s.qos, persistent: s.persistent, keepsQoS2State: s.version == 5}
		led.addSub(b)
		ready.Add(1)
		subsWG.Add(1)
		go func() {
			defer subsWG.Done()
			if s.lean {
				f.runSlowReader(runCtx, stopCtx, s, b, ready.Done)
			} else {
				f.runSubscriber(runCtx, stopCtx, s, b, ready.Done)
			}
		}()
	}
	ready.Wait()
	fmt.Fprintf(progress, "soak: %s on %s, %d devices, %d subscribers, %v at scale %g (write timeout %v, connect timeout %v)\n",
		cfg.Target, target.addr, len(devices), len(subs), cfg.Duration, cfg.Scale, cfg.WriteTimeout, cfg.ConnectTimeout)
	for _, d := range devices {
		devsWG.Add(1)
		go func() { defer devsWG.Done(); f.runDevice(runCtx, d) }()
	}
	var canaryWG sync.WaitGroup
	for _, c := range soakCanaries(target.log != nil) {
		canaryWG.Add(1)
		go func() { defer canaryWG.Done(); f.runCanary(runCtx, c, cfg.ConnectTimeout) }()
	}
	reportProgress(runCtx, progress, start, led, sampler, target)
	devsWG.Wait()
	canaryWG.Wait()
	runEnd := time.Now()

	// The drain: wait for what is owed while deliveries keep coming.
	last, lastChange := int64(-1), time.Now()
	for {
		n := led.outstanding()
		if n != last {
			last, lastChange = n, time.Now()
		}
		if n == 0 || time.Since(lastChange) > cfg.Drain || !target.alive() || ctx.Err() != nil {
			break
		}
		pause(ctx, 200*time.Millisecond)
	}
	fmt.Fprintf(progress, "soak: run ended after %v; drained in %v (%d deliveries outstanding)\n",
		runEnd.Sub(start).Round(time.Second), time.Since(runEnd).Round(100*time.Millisecond), last)
	stopSubs()
	subsWG.Wait()

	// Every client has left: the server's connections and goroutines
	// must come back down.
	var final map[string]float64
	if target.metricsURL != "" {
		deadline := time.Now().Add(soakTimeout)
		for time.Now().Before(deadline) && target.alive() && ctx.Err() == nil {
			m, err := target.metrics(ctx)
			if err == nil {
				final = m
				res.Goroutines[2] = m["go_goroutines"]
				if m["fleetmq_mqtt_connections"] == 0 && m["go_goroutines"] <= res.Goroutines[0]+goroutineSlack {
					break
				}
			}
			pause(ctx, 250*time.Millisecond)
		}
	}
	close(stopSampler)
	<-samplerDone
	alive := target.alive()
	target.stop()

	res.Seconds = runEnd.Sub(start).Seconds()
	res.soakTally = led.tally()
	res.ConnectFailures, res.Refused = f.connectFailures.Load(), f.refused.Load()
	res.Problems = f.problems
	res.judgeCloses(led, target.log)
	res.judgeMemory(&cfg, sampler.samples(), runEnd.Sub(start))
	res.ServerDisconnects = seriesBy(final, "fleetmq_mqtt_disconnects_total", "by", "reason")
	res.ServerDrops = seriesBy(final, "fleetmq_mqtt_dropped_total", "reason")
	if target.log != nil {
		l := target.log
		l.mu.Lock()
		if res.ServerDrops == nil {
			res.ServerDrops = l.drops
		}
		res.ServerErrors, res.LogSuppressed = l.errorsN, l.suppressed
		for _, e := range l.errors {
			res.fail("server log: %s", e)
		}
		l.mu.Unlock()
	}
	if !alive {
		res.fail("the server exited during the run: %s", target.log.lastLines()) // only children exit
	}
	res.judge()
	return res, nil
}
