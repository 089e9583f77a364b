package loadtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/history"
)

// NoisyConfig is a noisy-neighbour run: fleetmq serve with a victim and an
// attacker account, the victim's latencies measured in a baseline phase,
// during each attack, and in a recovery phase after them.
type NoisyConfig struct {
	Bin       string   // the fleetmq binary (default: this program)
	Database  string   // PostgreSQL URL; "": SQLite in a temporary data directory
	Phases    []string // attacks to run (default: all, in order)
	Duration  time.Duration
	KeepData  bool
	ServerLog string
	ServeArgs []string // more flags for serve

	// The victim's load.
	AckRate, RESTRate, ReadyRate int // per second

	// The attacker's bounds.
	AttackerClients int // the attacker plan's max_publisher_clients (its retained bound is x100)
	// AttackerRates names the catalog plan whose publish rates the
	// attacker's plan gets ("scale", the most generous, by default), or
	// "none" for no publish rates (what per-account fair ingest alone
	// does against an unthrottled flood).
	AttackerRates    string
	AttackerRecords  int // stored history of the attacker account
	Exports          int // export-stall: stalled NDJSON exports
	FilterLoops      int // expensive-filter: concurrent GET /history loops
	BigConnects      int // big-connect: sockets
	BigConnectSize   int // big-connect: declared remaining length of every other CONNECT
	HTTPIdle         int // http-idle: idle keep-alive connections
	HTTPSlow         int // http-idle: slow-body connections
	RetainedTopics   int // retained-flood: topics
	UserProps        int // user-properties: User Properties per PUBLISH
	UserPropsRepeats int
	Signins          int // signin-burst: simultaneous attempts
	RESTRateLimit    int // serve's -rest-rate-limit

	progress io.Writer
}

// noisyPhases are the attacks, in the order they run.
var noisyPhases = []string{"export-stall", "expensive-filter", "big-connect", "http-idle", "qos0-flood",
	"stuck-subscriber", "retained-flood", "user-properties", "signin-burst"}

func (c *NoisyConfig) fill() error {
	if c.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("-bin: %w", err)
		}
		c.Bin = exe
	}
	if len(c.Phases) == 0 {
		c.Phases = noisyPhases
	}
	for _, p := range c.Phases {
		if _, ok := noisyAttacks[p]; !ok {
			return fmt.Errorf("unknown phase %q (phases: %s)", p, strings.Join(noisyPhases, ","))
		}
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	def(&c.AckRate, 50)
	def(&c.RESTRate, 5)
	def(&c.ReadyRate, 10)
	def(&c.AttackerClients, 20)
	if c.AttackerRates == "" {
		c.AttackerRates = "scale"
	}
	def(&c.AttackerRecords, 100_000)
	def(&c.Exports, 10)
	def(&c.FilterLoops, 8)
	def(&c.BigConnects, 2000)
	def(&c.BigConnectSize, 1<<20)
	def(&c.HTTPIdle, 2000)
	def(&c.HTTPSlow, c.HTTPIdle/10)
	def(&c.RetainedTopics, 20_000)
	def(&c.UserProps, 120_000)
	def(&c.UserPropsRepeats, 20)
	def(&c.Signins, 150)
	def(&c.RESTRateLimit, 1_000_000)
	return nil
}

// NoisyPhase is what the victim saw during one phase.
type NoisyPhase struct {
	Phase   string     `json:"phase"`
	Seconds float64    `json:"seconds"`
	Ack     ProbeStats `json:"victim_qos1_ack"`
	REST    ProbeStats `json:"victim_rest_history"`
	Ready   ProbeStats `json:"readyz"`
	// ConnectMs is how long a victim device that never connected before
	// took to get its CONNACK during the phase (-1: it did not connect).
	ConnectMs    float64 `json:"victim_new_device_connect_ms"`
	ConnectError string  `json:"victim_new_device_error,omitempty"`
	RSSKiB       int64   `json:"serve_rss_kib"`
	FDs          int     `json:"serve_fds"`
	// Attack holds the attack's own figures; Figure is their human form.
	Attack  map[string]float64 `json:"attack,omitempty"`
	Figure  string             `json:"attack_figure,omitempty"`
	Notes   []string           `json:"notes,omitempty"`
	Verdict []string           `json:"failed_targets,omitempty"` // empty: every target held
	// Judged is false for the baseline.
	Judged bool `json:"judged"`
}

// NoisyResult is a whole run.
type NoisyResult struct {
	Database string        `json:"database"`
	Started  time.Time     `json:"started"`
	Phases   []*NoisyPhase `json:"phases"`
	// HistoryFillSeconds is how long the attacker's records took to store.
	AttackerRecords    int              `json:"attacker_records"`
	HistoryFillSeconds float64          `json:"history_fill_seconds"`
	ServerErrors       int64            `json:"server_error_lines"`
	ServerErrorLines   []string         `json:"server_error_examples,omitempty"`
	ServerRefusals     map[string]int64 `json:"server_refusals"`
}

// noisyRun is the state the phases share.
type noisyRun struct {
	cfg              *NoisyConfig
	srv              *soakTarget
	victim, attacker *noisyTenant
	httpURL          string // http://127.0.0.1:port of the portal and REST API
	readyURL         string
	newDevice        int // the next victim-new-N
}

func (r *noisyRun) logf(format string, args ...any) {
	if r.cfg.progress != nil {
		fmt.Fprintf(r.cfg.progress, format+"\n", args...)
	}
}

// RunNoisy runs the baseline, each attack of cfg.Phases and the recovery
// phase, and judges each against the targets.
func RunNoisy(ctx context.Context, cfg NoisyConfig) (*NoisyResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	raiseFileLimit()
	res := &NoisyResult{Database: "sqlite", Started: time.Now().UTC(), AttackerRecords: cfg.AttackerRecords}
	if cfg.Database != "" {
		res.Database = "postgresql"
	}
	srv, victim, attacker, err := startNoisyServe(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	res.HistoryFillSeconds = attacker.historyFillSeconds
	r := &noisyRun{cfg: &cfg, srv: srv, victim: victim, attacker: attacker, httpURL: srv.httpURL,
		readyURL: strings.TrimSuffix(srv.metricsURL, "/metrics") + "/readyz"}
	r.logf("serve pid %d: mqtt %s, http %s, readyz %s; attacker history %d records stored in %.1fs",
		srv.pid, srv.addr, r.httpURL, r.readyURL, cfg.AttackerRecords, attacker.historyFillSeconds)

	// The victim's load runs for the whole run; each phase reads its window.
	vctx, stopVictim := context.WithCancel(ctx)
	pub, err := newVictimPublisher(vctx, r)
	if err != nil {
		stopVictim()
		return nil, fmt.Errorf("victim publisher: %w", err)
	}
	ack, rest, ready := newProbe(), newProbe(), newProbe()
	restClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	readyClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		ack.run(vctx, time.Second/time.Duration(cfg.AckRate), 20, pub.publish)
	}()
	go func() {
		defer wg.Done()
		url := r.httpURL + "/api/v1/subscriber/history?limit=100&client_id=" + victim.historyClient
		// As many at once as the API runs for one account: a 429 is then
		// never the victim's own doing.
		rest.run(vctx, time.Second/time.Duration(cfg.RESTRate), history.RequestsPerAccount, func(ctx context.Context) error {
			return httpGet(ctx, restClient, url, victim.token)
		})
	}()
	go func() {
		defer wg.Done()
		ready.run(vctx, time.Second/time.Duration(cfg.ReadyRate), 10, func(ctx context.Context) error {
			return httpGet(ctx, readyClient, r.readyURL, "")
		})
	}()
	defer func() {
		stopVictim()
		wg.Wait()
		pub.close()
	}()

	// A warm-up, not measured: the first publishes and pages pay for
	// caches and connections.
	select {
	case <-ctx.Done():
	case <-time.After(min(2*time.Second, cfg.Duration)):
	}
	phases := append(append([]string{"baseline"}, cfg.Phases...), "recovery")
	var base *NoisyPhase
	for _, name := range phases {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if !srv.alive() {
			return res, fmt.Errorf("serve exited before phase %s: %s", name, srv.log.lastLines())
		}
		ph := &NoisyPhase{Phase: name, Attack: map[string]float64{}, Judged: name != "baseline"}
		r.logf("phase %s ...", name)
		stop := func() {}
		if a := noisyAttacks[name]; a != nil {
			stop, err = a(ctx, r, ph)
			if err != nil {
				return res, fmt.Errorf("phase %s: %w", name, err)
			}
		}
		from := time.Now()
		connected := make(chan struct{})
		go func() {
			defer close(connected)
			ph.ConnectMs, ph.ConnectError = r.connectNewDevice(ctx)
		}()
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Duration):
		}
		to := time.Now()
		<-connected
		ph.RSSKiB, _ = procRSS(srv.pid)
		ph.FDs = countFDs(srv.pid)
		stop()
		ph.Seconds = to.Sub(from).Seconds()
		// Requests of the phase still waiting are waited for (a healthy
		// server answers them in milliseconds; a stuck one counts).
		drain := max(10*time.Second, cfg.Duration)
		ph.Ack = ack.window(from, to, drain)
		ph.REST = rest.window(from, to, drain)
		ph.Ready = ready.window(from, to, drain)
		if base == nil {
			base = ph
		}
		ph.judge(base)
		res.Phases = append(res.Phases, ph)
		r.logf("  %s", ph.line())
	}
	srv.log.mu.Lock()
	res.ServerErrors = srv.log.errorsN
	res.ServerErrorLines = append([]string(nil), srv.log.errors[:min(3, len(srv.log.errors))]...)
	res.ServerRefusals = map[string]int64{}
	for k, v := range srv.log.refusals {
		res.ServerRefusals[k] = v
	}
	srv.log.mu.Unlock()
	return res, nil
}

// The targets a phase is judged against.
const (
	targetAckRatio   = 2.0
	targetAckP99ms   = 50
	targetRESTRatio  = 2.0
	targetReadyMs    = 100
	targetPreAuthKiB = 8
	// targetSigninEvaluated: of a burst of wrong passwords, at most this
	// many are checked before the throttle answers 429.
	targetSigninEvaluated = 10
)

// judge lists the targets the phase missed (a baseline is judged only on
// the absolute ones, for the record).
func (ph *NoisyPhase) judge(base *NoisyPhase) {
	var v []string
	if ph.Ack.OK == 0 {
		v = append(v, "no victim acks")
	}
	if ph.Ack.P99ms >= targetAckP99ms {
		v = append(v, fmt.Sprintf("ack p99 %.1fms >= %dms", ph.Ack.P99ms, targetAckP99ms))
	}
	if ph.Judged && base.Ack.P99ms > 0 && ph.Ack.P99ms > targetAckRatio*base.Ack.P99ms {
		v = append(v, fmt.Sprintf("ack p99 %.1fx baseline", ph.Ack.P99ms/base.Ack.P99ms))
	}
	if ph.Ack.Errors+ph.Ack.Stuck > 0 {
		v = append(v, fmt.Sprintf("%d victim publishes failed or unanswered", ph.Ack.Errors+ph.Ack.Stuck))
	}
	if ph.REST.Errors+ph.REST.Stuck > 0 {
		v = append(v, fmt.Sprintf("%d REST errors", ph.REST.Errors+ph.REST.Stuck))
	}
	if ph.Judged && base.REST.P99ms > 0 && ph.REST.P99ms > targetRESTRatio*base.REST.P99ms {
		v = append(v, fmt.Sprintf("REST p99 %.1fx baseline", ph.REST.P99ms/base.REST.P99ms))
	}
	if ph.Ready.Errors+ph.Ready.Stuck > 0 || ph.Ready.MaxMs >= targetReadyMs {
		v = append(v, fmt.Sprintf("readyz max %.0fms, %d failed", ph.Ready.MaxMs, ph.Ready.Errors+ph.Ready.Stuck))
	}
	if ph.ConnectMs < 0 {
		v = append(v, "new device could not connect")
	}
	if k, ok := ph.Attack["kib_per_socket"]; ok && k > targetPreAuthKiB {
		v = append(v, fmt.Sprintf("pre-auth %.1f KiB/socket > %d", k, targetPreAuthKiB))
	}
	if alone, ok := ph.Attack["attacker_acks_per_sec_alone"]; ok && ph.Attack["attacker_acks_per_sec_stuck"] < alone/2 {
		v = append(v, fmt.Sprintf("the stuck subscriber slowed its own tenant's publisher from %.0f to %.0f acks/s", alone, ph.Attack["attacker_acks_per_sec_stuck"]))
	}
	if b, ok := ph.Attack["bound"]; ok && ph.Attack["published"] > b && ph.Attack["refused"] == 0 {
		v = append(v, "retained flood not refused past the bound")
	}
	if e, ok := ph.Attack["evaluated"]; ok && e > targetSigninEvaluated {
		v = append(v, fmt.Sprintf("%.0f sign-ins evaluated > %d", e, targetSigninEvaluated))
	}
	ph.Verdict = v
}

// line is the phase's one-line progress report.
func (ph *NoisyPhase) line() string {
	return fmt.Sprintf("ack p50 %.1fms p99 %.1fms max %.1fms %.0f/s; REST p50 %.1fms p99 %.1fms err %d; readyz p99 %.1fms; connect %.1fms; RSS %d KiB, fds %d; %s; %s",
		ph.Ack.P50ms, ph.Ack.P99ms, ph.Ack.MaxMs, ph.Ack.PerSec, ph.REST.P50ms, ph.REST.P99ms, ph.REST.Errors+ph.REST.Stuck,
		ph.Ready.P99ms, ph.ConnectMs, ph.RSSKiB, ph.FDs, orDash(ph.Figure), verdictText(ph))
}

func verdictText(ph *NoisyPhase) string {
	if len(ph.Verdict) == 0 {
		return "ok"
	}
	return "MISSED: " + strings.Join(ph.Verdict, "; ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// httpGet GETs url (with a bearer token when not empty) and reads the
// whole body; anything but 200 is an error.
func httpGet(ctx context.Context, c *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// countFDs is the number of open file descriptors of a process (-1 when
// they cannot be read).
func countFDs(pid int) int {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(es)
}

// raiseFileLimit raises this process's soft limit on open files to the
// hard one. Setting it explicitly also makes the children (serve) inherit
// it: Go raises its own soft limit at start but gives children the
// original one unless the program sets the limit itself.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	lim.Cur = lim.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// victimPublisher is the victim's QoS 1 device (paho.golang), reconnected
// when the broker ends its connection.
type victimPublisher struct {
	r     *noisyRun
	topic string

	mu  sync.Mutex
	c   *paho.Client
	nc  net.Conn
	seq int64
}

func newVictimPublisher(ctx context.Context, r *noisyRun) (*victimPublisher, error) {
	p := &victimPublisher{r: r, topic: r.victim.account + "/victim-pub/state/noisy"}
	_, err := p.client(ctx)
	return p, err
}

// client returns the connection, dialling a new one when the last ended.
func (p *victimPublisher) client(ctx context.Context) (*paho.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c != nil {
		select {
		case <-p.c.Done():
			p.nc.Close()
			p.c = nil
		default:
			return p.c, nil
		}
	}
	c, nc, err := dialVictim(ctx, p.r, "victim-pub")
	if err != nil {
		return nil, err
	}
	p.c, p.nc = c, nc
	return c, nil
}

func (p *victimPublisher) publish(ctx context.Context) error {
	c, err := p.client(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.seq++
	payload := fmt.Sprintf(`{"seq":%d,"state":"running","temp":21.5}`, p.seq)
	p.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.Publish(pctx, &paho.Publish{Topic: p.topic, QoS: 1, Payload: []byte(payload)})
	if err != nil {
		return err
	}
	if resp != nil && resp.ReasonCode >= 0x80 {
		return fmt.Errorf("PUBACK 0x%02X", resp.ReasonCode)
	}
	return nil
}

func (p *victimPublisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c != nil {
		p.c.Disconnect(&paho.Disconnect{})
		p.nc.Close()
	}
}

// dialVictim connects a victim device with paho.golang.
func dialVictim(ctx context.Context, r *noisyRun, clientID string) (*paho.Client, net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", r.srv.addr)
	if err != nil {
		return nil, nil, err
	}
	c := paho.NewClient(paho.ClientConfig{ClientID: clientID, Conn: nc, PacketTimeout: 30 * time.Second})
	ack, err := c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 60,
		UsernameFlag: true, Username: r.victim.pubUser, PasswordFlag: true, Password: []byte(r.victim.pubPass)})
	if err != nil {
		nc.Close()
		if ack != nil {
			return nil, nil, fmt.Errorf("connect %s: CONNACK 0x%02X", clientID, ack.ReasonCode)
		}
		return nil, nil, fmt.Errorf("connect %s: %w", clientID, err)
	}
	return c, nc, nil
}

// connectNewDevice connects a victim device that never connected before
// and returns how long its CONNACK took (-1 and the error when it failed).
func (r *noisyRun) connectNewDevice(ctx context.Context) (float64, string) {
	id := fmt.Sprintf("victim-new-%d", r.newDevice%noisyNewDevices)
	r.newDevice++
	start := time.Now()
	c, nc, err := dialVictim(ctx, r, id)
	if err != nil {
		return -1, err.Error()
	}
	d := time.Since(start)
	c.Disconnect(&paho.Disconnect{})
	nc.Close()
	return msOf(d), ""
}
