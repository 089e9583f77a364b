package sqlstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
)

// BenchmarkAppendHistory: group inserts of 200-byte records into SQLite, as
// the ingest writer does (one transaction per batch).
func BenchmarkAppendHistory(b *testing.B) {
	for _, batch := range []int{1, 8, 64, 256, 2048, 8192} {
		b.Run(fmt.Sprintf("batch-%d", batch), func(b *testing.B) {
			st, err := OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			const acc = "b0000000-0000-4000-8000-000000000001"
			payload := make([]byte, 200)
			recs := make([]*fleetmq.Record, batch)
			at := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				for j := range recs {
					client := fmt.Sprintf("dev-%d", j%100)
					at = at.Add(time.Microsecond)
					recs[j] = &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/telemetry/x",
						Class: "telemetry", QoS: 1, PublishedQoS: 1, Payload: payload, Received: at}
				}
				if err := st.AppendHistory(context.Background(), recs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
