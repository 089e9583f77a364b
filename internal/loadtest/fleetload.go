package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// FleetConfig describes a fleet load: many devices, each connected all the
// time and publishing a small JSON state message at QoS 1 and a telemetry
// message at QoS 0 on its own schedule (phases spread at random, so the
// broker sees a steady rate), into a few wildcard subscribers.
type FleetConfig struct {
	Addr           string
	Devices        int
	Subscribers    int
	StateEvery     time.Duration // each device's QoS 1 state period
	TelemetryEvery time.Duration // each device's QoS 0 telemetry period
	Duration       time.Duration // the measured window of steady publishing
	Sources        []net.IP      // the devices' source addresses, used in turn
	Parallel       int           // concurrent device connects
	// Client is the subscribers' client and DeviceClient the devices'
	// (ClientLean, ClientPaho3 or ClientPahoV5; "" for DeviceClient: the
	// same as Client).
	Client       string
	DeviceClient string
	BrokerPID    int
	Drain        time.Duration // how long to wait for stragglers without progress

	// Identity and topic templates; "{i}" is the device's index.
	DeviceID                       string
	StateTopic, TelemetryTopic     string
	DeviceUsername, DevicePassword string
	SubClientID, SubFilter         string
	SubUsername, SubPassword       string
}

// fleetTimeout bounds one device's connect and a QoS 1 publish's PUBACK.
const fleetTimeout = 30 * time.Second

// fleetKeepAlive is the devices' keep alive (s): they publish far more
// often, so no PINGREQ is sent while they publish.
const fleetKeepAlive = 60

func (c *FleetConfig) fill() error {
	if c.Client == "" {
		c.Client = ClientLean
	}
	if c.DeviceClient == "" {
		c.DeviceClient = c.Client
	}
	if err := checkClient(c.Client); err != nil {
		return err
	}
	if err := checkClient(c.DeviceClient); err != nil {
		return err
	}
	if c.Devices <= 0 || c.Subscribers <= 0 {
		return errors.New("need at least one device and one subscriber")
	}
	if c.StateEvery <= 0 || c.TelemetryEvery <= 0 || c.Duration <= 0 {
		return errors.New("the state and telemetry periods and the duration must be positive")
	}
	if len(c.Sources) == 0 {
		c.Sources = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if c.Parallel <= 0 {
		c.Parallel = 32
	}
	if c.Drain <= 0 {
		c.Drain = 5 * time.Second
	}
	orDefault(&c.DeviceID, "dev{i}")
	orDefault(&c.StateTopic, "fleet/dev{i}/state/device")
	orDefault(&c.TelemetryTopic, "fleet/dev{i}/telemetry/sensors")
	orDefault(&c.SubClientID, "fleet-sub-{i}")
	orDefault(&c.SubFilter, "fleet/#")
	return nil
}

// raiseOpenFiles raises the process's soft open-file limit to the hard one
// (Go does this at start on Linux; this also covers a limit lowered since)
// and checks that need descriptors fit.
func raiseOpenFiles(need int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return err
		}
	}
	if uint64(need) > l.Cur {
		return fmt.Errorf("%d connections need %d open files, the limit is %d (raise it with ulimit -Hn, as root)", need-fleetFDMargin, need, l.Cur)
	}
	return nil
}

// fleetFDMargin is the descriptors the harness needs beside its connections.
const fleetFDMargin = 200

// fleetReceiveMax is the Receive Maximum the paho.golang devices announce
// (they subscribe to nothing): at the default of 65,535, paho.golang
// would give each a 512 KiB channel, 7.5 GiB for 15,000 devices.
const fleetReceiveMax = 16

// fleetConn is one device's connection, whatever its client.
type fleetConn interface {
	// publish returns after the write (QoS 0) or the PUBACK (QoS 1).
	publish(ctx context.Context, topic string, qos byte, payload []byte) error
	disconnect()
}

// leanDevice is a device on the harness's own client: one packet per
// write, and it reads its PUBACKs itself, so it needs no goroutine of its own.
type leanDevice struct {
	c   *conn
	pid uint16
}

func (d *leanDevice) publish(_ context.Context, topic string, qos byte, payload []byte) error {
	pk := &packet.Publish{Topic: topic, QoS: qos, Payload: payload}
	if qos > 0 {
		d.pid = d.pid%65535 + 1
		pk.PacketID = d.pid
	}
	if err := d.c.send(pk, true); err != nil {
		return err
	}
	if qos == 0 {
		return nil
	}
	d.c.nc.SetReadDeadline(time.Now().Add(fleetTimeout))
	defer d.c.nc.SetReadDeadline(time.Time{})
	for {
		p, err := d.c.read()
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *packet.Ack:
			if p.Kind == packet.PUBACK && p.PacketID == d.pid {
				if p.ReasonCode >= 0x80 {
					return fmt.Errorf("publish %s refused: %v", topic, p.ReasonCode)
				}
				return nil
			}
		case *packet.Disconnect:
			return fmt.Errorf("server disconnected: %v", p.ReasonCode)
		}
	}
}

func (d *leanDevice) disconnect() {
	d.c.send(&packet.Disconnect{}, true)
	d.c.close()
}

// paho3Device is a device on paho.mqtt.golang (MQTT 3.1.1).
type paho3Device struct{ c mqtt3.Client }

func (d *paho3Device) publish(ctx context.Context, topic string, qos byte, payload []byte) error {
	tok := d.c.Publish(topic, qos, false, payload)
	t := time.NewTimer(fleetTimeout)
	defer t.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("publish %s: no acknowledgement in %v", topic, fleetTimeout)
	}
}

func (d *paho3Device) disconnect() { d.c.Disconnect(0) }

// dialFleetDevice connects device i with the configured client.
func dialFleetDevice(ctx context.Context, cfg *FleetConfig, i int) (fleetConn, error) {
	id := expand(cfg.DeviceID, i)
	src := cfg.Sources[i%len(cfg.Sources)]
	switch cfg.DeviceClient {
	case ClientPaho3:
		o := paho3Options(cfg.Addr, id, cfg.DeviceUsername, cfg.DevicePassword, fleetTimeout).
			SetKeepAlive(fleetKeepAlive * time.Second).SetDialer(sourceDialer(src, fleetTimeout))
		c := mqtt3.NewClient(o)
		tok := c.Connect()
		t := time.NewTimer(fleetTimeout)
		defer t.Stop()
		select {
		case <-tok.Done():
		case <-ctx.Done():
			c.Disconnect(0)
			return nil, ctx.Err()
		case <-t.C:
			c.Disconnect(0)
			return nil, fmt.Errorf("connect %s: no CONNACK in %v", id, fleetTimeout)
		}
		if err := tok.Error(); err != nil {
			return nil, fmt.Errorf("connect %s: %w", id, err)
		}
		return &paho3Device{c: c}, nil
	case ClientPahoV5:
		return dialPahoV5(ctx, pahoV5Dial{addr: cfg.Addr, source: src, clientID: id, username: cfg.DeviceUsername,
			password: cfg.DevicePassword, keepAlive: fleetKeepAlive, receiveMax: fleetReceiveMax, timeout: fleetTimeout})
	}
	d := dialer{addr: cfg.Addr, version: packet.Version5, source: src, timeout: fleetTimeout}
	cp := connectPacket(id, cfg.DeviceUsername, cfg.DevicePassword)
	cp.KeepAlive = 0 // it reads only while waiting for a PUBACK, so it could not answer a ping timely
	c, _, err := d.connect(ctx, cp, 512)
	if err != nil {
		return nil, err
	}
	return &leanDevice{c: c}, nil
}

// fleetPayload appends a device's JSON message: the fields the subscribers
// read back come first, in this order (fleetHeader), then plausible
// device fields, 150-190 bytes in all.
func fleetPayload(b []byte, dev int, seq uint64, state bool) []byte {
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(dev), 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"sent_ns":`...)
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	if state {
		b = append(b, `,"kind":"state","online":true,"battery_pct":`...)
		b = strconv.AppendInt(b, int64(100-seq%60), 10)
		return append(b, `,"firmware":"2.4.1","mode":"auto","door":"closed","rssi_dbm":-67,"errors":[]}`...)
	}
	b = append(b, `,"kind":"telemetry","temp_c":21.`...)
	b = strconv.AppendUint(b, seq%10, 10)
	return append(b, `,"humidity_pct":41.2,"pressure_hpa":1013.2,"supply_v":3.31,"flow_lpm":12.75}`...)
}

// fleetHeader reads back what fleetPayload put first: the device, the
// sequence number, the send time (Unix ns) and whether it is a state
// message.
func fleetHeader(p []byte) (dev int, seq uint64, sent int64, state, ok bool) {
	num := func(prefix string) (uint64, bool) {
		if len(p) < len(prefix) || string(p[:len(prefix)]) != prefix {
			return 0, false
		}
		p = p[len(prefix):]
		var v uint64
		n := 0
		for n < len(p) && n < 20 && p[n] >= '0' && p[n] <= '9' {
			v = v*10 + uint64(p[n]-'0')
			n++
		}
		p = p[n:]
		return v, n > 0
	}
	d, ok1 := num(`{"n":`)
	s, ok2 := num(`,"seq":`)
	t, ok3 := num(`,"sent_ns":`)
	const kind = `,"kind":"`
	if !ok1 || !ok2 || !ok3 || len(p) <= len(kind) || string(p[:len(kind)]) != kind {
		return 0, 0, 0, false, false
	}
	return int(d), s, int64(t), p[len(kind)] == 's', true
}

// fleetSub is one subscriber of the fleet load: the state and telemetry
// messages are counted apart (latency is the state messages').
type fleetSub struct {
	stop             func()
	run              func() error
	state, telemetry *subscriber
}

func (s *fleetSub) record(payload []byte) {
	now := time.Now()
	dev, seq, sent, state, ok := fleetHeader(payload)
	if !ok {
		return
	}
	to := s.telemetry
	if state {
		to = s.state
	}
	to.mu.Lock()
	to.note(dev, seq, sent, now)
	to.mu.Unlock()
}

// fleetCounts are the devices' counters.
type fleetCounts struct {
	stateSent, stateAcked, stateFailed atomic.Int64
	telemetrySent, telemetryFailed     atomic.Int64
	devicesStopped                     atomic.Int64 // by a failed publish (a lost connection)

	mu        sync.Mutex
	firstErr  error
	firstWhen time.Time
}

func (f *fleetCounts) failed(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.firstErr == nil {
		f.firstErr, f.firstWhen = err, time.Now()
	}
}

// runFleetDevice publishes device i's schedule from start until stopAt
// (phases at random within each period); it stops at the first failed
// publish.
func runFleetDevice(ctx context.Context, cfg *FleetConfig, i int, c fleetConn, start, stopAt time.Time, n *fleetCounts) {
	stateTopic, telemetryTopic := expand(cfg.StateTopic, i), expand(cfg.TelemetryTopic, i)
	nextState := start.Add(rand.N(cfg.StateEvery))
	nextTelemetry := start.Add(rand.N(cfg.TelemetryEvery))
	var stateSeq, telemetrySeq uint64
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		state := !nextTelemetry.Before(nextState)
		next := nextTelemetry
		if state {
			next = nextState
		}
		if !next.Before(stopAt) {
			return
		}
		t.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if state {
			// paho keeps the payload until it is written: one per message.
			payload := fleetPayload(make([]byte, 0, 200), i, stateSeq, true)
			stateSeq++
			n.stateSent.Add(1)
			if err = c.publish(ctx, stateTopic, 1, payload); err == nil {
				n.stateAcked.Add(1)
			} else {
				n.stateFailed.Add(1)
			}
			nextState = nextState.Add(cfg.StateEvery)
		} else {
			payload := fleetPayload(make([]byte, 0, 200), i, telemetrySeq, false)
			telemetrySeq++
			n.telemetrySent.Add(1)
			if err = c.publish(ctx, telemetryTopic, 0, payload); err != nil {
				n.telemetryFailed.Add(1)
			}
			nextTelemetry = nextTelemetry.Add(cfg.TelemetryEvery)
		}
		if err != nil {
			if ctx.Err() == nil {
				n.devicesStopped.Add(1)
				n.failed(fmt.Errorf("device %d: %w", i, err))
			}
			return
		}
	}
}

// harnessInUse is the memory this process's heap and goroutine stacks
// hold after a collection (KiB), for the devices' own cost: unlike its
// RSS, it does not keep what an earlier run left to the allocator.
func harnessInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse+m.StackInuse) >> 10
}

// RunFleet connects the subscribers and the devices, lets the devices
// publish for the measured window, waits for every message to arrive (or
// for deliveries to stall) and reports the broker's CPU per message, its
// memory per connected device and the state messages' latency.
func RunFleet(ctx context.Context, cfg FleetConfig) (*Result, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if err := raiseOpenFiles(cfg.Devices + cfg.Subscribers + fleetFDMargin); err != nil {
		return nil, err
	}
	rssBefore, err := settledRSS(ctx, cfg.BrokerPID)
	if err != nil {
		return nil, err
	}
	harnessBefore, goroutinesBefore := harnessInUse(), runtime.NumGoroutine()

	subs := make([]*fleetSub, cfg.Subscribers)
	defer func() {
		for _, s := range subs {
			if s != nil {
				s.stop()
			}
		}
	}()
	errs := make(chan error, len(subs))
	var readers sync.WaitGroup
	for i := range subs {
		s := &fleetSub{state: &subscriber{seen: make([][]uint64, cfg.Devices)}, telemetry: &subscriber{seen: make([][]uint64, cfg.Devices)}}
		sd := subDial{addr: cfg.Addr, clientID: expand(cfg.SubClientID, i), username: cfg.SubUsername, password: cfg.SubPassword,
			filter: cfg.SubFilter, qos: 1, timeout: fleetTimeout}
		stop, run, err := dialBenchSubscriber(ctx, cfg.Client, packet.Version5, sd, s.record)
		if err != nil {
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
		s.stop, s.run = stop, run
		subs[i] = s
		if run != nil {
			readers.Add(1)
			go func() { defer readers.Done(); errs <- ignoreClosed(run()) }()
		}
	}

	// Connect the devices, cfg.Parallel at a time.
	devices := make([]fleetConn, cfg.Devices)
	closeDevices := func() {
		forEachIndex(context.Background(), len(devices), cfg.Parallel, func(i int) error {
			if devices[i] != nil {
				devices[i].disconnect()
				devices[i] = nil
			}
			return nil
		})
	}
	defer closeDevices()
	connectStart := time.Now()
	if err := forEachIndex(ctx, cfg.Devices, cfg.Parallel, func(i int) error {
		c, err := dialFleetDevice(ctx, &cfg, i)
		if err != nil {
			return fmt.Errorf("device %d: %w", i, err)
		}
		devices[i] = c
		return nil
	}); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	connectSeconds := time.Since(connectStart).Seconds()
	rssConnected, err := settledRSS(ctx, cfg.BrokerPID)
	if err != nil {
		return nil, err
	}
	harnessConnected, goroutinesConnected := harnessInUse(), runtime.NumGoroutine()

	// Publish for the window; the devices' phases spread the load over
	// each period from the start.
	var counts fleetCounts
	cpu0, _ := procCPU(cfg.BrokerPID)
	start := time.Now()
	stopAt := start.Add(cfg.Duration)
	var pubs sync.WaitGroup
	for i, c := range devices {
		pubs.Add(1)
		go func() { defer pubs.Done(); runFleetDevice(ctx, &cfg, i, c, start, stopAt, &counts) }()
	}
	delivered := func() (state, telemetry int64) {
		for _, s := range subs {
			state += s.state.unique.Load()
			telemetry += s.telemetry.unique.Load()
		}
		return
	}
	// The end of the window: CPU, RSS and the counts so far.
	t := time.NewTimer(time.Until(stopAt))
	select {
	case <-ctx.Done():
		t.Stop()
		return nil, ctx.Err()
	case <-t.C:
	}
	cpu1, _ := procCPU(cfg.BrokerPID)
	windowEnd := time.Now()
	rssSteady, _ := procRSS(cfg.BrokerPID)
	harnessSteady, _ := procRSS(syscall.Getpid())
	windowState, windowTelemetry := delivered()
	windowIn := counts.stateSent.Load() + counts.telemetrySent.Load()
	pubs.Wait() // the last QoS 1 publishes wait for their PUBACK

	// Wait for deliveries until complete or stalled.
	stateSent, telemetrySent := counts.stateSent.Load(), counts.telemetrySent.Load()
	subsN := int64(len(subs))
	if _, err := drainWait(ctx, cfg.Drain, errs, func() (int64, bool) {
		st, te := delivered()
		return st + te, st >= stateSent*subsN && te >= telemetrySent*subsN
	}); err != nil {
		return nil, err
	}
	closeDevices()
	for _, s := range subs {
		s.stop()
	}
	readers.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}

	st, te := delivered()
	var dups int64
	var lat []time.Duration
	for _, s := range subs {
		s.state.mu.Lock()
		dups += s.state.dups.Load()
		lat = append(lat, s.state.latencies...)
		s.state.mu.Unlock()
	}
	window := windowEnd.Sub(start).Seconds()
	rate := float64(cfg.Devices)/cfg.StateEvery.Seconds() + float64(cfg.Devices)/cfg.TelemetryEvery.Seconds()
	r := &Result{
		Mode: "fleet", QoS: 1, Devices: cfg.Devices, Subscribers: cfg.Subscribers, Rate: int(rate + 0.5),
		Sent: stateSent, Acked: counts.stateAcked.Load(), Expected: stateSent * subsN, Delivered: st,
		Lost: stateSent*subsN - st, Duplicates: dups, Seconds: window,
		TelemetrySent: telemetrySent, TelemetryDelivered: te, TelemetryLost: telemetrySent*subsN - te,
		WindowReceived: windowIn, WindowDelivered: windowState + windowTelemetry,
		DeliveredPerSec: float64(windowState+windowTelemetry) / window,
		ConnectSeconds:  connectSeconds, DevicesStopped: counts.devicesStopped.Load(),
		HarnessKiBPerDevice:        float64(harnessConnected-harnessBefore) / float64(cfg.Devices),
		HarnessRSSKiB:              harnessSteady,
		HarnessGoroutinesPerDevice: float64(goroutinesConnected-goroutinesBefore) / float64(cfg.Devices),
	}
	if counts.firstErr != nil {
		r.FirstError = fmt.Sprintf("%s: %v", counts.firstWhen.Format(time.TimeOnly), counts.firstErr)
	}
	r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs = percentiles(lat)
	if cfg.BrokerPID > 0 {
		r.BrokerCPUSeconds = cpu1 - cpu0
		if r.WindowDelivered > 0 {
			r.CPUPerMsgUs = r.BrokerCPUSeconds / float64(r.WindowDelivered) * 1e6
		}
		if windowIn > 0 {
			r.CPUPerInMsgUs = r.BrokerCPUSeconds / float64(windowIn) * 1e6
		}
		r.BrokerRSSKiB = rssSteady
		r.BrokerRSSConnectedKiB = rssConnected
		r.KiBPerConn = float64(rssConnected-rssBefore) / float64(cfg.Devices)
		r.KiBPerConnSteady = float64(rssSteady-rssBefore) / float64(cfg.Devices)
	}
	return r, nil
}
