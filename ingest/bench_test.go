package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/ingest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// countAck counts acknowledgements and says when want have arrived.
type countAck struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (c *countAck) Refuse(packet.ReasonCode, string) { panic("a benchmark record was refused") }

// wait waits until every acknowledgement has arrived, for a minute at most.
func (c *countAck) wait(b *testing.B) {
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d acknowledged after a minute", c.n.Load(), c.want)
	}
}

func (c *countAck) Ack() {
	if c.n.Add(1) == c.want {
		close(c.done)
	}
}

// BenchmarkIngest accepts b.N QoS 1 records of 200 bytes through a Writer
// into SQLite in a temp directory and waits until every one is
// acknowledged (committed): the ingest rate, in records/s. Publishers
// call Accept concurrently, as connection goroutines do. With
// observed=true the commit duration and every record's lag go to
// Prometheus histograms, as serve's do: the cost of the latency metrics.
//
//	go test -run '^$' -bench BenchmarkIngest -benchtime 200000x ./ingest/
func BenchmarkIngest(b *testing.B) {
	for _, publishers := range []int{1, 16} {
		for _, observed := range []bool{false, true} {
			b.Run(fmt.Sprintf("publishers=%d/observed=%v", publishers, observed), func(b *testing.B) {
				benchIngest(b, publishers, observed)
			})
		}
	}
}

func benchIngest(b *testing.B, publishers int, observed bool) {
	db := openDB(b)
	var opts ingest.Options
	if observed {
		opts.CommitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "commit", Buckets: prometheus.DefBuckets})
		opts.Lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lag", Buckets: prometheus.DefBuckets})
	}
	w := newWriter(b, db.Store, opts)
	payload := []byte(`{"station_controller_device_id":"sc-1","v":"` + strings.Repeat("x", 200-46) + `"}`)
	if len(payload) != 200 {
		b.Fatalf("payload is %d bytes", len(payload))
	}
	ack := &countAck{want: int64(b.N), done: make(chan struct{})}
	now := time.Now().UTC().Truncate(time.Microsecond)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("dev%d", p)
			topic := acctA + "/" + client + "/telemetry/power"
			for i := p; i < b.N; i += publishers {
				w.Accept(&fleetmq.Record{
					AccountID: acctA, ClientID: client, Topic: topic, Class: "telemetry",
					QoS: 1, PublishedQoS: 1, Payload: payload,
					StationControllerDeviceID: "sc-1", Received: now,
				}, ack)
			}
		}()
	}
	wg.Wait()
	ack.wait(b)
	b.StopTimer()
	st := w.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if st.Batches > 0 {
		b.ReportMetric(float64(st.Written)/float64(st.Batches), "records/commit")
	}
}

// slowStore commits in a fixed time, as a disk would, and stores nothing.
type slowStore struct {
	fleetmq.HistoryStore
	commit time.Duration
}

func (s slowStore) AppendHistory(context.Context, []*fleetmq.Record) error {
	time.Sleep(s.commit) // the disk's sync, not synchronisation
	return nil
}

// BenchmarkBlockedPublishers: 5,000 publishers (a fleet's connections)
// accept QoS 1 records into a queue much smaller than they are, through a
// store whose commits take 5 ms: most of them wait for room all the time.
// cpu-µs/record is what each record costs the process, waiting included.
//
//	go test -run '^$' -bench BenchmarkBlockedPublishers -benchtime 100000x ./ingest/
func BenchmarkBlockedPublishers(b *testing.B) {
	const publishers = 5000
	w := newWriter(b, slowStore{commit: 5 * time.Millisecond}, ingest.Options{QueueSize: 1024, AccountQueueSize: 1024, MaxBatch: 256})
	ack := &countAck{want: int64(b.N), done: make(chan struct{})}
	now := time.Now().UTC()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := testkit.ProcessCPU(b)
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("dev%d", p)
			for next.Add(1) <= int64(b.N) {
				w.Accept(&fleetmq.Record{AccountID: acctA, ClientID: client, Topic: acctA + "/" + client + "/state", Class: "state",
					QoS: 1, PublishedQoS: 1, Payload: []byte(`{}`), Received: now}, ack)
			}
		}()
	}
	wg.Wait()
	ack.wait(b)
	b.StopTimer()
	b.ReportMetric(float64((testkit.ProcessCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/record")
	b.ReportMetric(float64(w.Stats().AcceptWaits)/float64(b.N), "waits/record")
}
