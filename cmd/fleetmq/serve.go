package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// runServe is "fleetmq serve": the whole platform on a data directory.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg app.Config
	var lf logFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serveFlags(fs, &cfg, &lf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	cfg.Logger = log
	cfg.Version = version
	if keyWorkers {
		if exe, err := os.Executable(); err == nil {
			w := control.NewKeyWorker(exe, log)
			control.UseKeyWorker(w)
			defer w.Close()
		}
	}
	a, err := app.Start(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("fleetmq serving", "data", cfg.DataDir, "database", a.Store.Backend(), "listeners", strings.Join(a.URLs, " "))
	fmt.Fprintf(stdout, "fleetmq serving %s on %s\n", cfg.DataDir, strings.Join(a.URLs, " "))
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.Close(sctx)
}

// serveFlags registers serve's flags, each with its FLEETMQ_* variable
// named at the end of its help (TestEveryFlagHasItsVariable), the defaults
// taken from the packages that own them.
func serveFlags(fs *flag.FlagSet, cfg *app.Config, lf *logFlags) {
	storeFlags(fs, &cfg.DataDir, &cfg.Database)
	cfg.Listeners.Flags(fs, ":1883")
	fs.StringVar(&cfg.HTTPListen, "http-listen", ":8080", "HTTP address for the portal, the REST API, /metrics, /livez and /readyz (empty to disable) [FLEETMQ_HTTP_LISTEN]")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve /metrics, /livez and /readyz on this address instead of -http-listen, e.g. 127.0.0.1:9100 (empty: on -http-listen) [FLEETMQ_METRICS_LISTEN]")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve Go's runtime profiles (/debug/pprof/) on -metrics-listen, which must be set [FLEETMQ_PPROF]")
	fs.IntVar(&cfg.HTTPLimits.MaxConns, "http-max-conns", app.DefaultHTTPMaxConns, "most HTTP connections open at once; more are closed at accept, so HTTP never takes the file descriptors MQTT needs [FLEETMQ_HTTP_MAX_CONNS]")
	fs.IntVar(&cfg.HTTPLimits.MaxConnsPerAddr, "http-max-conns-per-addr", app.DefaultHTTPMaxConnsPerAddr, "most HTTP connections open at once from one IP address [FLEETMQ_HTTP_MAX_CONNS_PER_ADDR]")
	fs.StringVar(&cfg.TopicPrefix, "topic-prefix", "", "optional topic_prefix: devices publish under PREFIX/{account_id}/... [FLEETMQ_TOPIC_PREFIX]")
	fs.DurationVar(&cfg.ReloadInterval, "reload-interval", app.DefaultReloadInterval, "how often to flush the accounts' usage and client problems and disconnect expired credentials; control-plane changes are picked up within 100ms (or this, if shorter) [FLEETMQ_RELOAD_INTERVAL]")
	fs.DurationVar(&cfg.ClientUsageInterval, "client-usage-interval", app.DefaultClientUsageInterval, "how often to flush the per-client usage (one write per client that published; the accounts' usage goes every -reload-interval; at most 1h) [FLEETMQ_CLIENT_USAGE_INTERVAL]")
	fs.DurationVar(&cfg.StateSaveInterval, "state-save-interval", broker.DefaultSaveInterval, "how often retained messages and persistent sessions are saved while running (also at shutdown) [FLEETMQ_STATE_SAVE_INTERVAL]")
	fs.IntVar(&cfg.Ingest.QueueSize, "ingest-queue", ingest.DefaultQueueSize, "accepted messages that may wait to be stored before publishers are slowed down [FLEETMQ_INGEST_QUEUE]")
	fs.IntVar(&cfg.Ingest.MaxBatch, "ingest-batch", ingest.DefaultMaxBatch, "most messages stored in one commit [FLEETMQ_INGEST_BATCH]")
	fs.DurationVar(&cfg.Ingest.MaxDelay, "ingest-delay", ingest.DefaultMaxDelay, "how long a commit may wait for more messages while they are arriving [FLEETMQ_INGEST_DELAY]")
	fs.StringVar(&cfg.Ingest.QoS0Overload, "ingest-qos0-overload", ingest.OverloadDrop, "QoS 0 messages when the ingest queue is full: drop (delivered live, not stored, counted) or wait [FLEETMQ_INGEST_QOS0_OVERLOAD]")
	fs.DurationVar(&cfg.RetentionInterval, "retention-interval", app.DefaultRetentionInterval, "how often history older than each account's plan keeps is deleted [FLEETMQ_RETENTION_INTERVAL]")
	fs.IntVar(&cfg.RESTRateLimit, "rest-rate-limit", restauth.DefaultRateLimit, "requests per hour of one REST API token [FLEETMQ_REST_RATE_LIMIT]")
	fs.IntVar(&cfg.RESTAccountLimits.Concurrency, "rest-account-concurrency", restauth.DefaultAccountConcurrency, "REST API requests of one account (all its tokens) in flight at once [FLEETMQ_REST_ACCOUNT_CONCURRENCY]")
	fs.IntVar(&cfg.RESTAccountLimits.Rate, "rest-account-rate", restauth.DefaultAccountRate, "REST API requests per second of one account (all its tokens) once its burst is spent [FLEETMQ_REST_ACCOUNT_RATE]")
	fs.DurationVar(&cfg.RESTAccountLimits.RefusalPause, "rest-refusal-pause", restauth.DefaultRefusalPause, "how long a REST API request refused by a rate limit waits for its 429 (at most its Retry-After), so a client that ignores Retry-After cannot spin [FLEETMQ_REST_REFUSAL_PAUSE]")
	fs.IntVar(&cfg.RESTAccountLimits.Burst, "rest-account-burst", restauth.DefaultAccountBurst, "REST API requests one account (all its tokens) may make at once on top of -rest-account-rate [FLEETMQ_REST_ACCOUNT_BURST]")
	fs.BoolVar(&cfg.PortalSecureCookies, "portal-secure-cookies", false, "mark the portal's cookies Secure on plain HTTP too (TLS-terminating proxy in front) [FLEETMQ_PORTAL_SECURE_COOKIES]")
	fs.StringVar(&cfg.MQTTPublicAddr, "mqtt-public-addr", "", "broker address host:port shown in the portal's mosquitto examples (default: the portal's host and 1883) [FLEETMQ_MQTT_PUBLIC_ADDR]")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", broker.DefaultConnectTimeout, "how long a new MQTT connection may take to send CONNECT (TLS handshake included) [FLEETMQ_CONNECT_TIMEOUT]")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", broker.DefaultWriteTimeout, "how long a write to an MQTT client may wait before the client is disconnected as not reading [FLEETMQ_WRITE_TIMEOUT]")
	fs.DurationVar(&cfg.IdleParkAfter, "idle-park-after", broker.DefaultIdleParkAfter, "how long a plain TCP MQTT client may send nothing before it waits without a goroutine of its own (Linux; negative: never) [FLEETMQ_IDLE_PARK_AFTER]")
	cfg.Cluster.Flags(fs)
	lf.register(fs)
}

// storeFlags registers -data and -database, shared by serve and the
// operator commands.
func storeFlags(fs *flag.FlagSet, dir, database *string) {
	fs.StringVar(dir, "data", "./data", "data directory (broker state, and the SQLite database unless -database is set) [FLEETMQ_DATA]")
	fs.StringVar(database, "database", "", "PostgreSQL database URL, e.g. postgres://fleetmq@db.example/fleetmq (empty: SQLite in the data directory) [FLEETMQ_DATABASE]")
}
