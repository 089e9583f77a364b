package sqlstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// BenchmarkAppendHistory: group inserts of 200-byte records into SQLite, as
// the ingest writer does (one transaction per batch, then the store's
// upkeep between commits, which folds the client index), from 100 clients
// (a few busy publishers) and from 10,000 (a fleet: a client's records are
// far apart). ns/op is wall time per record, mostly the commit's fsync on
// small batches; cpu-µs/record is what a record costs the machine.
func BenchmarkAppendHistory(b *testing.B) {
	for _, clients := range []int{100, 10_000} {
		for _, batch := range []int{1, 8, 64, 256, 2048, 8192} {
			if clients > 100 && batch != 8 && batch != 64 {
				continue
			}
			b.Run(fmt.Sprintf("clients-%d/batch-%d", clients, batch), func(b *testing.B) {
				st, err := OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				const acc = "b0000000-0000-4000-8000-000000000001"
				payload := make([]byte, 200)
				recs := make([]*fleetmq.Record, batch)
				at := time.Now()
				n := 0
				b.ResetTimer()
				cpu := testkit.ProcessCPU(b)
				for i := 0; i < b.N; i += batch {
					for j := range recs {
						// Neighbours in a batch are far apart in the
						// client order, as a fleet's are.
						client := fmt.Sprintf("dev-%d", n*7919%clients)
						n++
						at = at.Add(time.Microsecond)
						recs[j] = &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/telemetry/x",
							Class: "telemetry", QoS: 1, PublishedQoS: 1, Payload: payload, Received: at}
					}
					if err := st.AppendHistory(context.Background(), recs); err != nil {
						b.Fatal(err)
					}
					st.AfterCommit(context.Background())
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				b.ReportMetric(float64((testkit.ProcessCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/record")
			})
		}
	}
}

// BenchmarkDeleteHistory: retention's batched deletes of an account's
// oldest records from SQLite, each one transaction that holds the write
// lock (history commits wait for it).
func BenchmarkDeleteHistory(b *testing.B) {
	for _, batch := range []int{250, 500, 2000} {
		b.Run(fmt.Sprintf("batch-%d", batch), func(b *testing.B) {
			st, err := OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			const acc = "b0000000-0000-4000-8000-000000000001"
			if err := st.CreateAccount(context.Background(), &fleetmq.Account{ID: acc, Name: "bench", OwnerEmail: "bench@fleetmq.invalid", CreatedAt: time.Now()}, ""); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 200)
			at := time.Now().Add(-time.Hour)
			fill := func(n int) {
				recs := make([]*fleetmq.Record, 0, 2048)
				for i := range n {
					client := fmt.Sprintf("dev-%d", i%100)
					at = at.Add(time.Microsecond)
					recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/telemetry/x",
						Class: "telemetry", QoS: 1, PublishedQoS: 1, Payload: payload, Received: at})
					if len(recs) == cap(recs) || i == n-1 {
						if err := st.AppendHistory(context.Background(), recs); err != nil {
							b.Fatal(err)
						}
						recs = recs[:0]
					}
				}
			}
			fill(100_000)
			b.ResetTimer()
			for range b.N {
				n, err := st.DeleteHistory(context.Background(), acc, time.Now(), batch)
				if err != nil {
					b.Fatal(err)
				}
				if n < int64(batch) {
					b.StopTimer()
					fill(100_000)
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/batch")
		})
	}
}
