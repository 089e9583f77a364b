package app

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq/web/restauth"
)

// Defaults of the Config fields that have one in this package (the others
// take theirs from the package that owns them: ingest, restauth, broker,
// api, history). The serve command's flags take their defaults from here.
const (
	DefaultReloadInterval = time.Second
	// DefaultClientUsageInterval: a fleet's per-client usage is one write
	// per device, so it is written once a minute, the accounts' every
	// ReloadInterval.
	DefaultClientUsageInterval = time.Minute
	MaxClientUsageInterval     = time.Hour
	DefaultRetainedMaxAge      = 24 * time.Hour // the longest a retained message lives
	DefaultRetentionInterval   = time.Hour
)

// withDefaults fills the zero fields that have a default.
func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ReloadInterval <= 0 {
		c.ReloadInterval = DefaultReloadInterval
	}
	if c.ClientUsageInterval <= 0 {
		c.ClientUsageInterval = DefaultClientUsageInterval
	}
	if c.RetainedMaxAge <= 0 {
		c.RetainedMaxAge = DefaultRetainedMaxAge
	}
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.RESTRateLimit <= 0 {
		c.RESTRateLimit = restauth.DefaultRateLimit
	}
	if c.Ingest.Logger == nil {
		c.Ingest.Logger = c.Logger
	}
	return c
}

// Validate checks the configuration as Start would take it (zero fields
// with a default are fine). Its messages name the serve flags and their
// variables.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("no data directory")
	}
	if err := ValidateTopicPrefix(c.TopicPrefix); err != nil {
		return err
	}
	if err := c.Listeners.Validate(); err != nil {
		return err
	}
	if c.ClientUsageInterval > MaxClientUsageInterval {
		// The meter keeps two UTC days per client: a longer wait could
		// see a day's counts replaced before they are written.
		return fmt.Errorf("-client-usage-interval (FLEETMQ_CLIENT_USAGE_INTERVAL) %v: at most %v", c.ClientUsageInterval, MaxClientUsageInterval)
	}
	if c.Pprof && c.MetricsListen == "" {
		return errors.New("-pprof (FLEETMQ_PPROF) needs -metrics-listen (FLEETMQ_METRICS_LISTEN): profiles are served only on the private metrics listener")
	}
	if err := c.Cluster.Validate(c.Database); err != nil {
		return err
	}
	return c.Ingest.Validate()
}

// ValidateTopicPrefix checks a topic_prefix: a topic name without
// wildcards, '$' or a leading or trailing '/'; empty is none.
func ValidateTopicPrefix(p string) error {
	if p != "" && (strings.ContainsAny(p, "+#") || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.HasPrefix(p, "$")) {
		return fmt.Errorf("-topic-prefix %q: must be a topic without wildcards, '$' or leading/trailing '/'", p)
	}
	return nil
}
