package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/metrics"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// brokerConfig is the configuration of `fleetmq broker`. Each flag has a
// FLEETMQ_* environment variable (named in its help text); a flag on the
// command line wins over the environment.
type brokerConfig struct {
	app.Listeners
	HTTPListen     string
	StatePath      string
	MaxInflight    int
	MaxQueued      int
	MaxPacketSize  int
	RetainedMaxAge time.Duration
	ConnectTimeout time.Duration
	WriteTimeout   time.Duration
	IdleParkAfter  time.Duration
	Cluster        app.ClusterConfig
	Log            logFlags
}

func (c *brokerConfig) flags(fs *flag.FlagSet) {
	c.Listeners.Flags(fs, "127.0.0.1:1883")
	fs.StringVar(&c.HTTPListen, "http-listen", "", "HTTP address for /metrics, /livez and /readyz (empty to disable) [FLEETMQ_HTTP_LISTEN]")
	fs.StringVar(&c.StatePath, "state", "", "file to save sessions in, and retained messages in FILE.retained (empty: in memory only) [FLEETMQ_BROKER_STATE]")
	fs.IntVar(&c.MaxInflight, "max-inflight", broker.DefaultMaxInflight, "unacknowledged QoS 1/2 messages per session [FLEETMQ_MAX_INFLIGHT]")
	fs.IntVar(&c.MaxQueued, "max-queued", broker.DefaultMaxQueued, "messages queued per session behind the inflight window [FLEETMQ_MAX_QUEUED]")
	fs.IntVar(&c.MaxPacketSize, "max-packet-size", broker.DefaultMaxPacketSize, "largest accepted packet in bytes [FLEETMQ_MAX_PACKET_SIZE]")
	fs.DurationVar(&c.RetainedMaxAge, "retained-max-age", 0, "maximum age of retained messages, 0 for none [FLEETMQ_RETAINED_MAX_AGE]")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", broker.DefaultConnectTimeout, "how long a new connection may take to send CONNECT (TLS handshake included) [FLEETMQ_CONNECT_TIMEOUT]")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", broker.DefaultWriteTimeout, "how long a write to a client may wait before the client is disconnected as not reading [FLEETMQ_WRITE_TIMEOUT]")
	fs.DurationVar(&c.IdleParkAfter, "idle-park-after", broker.DefaultIdleParkAfter, "how long a plain TCP client may send nothing before it waits without a goroutine of its own (Linux; negative: never) [FLEETMQ_IDLE_PARK_AFTER]")
	c.Cluster.Flags(fs)
	c.Log.register(fs)
}

func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg brokerConfig
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Listeners.Validate(); err != nil {
		return err
	}
	if err := cfg.Cluster.ValidateFlags(); err != nil {
		return err
	}
	log, err := cfg.Log.logger(stderr)
	if err != nil {
		return err
	}
	if cfg.StatePath != "" {
		// Two brokers saving one state file would overwrite each other.
		lock, err := app.LockStateFile(cfg.StatePath)
		if err != nil {
			return err
		}
		defer lock.Release()
	}
	opts := broker.Options{
		Logger:         log,
		MaxInflight:    cfg.MaxInflight,
		MaxQueued:      cfg.MaxQueued,
		MaxPacketSize:  uint32(cfg.MaxPacketSize),
		RetainedMaxAge: cfg.RetainedMaxAge,
		StatePath:      cfg.StatePath,
		ConnectTimeout: cfg.ConnectTimeout,
		WriteTimeout:   cfg.WriteTimeout,
		IdleParkAfter:  cfg.IdleParkAfter,
	}
	httpConns := 0
	if cfg.HTTPListen != "" {
		httpConns = app.DefaultHTTPMaxConns
	}
	cfg.Listeners.Limit(&opts, httpConns)
	var node *app.ClusterNode
	if cfg.Cluster.On() {
		// Bare brokers routed together: messages cross between them (no
		// store: nothing else is shared).
		if node, err = app.StartCluster(ctx, cfg.Cluster, &opts, nil, time.Now(), log); err != nil {
			return err
		}
		defer node.Close()
	}
	srv, err := broker.New(opts)
	if err != nil {
		return err
	}
	if node != nil {
		node.Attach(srv)
	}
	// Open every listener before announcing, so a busy port fails at once.
	fail := func(err error) error {
		srv.Close(context.Background())
		return err
	}
	listening, err := cfg.Listeners.Open(srv)
	if err != nil {
		return fail(err)
	}
	if cfg.HTTPListen != "" {
		reg := metrics.NewRegistry(version)
		app.RegisterBroker(reg, srv)
		if node != nil {
			app.RegisterCluster(reg, node)
		}
		hs, err := app.StartHTTP(cfg.HTTPListen, app.HealthMux(metrics.Handler(reg, log), func() error { return nil }), app.HTTPLimits{}, log)
		if err != nil {
			return fail(app.ListenError("-http-listen", cfg.HTTPListen, err))
		}
		defer hs.Close()
		listening = append(listening, "http://"+hs.Addr+"/metrics")
	}
	if node != nil && node.RouteAddr() != "" {
		listening = append(listening, "nats-route://"+node.RouteAddr())
	}
	log.Info("fleetmq broker listening (open policy: anonymous clients, any topic)", "listeners", strings.Join(listening, " "))
	fmt.Fprintf(stdout, "fleetmq broker listening on %s\n", strings.Join(listening, " "))
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Close(sctx)
}

// logFlags are -log-level and -log-format, shared by serve and broker.
type logFlags struct{ level, format string }

func (f *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.level, "log-level", "info", "debug, info, warn or error [FLEETMQ_LOG_LEVEL]")
	fs.StringVar(&f.format, "log-format", "text", "text (key=value) or json, one object per line [FLEETMQ_LOG_FORMAT]")
}

// logger is the event log the flags ask for, writing to w.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: %w", f.level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", f.format)
}
