package broker_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// ratePolicy puts each client in the namespace (group) named by its
// username, with the limits set for its client id and its group's shared
// limiter.
type ratePolicy struct {
	broker.OpenPolicy
	limits map[string]broker.Limits       // by client id
	groups map[string]*broker.RateLimiter // by username
}

func (p *ratePolicy) Authenticate(ctx context.Context, req *broker.ConnectRequest) (*broker.Identity, error) {
	id, err := p.OpenPolicy.Authenticate(ctx, req)
	if err != nil {
		return nil, err
	}
	id.Namespace = req.Connect.Username
	id.Limits = p.limits[id.ClientID]
	id.GroupLimiter = p.groups[id.Namespace]
	return id, nil
}

// flood publishes QoS 0 messages on topic from a client of group as fast
// as the connection takes them, until the test ends.
func flood(t *testing.T, addr, group, id, topic string, payload []byte) *mqtttest.V5 {
	t.Helper()
	cp := mqtttest.Clean(id)
	cp.Username, cp.UsernameFlag = group, true
	c := mqtttest.DialV5(t, addr, cp)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			_, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 0, Payload: payload})
			cancel()
			if err != nil {
				select {
				case <-stop:
				default:
					t.Errorf("flood %s: %v", id, err)
				}
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		c.Conn.Close() // a write blocked by the broker's back-pressure ends
		<-done
	})
	return c
}

// counter subscribes a client of its own group to filter and counts the
// messages it receives, by topic.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func count(t *testing.T, addr, filter string) *counter {
	t.Helper()
	k := &counter{n: map[string]int{}}
	cp := mqtttest.Clean("counter-" + filter)
	cp.Username, cp.UsernameFlag = "observer", true
	c := mqtttest.DialV5(t, addr, cp, func(cfg *paho.ClientConfig) {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			k.mu.Lock()
			k.n[pr.Packet.Topic]++
			k.mu.Unlock()
			return true, nil
		}}
	})
	c.MustSubscribe(t, paho.SubscribeOptions{Topic: filter, QoS: 0})
	return k
}

func (k *counter) total() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, v := range k.n {
		n += v
	}
	return n
}

func (k *counter) of(topic string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n[topic]
}

// rateOver waits for the first message, then counts what arrives in d: the
// rate subscribers see.
func (k *counter) rateOver(t *testing.T, d time.Duration) float64 {
	t.Helper()
	eventually(t, "the first message", func() bool { return k.total() > 0 })
	start, n0 := time.Now(), k.total()
	time.Sleep(d) // the measurement window itself, not a synchronisation
	return float64(k.total()-n0) / time.Since(start).Seconds()
}

// TestPublishRateThrottlesOnlyTheOffender: a client publishing QoS 0 as
// fast as it can against a limit of R messages/s gets about R/s through,
// stays connected, and a client of another group on the same server keeps
// getting its QoS 1 acknowledgements at once.
func TestPublishRateThrottlesOnlyTheOffender(t *testing.T) {
	const rate = 200
	b := startBroker(t, broker.Options{Policy: &ratePolicy{limits: map[string]broker.Limits{"flooder": {PublishRate: rate}}}})
	k := count(t, b.Addr, "flood/#")
	flood(t, b.Addr, "tenant-a", "flooder", "flood/x", []byte("0123456789"))

	got := k.rateOver(t, 2*time.Second)
	if got < 0.5*rate || got > 1.5*rate+rate/2 { // +the burst, spread over the window
		t.Fatalf("the flooding client got %.0f msg/s through, want about %d", got, rate)
	}
	st := b.Stats()
	if st.PublishThrottled == 0 || st.PublishThrottledTime <= 0 {
		t.Fatalf("throttling not counted: %d packets, %v", st.PublishThrottled, st.PublishThrottledTime)
	}

	// Another group's QoS 1 publisher is unaffected.
	cp := mqtttest.Clean("other")
	cp.Username, cp.UsernameFlag = "tenant-b", true
	other := mqtttest.DialV5(t, b.Addr, cp)
	var lat []time.Duration
	for range 100 {
		start := time.Now()
		other.MustPublish(t, &paho.Publish{Topic: "other/y", QoS: 1, Payload: []byte("hello")})
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	if p99 := lat[98]; p99 > 50*time.Millisecond {
		t.Fatalf("another group's QoS 1 ack latency p50 %v, p99 %v while a client is throttled; want p99 under 50ms", lat[50], p99)
	}

	if st := b.Stats(); st.Closes != ([len(st.Closes)]int64{}) {
		t.Fatalf("a connection ended while throttled: %v", st.Closes)
	}
}

// TestGroupRateIsShared: two clients of one group flooding together get
// about the group's rate, not twice it, and both get messages through.
func TestGroupRateIsShared(t *testing.T) {
	const rate = 200
	b := startBroker(t, broker.Options{Policy: &ratePolicy{groups: map[string]*broker.RateLimiter{"acct": broker.NewRateLimiter(rate, 0)}}})
	k := count(t, b.Addr, "flood/#")
	flood(t, b.Addr, "acct", "dev1", "flood/1", []byte("0123456789"))
	flood(t, b.Addr, "acct", "dev2", "flood/2", []byte("0123456789"))

	got := k.rateOver(t, 2*time.Second)
	if got < 0.5*rate || got > 1.5*rate+rate/2 {
		t.Fatalf("two clients of a group limited to %d msg/s got %.0f msg/s through together", rate, got)
	}
	if k.of("flood/1") == 0 || k.of("flood/2") == 0 {
		t.Fatalf("one client starved the other: %d and %d messages", k.of("flood/1"), k.of("flood/2"))
	}
}

// TestPublishBytesRateAndKeepAlive: with a bytes rate, large messages are
// paced by their size; the waits are longer than the client's keep alive
// allows silence, yet the client stays connected. A SetRates on the group
// applies to a connected client.
func TestPublishBytesRateAndKeepAlive(t *testing.T) {
	const rate = 32 << 10
	g := broker.NewRateLimiter(0, 0)
	b := startBroker(t, broker.Options{Policy: &ratePolicy{
		limits: map[string]broker.Limits{"big": {PublishBytesRate: rate}},
		groups: map[string]*broker.RateLimiter{"acct": g},
	}})
	k := count(t, b.Addr, "big/#")
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "big", CleanStart: true, KeepAlive: 1, Username: "acct", HasUsername: true})
	payload := []byte(strings.Repeat("x", 64<<10)) // two seconds' worth
	start := time.Now()
	for range 2 {
		rc.Must(t, &packet.Publish{Topic: "big/a", QoS: 0, Payload: payload})
	}
	eventually(t, "the first large message", func() bool { return k.total() >= 1 })
	first := time.Since(start)
	eventually(t, "the second large message", func() bool { return k.total() >= 2 })
	second := time.Since(start)
	// The first waits for the bytes it takes beyond the full bucket (~1s),
	// the second for all of its own (~2s): silences over 1.5x the keep
	// alive.
	if gap := second - first; gap < 1500*time.Millisecond {
		t.Fatalf("64 KiB messages at %d bytes/s arrived %v apart, want about 2s", rate, gap)
	}
	rc.Must(t, &packet.Pingreq{})
	rc.Expect(t, packet.PINGRESP)
	if n := b.Stats().Closes[broker.CloseKeepAliveTimeout]; n != 0 {
		t.Fatalf("%d keep-alive timeouts while throttled", n)
	}

	// The group's rate changes under the connected client.
	g.SetRates(2, 0)
	n0 := k.total()
	small := &packet.Publish{Topic: "big/s", QoS: 0, Payload: []byte("s")}
	for range 6 {
		rc.Must(t, small)
	}
	rc.Must(t, &packet.Pingreq{})
	start = time.Now()
	rc.Expect(t, packet.PINGRESP) // read after the six PUBLISHes
	if took := time.Since(start); took < time.Second {
		t.Fatalf("six messages at 2/s (burst 2) went through in %v, want about 2s", took)
	}
	eventually(t, "the six small messages", func() bool { return k.total()-n0 == 6 })
}

// TestThrottledWaitEndsWithServer: a connection waiting for its publish
// rate does not hold up Close (beyond the drain of its close, which its
// client, reading only afterwards, does not end), and its v5 client is
// told the server shuts down.
func TestThrottledWaitEndsWithServer(t *testing.T) {
	log, sink := testkit.NewLog()
	srv, err := broker.New(broker.Options{Logger: log, CloseDrainTimeout: 200 * time.Millisecond,
		Policy: &ratePolicy{limits: map[string]broker.Limits{"slow": {PublishBytesRate: 1024}}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := mqtttest.ConnectRaw(t, ln.Addr().String(), &packet.Connect{ClientID: "slow", CleanStart: true, KeepAlive: 30})
	rc.Must(t, &packet.Publish{Topic: "slow/a", QoS: 0, Payload: make([]byte, 512<<10)}) // ~8 minutes' worth
	eventually(t, "the PUBLISH to wait", func() bool { return len(sink.Lines("publish throttled", "client_id", "slow")) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Close(ctx); err != nil {
		t.Fatalf("close with a throttled connection: %v after %v", err, time.Since(start))
	}
	if st := srv.Stats(); st.PublishThrottled != 1 || st.PublishIn[0] != 0 || st.Closes[broker.CloseShutdown] != 1 {
		t.Fatalf("after close: %d throttled, %d handled, closes %v; want 1 throttled PUBLISH, not handled, and the connection ended by the shutdown",
			st.PublishThrottled, st.PublishIn[0], st.Closes)
	}
	if ps := rc.Closed(t); len(ps) != 1 || ps[0].Type() != packet.DISCONNECT {
		t.Fatalf("the throttled v5 client got %v, want a DISCONNECT", ps)
	}
}

// TestSetPublishRates: a connected client is held to per-client rates
// set after its CONNECT (it had none), and released when they go back to
// unlimited; a client the function leaves out keeps its own.
func TestSetPublishRates(t *testing.T) {
	b := startBroker(t, broker.Options{Policy: &ratePolicy{}})
	rc, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "dev", CleanStart: true, KeepAlive: 30, Username: "acct", HasUsername: true})
	other, _ := mqtttest.ConnectRaw(t, b.Addr, &packet.Connect{ClientID: "dev", CleanStart: true, KeepAlive: 30, Username: "other", HasUsername: true})
	set := func(msgs float64) int {
		return b.SetPublishRates(func(id *broker.Identity) (float64, float64, bool) { return msgs, 0, id.Namespace == "acct" })
	}
	// burst publishes six PUBLISHes and a PINGREQ, and returns how long
	// the PINGRESP (read after them) took.
	burst := func(c *mqtttest.Raw) time.Duration {
		start := time.Now()
		for range 6 {
			c.Must(t, &packet.Publish{Topic: "t", QoS: 0, Payload: []byte("x")})
		}
		c.Must(t, &packet.Pingreq{})
		c.Expect(t, packet.PINGRESP)
		return time.Since(start)
	}
	if n := set(2); n != 1 {
		t.Fatalf("SetPublishRates changed %d connections, want 1", n)
	}
	if n := set(2); n != 0 {
		t.Fatalf("SetPublishRates to the same rates changed %d connections, want 0", n)
	}
	if d := burst(rc); d < time.Second {
		t.Fatalf("six messages at 2/s (burst 2) went through in %v, want about 2s", d)
	}
	if d := burst(other); d > time.Second {
		t.Fatalf("a client left out took %v for six messages", d)
	}
	set(0)
	if d := burst(rc); d > time.Second {
		t.Fatalf("six messages after the rate went back to unlimited took %v", d)
	}
}
