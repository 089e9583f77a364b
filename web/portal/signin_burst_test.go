package portal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// signinWork counts what sign-ins cost: the store's owner-hash queries,
// the password checks and the hashes made, how many of them run at once
// (at most), and holds each at a gate until the test opens it.
type signinWork struct {
	gate chan struct{}

	mu                      sync.Mutex
	inFlight, most          int
	queries, checks, hashes int
}

// run counts one piece of work (into n), waits for the gate, then does f.
func (w *signinWork) run(n *int, f func()) {
	w.mu.Lock()
	*n++
	w.inFlight++
	w.most = max(w.most, w.inFlight)
	w.mu.Unlock()
	<-w.gate
	f()
	w.mu.Lock()
	w.inFlight--
	w.mu.Unlock()
}

func (w *signinWork) snapshot() (most, queries, checks, hashes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.queries, w.checks, w.hashes
}

// countingStore is the store with its owner-hash query counted.
type countingStore struct {
	Store
	w *signinWork
}

func (s countingStore) OwnerPasswordHash(ctx context.Context, email string) (id, hash string, err error) {
	s.w.run(&s.w.queries, func() { id, hash, err = s.Store.OwnerPasswordHash(ctx, email) })
	return id, hash, err
}

// cheapHash is an argon2id hash in control.HashPassword's format with
// small parameters.
func cheapHash(pw string) string {
	salt := make([]byte, 16)
	rand.Read(salt)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=64,t=1,p=1$%s$%s", argon2.Version, enc.EncodeToString(salt),
		enc.EncodeToString(argon2.IDKey([]byte(pw), salt, 1, 64, 1, 32)))
}

// TestSigninBurstOneCheckAtATime, on SQLite and on PostgreSQL: the sign-in
// page (which starts making the dummy hash for unknown addresses), then 40
// simultaneous wrong-password sign-ins of one owner from one address. 5
// are evaluated (401) and 35 throttled (429) without a store query or a
// hash; and the 5 store queries, the 5 checks and the dummy hash run one
// at a time: a burst neither takes more than one core and one hash's
// memory (19 MiB) nor opens more store connections (on PostgreSQL a new
// server process each) than one sign-in does.
func TestSigninBurstOneCheckAtATime(t *testing.T) {
	pgtest.ForEachDSN(t, func(t *testing.T, dsn string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := sqlstore.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		const email = "owner@acme.example"
		acc := &fleetmq.Account{ID: "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a", Name: "Acme", OwnerEmail: email, Plan: "starter", CreatedAt: time.Now().UTC()}
		if err := st.CreateAccount(ctx, acc, cheapHash("correct horse battery")); err != nil {
			t.Fatal(err)
		}

		w := &signinWork{gate: make(chan struct{})}
		opened := false
		open := func() {
			if !opened {
				opened = true
				close(w.gate)
			}
		}
		defer open()
		p := New(Deps{Store: countingStore{st, w}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, Options{})
		p.hashPassword = func(pw string) (h string, err error) {
			w.run(&w.hashes, func() { h = cheapHash(pw) })
			return h, nil
		}
		p.verifyPassword = func(hash, pw string) (ok bool, err error) {
			w.run(&w.checks, func() { ok, err = control.CheckPassword(hash, pw) })
			return ok, err
		}
		srv := httptest.NewServer(p) // 127.0.0.1
		t.Cleanup(srv.Close)
		hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		t.Cleanup(hc.CloseIdleConnections)

		resp, err := hc.Get(srv.URL + "/signin")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		var token string
		for _, c := range resp.Cookies() {
			if c.Name == SigninCookie {
				token = c.Value
			}
		}
		if token == "" {
			t.Fatal("GET /signin set no sign-in cookie")
		}

		const n, evaluated = 40, 5
		form := url.Values{"email": {email}, "password": {"wrong password 1234"}, CSRFField: {token}}.Encode()
		codes := make(chan int, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/signin", strings.NewReader(form))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.AddCookie(&http.Cookie{Name: SigninCookie, Value: token})
				<-start
				code := -1
				if resp, err := hc.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				codes <- code
			}()
		}
		close(start)
		count := map[int]int{}
		deadline := time.After(30 * time.Second)
		for range n - evaluated { // the throttled ones answer while the rest wait at the gate
			select {
			case c := <-codes:
				count[c]++
			case <-deadline:
				t.Fatalf("the throttled sign-ins did not answer while the evaluated ones waited: %v", count)
			}
		}
		if count[http.StatusTooManyRequests] != n-evaluated {
			t.Fatalf("the first %d answers: %v, want all 429", n-evaluated, count)
		}
		// Give the admitted sign-ins a moment to reach the store or a hash
		// together, if they can; stop at once if they do.
		testkit.Within(500*time.Millisecond, func() bool { most, _, _, _ := w.snapshot(); return most > 1 })
		open()
		wg.Wait()
		close(codes)
		for c := range codes {
			count[c]++
		}
		if count[http.StatusUnauthorized] != evaluated || count[http.StatusTooManyRequests] != n-evaluated {
			t.Fatalf("%d wrong passwords at once: %v; want %d evaluated (401), %d throttled (429)", n, count, evaluated, n-evaluated)
		}
		most, queries, checks, hashes := w.snapshot()
		if queries != evaluated || checks != evaluated || hashes > 1 {
			t.Fatalf("store queries %d, checks %d, hashes made %d; want %d, %d and at most 1 (the dummy)", queries, checks, hashes, evaluated, evaluated)
		}
		if most != 1 {
			t.Fatalf("%d store queries and hashes ran at once, want one at a time", most)
		}
	})
}
