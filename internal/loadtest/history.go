package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/sqlstore"
	"github.com/fleetmq/fleetmq/web/api"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// HistoryConfig is the history benchmark: a store filled with Records
// messages of one account's Clients (plus a second account with a tenth as
// many), then timed queries and an export.
type HistoryConfig struct {
	Database string // a PostgreSQL DSN, or "" for SQLite in Dir
	Dir      string
	Records  int
	Clients  int
	Size     int // payload bytes
	Queries  int // timed queries per figure
	Page     int // records per timed page

	// Retention, when above zero, adds the retention phase: that many
	// expired records of a third account are deleted by history.Retention
	// while the ingest writer stores IngestRate records/s, and the ingest
	// acknowledgement latency is compared with the same load alone.
	Retention  int
	IngestRate int

	// FilterQueries is how many times the first page of each filter shape
	// is timed (0: skip the filters), each page stopped after
	// FilterTimeout as the REST API stops it (api.QueryTimeout).
	FilterQueries int
	FilterTimeout time.Duration
	FiltersOnly   bool // only the filter pages (after the fill)
}

// HistoryResult holds the figures of a history benchmark.
type HistoryResult struct {
	Records      int64   `json:"records"`
	FillPerSec   float64 `json:"fill_records_per_sec"` // 0 when the store was already filled
	NewestP50ms  float64 `json:"newest_page_p50_ms"`
	NewestP90ms  float64 `json:"newest_page_p90_ms"`
	DeepP50ms    float64 `json:"deep_page_p50_ms"`
	DeepP90ms    float64 `json:"deep_page_p90_ms"`
	ExportPerSec float64 `json:"export_ndjson_records_per_sec"`
	Exported     int64   `json:"exported"`
	// The account's records of a 100-second window (every client), as
	// NDJSON: an export in time order.
	AccountExportPerSec float64 `json:"account_export_ndjson_records_per_sec"`
	AccountExported     int64   `json:"account_exported"`
	// GET /api/v1/subscriber/history?client_id=...&limit=1000 over
	// loopback HTTP: the newest 1,000 records of a random client, as JSON.
	APIPageP50ms float64 `json:"api_page_1000_p50_ms"`
	APIPageP90ms float64 `json:"api_page_1000_p90_ms"`

	// The first page (100 records, newest first) of filters that match
	// few or no records of the account, and following one of them to its
	// end.
	Filters []FilterFigure `json:"filters"`
	Follow  *FollowFigure  `json:"follow_nothing,omitempty"`

	// The retention phase (zero when not run).
	Ingest           *IngestLatency `json:"ingest_alone,omitempty"`
	IngestRetention  *IngestLatency `json:"ingest_during_retention,omitempty"`
	RetentionDeleted int64          `json:"retention_deleted,omitempty"`
	RetentionDays    int64          `json:"retention_days_dropped,omitempty"`
	RetentionSecs    float64        `json:"retention_seconds,omitempty"`
}

// FilterFigure is the time of a filter's first page.
type FilterFigure struct {
	Shape    string  `json:"shape"`
	P50ms    float64 `json:"p50_ms"`
	P90ms    float64 `json:"p90_ms"`
	Records  int     `json:"records"`   // on the first page
	Next     bool    `json:"has_next"`  // the first page has a next cursor
	TimedOut int     `json:"timed_out"` // pages stopped at FilterTimeout (their time counts as the timeout)
}

// FollowFigure is a filter that matches nothing, followed page by page
// until its next cursor is absent.
type FollowFigure struct {
	Shape   string  `json:"shape"`
	Pages   int     `json:"pages"`
	Seconds float64 `json:"seconds"`
	MaxMs   float64 `json:"slowest_page_ms"`
	// TimedOut: a page ran out of FilterTimeout (the walk stopped there).
	TimedOut bool `json:"timed_out"`
}

// IngestLatency is what publishers saw of the ingest writer: records
// acknowledged per second and the time from Accept to acknowledgement.
type IngestLatency struct {
	PerSec float64 `json:"records_per_sec"`
	P50ms  float64 `json:"ack_p50_ms"`
	P99ms  float64 `json:"ack_p99_ms"`
	MaxMs  float64 `json:"ack_max_ms"`
}

const benchAccount = "b0000000-0000-4000-8000-000000000001"

// benchPlan is the bench account's plan: ten years of history.
const benchPlan = "history-bench"
const benchOther = "b0000000-0000-4000-8000-000000000002"
const benchExpired = "b0000000-0000-4000-8000-000000000003"

// RunHistory fills the store unless it already holds the records, then
// measures "newest Page records of one client" (p50, p90 over Queries
// random clients), the same page deep in the client's history (from a
// cursor half-way down), and an NDJSON export of one client's whole
// history.
func RunHistory(ctx context.Context, cfg HistoryConfig, log io.Writer) (*HistoryResult, error) {
	var (
		st  *sqlstore.Store
		err error
	)
	if cfg.Database != "" {
		st, err = sqlstore.Open(ctx, cfg.Database)
	} else {
		st, err = sqlstore.OpenSQLite(ctx, filepath.Join(cfg.Dir, "history-bench.db"))
	}
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res := &HistoryResult{}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	perClient := cfg.Records / cfg.Clients
	// One record per 10 ms per client: the timeline of a busy fleet.
	step := 10 * time.Millisecond

	var have int64
	q := &fleetmq.HistoryQuery{AccountID: benchAccount, ClientID: "dev-0"}
	if err := st.QueryHistory(ctx, q, func(*fleetmq.Record) error { have++; return nil }); err != nil {
		return nil, err
	}
	if have < int64(perClient) {
		fmt.Fprintf(log, "filling %d records (%d clients) ...\n", cfg.Records, cfg.Clients)
		payload := make([]byte, cfg.Size)
		for i := range payload {
			payload[i] = 'a' + byte(i%26)
		}
		const batch = 2048
		recs := make([]*fleetmq.Record, 0, batch)
		start := time.Now()
		total := 0
		flush := func() error {
			if len(recs) == 0 {
				return nil
			}
			err := st.AppendHistory(ctx, recs)
			total += len(recs)
			recs = recs[:0]
			if total%(1<<20) < batch {
				fmt.Fprintf(log, "  %d records, %.0f/s\n", total, float64(total)/time.Since(start).Seconds())
			}
			return err
		}
		for i := range perClient {
			at := base.Add(time.Duration(i) * step)
			for c := range cfg.Clients {
				acc := benchAccount
				if c%10 == 9 && cfg.Clients >= 10 {
					acc = benchOther // a neighbour in the same tables
				}
				client := fmt.Sprintf("dev-%d", c)
				recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/telemetry/flow",
					Class: "telemetry", QoS: 1, PublishedQoS: 1, Payload: payload, Received: at.Add(time.Duration(c) * time.Microsecond)})
				if len(recs) == batch {
					if err := flush(); err != nil {
						return nil, err
					}
				}
			}
		}
		if err := flush(); err != nil {
			return nil, err
		}
		res.FillPerSec = float64(total) / time.Since(start).Seconds()
	}
	res.Records = int64(perClient * cfg.Clients)

	if cfg.FiltersOnly {
		if err := filterPages(ctx, st, cfg, res, log); err != nil {
			return nil, fmt.Errorf("filter pages: %w", err)
		}
		return res, nil
	}
	rng := rand.New(rand.NewPCG(1, 2))
	client := func() string {
		for {
			c := rng.IntN(cfg.Clients)
			if !(c%10 == 9 && cfg.Clients >= 10) {
				return fmt.Sprintf("dev-%d", c)
			}
		}
	}
	timePage := func(after *fleetmq.Position, id string) (time.Duration, int, error) {
		q := &fleetmq.HistoryQuery{AccountID: benchAccount, ClientID: id, Limit: cfg.Page, After: after}
		t := time.Now()
		p, err := history.Page(ctx, st, q)
		if err != nil {
			return 0, 0, err
		}
		return time.Since(t), len(p.Records), nil
	}
	var newest, deep []time.Duration
	for range cfg.Queries {
		id := client()
		d, n, err := timePage(nil, id)
		if err != nil {
			return nil, err
		}
		if n != min(cfg.Page, perClient) {
			return nil, fmt.Errorf("newest page of %s: %d records, want %d", id, n, min(cfg.Page, perClient))
		}
		newest = append(newest, d)
		// Half-way down the client's history.
		c := 0
		fmt.Sscanf(id, "dev-%d", &c)
		mid := &fleetmq.Position{Received: base.Add(time.Duration(perClient/2)*step + time.Duration(c)*time.Microsecond)} // before the record there: perClient/2 records
		d, n, err = timePage(mid, id)
		if err != nil {
			return nil, err
		}
		if n != min(cfg.Page, perClient/2) {
			return nil, fmt.Errorf("deep page of %s: %d records, want %d", id, n, min(cfg.Page, perClient/2))
		}
		deep = append(deep, d)
	}
	res.NewestP50ms, res.NewestP90ms = percentileMS(newest, 50), percentileMS(newest, 90)
	res.DeepP50ms, res.DeepP90ms = percentileMS(deep, 50), percentileMS(deep, 90)

	t := time.Now()
	n, err := history.Export(ctx, io.Discard, st, &fleetmq.HistoryQuery{AccountID: benchAccount, ClientID: client(), Ascending: true}, history.NDJSON)
	if err != nil {
		return nil, err
	}
	res.Exported = n
	res.ExportPerSec = float64(n) / time.Since(t).Seconds()
	mid := base.Add(time.Duration(perClient/2) * step)
	t = time.Now()
	n, err = history.Export(ctx, io.Discard, st, &fleetmq.HistoryQuery{AccountID: benchAccount, Ascending: true,
		From: mid.Add(-50 * time.Second), To: mid.Add(50 * time.Second)}, history.NDJSON)
	if err != nil {
		return nil, err
	}
	res.AccountExported = n
	res.AccountExportPerSec = float64(n) / time.Since(t).Seconds()
	if err := apiPages(ctx, st, cfg, client, res); err != nil {
		return nil, fmt.Errorf("REST history pages: %w", err)
	}
	if cfg.FilterQueries > 0 {
		if err := filterPages(ctx, st, cfg, res, log); err != nil {
			return nil, fmt.Errorf("filter pages: %w", err)
		}
	}
	if cfg.Retention > 0 {
		if err := retentionPhase(ctx, st, cfg, res, log); err != nil {
			return nil, fmt.Errorf("retention phase: %w", err)
		}
	}
	return res, nil
}

// filterShapes are the filters of the bench account that match few or no
// of its 9 million records (every bench record is telemetry/flow, with no
// station controller).
func filterShapes() []struct {
	name string
	p    history.Params
} {
	A := benchAccount
	return []struct {
		name string
		p    history.Params
	}{
		{"topic " + "A/+/nothing/#", history.Params{Topic: A + "/+/nothing/#"}},
		{"topic A/+/telemetry/nothing", history.Params{Topic: A + "/+/telemetry/nothing"}},
		{"topic_regex ^A/dev-[0-9]+/telemetry/nothing$", history.Params{TopicRegex: "^" + A + "/dev-[0-9]+/telemetry/nothing$"}},
		{"topic A/dev-1/telemetry/nothing (one client)", history.Params{Topic: A + "/dev-1/telemetry/nothing"}},
		{"class=state (no record)", history.Params{Class: "state"}},
		{"class=telemetry (every record)", history.Params{Class: "telemetry"}},
		{"topic A/+/telemetry/flow (every record)", history.Params{Topic: A + "/+/telemetry/flow"}},
		{"station_controller_device_id=sc-1 (no record)", history.Params{StationControllerDeviceID: "sc-1"}},
	}
}

// filterPages times the first page of each filter shape, and follows
// A/+/telemetry/nothing to its end once.
func filterPages(ctx context.Context, st *sqlstore.Store, cfg HistoryConfig, res *HistoryResult, log io.Writer) error {
	for _, sh := range filterShapes() {
		q, err := history.Build(benchAccount, sh.p, false)
		if err != nil {
			return err
		}
		f := FilterFigure{Shape: sh.name}
		var lat []time.Duration
		for range cfg.FilterQueries {
			t := time.Now()
			qctx, cancel := context.WithTimeout(ctx, cfg.FilterTimeout)
			p, err := history.Page(qctx, st, q)
			cancel()
			d := time.Since(t)
			switch {
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
				f.TimedOut++
			case err != nil:
				return fmt.Errorf("%s: %w", sh.name, err)
			default:
				f.Records, f.Next = len(p.Records), p.Next != ""
			}
			lat = append(lat, d)
		}
		f.P50ms, f.P90ms = percentileMS(lat, 50), percentileMS(lat, 90)
		fmt.Fprintf(log, "  %s: p50 %.1f ms p90 %.1f ms, %d records, next %v, %d timed out\n", f.Shape, f.P50ms, f.P90ms, f.Records, f.Next, f.TimedOut)
		res.Filters = append(res.Filters, f)
	}
	sh := filterShapes()[1]
	q, err := history.Build(benchAccount, sh.p, false)
	if err != nil {
		return err
	}
	fw := &FollowFigure{Shape: sh.name}
	start := time.Now()
	for {
		t := time.Now()
		qctx, cancel := context.WithTimeout(ctx, cfg.FilterTimeout)
		p, err := history.Page(qctx, st, q)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			fw.TimedOut = true
			break
		}
		if err != nil {
			return err
		}
		fw.Pages++
		fw.MaxMs = max(fw.MaxMs, float64(time.Since(t).Microseconds())/1000)
		if len(p.Records) != 0 {
			return fmt.Errorf("%s: %d records", sh.name, len(p.Records))
		}
		if p.Next == "" {
			break
		}
		pos, _, err := history.DecodeCursor(p.Next)
		if err != nil {
			return err
		}
		q.After = &pos
	}
	fw.Seconds = time.Since(start).Seconds()
	res.Follow = fw
	return nil
}

// apiPages times GET /history pages of 1,000 records through the real
// REST API over loopback HTTP: the bench account gets a base plan, the
// history add-on and a token.
func apiPages(ctx context.Context, st *sqlstore.Store, cfg HistoryConfig, client func() string, res *HistoryResult) error {
	// A plan that keeps the fill's records (dated from 2026-01-01), so
	// that the retention phase expires only its own account's.
	if err := st.PutPlan(ctx, fleetmq.Plan{Name: benchPlan, MaxPublisherClients: 1000, QoS2DailyPool: 1000, HistoryRetentionDays: 3650}); err != nil {
		return err
	}
	if a, err := st.Account(ctx, benchAccount); err != nil {
		if !errors.Is(err, fleetmq.ErrNotFound) {
			return err
		}
		// On the store, not through control.Service: the account's id is
		// fixed, because the reused bench store's records carry it, and the
		// service chooses ids itself.
		if err := st.CreateAccount(ctx, &fleetmq.Account{ID: benchAccount, Name: "history bench", OwnerEmail: "history@fleetmq.invalid",
			Plan: benchPlan, CreatedAt: time.Now().UTC()}, ""); err != nil {
			return err
		}
	} else if a.Plan != benchPlan {
		if err := st.SetPlan(ctx, benchAccount, benchPlan, time.Now().UTC()); err != nil {
			return err
		}
	}
	svc := control.New(st)
	if err := svc.SetAddOn(ctx, benchAccount, fleetmq.AddOnHistoryDownload, true); err != nil {
		return err
	}
	tok, value, err := svc.CreateRESTToken(ctx, benchAccount, control.NewRESTToken{Label: "bench"})
	if err != nil {
		return err
	}
	defer svc.RevokeRESTToken(context.Background(), benchAccount, tok.ID)
	auth, err := restauth.New(ctx, st)
	if err != nil {
		return err
	}
	snap, err := platform.StoreSource{Store: st}.Load(ctx)
	if err != nil {
		return err
	}
	h := api.New(api.Deps{Service: svc, Store: st, Policy: platform.NewPolicy(platform.Options{}, snap), Auth: auth,
		Limiter: restauth.NewLimiter(nil, 1<<30), Accounts: restauth.NewAccountLimiter(restauth.AccountLimits{Rate: 1 << 30, Burst: 1 << 30})})
	srv := httptest.NewServer(h)
	defer srv.Close()
	var lat []time.Duration
	for range cfg.Queries {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+api.Prefix+"/history?limit=1000&client_id="+client(), nil)
		req.Header.Set("Authorization", "Bearer "+value)
		t := time.Now()
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		var page struct {
			Records []json.RawMessage `json:"records"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		d := time.Since(t)
		if err != nil || resp.StatusCode != http.StatusOK || len(page.Records) != 1000 {
			return fmt.Errorf("GET history: %d, %d records, %v", resp.StatusCode, len(page.Records), err)
		}
		lat = append(lat, d)
	}
	res.APIPageP50ms, res.APIPageP90ms = percentileMS(lat, 50), percentileMS(lat, 90)
	return nil
}

// retentionPhase stores cfg.Retention records of a year ago for a third
// account on the starter plan (7 days), then measures the ingest writer at
// cfg.IngestRate records/s alone for 5 s, and again while a retention pass
// deletes those records.
func retentionPhase(ctx context.Context, st *sqlstore.Store, cfg HistoryConfig, res *HistoryResult, log io.Writer) error {
	if _, err := st.Account(ctx, benchExpired); err != nil {
		if !errors.Is(err, fleetmq.ErrNotFound) {
			return err
		}
		// On the store, with its fixed id, as the bench account (apiPages).
		if err := st.CreateAccount(ctx, &fleetmq.Account{ID: benchExpired, Name: "retention bench", OwnerEmail: "retention@fleetmq.invalid",
			Plan: "starter", CreatedAt: time.Now().UTC()}, ""); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "storing %d expired records ...\n", cfg.Retention)
	old := time.Now().UTC().AddDate(-1, 0, 0)
	payload := make([]byte, cfg.Size)
	recs := make([]*fleetmq.Record, 0, 2048)
	for i := range cfg.Retention {
		client := fmt.Sprintf("old-%d", i%10)
		recs = append(recs, &fleetmq.Record{AccountID: benchExpired, ClientID: client, Topic: benchExpired + "/" + client + "/telemetry/x",
			Class: "telemetry", QoS: 1, PublishedQoS: 1, Payload: payload, Received: old.Add(time.Duration(i) * time.Millisecond)})
		if len(recs) == cap(recs) || i == cfg.Retention-1 {
			if err := st.AppendHistory(ctx, recs); err != nil {
				return err
			}
			recs = recs[:0]
		}
	}
	alone, err := ingestLoad(ctx, st, cfg, payload, func() bool { return false }, 5*time.Second)
	if err != nil {
		return err
	}
	res.Ingest = alone
	ret := &history.Retention{Control: st, History: st}
	done := make(chan error, 1)
	start := time.Now()
	var finished atomic.Bool
	go func() {
		_, err := ret.Pass(ctx)
		res.RetentionSecs = time.Since(start).Seconds()
		finished.Store(true)
		done <- err
	}()
	during, err := ingestLoad(ctx, st, cfg, payload, finished.Load, 10*time.Minute)
	if err != nil {
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	res.IngestRetention = during
	res.RetentionDeleted, res.RetentionDays = ret.Deleted(), ret.DaysDropped()
	return nil
}

// ingestLoad offers rate records/s to an ingest writer over st from 16
// publishers until stop reports true (checked every 100 ms) or max passes,
// and measures how long each record waited for its acknowledgement.
func ingestLoad(ctx context.Context, st *sqlstore.Store, cfg HistoryConfig, payload []byte, stop func() bool, max time.Duration) (*IngestLatency, error) {
	w, err := ingest.New(st, ingest.Options{})
	if err != nil {
		return nil, err
	}
	const publishers = 16
	var (
		mu   sync.Mutex
		lats []time.Duration
	)
	begin := time.Now()
	end := begin.Add(max)
	var wg sync.WaitGroup
	var sent atomic.Int64
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			interval := time.Duration(float64(time.Second) * publishers / float64(cfg.IngestRate))
			next := time.Now()
			client := fmt.Sprintf("ingest-%d", p)
			topic := benchAccount + "/" + client + "/telemetry/x"
			for n := 0; ; n++ {
				if n%64 == 0 && (stop() || time.Now().After(end) || ctx.Err() != nil) {
					return
				}
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(interval)
				a := &latencyAck{start: time.Now(), mu: &mu, lats: &lats}
				w.Accept(&fleetmq.Record{AccountID: benchAccount, ClientID: client, Topic: topic, Class: "telemetry",
					QoS: 1, PublishedQoS: 1, Payload: payload, Received: a.start.UTC().Truncate(time.Microsecond)}, a)
				sent.Add(1)
			}
		}()
	}
	// A floor of 5 s, so the figure has enough samples.
	for time.Since(begin) < 5*time.Second && !stop() {
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Close(cctx); err != nil {
		return nil, err
	}
	elapsed := time.Since(begin)
	mu.Lock()
	defer mu.Unlock()
	if int64(len(lats)) != sent.Load() {
		return nil, fmt.Errorf("%d records acknowledged of %d", len(lats), sent.Load())
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	return &IngestLatency{PerSec: float64(len(lats)) / elapsed.Seconds(), P50ms: percentileMS(lats, 50), P99ms: percentileMS(lats, 99),
		MaxMs: float64(lats[len(lats)-1].Microseconds()) / 1000}, nil
}

// latencyAck records how long its record waited to be acknowledged.
type latencyAck struct {
	start time.Time
	mu    *sync.Mutex
	lats  *[]time.Duration
}

// Refuse is never expected of a benchmark's records; it counts as nothing.
func (a *latencyAck) Refuse(packet.ReasonCode, string) {}

func (a *latencyAck) Ack() {
	d := time.Since(a.start)
	a.mu.Lock()
	*a.lats = append(*a.lats, d)
	a.mu.Unlock()
}

func percentileMS(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s) - 1) * p / 100
	return float64(s[i].Microseconds()) / 1000
}

func mainHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench history", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg HistoryConfig
	fs.StringVar(&cfg.Database, "database", "", "PostgreSQL DSN (default: SQLite in -dir)")
	fs.StringVar(&cfg.Dir, "dir", ".", "directory of the SQLite benchmark database (kept for reuse)")
	fs.IntVar(&cfg.Records, "records", 10_000_000, "records in the store")
	fs.IntVar(&cfg.Clients, "clients", 100, "clients (every tenth belongs to a second account)")
	fs.IntVar(&cfg.Size, "size", 200, "payload bytes")
	fs.IntVar(&cfg.Queries, "queries", 20, "timed queries per figure")
	fs.IntVar(&cfg.Page, "page", 10_000, "records per page")
	fs.IntVar(&cfg.FilterQueries, "filter-queries", 5, "timed first pages per filter shape (0: skip them)")
	fs.BoolVar(&cfg.FiltersOnly, "filters-only", false, "after the fill, time only the filter pages")
	fs.DurationVar(&cfg.FilterTimeout, "filter-timeout", api.QueryTimeout, "stop each filter page after this long, as the REST API does")
	fs.IntVar(&cfg.Retention, "retention", 0, "also measure ingest while retention deletes this many expired records (0: skip)")
	fs.IntVar(&cfg.IngestRate, "ingest-rate", 20_000, "records/s offered to the ingest writer in the retention phase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Clients < 1 || cfg.Records < cfg.Clients || cfg.Queries < 1 || cfg.Page < 1 {
		return fmt.Errorf("bench history: need records >= clients >= 1, queries >= 1, page >= 1")
	}
	r, err := RunHistory(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if !cfg.FiltersOnly {
		defer fmt.Fprintf(stdout, "REST GET history, 1,000 records of one client as JSON over loopback HTTP: p50 %.1f ms p90 %.1f ms\n", r.APIPageP50ms, r.APIPageP90ms)
		fmt.Fprintf(stdout, "history: %d records; fill %.0f records/s; newest %d of one client p50 %.1f ms p90 %.1f ms; deep page p50 %.1f ms p90 %.1f ms; export of one client: %d records as NDJSON at %.0f records/s; export of the account's 100 s window: %d records at %.0f records/s\n",
			r.Records, r.FillPerSec, cfg.Page, r.NewestP50ms, r.NewestP90ms, r.DeepP50ms, r.DeepP90ms, r.Exported, r.ExportPerSec, r.AccountExported, r.AccountExportPerSec)
	}
	for _, f := range r.Filters {
		fmt.Fprintf(stdout, "first page of 100, %s: p50 %.1f ms p90 %.1f ms (%d records, next cursor %v; %d of %d stopped at %s)\n",
			f.Shape, f.P50ms, f.P90ms, f.Records, f.Next, f.TimedOut, cfg.FilterQueries, cfg.FilterTimeout)
	}
	if f := r.Follow; f != nil {
		fmt.Fprintf(stdout, "%s followed to its end: %d pages in %.1f s, slowest page %.1f ms (stopped at %s: %v)\n", f.Shape, f.Pages, f.Seconds, f.MaxMs, cfg.FilterTimeout, f.TimedOut)
	}
	if a, d := r.Ingest, r.IngestRetention; a != nil && d != nil {
		fmt.Fprintf(stdout, "ingest at %d records/s alone: %.0f records/s, ack p50 %.1f ms p99 %.1f ms max %.1f ms\n", cfg.IngestRate, a.PerSec, a.P50ms, a.P99ms, a.MaxMs)
		fmt.Fprintf(stdout, "ingest while retention deleted %d records and dropped %d whole days in %.1f s: %.0f records/s, ack p50 %.1f ms p99 %.1f ms max %.1f ms\n",
			r.RetentionDeleted, r.RetentionDays, r.RetentionSecs, d.PerSec, d.P50ms, d.P99ms, d.MaxMs)
	}
	return nil
}
