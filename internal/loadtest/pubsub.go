package loadtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// PubSubConfig describes one publish/subscribe load.
type PubSubConfig struct {
	Addr        string
	Version     byte
	Publishers  int
	Subscribers int
	QoS         byte // publish and subscribe QoS
	Size        int  // payload bytes (at least headerSize)
	Rate        int  // total messages per second; 0 = unthrottled
	Duration    time.Duration
	Window      int           // unacknowledged QoS 1/2 publishes per publisher (capped by Receive Maximum)
	Drain       time.Duration // how long to wait for stragglers without progress
	BrokerPID   int           // 0: no CPU/memory figures
	// SubAddr is the subscribers' broker when it is not Addr (another node
	// of a cluster); OtherPIDs are that cluster's other server processes,
	// whose CPU and memory count with BrokerPID's.
	SubAddr   string
	OtherPIDs []int
	// Client is the publishers' MQTT client: ClientLean (default, the
	// repository's own, which batches writes when unthrottled) or
	// ClientPaho3 (paho.mqtt.golang speaking MQTT 3.1.1, one packet per
	// write, as most device firmware does) or ClientPahoV5 (paho.golang
	// speaking MQTT 5, one packet per write too), for the subscribers too.
	Client string
	// Spread starts the publishers of a fixed rate at even offsets within
	// their interval (publisher i of n at i/n of it), so that messages
	// arrive one at a time, as from devices whose clocks are not in step.
	// By default they start together and send in bursts of one message
	// each, as devices that report on the same tick do.
	Spread bool

	// Topic and identity templates; "{i}" is replaced by the index.
	PubClientID string
	PubTopic    string
	PubUsername string
	PubPassword string
	SubClientID string
	SubFilter   string
	SubUsername string
	SubPassword string
}

// firstSend is when publisher idx sends its first message at a fixed
// rate of one every interval (PubSubConfig.Spread).
func (c *PubSubConfig) firstSend(idx int, interval time.Duration) time.Time {
	start := time.Now()
	if c.Spread && c.Publishers > 0 {
		start = start.Add(interval * time.Duration(idx) / time.Duration(c.Publishers))
	}
	return start
}

// Clients of the publishers and the subscribers (PubSubConfig.Client).
const (
	ClientLean   = "lean"
	ClientPaho3  = "paho3"
	ClientPahoV5 = "pahov5"
)

// checkClient checks a client name (PubSubConfig.Client).
func checkClient(c string) error {
	switch c {
	case ClientLean, ClientPaho3, ClientPahoV5:
		return nil
	}
	return fmt.Errorf("client %q: must be %s, %s or %s", c, ClientLean, ClientPaho3, ClientPahoV5)
}

func (c *PubSubConfig) fill() error {
	if c.Version == 0 {
		c.Version = packet.Version5
	}
	if c.Client == "" {
		c.Client = ClientLean
	}
	if err := checkClient(c.Client); err != nil {
		return err
	}
	if c.Publishers <= 0 || c.Subscribers <= 0 {
		return errors.New("need at least one publisher and one subscriber")
	}
	if c.QoS > 2 {
		return fmt.Errorf("qos %d: must be 0, 1 or 2", c.QoS)
	}
	if c.Size < headerSize {
		c.Size = headerSize
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Window <= 0 {
		c.Window = 64
	}
	if c.Drain <= 0 {
		c.Drain = 5 * time.Second
	}
	orDefault(&c.PubClientID, "bench-pub-{i}")
	orDefault(&c.PubTopic, "bench/{i}/telemetry")
	orDefault(&c.SubClientID, "bench-sub-{i}")
	orDefault(&c.SubFilter, "bench/#")
	return nil
}

func expand(tmpl string, i int) string { return strings.ReplaceAll(tmpl, "{i}", strconv.Itoa(i)) }

// headerSize is the part of each payload the harness reads back: publisher
// index, sequence number and send time.
const headerSize = 20

// subscriber counts what one subscriber receives.
type subscriber struct {
	stop func()       // closes the subscriber's connection
	run  func() error // the lean client's read loop (nil: paho reads on its own goroutines)
	mu   sync.Mutex   // held by record

	seen      [][]uint64 // per publisher, a bitset of sequence numbers
	unique    atomic.Int64
	dups      atomic.Int64
	latencies []time.Duration // sampled
	nth       int
}

// maxSamples bounds the latency samples each subscriber keeps.
const maxSamples = 200_000

// record notes a message of the pubsub load (its binary header).
func (s *subscriber) record(payload []byte, now time.Time) {
	if len(payload) < headerSize {
		return
	}
	pub := int(binary.BigEndian.Uint32(payload))
	seq := binary.BigEndian.Uint64(payload[4:])
	sent := int64(binary.BigEndian.Uint64(payload[12:]))
	s.mu.Lock()
	s.note(pub, seq, sent, now)
	s.mu.Unlock()
}

// note counts message seq of publisher pub, sent at sent (Unix ns), under
// s.mu.
func (s *subscriber) note(pub int, seq uint64, sent int64, now time.Time) {
	if pub < 0 || pub >= len(s.seen) {
		return
	}
	w, bit := seq/64, seq%64
	bs := s.seen[pub]
	for uint64(len(bs)) <= w {
		bs = append(bs, 0)
	}
	s.seen[pub] = bs
	if bs[w]&(1<<bit) != 0 {
		s.dups.Add(1)
		return
	}
	bs[w] |= 1 << bit
	s.unique.Add(1)
	s.nth++
	if len(s.latencies) < maxSamples {
		s.latencies = append(s.latencies, now.Sub(time.Unix(0, sent)))
	} else if s.nth%8 == 0 { // keep sampling late messages too
		s.latencies[s.nth/8%maxSamples] = now.Sub(time.Unix(0, sent))
	}
}

// leanSubscriberLoop reads a lean subscriber's connection until it
// closes, acknowledging every flow and handing each payload to on.
func leanSubscriberLoop(c *conn, on func(payload []byte)) error {
	for {
		p, err := c.read()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		more := c.r.Buffered() > 0
		switch p := p.(type) {
		case *packet.Publish:
			on(p.Payload)
			switch p.QoS {
			case 1:
				err = c.sendAck(packet.PUBACK, p.PacketID, !more)
			case 2:
				err = c.sendAck(packet.PUBREC, p.PacketID, !more)
			default:
				if !more {
					err = c.flush()
				}
			}
		case *packet.Ack:
			if p.Kind == packet.PUBREL {
				err = c.sendAck(packet.PUBCOMP, p.PacketID, !more)
			}
		case *packet.Disconnect:
			return fmt.Errorf("server disconnected the subscriber: %v", p.ReasonCode)
		}
		if err != nil {
			return err
		}
	}
}

// benchPublisher is one publisher of a load, whatever its client.
type benchPublisher interface {
	// run publishes until ctx ends, at rate msgs/s (0 = as fast as the
	// window allows).
	run(ctx context.Context, cfg *PubSubConfig, rate float64) error
	// acks completes the QoS 1/2 flows until the connection closes.
	acks() error
	counts() (sent, acked int64)
	close()
}

// publisher sends numbered messages with the lean client.
type publisher struct {
	idx    int
	c      *conn
	window chan struct{} // a slot per unacknowledged QoS 1/2 publish
	sent   atomic.Int64
	acked  atomic.Int64
}

func (p *publisher) counts() (sent, acked int64) { return p.sent.Load(), p.acked.Load() }

func (p *publisher) close() { p.c.close() }

// acks completes the publisher's QoS 1/2 flows.
func (p *publisher) acks() error {
	for {
		pk, err := p.c.read()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		a, ok := pk.(*packet.Ack)
		if !ok {
			if d, ok := pk.(*packet.Disconnect); ok {
				return fmt.Errorf("server disconnected publisher %d: %v", p.idx, d.ReasonCode)
			}
			continue
		}
		if a.ReasonCode >= 0x80 {
			return fmt.Errorf("publisher %d: %v refused: %v", p.idx, a.Kind, a.ReasonCode)
		}
		switch a.Kind {
		case packet.PUBACK, packet.PUBCOMP:
			p.acked.Add(1)
			<-p.window
		case packet.PUBREC:
			if err := p.c.sendAck(packet.PUBREL, a.PacketID, p.c.r.Buffered() == 0); err != nil {
				return err
			}
		}
	}
}

// run publishes until ctx ends, at rate msgs/s (0 = as fast as the window
// allows).
func (p *publisher) run(ctx context.Context, cfg *PubSubConfig, rate float64) error {
	topic := expand(cfg.PubTopic, p.idx)
	payload := make([]byte, cfg.Size)
	for i := headerSize; i < len(payload); i++ {
		payload[i] = 'x'
	}
	binary.BigEndian.PutUint32(payload, uint32(p.idx))
	pk := &packet.Publish{Topic: topic, QoS: cfg.QoS, Payload: payload}
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	start := cfg.firstSend(p.idx, interval)
	var pid uint16
	for seq := uint64(0); ; seq++ {
		if ctx.Err() != nil {
			return p.c.flush()
		}
		if interval > 0 {
			if d := time.Until(start.Add(time.Duration(seq) * interval)); d > 0 {
				select {
				case <-ctx.Done():
					return p.c.flush()
				case <-time.After(d):
				}
			}
		}
		if cfg.QoS > 0 {
			select {
			case p.window <- struct{}{}:
			default:
				if err := p.c.flush(); err != nil {
					return err
				}
				select {
				case p.window <- struct{}{}:
				case <-ctx.Done():
					return nil
				}
			}
			pid = pid%65535 + 1
			pk.PacketID = pid
		}
		binary.BigEndian.PutUint64(payload[4:], seq)
		binary.BigEndian.PutUint64(payload[12:], uint64(time.Now().UnixNano()))
		flush := interval > 0 || seq%32 == 31
		if err := p.c.send(pk, flush); err != nil {
			return err
		}
		p.sent.Add(1)
	}
}

// serversCPU is the CPU seconds of the server processes measured.
func (cfg *PubSubConfig) serversCPU() float64 {
	total, _ := procCPU(cfg.BrokerPID)
	for _, pid := range cfg.OtherPIDs {
		c, _ := procCPU(pid)
		total += c
	}
	return total
}

// RunPubSub runs one load and reports what was delivered.
func RunPubSub(ctx context.Context, cfg PubSubConfig) (*Result, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	d := dialer{addr: cfg.Addr, version: cfg.Version, timeout: 10 * time.Second}

	subs := make([]*subscriber, cfg.Subscribers)
	defer func() {
		for _, s := range subs {
			if s != nil {
				s.stop()
			}
		}
	}()
	for i := range subs {
		s := &subscriber{seen: make([][]uint64, cfg.Publishers)}
		stop, run, err := dialBenchSubscriber(ctx, cfg.Client, cfg.Version, cfg.subDial(i, d.timeout), func(payload []byte) { s.record(payload, time.Now()) })
		if err != nil {
			return nil, err
		}
		s.stop, s.run = stop, run
		subs[i] = s
	}
	pubs := make([]benchPublisher, cfg.Publishers)
	defer func() {
		for _, p := range pubs {
			if p != nil {
				p.close()
			}
		}
	}()
	for i := range pubs {
		if cfg.Client != ClientLean {
			p, err := dialPahoPublisher(ctx, &cfg, i, d.timeout)
			if err != nil {
				return nil, err
			}
			pubs[i] = p
			continue
		}
		c, rm, err := d.connect(ctx, connectPacket(expand(cfg.PubClientID, i), cfg.PubUsername, cfg.PubPassword), 16<<10)
		if err != nil {
			return nil, err
		}
		w := min(cfg.Window, int(rm))
		pubs[i] = &publisher{idx: i, c: c, window: make(chan struct{}, w)}
	}

	errs := make(chan error, len(pubs)*2+len(subs))
	var readers sync.WaitGroup
	for _, s := range subs {
		if s.run == nil {
			continue // paho reads on its own goroutines
		}
		readers.Add(1)
		go func() { defer readers.Done(); errs <- ignoreClosed(s.run()) }()
	}
	for _, p := range pubs {
		readers.Add(1)
		go func() { defer readers.Done(); errs <- ignoreClosed(p.acks()) }()
	}

	cpu0 := cfg.serversCPU()
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	var writers sync.WaitGroup
	perPub := float64(cfg.Rate) / float64(cfg.Publishers)
	for _, p := range pubs {
		writers.Add(1)
		go func() {
			defer writers.Done()
			if err := p.run(runCtx, &cfg, perPub); err != nil {
				errs <- err
			}
		}()
	}
	writers.Wait()
	cancel()
	pubEnd := time.Now()
	var ackedWhilePublishing int64
	for _, p := range pubs {
		_, a := p.counts()
		ackedWhilePublishing += a
	}

	var sent int64
	for _, p := range pubs {
		s, _ := p.counts()
		sent += s
	}
	expected := sent * int64(len(subs))
	delivered := func() int64 {
		var n int64
		for _, s := range subs {
			n += s.unique.Load()
		}
		return n
	}
	// Wait for deliveries (and publisher acks) until complete or stalled.
	lastDelivery, err := drainWait(ctx, cfg.Drain, errs, func() (int64, bool) {
		n := delivered()
		var acked int64
		for _, p := range pubs {
			_, a := p.counts()
			acked += a
		}
		return n, n >= expected && (cfg.QoS == 0 || acked >= sent)
	})
	if err != nil {
		return nil, err
	}
	end := time.Now()
	if lastDelivery.After(pubEnd) {
		end = lastDelivery
	}
	cpu1 := cfg.serversCPU()
	rss, _ := procRSS(cfg.BrokerPID)
	for _, pid := range cfg.OtherPIDs {
		r, _ := procRSS(pid)
		rss += r
	}
	for _, p := range pubs {
		p.close()
	}
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

	n := delivered()
	var dups int64
	var lat []time.Duration
	for _, s := range subs {
		s.mu.Lock() // after the last record
		dups += s.dups.Load()
		lat = append(lat, s.latencies...)
		s.mu.Unlock()
	}
	r := &Result{
		Mode: "pubsub", QoS: int(cfg.QoS), Publishers: cfg.Publishers, Subscribers: cfg.Subscribers,
		Size: cfg.Size, Rate: cfg.Rate, Sent: sent, Expected: expected, Delivered: n,
		Lost: expected - n, Duplicates: dups, Seconds: end.Sub(start).Seconds(),
	}
	r.DeliveredPerSec = float64(n) / r.Seconds
	if cfg.QoS > 0 {
		r.Acked = ackedWhilePublishing
		r.AckedPerSec = float64(ackedWhilePublishing) / pubEnd.Sub(start).Seconds()
	}
	r.P50Ms, r.P90Ms, r.P99Ms, r.MaxMs = percentiles(lat)
	if cfg.BrokerPID > 0 {
		r.BrokerCPUSeconds = cpu1 - cpu0
		if n > 0 {
			r.CPUPerMsgUs = r.BrokerCPUSeconds / float64(n) * 1e6
		}
		r.BrokerRSSKiB = rss
	}
	return r, nil
}

func connectPacket(id, user, pass string) *packet.Connect {
	c := &packet.Connect{ClientID: id, CleanStart: true, KeepAlive: 300}
	if user != "" {
		c.HasUsername, c.Username = true, user
	}
	if pass != "" {
		c.HasPassword, c.Password = true, []byte(pass)
	}
	// Ask for a large outbound window so the broker's own window limits.
	c.Properties.SetUint16(packet.PropReceiveMaximum, 65535)
	return c
}

func percentiles(d []time.Duration) (p50, p90, p99, worst float64) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		return float64(d[max(i, 0)]) / 1e6
	}
	return at(0.50), at(0.90), at(0.99), float64(d[len(d)-1]) / 1e6
}

// ignoreClosed drops the error of a connection the harness closed itself
// at the end of a run (a reader may be writing an ack at that moment).
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// orDefault sets *s to v when it is empty (a config's default).
func orDefault(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

// drainWait polls progress every 5 ms until it reports done, or its count
// has not moved for drain, or ctx ends; an error from errs ends it with
// that error. It returns when the count last moved (zero if it never did).
func drainWait(ctx context.Context, drain time.Duration, errs <-chan error, progress func() (n int64, done bool)) (time.Time, error) {
	last, lastChange := int64(-1), time.Now()
	var moved time.Time
	for {
		n, done := progress()
		if n != last {
			last, lastChange = n, time.Now()
			moved = lastChange
		}
		if done || time.Since(lastChange) > drain || ctx.Err() != nil {
			return moved, nil
		}
		select {
		case err := <-errs:
			if err != nil {
				return moved, err
			}
		case <-time.After(5 * time.Millisecond):
		}
	}
}
