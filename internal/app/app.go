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
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/metrics"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/sqlstore"
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
	HTTPListen  string
	TopicPrefix string
	// ReloadInterval is how often the control-plane version is polled (and
	// usage flushed). Default 1 s, so CLI changes apply within 2 s.
	ReloadInterval time.Duration
	// RetainedMaxAge is the retained maximum age. Default 24 h (the spec).
	RetainedMaxAge time.Duration
	// SweepInterval is the broker's sweep period. Default 1 minute.
	SweepInterval time.Duration
	// StateSaveInterval is how often the broker saves retained messages
	// and persistent sessions while running (they are also saved at a
	// clean shutdown). Default 30 s.
	StateSaveInterval time.Duration
	// Ingest configures the pipeline into stored history.
	Ingest ingest.Options
	// RetentionInterval is how often history older than each account's
	// plan keeps is deleted. Default 1 hour; the first pass runs at start.
	RetentionInterval time.Duration
	Now               func() time.Time
	Logger            *slog.Logger
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
	// Retention deletes expired history in the background.
	Retention *history.Retention
	Metrics   *metrics.Registry
	// URLs of the listeners, e.g. "mqtt://127.0.0.1:1883".
	URLs     []string
	MQTTAddr string // the TCP listener's address, if any
	HTTPAddr string

	http   *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup // the policy's reload loop and retention

	closeOnce sync.Once
	closeErr  error
}

// Start opens the data directory and starts serving.
func Start(ctx context.Context, cfg Config) (*App, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("no data directory")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReloadInterval <= 0 {
		cfg.ReloadInterval = time.Second
	}
	if cfg.RetainedMaxAge <= 0 {
		cfg.RetainedMaxAge = 24 * time.Hour
	}
	if cfg.RetentionInterval <= 0 {
		cfg.RetentionInterval = time.Hour
	}
	if cfg.Ingest.Logger == nil {
		cfg.Ingest.Logger = cfg.Logger
	}
	if err := cfg.Listeners.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Ingest.Validate(); err != nil {
		return nil, err
	}
	store, err := OpenStore(ctx, cfg.DataDir, cfg.Database)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, Store: store, Service: &control.Service{Store: store, Now: cfg.Now}}
	if err := a.start(ctx); err != nil {
		if a.Broker != nil {
			a.Broker.Close(context.Background())
		}
		if a.Ingest != nil {
			a.Ingest.Close(context.Background())
		}
		store.Close()
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
	a.Ingest, err = ingest.New(a.Store, cfg.Ingest)
	if err != nil {
		return err
	}
	a.Policy = platform.NewPolicy(platform.Options{TopicPrefix: cfg.TopicPrefix, Now: cfg.Now, Sink: a.Ingest}, snap)
	if err := a.restorePools(ctx, snap); err != nil {
		return err
	}
	a.Broker, err = broker.New(broker.Options{
		Policy:         a.Policy,
		Logger:         cfg.Logger,
		Now:            cfg.Now,
		MaxInflight:    platform.Inflight,
		RetainedMaxAge: cfg.RetainedMaxAge,
		SweepInterval:  cfg.SweepInterval,
		SaveInterval:   cfg.StateSaveInterval,
		StatePath:      filepath.Join(cfg.DataDir, BrokerStateFile),
	})
	if err != nil {
		return err
	}
	a.URLs, err = cfg.Listeners.Open(a.Broker)
	if err != nil {
		return err
	}
	for _, u := range a.URLs {
		if len(u) > 7 && u[:7] == "mqtt://" {
			a.MQTTAddr = u[7:]
		}
	}
	a.Metrics = &metrics.Registry{}
	RegisterBroker(a.Metrics, a.Broker)
	RegisterPlatform(a.Metrics, a.Policy)
	a.Retention = &history.Retention{Control: a.Store, History: a.Store, Now: cfg.Now, Logger: cfg.Logger}
	RegisterHistory(a.Metrics, a.Ingest, a.Retention)
	if cfg.HTTPListen != "" {
		mux := HealthMux(a.Metrics, func() error { return a.ready(ctx) })
		a.http, a.HTTPAddr, err = StartHTTP(cfg.HTTPListen, mux, cfg.Logger)
		if err != nil {
			return err
		}
		a.URLs = append(a.URLs, "http://"+a.HTTPAddr)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		a.Policy.Run(runCtx, src, a.Store, a.Broker, cfg.ReloadInterval, cfg.Logger)
	}()
	go func() {
		defer a.wg.Done()
		a.Retention.Run(runCtx, cfg.RetentionInterval)
	}()
	return nil
}

// restorePools carries today's QoS 2 pool use over a restart, so a restart
// does not hand an account a fresh pool.
func (a *App) restorePools(ctx context.Context, snap *platform.Snapshot) error {
	now := a.cfg.Now().UTC()
	day := now.Format(time.DateOnly)
	for id := range snap.Accounts {
		u, err := a.Store.Usage(ctx, id, day, day)
		if err != nil {
			return fmt.Errorf("restore QoS 2 pools: %w", err)
		}
		if len(u) == 1 && (u[0].PoolUsed > 0 || u[0].Demotions > 0) {
			a.Policy.Pool(id).Restore(now, u[0].PoolUsed, u[0].Demotions)
		}
	}
	return nil
}

// ready reports whether the store answers.
func (a *App) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := a.Store.Version(ctx)
	return err
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
	if a.http != nil {
		errs = append(errs, a.http.Shutdown(ctx))
	}
	errs = append(errs, a.Broker.Close(ctx))
	errs = append(errs, a.Ingest.Close(ctx))
	a.cancel()
	stopped := make(chan struct{})
	go func() { a.wg.Wait(); close(stopped) }()
	select {
	case <-stopped: // the last usage flush
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	errs = append(errs, a.Store.Close())
	return errors.Join(errs...)
}
