package broker

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
)

// BenchmarkRoute measures routing alone, without the network: matching, grouping
// the matches per session and handing each session its copy, for n sessions
// that each have one subscription matching the message, or two overlapping
// ones. The sessions' queues are full, so a copy costs only the (lock-free)
// drop and the numbers are routing's own. Run:
// go test ./mqtt/broker -run '^$' -bench Route -benchmem
func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{1, 1000} {
		for _, overlap := range []bool{false, true} {
			name := fmt.Sprintf("sessions=%d", n)
			if overlap {
				name += "/overlap"
			}
			b.Run(name, func(b *testing.B) {
				s, err := New(Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close(context.Background())
				filters := []string{"acct/#"}
				if overlap {
					filters = append(filters, "acct/+/telemetry")
				}
				for i := range n {
					ss := &session{srv: s, key: fmt.Sprintf("s%d", i), subs: make(map[string]*subscription)}
					ss.full.Store(true)
					for j, f := range filters {
						s.subs.Subscribe(f, ss.key, subscription{sess: ss, wire: f, filter: f, qos: 1, id: uint32(j + 1)})
					}
				}
				m := &Message{Topic: "acct/dev-1/telemetry", QoS: 1, Payload: make([]byte, 200)}
				b.ReportAllocs()
				for b.Loop() {
					s.route(m, nil)
				}
				b.ReportMetric(float64(s.stats.drops[DropQueueFull].Load())/float64(b.N), "copies/op")
			})
		}
	}
}
