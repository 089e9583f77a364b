package app

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/metrics"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// The metric families of fleetmq's parts. Each part's counters are read
// from one snapshot per scrape (metrics.Snapshot): the message path only
// touches its own atomics. docs/operator.md lists them and
// docs/grafana/fleetmq.json charts them.

// RegisterBroker adds the broker's families to reg.
func RegisterBroker(reg prometheus.Registerer, srv *broker.Server) {
	type fam = metrics.Family[broker.Stats]
	one := func(name, help string, kind prometheus.ValueType, f func(broker.Stats) int64) fam {
		return metrics.Value(name, help, kind, func(s broker.Stats) float64 { return float64(f(s)) })
	}
	packets := func(name, help string, f func(broker.Stats) [16]int64) fam {
		return fam{Name: name, Help: help, Kind: metrics.Counter, Labels: []string{"type"}, Collect: func(s broker.Stats, emit metrics.Emit) {
			v := f(s)
			for t := packet.CONNECT; t <= packet.AUTH; t++ {
				emit(float64(v[t]), t.String())
			}
		}}
	}
	byQoS := func(name, help string, f func(broker.Stats) [3]int64) fam {
		return fam{Name: name, Help: help, Kind: metrics.Counter, Labels: []string{"qos"}, Collect: func(s broker.Stats, emit metrics.Emit) {
			qosSamples(f(s), emit)
		}}
	}
	byCode := func(name, help string, f func(broker.Stats) map[packet.ReasonCode]int64) fam {
		return fam{Name: name, Help: help, Kind: metrics.Counter, Labels: []string{"code"}, Collect: func(s broker.Stats, emit metrics.Emit) {
			codeSamples(f(s), emit)
		}}
	}
	reg.MustRegister(metrics.NewSnapshot(srv.Stats,
		fam{Name: "fleetmq_mqtt_connections", Help: "Open MQTT connections, by listener (tcp, tls, websocket).", Kind: metrics.Gauge, Labels: []string{"listener"},
			Collect: func(s broker.Stats, emit metrics.Emit) {
				for i, name := range broker.ListenerNames() {
					emit(float64(s.ConnectionsBy[i]), name)
				}
			}},
		one("fleetmq_mqtt_connections_total", "MQTT connections accepted since start.", metrics.Counter, func(s broker.Stats) int64 { return s.ConnectionsTotal }),
		fam{Name: "fleetmq_mqtt_connections_refused_at_accept_total", Help: "MQTT connections closed as soon as accepted: a listener had -mqtt-max-conns open (reason total), their address had its -mqtt-max-conns-per-addr (per_address) or came faster than -mqtt-max-conn-rate-per-addr (rate).",
			Kind: metrics.Counter, Labels: []string{"reason"},
			Collect: func(s broker.Stats, emit metrics.Emit) {
				emit(float64(s.ConnsRefusedAtAccept[0]), "total")
				emit(float64(s.ConnsRefusedAtAccept[1]), "per_address")
				emit(float64(s.ConnsRefusedAtAccept[2]), "rate")
			}},
		one("fleetmq_mqtt_sessions", "Sessions known (connected or persisted).", metrics.Gauge, func(s broker.Stats) int64 { return s.Sessions }),
		one("fleetmq_mqtt_subscriptions", "Subscriptions in the index.", metrics.Gauge, func(s broker.Stats) int64 { return s.Subscriptions }),
		one("fleetmq_mqtt_retained_messages", "Retained messages stored.", metrics.Gauge, func(s broker.Stats) int64 { return s.Retained }),
		one("fleetmq_mqtt_inflight_messages", "Outbound QoS 1/2 messages awaiting acknowledgement.", metrics.Gauge, func(s broker.Stats) int64 { return s.Inflight }),
		one("fleetmq_mqtt_queued_messages", "Messages waiting in session queues.", metrics.Gauge, func(s broker.Stats) int64 { return s.Queued }),
		one("fleetmq_mqtt_received_bytes_total", "Bytes read from MQTT clients.", metrics.Counter, func(s broker.Stats) int64 { return s.BytesIn }),
		one("fleetmq_mqtt_sent_bytes_total", "Bytes written to MQTT clients.", metrics.Counter, func(s broker.Stats) int64 { return s.BytesOut }),
		one("fleetmq_mqtt_protocol_errors_total", "Connections ended by a protocol error.", metrics.Counter, func(s broker.Stats) int64 { return s.ProtocolErrors }),
		one("fleetmq_mqtt_wills_published_total", "Will messages published.", metrics.Counter, func(s broker.Stats) int64 { return s.WillsPublished }),
		packets("fleetmq_mqtt_packets_received_total", "MQTT packets received by type.", func(s broker.Stats) [16]int64 { return s.PacketsIn }),
		packets("fleetmq_mqtt_packets_sent_total", "MQTT packets sent by type.", func(s broker.Stats) [16]int64 { return s.PacketsOut }),
		byQoS("fleetmq_mqtt_publish_received_total", "Inbound PUBLISH by published QoS.", func(s broker.Stats) [3]int64 { return s.PublishIn }),
		byQoS("fleetmq_mqtt_publish_sent_total", "Outbound PUBLISH by delivered QoS.", func(s broker.Stats) [3]int64 { return s.PublishOut }),
		byCode("fleetmq_mqtt_connects_refused_total", "CONNECTs refused, by reason code (bad_user_name_or_password, not_authorized, client_identifier_not_valid, ...).",
			func(s broker.Stats) map[packet.ReasonCode]int64 { return s.ConnectsRefusedBy }),
		byCode("fleetmq_mqtt_publish_refused_total", "Inbound PUBLISH refused by the policy or the broker's limits, by reason code.",
			func(s broker.Stats) map[packet.ReasonCode]int64 { return s.PublishRefusedBy }),
		byCode("fleetmq_mqtt_subscribe_refused_total", "SUBSCRIBE topic filters refused, by reason code.",
			func(s broker.Stats) map[packet.ReasonCode]int64 { return s.SubscribesRefusedBy }),
		fam{Name: "fleetmq_mqtt_disconnects_total", Help: "Ended MQTT connections, by who ended them (client or server) and why.", Kind: metrics.Counter, Labels: []string{"by", "reason"},
			Collect: func(s broker.Stats, emit metrics.Emit) {
				for i, name := range broker.CloseNames() {
					by := "client"
					if broker.CloseReason(i).ByServer() {
						by = "server"
					}
					emit(float64(s.Closes[i]), by, name)
				}
			}},
		one("fleetmq_log_suppressed_total", "Event-log lines suppressed by the per-client rate limit.", metrics.Counter, func(s broker.Stats) int64 { return s.LogSuppressed }),
		one("fleetmq_mqtt_strangers_waiting", "Open MQTT connections whose CONNECT has not fully arrived, waiting with no goroutine.", metrics.Gauge, func(s broker.Stats) int64 { return s.StrangersWaiting }),
		one("fleetmq_mqtt_idle_parks_total", "Times an idle MQTT client was parked (its reader goroutine ended until it sends again).", metrics.Counter, func(s broker.Stats) int64 { return s.IdleParks }),
		one("fleetmq_mqtt_idle_parked", "MQTT clients (plain TCP) that sent nothing for -idle-park-after, waiting with no goroutine until they send again.", metrics.Gauge, func(s broker.Stats) int64 { return s.IdleParked }),
		one("fleetmq_mqtt_publisher_pauses_total", "1 ms pauses of publishers whose messages overflowed the queue of a subscriber still reading.", metrics.Counter, func(s broker.Stats) int64 { return s.PublisherPauses }),
		one("fleetmq_mqtt_publish_throttled_total", "Inbound PUBLISH packets that waited for their client's or account's publish rate (the connection was not read meanwhile).", metrics.Counter, func(s broker.Stats) int64 { return s.PublishThrottled }),
		metrics.Value("fleetmq_mqtt_publish_throttled_seconds_total", "Time connections spent not reading while a PUBLISH waited for its client's or account's publish rate.", metrics.Counter,
			func(s broker.Stats) float64 { return s.PublishThrottledTime.Seconds() }),
		fam{Name: "fleetmq_mqtt_dropped_total", Help: "Messages not delivered to a session, by reason.", Kind: metrics.Counter, Labels: []string{"reason"},
			Collect: func(s broker.Stats, emit metrics.Emit) {
				for i, name := range broker.DropNames() {
					emit(float64(s.Drops[i]), name)
				}
			}},
	))
}

// RegisterPlatform adds the platform policy's totals to reg. Labels stay
// bounded: no per-account series (per-account usage is in the store).
func RegisterPlatform(reg prometheus.Registerer, p *platform.Policy) {
	one := func(name, help string, f func(platform.Totals) int64) metrics.Family[platform.Totals] {
		return metrics.Value(name, help, metrics.Counter, func(t platform.Totals) float64 { return float64(f(t)) })
	}
	reg.MustRegister(metrics.NewSnapshot(p.Totals,
		metrics.Family[platform.Totals]{Name: "fleetmq_platform_messages_total", Help: "Accepted messages by effective QoS.", Kind: metrics.Counter, Labels: []string{"qos"},
			Collect: func(t platform.Totals, emit metrics.Emit) { qosSamples(t.Effective, emit) }},
		one("fleetmq_platform_qos2_pool_used_total", "QoS 2 pool units used (all accounts).", func(t platform.Totals) int64 { return t.QoS2Pool }),
		one("fleetmq_platform_demotions_total", "QoS 2 publishes demoted to QoS 1 because the daily pool was used up.", func(t platform.Totals) int64 { return t.Demotions }),
		one("fleetmq_platform_publish_refused_total", "Publishes refused by the platform rules.", func(t platform.Totals) int64 { return t.Refused }),
		one("fleetmq_platform_problems_overflown_total", "Client problems (refusals, closes, drops) not recorded for their account owners because a flush interval's bounds were reached.", func(t platform.Totals) int64 { return t.ProblemsOverflown }),
	))
}

// IngestLatency returns the ingest writer's latency histograms, registered
// with reg, for ingest.Options.CommitDuration and Lag.
func IngestLatency(reg prometheus.Registerer) (commit, lag prometheus.Histogram) {
	commit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleetmq_ingest_commit_duration_seconds",
		Help:    "Duration of successful history commits (one observation per commit).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	lag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "fleetmq_ingest_lag_seconds",
		Help: "Time from a message being accepted to the end of the commit that stored it (one observation per message): " +
			"what storing adds to a QoS 1/2 publisher's acknowledgement.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	reg.MustRegister(commit, lag)
	return commit, lag
}

// RegisterHistory adds the ingest writer's and retention's counters to reg.
// RegisterHTTP registers the HTTP listener's refused connections.
func RegisterHTTP(reg prometheus.Registerer, l *HTTPListener) {
	type counts struct{ total, perAddr int64 }
	reg.MustRegister(metrics.NewSnapshot(func() counts { t, a := l.Refused(); return counts{t, a} },
		metrics.Family[counts]{Name: "fleetmq_http_connections_refused_total", Help: "HTTP connections closed at accept: the listener had its maximum open (reason total) or the client's address had its share (per_address).",
			Kind: metrics.Counter, Labels: []string{"reason"},
			Collect: func(c counts, emit metrics.Emit) {
				emit(float64(c.total), "total")
				emit(float64(c.perAddr), "per_address")
			}},
	))
}

func RegisterHistory(reg prometheus.Registerer, w *ingest.Writer, r *history.Retention, st *sqlstore.Store) {
	one := func(name, help string, kind prometheus.ValueType, f func(ingest.Stats) float64) metrics.Family[ingest.Stats] {
		return metrics.Value(name, help, kind, f)
	}
	reg.MustRegister(metrics.NewSnapshot(w.Stats,
		one("fleetmq_ingest_records_total", "Messages committed to stored history.", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.Written) }),
		one("fleetmq_ingest_commits_total", "History commits (records_total / commits_total is the mean group size).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.Batches) }),
		one("fleetmq_ingest_commit_seconds_total", "Time spent in successful history commits.", metrics.Counter, func(s ingest.Stats) float64 { return s.CommitTime.Seconds() }),
		one("fleetmq_ingest_queue_depth", "Accepted messages waiting to be committed to history.", metrics.Gauge, func(s ingest.Stats) float64 { return float64(s.QueueDepth) }),
		one("fleetmq_ingest_queue_capacity", "Capacity of the ingest queue.", metrics.Gauge, func(s ingest.Stats) float64 { return float64(s.QueueCapacity) }),
		one("fleetmq_ingest_dropped_qos0_total", "QoS 0 messages delivered live but not stored because the ingest queue was full (policy drop).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.DroppedQoS0) }),
		one("fleetmq_ingest_backpressure_waits_total", "Publishes that waited for room in the full ingest queue (their connection was not read meanwhile).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.AcceptWaits) }),
		one("fleetmq_ingest_not_stored_total", "Messages the history store refused while it took others: set aside and refused to their publishers (MQTT 5: 0x83; 3.1.1: connection closed), never retried.", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.NotStored) }),
		one("fleetmq_ingest_store_errors_total", "Failed history commit attempts (each retried; nothing acknowledged until stored).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.StoreErrors) }),
		one("fleetmq_ingest_abandoned_total", "Messages neither stored nor acknowledged because the server was shutting down.", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.Abandoned) }),
	))
	reg.MustRegister(metrics.NewSnapshot(func() *history.Retention { return r },
		metrics.Value("fleetmq_history_retention_deleted_total", "History records deleted by retention.", metrics.Counter, func(r *history.Retention) float64 { return float64(r.Deleted()) }),
		metrics.Value("fleetmq_history_retention_days_dropped_total", "Days of history dropped whole by retention (PostgreSQL).", metrics.Counter, func(r *history.Retention) float64 { return float64(r.DaysDropped()) }),
		metrics.Value("fleetmq_history_retention_days_reordered_total", "Days of history reordered by client after they ended (PostgreSQL).", metrics.Counter, func(r *history.Retention) float64 { return float64(r.DaysReordered()) }),
		metrics.Value("fleetmq_history_retention_passes_total", "Completed retention passes.", metrics.Counter, func(r *history.Retention) float64 { return float64(r.Runs()) }),
	))
	reg.MustRegister(metrics.NewSnapshot(st.FoldStats,
		metrics.Value("fleetmq_history_unfolded_records", "SQLite: history records not yet folded into their day's client index (listed in memory, ~70 bytes each; while folds succeed, near the larger of 2,048 and 8 per client written to lately, at most about 131,072).", metrics.Gauge, func(f sqlstore.FoldStats) float64 { return float64(f.Unfolded) }),
		metrics.Value("fleetmq_history_fold_failures_total", "SQLite: history folds that failed (the commit went in without its fold; a later one folds).", metrics.Counter, func(f sqlstore.FoldStats) float64 { return float64(f.Failures) }),
	))
}

// qosSamples emits counts by QoS, labelled "0", "1" and "2".
func qosSamples(v [3]int64, emit metrics.Emit) {
	for q, n := range v {
		emit(float64(n), strconv.Itoa(q))
	}
}

// codeSamples emits refusal counts by reason code, labelled with the
// code's name in snake case (every code that occurred; none before the
// first), in name order.
func codeSamples(m map[packet.ReasonCode]int64, emit metrics.Emit) {
	names := make([]string, 0, len(m))
	byName := make(map[string]int64, len(m))
	for code, n := range m {
		name := code.Name()
		names = append(names, name)
		byName[name] = n
	}
	sort.Strings(names)
	for _, name := range names {
		emit(float64(byName[name]), name)
	}
}
