package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// noisyAttack starts an attack and returns once it is under way; stop
// ends it and fills the phase's attack figures.
type noisyAttack func(ctx context.Context, r *noisyRun, ph *NoisyPhase) (stop func(), err error)

var noisyAttacks = map[string]noisyAttack{
	"export-stall":     exportStall,
	"expensive-filter": expensiveFilter,
	"big-connect":      bigConnect,
	"http-idle":        httpIdle,
	"qos0-flood":       qos0Flood,
	"stuck-subscriber": stuckSubscriber,
	"retained-flood":   retainedFlood,
	"user-properties":  userProperties,
	"signin-burst":     signinBurst,
}

// Each attack comes from loopback addresses of its own (127.B.x.y), so no
// attack takes the victim's share of a per-address bound (the victim is
// 127.0.0.1) and none runs out of ephemeral ports.
func attackIP(block, i int) net.IP {
	return net.IPv4(127, byte(block), byte(i/250), byte(i%250+1))
}

// dialFrom opens a TCP connection from src; rcvbuf > 0 shrinks the
// socket's receive buffer before it connects, so a reader that stops
// reading stops the sender soon.
func dialFrom(ctx context.Context, src net.IP, addr string, rcvbuf int) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: src}}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	return d.DialContext(ctx, "tcp", addr)
}

// hostOf is the host:port of an http:// URL.
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Host
}

// httpClientFrom is an HTTP client whose connections come from src.
func httpClientFrom(src net.IP, conns int) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: src}}
	return &http.Client{Timeout: 60 * time.Second,
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
}

// heldConns are sockets the attacker keeps open; a goroutine per socket
// reads it to notice when the server closes it.
type heldConns struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed atomic.Int64
	wg     sync.WaitGroup
}

// hold keeps c open, discarding whatever the server sends.
func (h *heldConns) hold(c net.Conn) {
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		io.Copy(io.Discard, c)
		h.closed.Add(1)
	}()
}

func (h *heldConns) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns) - int(h.closed.Load())
}

func (h *heldConns) closeAll() {
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// exportStall opens cfg.Exports unpaged NDJSON exports of the attacker's
// whole history and never reads their bodies.
func exportStall(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	var conns []net.Conn
	codes := map[int]int{}
	req := fmt.Sprintf("GET /api/v1/subscriber/history?format=ndjson HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n",
		hostOf(r.httpURL), r.attacker.token)
	for range r.cfg.Exports {
		c, err := dialFrom(ctx, attackIP(2, 0), hostOf(r.httpURL), 4096)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		// The status line only: the body stays unread.
		code := -1
		if _, err := io.WriteString(c, req); err == nil {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var line [12]byte
			if _, err := io.ReadFull(c, line[:]); err == nil {
				fmt.Sscanf(string(line[9:12]), "%d", &code)
			}
			c.SetReadDeadline(time.Time{})
		}
		codes[code]++
	}
	ph.Attack["exports"], ph.Attack["exports_200"] = float64(len(conns)), float64(codes[200])
	ph.Figure = fmt.Sprintf("%d NDJSON exports of the attacker's %d records opened and left unread (%s)", len(conns), r.cfg.AttackerRecords, formatCodes(codes))
	return func() {
		for _, c := range conns {
			c.Close()
		}
	}, nil
}

// expensiveFilter runs cfg.FilterLoops loops of GET /history with a
// filter that matches none of the attacker's records, each with a REST
// token of its own (of the attacker's account).
func expensiveFilter(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	c := httpClientFrom(attackIP(3, 0), r.cfg.FilterLoops)
	u := r.httpURL + "/api/v1/subscriber/history?limit=100&topic=" + url.QueryEscape(r.attacker.account+"/+/nothing/#")
	var mu sync.Mutex
	codes := map[int]int{}
	var lats []time.Duration
	var wg sync.WaitGroup
	for i := range r.cfg.FilterLoops {
		token := r.attacker.loopTokens[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				t := time.Now()
				resp, err := c.Do(req)
				code := -1
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				codes[code]++
				lats = append(lats, time.Since(t))
				mu.Unlock()
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
		n := len(lats)
		ph.Attack["requests"], ph.Attack["requests_200"] = float64(n), float64(codes[200])
		ph.Attack["attacker_p50_ms"] = percentileMS(lats, 50)
		ph.Figure = fmt.Sprintf("%d loops: %d requests (%s), attacker p50 %.0fms", r.cfg.FilterLoops, n, formatCodes(codes), percentileMS(lats, 50))
	}, nil
}

func formatCodes(m map[int]int) string {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	var parts []string
	for _, k := range ks {
		name := fmt.Sprint(k)
		if k < 0 {
			name = "error"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, m[k]))
	}
	return strings.Join(parts, ", ")
}

// bigConnect opens cfg.BigConnects sockets to MQTT, each sending only the
// fixed header of a CONNECT: every other one declares cfg.BigConnectSize
// bytes, the others 65,000 (just under the broker's 64 KiB CONNECT
// bound, so a broker that sized its buffer from the header would show
// it). The figure is serve's RSS growth per socket still open, at the
// highest RSS seen while they were held.
func bigConnect(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	before, err := procRSS(r.srv.pid)
	if err != nil {
		return nil, err
	}
	goBefore, err := goMemory(ctx, r.srv.metricsURL)
	if err != nil {
		return nil, err
	}
	h := &heldConns{}
	err = forEachIndex(ctx, r.cfg.BigConnects, 32, func(i int) error {
		c, err := dialFrom(ctx, attackIP(4, i/500), r.srv.addr, 0)
		if err != nil {
			return err
		}
		size := r.cfg.BigConnectSize
		if i%2 == 1 {
			size = 65_000
		}
		c.Write(packet.AppendVarint([]byte{0x10}, size))
		h.hold(c)
		return nil
	})
	if err != nil {
		h.closeAll()
		return nil, err
	}
	// The Go runtime's own count (heap and stacks in use) once every
	// socket is open: the RSS is the target's measure, but it also moves
	// with what earlier phases left for the runtime to return.
	heldNow := h.open()
	goAfter, err := goMemory(ctx, r.srv.metricsURL)
	if err != nil {
		h.closeAll()
		return nil, err
	}
	goPer := float64(goAfter-goBefore) / 1024 / float64(max(heldNow, 1))
	// Sample serve's memory while the sockets are held: the figure is
	// taken when most of them were open (the broker closes them at its
	// connect timeout, and an RSS that stays high afterwards says nothing
	// about the sockets still open).
	var atRSS, mostHeld atomic.Int64
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	sample := func() {
		held := int64(h.open())
		if rss, err := procRSS(r.srv.pid); err == nil && (held > mostHeld.Load() || held == mostHeld.Load() && rss > atRSS.Load()) {
			atRSS.Store(rss)
			mostHeld.Store(held)
		}
	}
	sample()
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() {
		stopSampling()
		<-sampled
		open := h.open()
		h.closeAll()
		held, rss := mostHeld.Load(), atRSS.Load()
		div := held
		if div == 0 {
			div = int64(r.cfg.BigConnects)
		}
		per := float64(rss-before) / float64(div)
		ph.Attack["sockets"], ph.Attack["held_at_most"], ph.Attack["open_at_end"] = float64(r.cfg.BigConnects), float64(held), float64(open)
		ph.Attack["rss_growth_kib"], ph.Attack["rss_kib_per_socket"], ph.Attack["go_kib_per_socket"] = float64(rss-before), per, goPer
		ph.Figure = fmt.Sprintf("%d sockets (at most %d held at once, %d open at the end): RSS %+d KiB with %d held = %.2f KiB/socket; Go heap+stacks %+.0f KiB with %d held = %.2f KiB/socket",
			r.cfg.BigConnects, held, open, rss-before, held, per, float64(goAfter-goBefore)/1024, heldNow, goPer)
		// The RSS figure, unless the runtime returned more memory than
		// the sockets took meanwhile (then the Go runtime's).
		if per <= 0 {
			per = goPer
			ph.Notes = append(ph.Notes, "serve's RSS fell during big-connect: judged on the Go runtime's heap and stacks")
		}
		ph.Attack["kib_per_socket"] = per
	}, nil
}

// httpIdle holds cfg.HTTPIdle idle keep-alive connections (each after one
// request) and cfg.HTTPSlow connections sending a request body that never
// comes, to the portal/REST listener, from 100 connections per address.
// The phase's connect probe is the new device that must still connect.
func httpIdle(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	host := hostOf(r.httpURL)
	idle, slow := &heldConns{}, &heldConns{}
	var answered, refused atomic.Int64
	req := fmt.Sprintf("GET /api/v1/subscriber/usage HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	err := forEachIndex(ctx, r.cfg.HTTPIdle, 64, func(i int) error {
		c, err := dialFrom(ctx, attackIP(5, i/100), host, 0)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(c, req); err != nil {
			refused.Add(1)
			c.Close()
			return nil
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReaderSize(c, 1024)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			refused.Add(1)
			c.Close()
			return nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.SetReadDeadline(time.Time{})
		answered.Add(1)
		idle.hold(c)
		return nil
	})
	if err != nil {
		idle.closeAll()
		return nil, err
	}
	body := fmt.Sprintf("POST /api/v1/subscriber/publishers HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"client_id\":",
		host, r.attacker.token)
	err = forEachIndex(ctx, r.cfg.HTTPSlow, 64, func(i int) error {
		c, err := dialFrom(ctx, attackIP(6, i/100), host, 0)
		if err != nil {
			return err
		}
		io.WriteString(c, body)
		slow.hold(c)
		return nil
	})
	if err != nil {
		idle.closeAll()
		slow.closeAll()
		return nil, err
	}
	return func() {
		io2, so := idle.open(), slow.open()
		idle.closeAll()
		slow.closeAll()
		ph.Attack["idle"], ph.Attack["idle_answered"], ph.Attack["idle_open_at_end"] = float64(r.cfg.HTTPIdle), float64(answered.Load()), float64(io2)
		ph.Attack["slow"], ph.Attack["slow_open_at_end"] = float64(r.cfg.HTTPSlow), float64(so)
		ph.Figure = fmt.Sprintf("%d idle keep-alive (%d answered, %d refused, %d open at the end), %d slow bodies (%d open at the end)",
			r.cfg.HTTPIdle, answered.Load(), refused.Load(), io2, r.cfg.HTTPSlow, so)
	}, nil
}

// leanAttacker connects an attacker client with the harness's own client
// (MQTT 5) from src.
func leanAttacker(ctx context.Context, r *noisyRun, src net.IP, clientID, user, pass string) (*conn, uint16, error) {
	d := dialer{addr: r.srv.addr, version: packet.Version5, source: src, timeout: 10 * time.Second}
	return d.connect(ctx, &packet.Connect{ClientID: clientID, CleanStart: true, HasUsername: true, Username: user,
		HasPassword: true, Password: []byte(pass)}, 64<<10)
}

// endReason reads c until the server closes it and returns the reason
// of a DISCONNECT, if one came.
func endReason(c *conn) string {
	for {
		p, err := c.read()
		if err != nil {
			return "closed"
		}
		if d, ok := p.(*packet.Disconnect); ok {
			s := fmt.Sprintf("DISCONNECT 0x%02X", byte(d.ReasonCode))
			if d.Properties.ReasonString != "" {
				s += " " + d.Properties.ReasonString
			}
			return s
		}
	}
}

// qos0Flood publishes QoS 0 on one attacker connection as fast as it
// goes, reconnecting when the broker ends the connection.
func qos0Flood(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var sent, conns atomic.Int64
	var mu sync.Mutex
	reasons := map[string]int{}
	topic := r.attacker.account + "/" + attFlood + "/telemetry/flood"
	payload := []byte(`{"v":1,"flood":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	start := time.Now()
	done := make(chan struct{})
	c, _, err := leanAttacker(ctx, r, attackIP(7, 0), attFlood, r.attacker.pubUser, r.attacker.pubPass)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if c == nil {
				var err error
				if c, _, err = leanAttacker(ctx, r, attackIP(7, 0), attFlood, r.attacker.pubUser, r.attacker.pubPass); err != nil {
					mu.Lock()
					reasons["connect: "+err.Error()]++
					mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
			}
			conns.Add(1)
			ended := make(chan string, 1)
			go func(c *conn) { ended <- endReason(c) }(c)
			p := &packet.Publish{Topic: topic, Payload: payload}
			for ctx.Err() == nil {
				c.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
				var err error
				for range 64 {
					if err = c.send(p, false); err != nil {
						break
					}
				}
				if err == nil {
					err = c.flush()
				}
				if err != nil {
					break
				}
				sent.Add(64)
			}
			// A reset, not a FIN: the megabytes the broker has not read yet
			// (it reads the attacker at its plan's rate) are discarded, so
			// the flood ends with the phase instead of going on, at that
			// rate, through the phases after it.
			if tc, ok := c.nc.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.close()
			why := <-ended
			if ctx.Err() == nil {
				mu.Lock()
				reasons[why]++
				mu.Unlock()
			}
			c = nil
		}
	}()
	return func() {
		cancel()
		<-done
		secs := time.Since(start).Seconds()
		ph.Attack["sent"], ph.Attack["sent_per_sec"], ph.Attack["connections"] = float64(sent.Load()), float64(sent.Load())/secs, float64(conns.Load())
		ph.Figure = fmt.Sprintf("attacker QoS 0: %d sent (%.0f msg/s) on %d connections", sent.Load(), float64(sent.Load())/secs, conns.Load())
		if len(reasons) > 0 {
			ph.Figure += "; ended by the server: " + formatReasons(reasons)
		}
	}, nil
}

func formatReasons(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// qos1Flood publishes QoS 1 messages next(i) on c, at most window
// unacknowledged, until next returns nil or ctx ends; onAck sees every
// PUBACK. It returns the number sent and acknowledged and why the
// connection ended, if it did.
func qos1Flood(ctx context.Context, c *conn, window int, next func(i int) *packet.Publish, onAck func(*packet.Ack)) (sent, acked int64, ended string) {
	slots := make(chan struct{}, window)
	var ackN atomic.Int64
	readDone := make(chan string, 1)
	go func() {
		for {
			p, err := c.read()
			if err != nil {
				readDone <- "closed"
				return
			}
			switch p := p.(type) {
			case *packet.Ack:
				if p.Kind == packet.PUBACK {
					if onAck != nil {
						onAck(p)
					}
					ackN.Add(1)
					<-slots
				}
			case *packet.Disconnect:
				readDone <- fmt.Sprintf("DISCONNECT 0x%02X %s", byte(p.ReasonCode), p.Properties.ReasonString)
				return
			}
		}
	}()
	for i := 0; ; i++ {
		p := next(i)
		if p == nil {
			break
		}
		select {
		case <-ctx.Done():
		case slots <- struct{}{}:
		case ended = <-readDone:
		}
		if ctx.Err() != nil || ended != "" {
			break
		}
		p.QoS, p.PacketID = 1, uint16(i%65000+1)
		c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := c.send(p, true); err != nil {
			break
		}
		sent++
	}
	// Wait (bounded) for the outstanding acknowledgements.
	deadline := time.Now().Add(5 * time.Second)
	for ended == "" && ackN.Load() < sent && time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case ended = <-readDone:
		case <-time.After(10 * time.Millisecond):
		}
	}
	return sent, ackN.Load(), ended
}

// stuckSubscriber measures an attacker publisher's QoS 1 rate alone for a
// second, then subscribes an attacker subscriber to the whole account
// that never reads (a 4 KiB receive buffer), and keeps the publisher
// going for the phase. The publisher first runs for a second unmeasured:
// its publish rate's bucket starts full (a second of its rate), and a
// rate measured while the bucket empties would be twice the rate the
// publisher then keeps, with or without the stuck subscriber.
func stuckSubscriber(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	pub, rm, err := leanAttacker(ctx, r, attackIP(8, 0), attPub, r.attacker.pubUser, r.attacker.pubPass)
	if err != nil {
		return nil, err
	}
	topic := r.attacker.account + "/" + attPub + "/telemetry/x"
	payload := []byte(`{"v":1,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	window := int(min(rm, 64))
	var phase atomic.Int32 // 0: the bucket's burst, 1: alone, 2: with the stuck subscriber
	var counts [3]atomic.Int64
	var spans [3]time.Duration
	onAck := func(*packet.Ack) { counts[phase.Load()].Add(1) }
	next := func(int) *packet.Publish { return &packet.Publish{Topic: topic, Payload: payload} }
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan string, 1)
	go func() {
		_, _, ended := qos1Flood(pctx, pub, window, next, onAck)
		done <- ended
	}()
	// The burst, then the publisher alone, a second each (bounded: a
	// phase of a second has no time to spare).
	step := min(time.Second, r.cfg.Duration/4)
	select {
	case <-ctx.Done():
	case <-time.After(step):
	}
	phase.Store(1)
	aloneStart := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(step):
	}
	spans[1] = time.Since(aloneStart)
	d := dialer{addr: r.srv.addr, version: packet.Version5, source: attackIP(8, 1), timeout: 10 * time.Second}
	sub, _, err := d.connect(ctx, &packet.Connect{ClientID: "att-stuck", CleanStart: true, HasUsername: true,
		Username: r.attacker.subUser, HasPassword: true, Password: []byte(r.attacker.subPass)}, 4096)
	if err != nil {
		cancel()
		pub.close()
		return nil, fmt.Errorf("stuck subscriber: %w", err)
	}
	sub.nc.(*net.TCPConn).SetReadBuffer(4096)
	if err := sub.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: r.attacker.account + "/#", QoS: 1}}}, true); err != nil {
		cancel()
		pub.close()
		sub.close()
		return nil, err
	}
	phase.Store(2)
	withStart := time.Now()
	return func() {
		spans[2] = time.Since(withStart)
		cancel()
		ended := <-done
		pub.close()
		// Was the subscriber's connection ended by the server? Whatever
		// it sent is read now, to the end.
		sub.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		subEnd := "still open"
		for {
			p, err := sub.read()
			if err != nil {
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					subEnd = "closed by the server"
				}
				break
			}
			if dp, ok := p.(*packet.Disconnect); ok {
				subEnd = fmt.Sprintf("DISCONNECT 0x%02X %s", byte(dp.ReasonCode), dp.Properties.ReasonString)
				break
			}
		}
		sub.close()
		alone := float64(counts[1].Load()) / spans[1].Seconds()
		with := float64(counts[2].Load()) / spans[2].Seconds()
		ph.Attack["attacker_acks_per_sec_alone"], ph.Attack["attacker_acks_per_sec_stuck"] = alone, with
		ph.Figure = fmt.Sprintf("attacker QoS 1 publisher %.0f acks/s alone, %.0f/s with the stuck subscriber; subscriber: %s", alone, with, subEnd)
		if ended != "" {
			ph.Figure += "; publisher: " + ended
		}
	}, nil
}

// retainedFlood publishes cfg.RetainedTopics retained QoS 1 messages on
// distinct topics of one attacker device and counts the PUBACK reason
// codes: past the account's bound they must be refused.
func retainedFlood(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	c, rm, err := leanAttacker(ctx, r, attackIP(9, 0), attRetain, r.attacker.pubUser, r.attacker.pubPass)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	codes := map[byte]int{}
	firstRefusal := ""
	onAck := func(a *packet.Ack) {
		mu.Lock()
		codes[byte(a.ReasonCode)]++
		if a.ReasonCode >= 0x80 && firstRefusal == "" {
			firstRefusal = fmt.Sprintf("0x%02X %s", byte(a.ReasonCode), a.Properties.ReasonString)
		}
		mu.Unlock()
	}
	prefix := r.attacker.account + "/" + attRetain + "/state/r"
	next := func(i int) *packet.Publish {
		if i >= r.cfg.RetainedTopics {
			return nil
		}
		return &packet.Publish{Topic: prefix + fmt.Sprint(i), Retain: true, Payload: []byte("1")}
	}
	pctx, cancel := context.WithCancel(ctx)
	type outcome struct {
		sent, acked int64
		ended       string
	}
	done := make(chan outcome, 1)
	start := time.Now()
	var took atomic.Int64
	go func() {
		s, a, e := qos1Flood(pctx, c, int(min(rm, 64)), next, onAck)
		took.Store(int64(time.Since(start)))
		done <- outcome{s, a, e}
	}()
	return func() {
		cancel()
		o := <-done
		c.close()
		mu.Lock()
		defer mu.Unlock()
		refused := 0
		var parts []string
		for code, n := range codes {
			if code >= 0x80 {
				refused += n
			}
			parts = append(parts, fmt.Sprintf("0x%02X: %d", code, n))
		}
		sort.Strings(parts)
		ph.Attack["published"], ph.Attack["acked"], ph.Attack["accepted"], ph.Attack["refused"] = float64(o.sent), float64(o.acked), float64(codes[0]), float64(refused)
		ph.Attack["bound"], ph.Attack["quota_exceeded"] = float64(r.attacker.maxRetained), float64(codes[byte(packet.QuotaExceeded)])
		ph.Figure = fmt.Sprintf("%d retained publishes in %.1fs (bound %d): accepted %d, refused %d (%s); first refusal %s",
			o.sent, time.Duration(took.Load()).Seconds(), r.attacker.maxRetained, codes[0], refused, strings.Join(parts, ", "), orDash(firstRefusal))
		if o.ended != "" {
			ph.Figure += "; connection: " + o.ended
		}
		// The owner sees why: the refusal among the device's problems.
		// (listed within a second or two: polled for up to 5 s).
		visible := 0.0
		for deadline := time.Now().Add(5 * time.Second); visible == 0 && time.Now().Before(deadline); {
			var problems struct {
				Problems []struct {
					Reason string `json:"reason"`
				} `json:"problems"`
			}
			if err := getJSON(ctx, r.httpURL+"/api/v1/subscriber/publishers/"+attRetain+"/problems", r.attacker.token, &problems); err != nil {
				ph.Notes = append(ph.Notes, "problems: "+err.Error())
				break
			}
			for _, p := range problems.Problems {
				if p.Reason == "quota_exceeded" {
					visible = 1
				}
			}
			if visible == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		ph.Attack["refusal_in_problems"] = visible
		if visible == 1 {
			ph.Figure += "; the refusal is among the device's problems (quota_exceeded)"
		} else {
			ph.Figure += "; the refusal is NOT among the device's problems"
		}
	}, nil
}

// userPropsPublish is a v5 PUBLISH (QoS 0) carrying n one-byte User
// Properties, encoded by hand: the harness's encoder is not meant to
// write what the decoder refuses.
func userPropsPublish(topic string, n int) []byte {
	props := make([]byte, 0, 7*n)
	for range n {
		props = append(props, byte(packet.PropUser), 0, 1, 'k', 0, 1, 'v')
	}
	var body []byte
	body = append(body, byte(len(topic)>>8), byte(len(topic)))
	body = append(body, topic...)
	body = packet.AppendVarint(body, len(props))
	body = append(body, props...)
	body = append(body, `{"v":1}`...)
	out := packet.AppendVarint([]byte{0x30}, len(body))
	return append(out, body...)
}

// userProperties sends cfg.UserPropsRepeats PUBLISHes with cfg.UserProps
// User Properties each, a new connection for each, and times how long the
// broker takes to end the connection.
func userProperties(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	raw := userPropsPublish(r.attacker.account+"/"+attProps+"/telemetry/x", r.cfg.UserProps)
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	ends := map[string]int{}
	var lats []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range r.cfg.UserPropsRepeats {
			if ctx.Err() != nil {
				return
			}
			c, _, err := leanAttacker(ctx, r, attackIP(10, 0), attProps, r.attacker.pubUser, r.attacker.pubPass)
			if err != nil {
				mu.Lock()
				ends["connect: "+err.Error()]++
				mu.Unlock()
				continue
			}
			t := time.Now()
			c.nc.SetDeadline(time.Now().Add(10 * time.Second))
			ended := make(chan string, 1)
			go func() { ended <- endReason(c) }()
			c.nc.Write(raw)
			why := <-ended
			d := time.Since(t)
			c.close()
			mu.Lock()
			ends[why]++
			lats = append(lats, d)
			mu.Unlock()
		}
	}()
	return func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		ph.Attack["packets"], ph.Attack["packet_bytes"] = float64(len(lats)), float64(len(raw))
		ph.Attack["close_p50_ms"] = percentileMS(lats, 50)
		n95 := 0
		for why, n := range ends {
			if strings.HasPrefix(why, "DISCONNECT 0x95") {
				n95 += n
			}
		}
		ph.Attack["disconnected_0x95"] = float64(n95)
		ph.Figure = fmt.Sprintf("%d PUBLISHes of %d User Properties (%d KiB): %s; closed after p50 %.1fms",
			len(lats), r.cfg.UserProps, len(raw)>>10, formatReasons(ends), percentileMS(lats, 50))
	}, nil
}

// signinBurst sends cfg.Signins simultaneous portal sign-ins with a wrong
// password for the attacker's owner: 401 means the password was checked,
// 429 that the attempt was throttled before.
func signinBurst(ctx context.Context, r *noisyRun, ph *NoisyPhase) (func(), error) {
	c := httpClientFrom(attackIP(11, 0), r.cfg.Signins)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.httpURL+"/signin", nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	token := ""
	for _, ck := range resp.Cookies() {
		if ck.Name == "fleetmq_signin" {
			token = ck.Value
		}
	}
	if token == "" {
		return nil, fmt.Errorf("GET /signin: %s, no sign-in cookie", resp.Status)
	}
	form := url.Values{"email": {r.attacker.email}, "password": {"not-the-password-1234"}, "csrf": {token}}.Encode()
	var mu sync.Mutex
	codes := map[int]int{}
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for range r.cfg.Signins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.httpURL+"/signin", strings.NewReader(form))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(&http.Cookie{Name: "fleetmq_signin", Value: token})
			<-gate
			code := -1
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	start := time.Now()
	close(gate)
	finished := make(chan struct{})
	var took time.Duration
	go func() {
		wg.Wait()
		took = time.Since(start)
		close(finished)
	}()
	return func() {
		<-finished
		mu.Lock()
		defer mu.Unlock()
		ph.Attack["attempts"], ph.Attack["evaluated"], ph.Attack["throttled"] = float64(r.cfg.Signins), float64(codes[401]), float64(codes[429])
		ph.Attack["burst_seconds"] = took.Seconds()
		ph.Figure = fmt.Sprintf("%d simultaneous wrong-password sign-ins in %.1fs: %d evaluated (401), %d throttled (429); all: %s",
			r.cfg.Signins, took.Seconds(), codes[401], codes[429], formatCodes(codes))
	}, nil
}

// getJSON GETs url with a bearer token and decodes the 200 answer into v.
func getJSON(ctx context.Context, url, token string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// goMemory is the Go heap and stacks in use of the process behind a
// /metrics URL, in bytes.
func goMemory(ctx context.Context, metricsURL string) (int64, error) {
	m, err := scrapeMetrics(ctx, metricsURL)
	if err != nil {
		return 0, err
	}
	heap, ok := m["go_memstats_heap_inuse_bytes"]
	if !ok {
		return 0, fmt.Errorf("%s: no go_memstats_heap_inuse_bytes", metricsURL)
	}
	return int64(heap + m["go_memstats_stack_inuse_bytes"]), nil
}
