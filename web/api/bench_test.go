package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/web/api"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// BenchmarkAPIMiddleware measures what authentication and the rate limit
// cost a request, through App.API.ServeHTTP with httptest (no network),
// on a real App (SQLite). The target: the auth + rate-limit
// middleware adds under 50 µs per request.
//
//   - publishers: an authenticated GET /publishers of an account without
//     clients, the whole stack (routing, middleware, handler, JSON);
//   - no-token: the same request without a token, refused by the
//     middleware (routing and the problem response, no store access);
//   - token+limit: the token check (SHA-256, index lookup, constant-time
//     compare) and the limiter's count;
//   - account-read: the account read from the store that the add-on check
//     needs; the middleware's own work is these two;
//   - handler-store: the handler's own store read (the account's clients),
//     what the route costs without the middleware.
func BenchmarkAPIMiddleware(b *testing.B) {
	e := start(b, func(c *app.Config) {
		c.RESTRateLimit = 1 << 31
		c.RESTAccountLimits = restauth.AccountLimits{Rate: 1 << 30, Burst: 1 << 30}
	})
	tn := e.tenant(b, "Bench", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	target := api.Prefix + "/publishers"
	bearer := "Bearer " + tn.Token

	serve := func(b *testing.B, header string, want int) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			if header != "" {
				r.Header.Set("Authorization", header)
			}
			w := httptest.NewRecorder()
			e.API.ServeHTTP(w, r)
			if i == 0 && w.Code != want {
				b.Fatalf("GET %s: %d %s, want %d", target, w.Code, w.Body, want)
			}
		}
	}
	b.Run("publishers", func(b *testing.B) { serve(b, bearer, http.StatusOK) })
	b.Run("no-token", func(b *testing.B) { serve(b, "", http.StatusUnauthorized) })
	b.Run("token+limit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			now := e.clock.Now()
			tok, err := e.Auth.Authenticate(bearer, now)
			if err != nil {
				b.Fatal(err)
			}
			if d := e.Limiter.Allow(tok.ID, now); !d.Allowed {
				b.Fatal("rate limited")
			}
		}
	})
	b.Run("account-read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Store.Account(e.ctx, tn.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handler-store", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Store.Clients(e.ctx, tn.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
