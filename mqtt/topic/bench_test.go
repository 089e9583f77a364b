package topic

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchAccounts times five filters each is the 100k filters of the benchmarks.
const benchAccounts = 20_000

// benchUUID returns a deterministic random UUID-shaped account id.
func benchUUID(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// benchFilters returns the account ids and about 100k filters of the shapes a fleet
// broker sees: per account two device state subscriptions, an account-wide "#", a
// telemetry "+" pattern and either a shared ingest subscription or a command
// subscription; plus a few cross-account monitoring filters in the wild shard.
func benchFilters() (accounts []string, subs [][2]string) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range benchAccounts {
		u := benchUUID(r)
		accounts = append(accounts, u)
		subs = append(subs,
			[2]string{fmt.Sprintf("%s/dev-%d/state/#", u, i%50), fmt.Sprintf("device-%d-a", i)},
			[2]string{fmt.Sprintf("%s/dev-%d/state/#", u, i%50+1), fmt.Sprintf("device-%d-b", i)},
			[2]string{u + "/#", fmt.Sprintf("dashboard-%d", i)},
			[2]string{u + "/+/telemetry/+", fmt.Sprintf("rules-%d", i)},
		)
		if i%4 == 0 {
			subs = append(subs, [2]string{"$share/ingest/" + u + "/+/telemetry/#", fmt.Sprintf("ingest-%d", i%3)})
		} else {
			subs = append(subs, [2]string{fmt.Sprintf("%s/dev-%d/cmd/+", u, i%50), fmt.Sprintf("device-%d-a", i)})
		}
	}
	subs = append(subs,
		[2]string{"+/+/alarm/#", "monitor-1"},
		[2]string{"+/dev-0/state/online", "monitor-2"},
	)
	return accounts, subs
}

func benchIndex(b *testing.B) (*Index[string, byte], []string) {
	b.Helper()
	accounts, subs := benchFilters()
	ix := NewIndex[string, byte]()
	for _, s := range subs {
		ix.Subscribe(s[0], s[1], 1)
	}
	return ix, accounts
}

func BenchmarkMatch(b *testing.B) {
	ix, accounts := benchIndex(b)
	name := accounts[4000] + "/dev-7/telemetry/temp" // account-wide #, telemetry +, shared ingest
	n := 0
	fn := func(string, byte, string) { n++ }
	b.ReportAllocs()
	for b.Loop() {
		ix.Match(name, fn)
	}
	if n == 0 || n%3 != 0 {
		b.Fatalf("%d deliveries, want 3 per message", n)
	}
	b.ReportMetric(float64(ix.Len()), "filters")
}

func BenchmarkMatchParallel(b *testing.B) {
	ix, accounts := benchIndex(b)
	names := make([]string, 1024)
	for i := range names {
		names[i] = fmt.Sprintf("%s/dev-%d/state/battery", accounts[(i*7919)%len(accounts)], i%50)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		fn := func(string, byte, string) {}
		for pb.Next() {
			ix.Match(names[i%len(names)], fn)
			i++
		}
	})
}

func BenchmarkSubscribe(b *testing.B) {
	ix, _ := benchIndex(b)
	_, subs := benchFilters()
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-session-%d", i)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		s := subs[i%len(subs)]
		ix.Subscribe(s[0], keys[i/len(subs)%len(keys)], 1) // a new subscription each time
		i++
	}
}

func BenchmarkSubscribeUnsubscribe(b *testing.B) {
	ix, accounts := benchIndex(b)
	filters := make([]string, 1024)
	for i := range filters {
		filters[i] = fmt.Sprintf("%s/dev-new-%d/state/#", accounts[i*13%len(accounts)], i)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		f := filters[i%len(filters)]
		ix.Subscribe(f, "churn", 1)
		ix.Unsubscribe(f, "churn")
		i++
	}
}
