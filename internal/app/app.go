// Package app wires fleetmq's parts into the running platform that
// "fleetmq serve" starts: the store (SQLite in the data directory or
// PostgreSQL), the platform policy kept current from it, the ingest writer
// that stores every accepted message before it is acknowledged, history
// retention, the broker and its listeners, and the HTTP server (health,
// readiness, metrics). Tests start the same App in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/metrics"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/sqlstore"
	"github.com/fleetmq/fleetmq/web/api"
	"github.com/fleetmq/fleetmq/web/portal"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// Config configures the platform.
type Config struct {
	// DataDir keeps the broker state, and the SQLite store unless Database
	// is set.
	DataDir string
	// Database is the store's DSN, e.g. postgres://user@host/fleetmq;
	// empty for SQLite in DataDir.
	Database string
	Listeners
	HTTPListen string
	// MetricsListen, if set, serves /metrics (with /livez and /readyz) on
	// its own listener instead of HTTPListen, so it can stay private while
	// the portal and the REST API are public.
	MetricsListen string
	// Pprof serves Go's runtime profiles (/debug/pprof/) on MetricsListen,
	// which must be set: never on the public listener.
	Pprof bool
	// HistoryQueryTimeout stops a REST history page's query (default
	// api.QueryTimeout).
	HistoryQueryTimeout time.Duration
	// HistoryScanBudget bounds the rows a REST history page or export
	// batch examines (default history.ScanBudget).
	HistoryScanBudget int
	// HTTPLimits bounds HTTPListen's connections (defaults
	// DefaultHTTPMaxConns, DefaultHTTPMaxConnsPerAddr).
	HTTPLimits  HTTPLimits
	TopicPrefix string
	// ReloadInterval is how often the accounts' usage and client problems are flushed and
	// expired credentials disconnected. Default 1 s. The control-plane
	// version is polled every platform.VersionPoll (or this, if shorter).
	ReloadInterval time.Duration
	// ClientUsageInterval is how often the per-client usage (messages per
	// client and day, fleetmq account usage) is flushed; the live view
	// does not wait for it. Default 1 minute.
	ClientUsageInterval time.Duration
	// RetainedMaxAge is the retained maximum age. Default 24 h (the spec).
	RetainedMaxAge time.Duration
	// SweepInterval is the broker's sweep period. Default 1 minute.
	SweepInterval time.Duration
	// ConnectTimeout and WriteTimeout are the broker's (defaults 10 s and
	// 30 s): how long a new connection may take to CONNECT, and how long a
	// write to a client may wait before the client is disconnected.
	ConnectTimeout time.Duration
	WriteTimeout   time.Duration
	// IdleParkAfter is the broker's Options.IdleParkAfter (default 10 s).
	IdleParkAfter time.Duration
	// StateSaveInterval is how often the broker saves retained messages
	// and persistent sessions while running (they are also saved at a
	// clean shutdown). Default 30 s.
	StateSaveInterval time.Duration
	// Ingest configures the pipeline into stored history.
	Ingest ingest.Options
	// RetentionInterval is how often history older than each account's
	// plan keeps is deleted. Default 1 hour; the first pass runs at start.
	RetentionInterval time.Duration
	// RESTRateLimit is the requests per hour of one REST API token.
	// Default restauth.DefaultRateLimit (5000, the spec's).
	RESTRateLimit int
	// RESTAccountLimits are the REST API's secondary limits per account,
	// over all its tokens: requests in flight at once, requests per
	// second and the burst beyond it. Zero fields take restauth's
	// defaults.
	RESTAccountLimits restauth.AccountLimits
	// PortalSecureCookies marks the portal's cookies Secure on plain HTTP
	// requests too (a TLS-terminating proxy in front).
	PortalSecureCookies bool
	// MQTTPublicAddr is the broker's address as devices reach it, shown in
	// the portal's mosquitto examples; empty: the request's host and 1883.
	MQTTPublicAddr string
	// Cluster makes the process one node of a cluster.
	Cluster ClusterConfig
	// Version is the fleetmq release, shown in fleetmq_build_info.
	Version string
	Now     func() time.Time
	Logger  *slog.Logger
}

// BrokerStateFile is the broker's state file inside the data directory.
const BrokerStateFile = "broker-state.json"

// App is a running platform.
type App struct {
	cfg     Config
	Store   *sqlstore.Store
	Service *control.Service
	Policy  *platform.Policy
	Broker  *broker.Server
	Ingest  *ingest.Writer
	cluster *ClusterNode // nil on a single node
	// Retention deletes expired history in the background.
	Retention *history.Retention
	// Auth and Limiter guard the subscriber REST API.
	Auth    *restauth.Authenticator
	Limiter *restauth.Limiter
	API     *api.API
	// Portal is the account owner's web portal, served at "/".
	Portal *portal.Portal
	// HistorySlots bounds the history requests each account runs at once,
	// through the REST API and the portal together.
	HistorySlots history.Slots
	// Metrics is the Prometheus registry served at /metrics: fleetmq's
	// families, the Go runtime and the process.
	Metrics *prometheus.Registry
	// URLs of the listeners, e.g. "mqtt://127.0.0.1:1883".
	URLs        []string
	MQTTAddr    string // the TCP listener's address, if any
	HTTPAddr    string
	MetricsAddr string // the -metrics-listen address, if any

	http        *HTTPListener
	metricsHTTP *HTTPListener // on MetricsListen, if set
	lock        *Lock         // on the data directory
	cancel      context.CancelFunc
	wg          sync.WaitGroup // the policy's reload loop, retention and the API's bookkeeping

	node        fleetmq.Node // this process's row in the store's nodes
	authVersion int64        // the control-plane version the REST token index follows

	closeOnce sync.Once
	closeErr  error
}

// Start locks and opens the data directory and starts serving. A data
// directory another process serves is refused with an *InUseError.
func Start(ctx context.Context, cfg Config) (*App, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The data directory holds the broker state (and the SQLite store):
	// one process at a time, PostgreSQL or not.
	lock, err := LockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	store, err := OpenStore(ctx, cfg.DataDir, cfg.Database)
	if err != nil {
		lock.Release()
		return nil, err
	}
	a := &App{cfg: cfg, Store: store, Service: &control.Service{Store: store, Now: cfg.Now}, lock: lock}
	a.HistorySlots.Now = cfg.Now
	if err := a.start(ctx); err != nil {
		if a.Broker != nil {
			a.Broker.Close(context.Background())
		}
		if a.Ingest != nil {
			a.Ingest.Close(context.Background())
		}
		a.cluster.Close()
		store.Close()
		lock.Release()
		return nil, err
	}
	return a, nil
}

func (a *App) start(ctx context.Context) error {
	cfg := a.cfg
	src := platform.StoreSource{Store: a.Store}
	snap, err := src.Load(ctx)
	if err != nil {
		return fmt.Errorf("load control plane: %w", err)
	}
	a.Metrics = metrics.NewRegistry(cfg.Version)
	cfg.Ingest.CommitDuration, cfg.Ingest.Lag = IngestLatency(a.Metrics)
	cfg.Ingest.NotStored = func(rec *fleetmq.Record, err error) { a.Policy.NotStored(rec, err) } // the writer calls it only once running, after the policy exists
	a.Ingest, err = ingest.New(a.Store, cfg.Ingest)
	if err != nil {
		return err
	}
	popts := platform.Options{TopicPrefix: cfg.TopicPrefix, Now: cfg.Now, Sink: a.Ingest, Logger: cfg.Logger,
		Applied: a.applied, ClientUsageEvery: cfg.ClientUsageInterval}
	if cfg.Cluster.On() {
		// The nodes take from pools kept in the database.
		popts.QoS2Pools = &platform.BlockPools{Shared: a.Store.QoS2Pools()}
	}
	a.Policy = platform.NewPolicy(popts, snap)
	if err := a.restorePools(ctx, snap); err != nil {
		return err
	}
	opts := broker.Options{
		Policy:         a.Policy,
		Logger:         cfg.Logger,
		Now:            cfg.Now,
		MaxInflight:    platform.Inflight,
		RetainedMaxAge: cfg.RetainedMaxAge,
		SweepInterval:  cfg.SweepInterval,
		ConnectTimeout: cfg.ConnectTimeout,
		WriteTimeout:   cfg.WriteTimeout,
		IdleParkAfter:  cfg.IdleParkAfter,
		SaveInterval:   cfg.StateSaveInterval,
		StatePath:      filepath.Join(cfg.DataDir, BrokerStateFile),
	}
	httpConns := 0
	if cfg.HTTPListen != "" {
		httpConns += cfg.HTTPLimits.withDefaults().MaxConns
	}
	if cfg.MetricsListen != "" {
		httpConns += HTTPLimits{}.withDefaults().MaxConns
	}
	cfg.Listeners.Limit(&opts, httpConns)
	// Sessions resumed from another node's state, and those restored from
	// the state file at start, get what they missed from history.
	opts.Replay = platform.Replay(a.Store, &a.HistorySlots)
	if cfg.Cluster.On() {
		if cfg.Cluster.NodeID == "" {
			if cfg.Cluster.NodeID, err = dataDirNodeID(cfg.DataDir); err != nil {
				return fmt.Errorf("this node's name in the data directory: %w", err)
			}
		}
		if a.cluster, err = StartCluster(ctx, cfg.Cluster, &opts, a.Store, cfg.Now(), cfg.Logger); err != nil {
			return err
		}
		if err := a.cluster.ShareRates(a.Policy, cfg.Logger); err != nil {
			return err
		}
		cfg.Logger.Info("cluster node", "node", a.cluster.ID(), "nats", cfg.Cluster.NATSURL, "routes_listen", a.cluster.RouteAddr())
	}
	if cfg.Listeners.MaxConns == 0 && opts.MaxConns > 0 {
		cfg.Logger.Info("mqtt: connections per listener bounded by the file limit", "max_conns", opts.MaxConns,
			"file_limit", fileLimit(), "http_conns", httpConns, "reserve", fdReserve)
	}
	a.Broker, err = broker.New(opts)
	if err != nil {
		return err
	}
	if a.cluster != nil {
		a.cluster.Attach(a.Broker)
	}
	a.Policy.SetBroker(a.Broker) // the live view reads retained state from it
	a.URLs, err = cfg.Listeners.Open(a.Broker)
	if err != nil {
		return err
	}
	for _, u := range a.URLs {
		if len(u) > 7 && u[:7] == "mqtt://" {
			a.MQTTAddr = u[7:]
		}
	}
	RegisterBroker(a.Metrics, a.Broker)
	if a.cluster != nil {
		RegisterCluster(a.Metrics, a.cluster)
	}
	RegisterPlatform(a.Metrics, a.Policy)
	a.Retention = &history.Retention{Control: a.Store, History: a.Store, Now: cfg.Now, Logger: cfg.Logger}
	RegisterHistory(a.Metrics, a.Ingest, a.Retention, a.Store)
	if err := a.startAPI(ctx); err != nil {
		return err
	}
	a.startPortal()
	ready := func() error { return a.ready(ctx) }
	metricsHandler := metrics.Handler(a.Metrics, cfg.Logger)
	if cfg.MetricsListen != "" {
		mux := HealthMux(metricsHandler, ready)
		if cfg.Pprof {
			handlePprof(mux)
		}
		a.metricsHTTP, err = StartHTTP(cfg.MetricsListen, mux, HTTPLimits{}, cfg.Logger)
		if err != nil {
			return ListenError("-metrics-listen", cfg.MetricsListen, err)
		}
		a.MetricsAddr = a.metricsHTTP.Addr
		a.URLs = append(a.URLs, "http://"+a.MetricsAddr+"/metrics")
		metricsHandler = nil // not on the public listener
	}
	if cfg.HTTPListen != "" {
		mux := HealthMux(metricsHandler, ready)
		mux.Handle(api.Prefix+"/", a.API)
		mux.Handle("/", a.Portal) // every path the routes above do not take
		a.http, err = StartHTTP(cfg.HTTPListen, mux, cfg.HTTPLimits, cfg.Logger)
		if err != nil {
			return ListenError("-http-listen", cfg.HTTPListen, err)
		}
		a.HTTPAddr = a.http.Addr
		RegisterHTTP(a.Metrics, a.http)
		a.URLs = append(a.URLs, "http://"+a.HTTPAddr)
	}
	if a.cluster != nil && a.cluster.RouteAddr() != "" {
		a.URLs = append(a.URLs, "nats-route://"+a.cluster.RouteAddr())
	}
	if err := a.startNode(ctx, snap.Version); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(4)
	go func() {
		defer a.wg.Done()
		a.Policy.Run(runCtx, src, a.Store, a.Broker, cfg.ReloadInterval, cfg.Logger)
	}()
	go func() {
		defer a.wg.Done()
		watchFolds(runCtx, a.Store.FoldStats, foldCheck, cfg.Logger)
	}()
	go func() {
		defer a.wg.Done()
		a.runAPIBookkeeping(runCtx)
	}()
	go func() {
		defer a.wg.Done()
		a.Retention.Run(runCtx, cfg.RetentionInterval)
	}()
	return nil
}

// restorePools carries today's QoS 2 pool use over a restart, so a restart
// does not hand an account a fresh pool, and today's per-client QoS mix,
// so the live view does not start from zero.
func (a *App) restorePools(ctx context.Context, snap *platform.Snapshot) error {
	now := a.cfg.Now().UTC()
	day := now.Format(time.DateOnly)
	for id := range snap.Accounts {
		u, err := a.Store.Usage(ctx, id, day, day)
		if err != nil {
			return fmt.Errorf("restore QoS 2 pools: %w", err)
		}
		if len(u) == 1 && (u[0].PoolUsed > 0 || u[0].Demotions > 0) {
			a.Policy.Pool(id).Restore(now, u[0].PoolUsed, u[0].Demotions, u[0].DemotedSince)
		}
		// Today's QoS mix per client, for the live view.
		cu, err := a.Store.ClientUsage(ctx, id, day, day)
		if err != nil {
			return fmt.Errorf("restore today's client usage: %w", err)
		}
		a.Policy.RestoreToday(now, cu)
	}
	return nil
}

// ready reports why the platform cannot take traffic, or nil: the
// store refuses the history writer's commits (a full disk: publishers get
// no acknowledgements until it recovers), or it does not answer.
func (a *App) ready(ctx context.Context) error {
	if since, err := a.Ingest.Failing(); err != nil {
		return fmt.Errorf("store refuses writes: %w (failing since %s)", err, since.UTC().Format(time.RFC3339))
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := a.Store.Version(ctx); err != nil {
		return fmt.Errorf("store does not answer: %w", err)
	}
	if a.cluster != nil {
		return a.cluster.ready(ctx, a.Store, time.Now())
	}
	return nil
}

// Close stops serving: clients are disconnected, broker state saved, the
// ingest queue committed to history, usage flushed and the store closed.
// Messages still queued for history when ctx ends are neither stored nor
// acknowledged (their QoS 1/2 publishers send them again). Later calls
// return the first call's result.
func (a *App) Close(ctx context.Context) error {
	a.closeOnce.Do(func() { a.closeErr = a.close(ctx) })
	return a.closeErr
}

func (a *App) close(ctx context.Context) error {
	var errs []error
	for _, hs := range []*HTTPListener{a.http, a.metricsHTTP} {
		if hs != nil {
			errs = append(errs, hs.Shutdown(ctx))
		}
	}
	errs = append(errs, a.Broker.Close(ctx))
	a.cluster.Close()
	errs = append(errs, a.Ingest.Close(ctx))
	a.cancel()
	stopped := make(chan struct{})
	go func() { a.wg.Wait(); close(stopped) }()
	select {
	case <-stopped: // the last usage flush
		errs = append(errs, a.stopNode(ctx))
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	errs = append(errs, a.Store.Close())
	errs = append(errs, a.lock.Release())
	return errors.Join(errs...)
}

// startAPI builds the subscriber REST API: the token index, the rate
// limiter with this window's stored counts, and the routes.
func (a *App) startAPI(ctx context.Context) error {
	var err error
	a.Auth, err = restauth.New(ctx, a.Store)
	if err != nil {
		return fmt.Errorf("load REST API tokens: %w", err)
	}
	a.Auth.Log = a.cfg.Logger
	// A token created or revoked in this process applies at once; one
	// changed by another process (the CLI) at the next version check.
	a.Service.OnRESTTokenChange = func() {
		if err := a.Auth.Refresh(context.Background()); err != nil {
			a.cfg.Logger.Error("refresh REST API tokens", "error", err)
		}
	}
	a.Limiter = restauth.NewLimiter(a.Store, a.cfg.RESTRateLimit)
	if a.cfg.Cluster.On() {
		// The nodes reserve requests in the database: the limit is exact
		// across them.
		a.Limiter = restauth.NewSharedLimiter(a.Store, a.cfg.RESTRateLimit)
	}
	if err := a.Limiter.Load(ctx, a.cfg.Now()); err != nil {
		return fmt.Errorf("load REST rate-limit counts: %w", err)
	}
	a.API = api.New(api.Deps{Service: a.Service, Store: a.Store, Policy: a.Policy, Auth: a.Auth, Limiter: a.Limiter,
		Accounts: restauth.NewAccountLimiter(a.cfg.RESTAccountLimits),
		Now:      a.cfg.Now, Changed: a.Sync, Logger: a.cfg.Logger, QueryTimeout: a.cfg.HistoryQueryTimeout,
		HistorySlots: &a.HistorySlots, ScanBudget: a.cfg.HistoryScanBudget})
	return nil
}

// runAPIBookkeeping writes token last-use times and rate-limit counts
// every reload interval, and once more on the way out. (The token index
// follows the control plane in applied.)
func (a *App) runAPIBookkeeping(ctx context.Context) {
	t := time.NewTicker(a.cfg.ReloadInterval)
	defer t.Stop()
	flush := func(ctx context.Context) {
		if err := a.Auth.Flush(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Error("flush REST token last use", "error", err)
		}
		if err := a.Limiter.Flush(ctx, a.cfg.Now()); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Error("flush REST rate-limit counts", "error", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(fctx)
			// A cluster node gives back the REST requests it reserved and
			// did not use: the other nodes may use them this hour.
			if err := a.Limiter.GiveBack(fctx); err != nil {
				a.cfg.Logger.Error("give back reserved REST requests", "error", err)
			}
			cancel()
			return
		case <-t.C:
		}
		flush(ctx)
	}
}

// Sync applies control-plane changes at once instead of at the next
// reload: the policy takes the store's current snapshot and sessions it
// no longer allows are disconnected. The REST API calls it after each
// change it makes.
func (a *App) Sync(ctx context.Context) {
	if err := a.Policy.Reload(ctx, platform.StoreSource{Store: a.Store}); err != nil {
		a.cfg.Logger.Error("reload control plane", "error", err)
		return
	}
	a.Policy.DisconnectInvalid(a.Broker)
}

// The store writes usage at most once per write id: a flush whose commit
// went through but reported an error is sent again, not counted twice.
var _ platform.OnceUsageSink = (*sqlstore.Store)(nil)

// foldCheck is how often serve looks for failed history folds.
const foldCheck = time.Minute

// watchFolds logs, every interval until ctx ends, the history folds that
// failed since it last looked (SQLite: a fold that keeps failing leaves
// its records in memory and their clients' queries slower, and nothing
// else says so but fleetmq_history_fold_failures_total).
func watchFolds(ctx context.Context, stats func() sqlstore.FoldStats, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	seen := stats().Failures
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if f := stats(); f.Failures > seen {
			log.Error("history folds fail: the records they would fold stay in memory, and their clients' queries read them apart",
				"failed", f.Failures-seen, "since", interval, "unfolded", f.Unfolded, "error", f.LastError)
			seen = f.Failures
		}
	}
}
