package app

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/metrics"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/platform"
)

// statsCache reads the broker's Stats at most once per scrape burst, so
// the many families of one scrape share a snapshot.
type statsCache struct {
	srv *broker.Server
	mu  sync.Mutex
	at  time.Time
	st  broker.Stats
}

func (c *statsCache) get() broker.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > 100*time.Millisecond {
		c.st, c.at = c.srv.Stats(), time.Now()
	}
	return c.st
}

// RegisterBroker adds the broker's counters to reg.
func RegisterBroker(reg *metrics.Registry, srv *broker.Server) {
	c := &statsCache{srv: srv}
	gauge := func(name, help string, f func(broker.Stats) int64, kind metrics.Kind) {
		reg.Add(metrics.Family{Name: name, Help: help, Kind: kind, Collect: metrics.Value(func() float64 { return float64(f(c.get())) })})
	}
	gauge("fleetmq_mqtt_connections", "Open MQTT connections.", func(s broker.Stats) int64 { return s.Connections }, metrics.Gauge)
	gauge("fleetmq_mqtt_connections_total", "MQTT connections accepted since start.", func(s broker.Stats) int64 { return s.ConnectionsTotal }, metrics.Counter)
	gauge("fleetmq_mqtt_sessions", "Sessions known (connected or persisted).", func(s broker.Stats) int64 { return s.Sessions }, metrics.Gauge)
	gauge("fleetmq_mqtt_subscriptions", "Subscriptions in the index.", func(s broker.Stats) int64 { return s.Subscriptions }, metrics.Gauge)
	gauge("fleetmq_mqtt_retained_messages", "Retained messages stored.", func(s broker.Stats) int64 { return s.Retained }, metrics.Gauge)
	gauge("fleetmq_mqtt_inflight_messages", "Outbound QoS 1/2 messages awaiting acknowledgement.", func(s broker.Stats) int64 { return s.Inflight }, metrics.Gauge)
	gauge("fleetmq_mqtt_queued_messages", "Messages waiting in session queues.", func(s broker.Stats) int64 { return s.Queued }, metrics.Gauge)
	gauge("fleetmq_mqtt_received_bytes_total", "Bytes read from MQTT clients.", func(s broker.Stats) int64 { return s.BytesIn }, metrics.Counter)
	gauge("fleetmq_mqtt_sent_bytes_total", "Bytes written to MQTT clients.", func(s broker.Stats) int64 { return s.BytesOut }, metrics.Counter)
	gauge("fleetmq_mqtt_protocol_errors_total", "Connections ended by a protocol error.", func(s broker.Stats) int64 { return s.ProtocolErrors }, metrics.Counter)
	gauge("fleetmq_mqtt_wills_published_total", "Will messages published.", func(s broker.Stats) int64 { return s.WillsPublished }, metrics.Counter)

	packets := func(name, help string, f func(broker.Stats) [16]int64) {
		reg.Add(metrics.Family{Name: name, Help: help, Kind: metrics.Counter, Collect: func() []metrics.Sample {
			v := f(c.get())
			var out []metrics.Sample
			for t := packet.CONNECT; t <= packet.AUTH; t++ {
				out = append(out, metrics.Sample{Labels: []string{"type", t.String()}, Value: float64(v[t])})
			}
			return out
		}})
	}
	packets("fleetmq_mqtt_packets_received_total", "MQTT packets received by type.", func(s broker.Stats) [16]int64 { return s.PacketsIn })
	packets("fleetmq_mqtt_packets_sent_total", "MQTT packets sent by type.", func(s broker.Stats) [16]int64 { return s.PacketsOut })
	byQoS := func(name, help string, f func(broker.Stats) [3]int64) {
		reg.Add(metrics.Family{Name: name, Help: help, Kind: metrics.Counter, Collect: func() []metrics.Sample {
			v := f(c.get())
			return []metrics.Sample{{Labels: []string{"qos", "0"}, Value: float64(v[0])}, {Labels: []string{"qos", "1"}, Value: float64(v[1])}, {Labels: []string{"qos", "2"}, Value: float64(v[2])}}
		}})
	}
	byQoS("fleetmq_mqtt_publish_received_total", "Inbound PUBLISH by published QoS.", func(s broker.Stats) [3]int64 { return s.PublishIn })
	byQoS("fleetmq_mqtt_publish_sent_total", "Outbound PUBLISH by delivered QoS.", func(s broker.Stats) [3]int64 { return s.PublishOut })
	byCode := func(name, help string, f func(broker.Stats) map[packet.ReasonCode]int64) {
		reg.Add(metrics.Family{Name: name, Help: help, Kind: metrics.Counter, Collect: func() []metrics.Sample {
			return codeSamples(f(c.get()))
		}})
	}
	byCode("fleetmq_mqtt_connects_refused_total", "CONNECTs refused, by reason code (bad_user_name_or_password, not_authorized, client_identifier_not_valid, ...).",
		func(s broker.Stats) map[packet.ReasonCode]int64 { return s.ConnectsRefusedBy })
	byCode("fleetmq_mqtt_publish_refused_total", "Inbound PUBLISH refused by the policy or the broker's limits, by reason code.",
		func(s broker.Stats) map[packet.ReasonCode]int64 { return s.PublishRefusedBy })
	byCode("fleetmq_mqtt_subscribe_refused_total", "SUBSCRIBE topic filters refused, by reason code.",
		func(s broker.Stats) map[packet.ReasonCode]int64 { return s.SubscribesRefusedBy })
	reg.Add(metrics.Family{Name: "fleetmq_mqtt_disconnects_total", Help: "Ended MQTT connections, by who ended them (client or server) and why.", Kind: metrics.Counter, Collect: func() []metrics.Sample {
		st := c.get()
		out := make([]metrics.Sample, 0, len(st.Closes))
		for i, name := range broker.CloseNames() {
			by := "client"
			if broker.CloseReason(i).ByServer() {
				by = "server"
			}
			out = append(out, metrics.Sample{Labels: []string{"by", by, "reason", name}, Value: float64(st.Closes[i])})
		}
		return out
	}})
	gauge("fleetmq_log_suppressed_total", "Event-log lines suppressed by the per-client rate limit.", func(s broker.Stats) int64 { return s.LogSuppressed }, metrics.Counter)
	reg.Add(metrics.Family{Name: "fleetmq_mqtt_dropped_total", Help: "Messages not delivered to a session, by reason.", Kind: metrics.Counter, Collect: func() []metrics.Sample {
		st := c.get()
		var out []metrics.Sample
		for i, name := range broker.DropNames() {
			out = append(out, metrics.Sample{Labels: []string{"reason", name}, Value: float64(st.Drops[i])})
		}
		return out
	}})
}

// RegisterPlatform adds the platform policy's totals to reg. Labels stay
// bounded: no per-account series (per-account usage is in the store).
func RegisterPlatform(reg *metrics.Registry, p *platform.Policy) {
	reg.Add(metrics.Family{Name: "fleetmq_platform_messages_total", Help: "Accepted messages by effective QoS.", Kind: metrics.Counter, Collect: func() []metrics.Sample {
		t := p.Totals()
		return []metrics.Sample{{Labels: []string{"qos", "0"}, Value: float64(t.Effective[0])}, {Labels: []string{"qos", "1"}, Value: float64(t.Effective[1])}, {Labels: []string{"qos", "2"}, Value: float64(t.Effective[2])}}
	}})
	one := func(name, help string, f func(platform.Totals) int64) {
		reg.Add(metrics.Family{Name: name, Help: help, Kind: metrics.Counter, Collect: metrics.Value(func() float64 { return float64(f(p.Totals())) })})
	}
	one("fleetmq_platform_qos2_pool_used_total", "QoS 2 pool units used (all accounts).", func(t platform.Totals) int64 { return t.QoS2Pool })
	one("fleetmq_platform_demotions_total", "QoS 2 publishes demoted to QoS 1 because the daily pool was used up.", func(t platform.Totals) int64 { return t.Demotions })
	one("fleetmq_platform_publish_refused_total", "Publishes refused by the platform rules.", func(t platform.Totals) int64 { return t.Refused })
}

// RegisterHistory adds the ingest writer's and retention's counters to reg.
func RegisterHistory(reg *metrics.Registry, w *ingest.Writer, r *history.Retention) {
	one := func(name, help string, kind metrics.Kind, f func(ingest.Stats) float64) {
		reg.Add(metrics.Family{Name: name, Help: help, Kind: kind, Collect: metrics.Value(func() float64 { return f(w.Stats()) })})
	}
	one("fleetmq_ingest_records_total", "Messages committed to stored history.", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.Written) })
	one("fleetmq_ingest_commits_total", "History commits (records_total / commits_total is the mean group size).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.Batches) })
	one("fleetmq_ingest_commit_seconds_total", "Time spent in successful history commits.", metrics.Counter, func(s ingest.Stats) float64 { return s.CommitTime.Seconds() })
	one("fleetmq_ingest_queue_depth", "Accepted messages waiting to be committed to history.", metrics.Gauge, func(s ingest.Stats) float64 { return float64(s.QueueDepth) })
	one("fleetmq_ingest_queue_capacity", "Capacity of the ingest queue.", metrics.Gauge, func(s ingest.Stats) float64 { return float64(s.QueueCapacity) })
	one("fleetmq_ingest_dropped_qos0_total", "QoS 0 messages delivered live but not stored because the ingest queue was full (policy drop).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.DroppedQoS0) })
	one("fleetmq_ingest_backpressure_waits_total", "Publishes that waited for room in the full ingest queue (their connection was not read meanwhile).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.AcceptWaits) })
	one("fleetmq_ingest_store_errors_total", "Failed history commit attempts (each retried; nothing acknowledged until stored).", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.StoreErrors) })
	one("fleetmq_ingest_abandoned_total", "Messages neither stored nor acknowledged because the server was shutting down.", metrics.Counter, func(s ingest.Stats) float64 { return float64(s.Abandoned) })
	reg.Add(metrics.Family{Name: "fleetmq_history_retention_deleted_total", Help: "History records deleted by retention.", Kind: metrics.Counter, Collect: metrics.Value(func() float64 { return float64(r.Deleted()) })})
	reg.Add(metrics.Family{Name: "fleetmq_history_retention_passes_total", Help: "Completed retention passes.", Kind: metrics.Counter, Collect: metrics.Value(func() float64 { return float64(r.Runs()) })})
}

// codeSamples are refusal counts by reason code, labelled with the code's
// name in snake case (every code that occurred; none before the first).
func codeSamples(m map[packet.ReasonCode]int64) []metrics.Sample {
	out := make([]metrics.Sample, 0, len(m))
	for code, n := range m {
		out = append(out, metrics.Sample{Labels: []string{"code", codeName(code)}, Value: float64(n)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Labels[1] < out[j].Labels[1] })
	return out
}

// codeName is a reason code as a label value: "Bad User Name or Password"
// becomes "bad_user_name_or_password".
func codeName(c packet.ReasonCode) string {
	return strings.ReplaceAll(strings.ToLower(c.String()), " ", "_")
}
