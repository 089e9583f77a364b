package restauth_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/sqlstore"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// BenchmarkAuthenticateAndAllow is the per-request cost of the REST
// middleware's checks: Authenticate on an index of a few hundred tokens
// (two accounts' 10 active ones each and 600 revoked) and Allow, with the clock
// read as a request does. Target: under 50 µs per request (issue 5).
func BenchmarkAuthenticateAndAllow(b *testing.B) {
	f := newFixture(b, filepath.Join(b.TempDir(), sqlstore.DatabaseFile))
	f.svc.OnRESTTokenChange = nil // one Refresh after the setup
	var values []string
	for _, acc := range []string{accA, accB} {
		for range 300 { // revoked tokens stay in the index
			tok, _ := f.token(b, acc, nil)
			must(b, f.svc.RevokeRESTToken(f.ctx, acc, tok.ID))
		}
		for range 10 {
			_, v := f.token(b, acc, nil)
			values = append(values, "Bearer "+v)
		}
	}
	must(b, f.auth.Refresh(f.ctx))
	l := restauth.NewLimiter(f.store, 1<<30)
	request := func(h string) {
		now := time.Now()
		tok, err := f.auth.Authenticate(h, now)
		if err != nil {
			b.Fatal(err)
		}
		if d := l.Allow(tok.ID, now); !d.Allowed {
			b.Fatalf("denied: %+v", d)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			request(values[i%len(values)])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				request(values[i%len(values)])
				i++
			}
		})
	})
}
