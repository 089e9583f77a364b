package loadtest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// IdleConfig describes an idle-connections load.
type IdleConfig struct {
	Addr      string
	Version   byte
	Conns     int
	Sources   []net.IP // source addresses, used in turn (127.0.0.x)
	Parallel  int      // concurrent dials
	BrokerPID int
	ClientID  string // template with {i}
	Username  string
	Password  string
	// Quiet is how long the connections stay idle before their memory is
	// measured: a broker may change how it holds an idle connection after
	// a while (fleetmq parks idle clients after -idle-park-after).
	Quiet time.Duration

	onMeasured func() // called with the connections still open
}

// maxIdleConns keeps the harness under the machine's open-file limit
// (about 20,000 per process here).
const maxIdleConns = 18000

// RunIdle opens cfg.Conns MQTT connections, waits for the broker's memory to
// settle and reports the resident memory each connection costs it.
func RunIdle(ctx context.Context, cfg IdleConfig) (*Result, error) {
	if cfg.Conns <= 0 || cfg.Conns > maxIdleConns {
		return nil, fmt.Errorf("conns %d: must be 1..%d", cfg.Conns, maxIdleConns)
	}
	if cfg.Version == 0 {
		cfg.Version = 5
	}
	if len(cfg.Sources) == 0 {
		cfg.Sources = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 32
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "bench-idle-{i}"
	}
	before, err := settledRSS(ctx, cfg.BrokerPID)
	if err != nil {
		return nil, err
	}
	conns := make([]*conn, cfg.Conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	start := time.Now()
	if err := forEachIndex(ctx, cfg.Conns, cfg.Parallel, func(i int) error {
		d := dialer{addr: cfg.Addr, version: cfg.Version, source: cfg.Sources[i%len(cfg.Sources)], timeout: 30 * time.Second}
		cp := connectPacket(expand(cfg.ClientID, i), cfg.Username, cfg.Password)
		cp.KeepAlive = 0 // idle for as long as the test holds it
		c, _, err := d.connect(ctx, cp, 256)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		conns[i] = c
		return nil
	}); err != nil {
		return nil, err
	}
	connected := time.Since(start)
	select {
	case <-time.After(cfg.Quiet):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	after, err := settledRSS(ctx, cfg.BrokerPID)
	if err != nil {
		return nil, err
	}
	if cfg.onMeasured != nil {
		cfg.onMeasured()
	}
	r := &Result{Mode: "idle", Conns: cfg.Conns, Seconds: connected.Seconds(), BrokerRSSKiB: after}
	if cfg.BrokerPID > 0 {
		r.KiBPerConn = float64(after-before) / float64(cfg.Conns)
	}
	return r, nil
}

// settledRSS polls the broker's RSS until two readings half a second apart
// differ by under 1%, or 15 seconds pass.
func settledRSS(ctx context.Context, pid int) (int64, error) {
	if pid <= 0 {
		return 0, nil
	}
	prev, err := procRSS(pid)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		cur, err := procRSS(pid)
		if err != nil {
			return 0, err
		}
		if diff := cur - prev; diff*100 <= prev && -diff*100 <= prev {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// forEachIndex calls f(i) for every i in [0, n) from workers goroutines,
// each taking the next index, and waits for them. The first error stops
// the others from starting more and is returned; so is ctx's, once it
// ends.
func forEachIndex(ctx context.Context, n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range max(min(workers, n), 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
