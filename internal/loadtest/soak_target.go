package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// soakTarget is the broker under soak: a "fleetmq serve" or "fleetmq
// broker" the harness started (with its event log read from stderr), or a
// broker at a given address.
type soakTarget struct {
	kind       string // serve, broker or addr
	addr       string // MQTT over TCP
	pid        int    // 0: no memory figures
	metricsURL string // "": no goroutine figures
	httpURL    string // the HTTP listener (portal and REST API) of serve, "" when none

	// Identities and topic root of the fleet.
	root             string
	pubUser, pubPass string
	subUser, subPass string

	log    *serverLog // nil when the harness does not read the server's log
	cmd    *exec.Cmd
	exited chan struct{} // closed when the child has exited
	dir    string        // the data directory the harness made (serve)
	keep   bool
}

// soakDeviceIDs are the client ids the platform must know.
func soakDeviceIDs(devs []deviceSpec) []string {
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.id
	}
	return ids
}

// startSoakTarget starts the broker cfg names (or describes the one at
// cfg.Addr) and waits until it listens.
func startSoakTarget(ctx context.Context, cfg *SoakConfig, deviceIDs []string) (*soakTarget, error) {
	t := &soakTarget{kind: cfg.Target, keep: cfg.KeepData}
	if cfg.Target == "addr" {
		t.addr, t.pid, t.metricsURL = cfg.Addr, cfg.PID, cfg.MetricsURL
		t.root = cfg.Account
		t.pubUser, t.pubPass, t.subUser, t.subPass = cfg.PubUsername, cfg.PubPassword, cfg.SubUsername, cfg.SubPassword
		return t, nil
	}
	common := []string{"-listen", "127.0.0.1:0", "-log-format", "json", "-log-level", "info",
		"-write-timeout", cfg.WriteTimeout.String(), "-connect-timeout", cfg.ConnectTimeout.String()}
	var argv []string
	switch cfg.Target {
	case "serve":
		dir, err := os.MkdirTemp("", "fleetmq-soak-")
		if err != nil {
			return nil, err
		}
		t.dir = dir
		plat, err := provisionPlatform(ctx, dir, deviceIDs)
		if err != nil {
			t.removeDir()
			return nil, fmt.Errorf("provision the platform: %w", err)
		}
		t.root = plat.account
		t.pubUser, t.pubPass, t.subUser, t.subPass = plat.pubUser, plat.pubPass, plat.subUser, plat.subPass
		argv = append([]string{cfg.Fleetmq, "serve", "-data", dir, "-http-listen", "", "-metrics-listen", "127.0.0.1:0",
			"-reload-interval", cfg.scaled(time.Second).String(),
			"-state-save-interval", cfg.scaled(30 * time.Second).String(),
			"-retention-interval", cfg.scaled(time.Hour).String()}, common...)
	case "broker":
		t.root = "soak"
		argv = append([]string{cfg.Fleetmq, "broker", "-http-listen", "127.0.0.1:0"}, common...)
	default:
		return nil, fmt.Errorf("-target %q: want serve, broker or addr", cfg.Target)
	}
	if err := t.start(argv, cfg.ServerLog); err != nil {
		t.removeDir()
		return nil, err
	}
	return t, nil
}

// start runs argv, reads its event log from stderr and waits for the line
// on stdout that names its listeners.
func (t *soakTarget) start(argv []string, logPath string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	var tee io.WriteCloser
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return err
		}
		tee = f
	}
	if err := cmd.Start(); err != nil {
		if tee != nil {
			tee.Close()
		}
		return fmt.Errorf("start %s: %w", strings.Join(argv[:2], " "), err)
	}
	t.cmd, t.pid = cmd, cmd.Process.Pid
	t.log = newServerLog()
	go t.log.consume(stderr, tee)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
		}
		close(lines)
	}()
	t.exited = make(chan struct{})
	go func() {
		<-t.log.done // stderr is at EOF: the process is exiting
		cmd.Wait()
		close(t.exited)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			<-t.exited
			return fmt.Errorf("%s exited before listening: %s", argv[1], t.log.lastLines())
		}
		for _, f := range strings.Fields(line) {
			switch {
			case strings.HasPrefix(f, "mqtt://"):
				t.addr = strings.TrimPrefix(f, "mqtt://")
			case strings.HasPrefix(f, "http://") && strings.HasSuffix(f, "/metrics"):
				t.metricsURL = f
			case strings.HasPrefix(f, "http://"):
				t.httpURL = f
			}
		}
		if t.addr == "" {
			t.stop()
			return fmt.Errorf("%s: no MQTT listener in %q", argv[1], line)
		}
		return nil
	case <-time.After(soakTimeout):
		t.stop()
		return fmt.Errorf("%s did not start within %v: %s", argv[1], soakTimeout, t.log.lastLines())
	}
}

// alive reports whether the child still runs (always true for -addr).
func (t *soakTarget) alive() bool {
	if t.exited == nil {
		return true
	}
	select {
	case <-t.exited:
		return false
	default:
		return true
	}
}

// stop ends the child with SIGTERM (SIGKILL after 15 s) and waits until
// its log is read to the end.
func (t *soakTarget) stop() {
	if t.cmd == nil {
		return
	}
	if t.alive() {
		t.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-t.exited:
		case <-time.After(15 * time.Second):
			t.cmd.Process.Kill()
			<-t.exited
		}
	}
	t.removeDir()
}

func (t *soakTarget) removeDir() {
	if t.dir != "" && !t.keep {
		os.RemoveAll(t.dir)
	}
}

// serverClose is the server's log line about the end of one connection.
type serverClose struct {
	at       time.Time
	msg      string
	clientID string
	remote   string
	by       string // server or client
	reason   string // e.g. keepalive_timeout
	code     string
	detail   string
}

// serverLog reads the server's JSON event log.
type serverLog struct {
	done chan struct{} // closed at EOF

	mu         sync.Mutex
	closes     map[string][]*serverClose // by remote address
	lines      int64
	errors     []string // the first ERROR lines (and lines that are not JSON: a panic)
	errorsN    int64
	drops      map[string]int64 // "message dropped" lines by reason
	refusals   map[string]int64 // "publish refused", "subscribe refused", "connect refused", "will refused"
	takeovers  int64
	suppressed int64 // sum of suppressed_before: lines the rate limit held back
	tail       []string
}

func newServerLog() *serverLog {
	return &serverLog{done: make(chan struct{}), closes: map[string][]*serverClose{},
		drops: map[string]int64{}, refusals: map[string]int64{}}
}

// consume reads r to EOF, copying it to tee when not nil.
func (l *serverLog) consume(r io.Reader, tee io.WriteCloser) {
	defer close(l.done)
	if tee != nil {
		defer tee.Close()
		r = io.TeeReader(r, tee)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l.line(sc.Text())
	}
	io.Copy(io.Discard, r) // a line over 1 MiB: keep the child from blocking
}

// line parses one line of the log.
func (l *serverLog) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines++
	if len(l.tail) == 40 {
		l.tail = l.tail[1:]
	}
	l.tail = append(l.tail, s)
	var m map[string]any
	if json.Unmarshal([]byte(s), &m) != nil {
		if strings.TrimSpace(s) != "" {
			l.error(s)
		}
		return
	}
	str := func(k string) string { v, _ := m[k].(string); return v }
	if n, ok := m["suppressed_before"].(float64); ok {
		l.suppressed += int64(n)
	}
	if str("level") == "ERROR" {
		l.error(s)
	}
	switch msg := str("msg"); msg {
	case "client disconnected", "connection closed before CONNECT":
		at, _ := time.Parse(time.RFC3339Nano, str("time"))
		c := &serverClose{at: at, msg: msg, clientID: str("client_id"), remote: str("remote"), by: str("by"),
			reason: str("reason"), code: str("code"), detail: str("detail")}
		l.closes[c.remote] = append(l.closes[c.remote], c)
	case "message dropped":
		l.drops[str("reason")]++
	case "publish refused", "subscribe refused", "connect refused", "will refused":
		l.refusals[msg]++
	case "session taken over":
		l.takeovers++
	}
}

func (l *serverLog) error(s string) {
	l.errorsN++
	if len(l.errors) < 10 {
		l.errors = append(l.errors, s)
	}
}

// lastLines is the end of the log, for an error message.
func (l *serverLog) lastLines() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, "\n")
}

// closeFor finds the server's line about the connection from remote that
// ended nearest to at.
func (l *serverLog) closeFor(remote string, at time.Time) *serverClose {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best *serverClose
	for _, c := range l.closes[remote] {
		if best == nil || absDur(c.at.Sub(at)) < absDur(best.at.Sub(at)) {
			best = c
		}
	}
	return best
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// scrapeMetrics reads a Prometheus text exposition: each series' value by
// its name with labels as written, and each name's sum over its labels.
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		out[series] = v
		if j := strings.IndexByte(series, '{'); j >= 0 {
			out[series[:j]] += v
		}
	}
	return out, sc.Err()
}

// procMem is a process's resident memory in KiB: all of it, anonymous
// (heap, stacks, SQLite's page cache) and file-backed (the binary, the
// database pages SQLite reads through mmap).
type procMem struct{ rss, anon, file int64 }

func readProcMem(pid int) (procMem, error) {
	var m procMem
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			m.rss, found = n, true
		case "RssAnon":
			m.anon = n
		case "RssFile":
			m.file = n
		}
	}
	if !found {
		return m, errors.New("no VmRSS in /proc/PID/status")
	}
	return m, nil
}
