package restauth_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/sqlstore"
	"github.com/fleetmq/fleetmq/web/restauth"
)

var t0 = time.Date(2026, 3, 14, 10, 15, 0, 0, time.UTC)

const (
	accA = "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a"
	accB = "9e1d2c3b-4a59-4687-8f6e-5d4c3b2a1908"
)

// forEachDSN runs f on SQLite and PostgreSQL, as the sqlstore contract
// suite does (pgtest.ForEachDSN).
func forEachDSN(t *testing.T, f func(t *testing.T, dsn string)) { pgtest.ForEachDSN(t, f) }

func openStore(t testing.TB, dsn string) *sqlstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fixture is a store with accounts A and B on plan starter, the control
// service on it (clock at t0), and an Authenticator refreshed by the
// service's hook, as the app wires them.
type fixture struct {
	ctx   context.Context
	store *sqlstore.Store
	svc   *control.Service
	clock *testkit.Clock
	auth  *restauth.Authenticator
}

func newFixture(t testing.TB, dsn string) *fixture {
	t.Helper()
	f := &fixture{ctx: ctxT(t), store: openStore(t, dsn), clock: testkit.NewClock(t0)}
	for i, id := range []string{accA, accB} {
		a := &fleetmq.Account{ID: id, Name: "acc" + id[:4], OwnerEmail: id[:8] + "@example.com", Plan: "starter", CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		must(t, f.store.CreateAccount(f.ctx, a, "unused"))
	}
	f.svc = &control.Service{Store: f.store, Now: f.clock.Now}
	var err error
	f.auth, err = restauth.New(f.ctx, f.store)
	must(t, err)
	f.svc.OnRESTTokenChange = func() {
		if err := f.auth.Refresh(f.ctx); err != nil {
			t.Errorf("refresh from the hook: %v", err)
		}
	}
	return f
}

func (f *fixture) token(t testing.TB, acc string, days *int) (*fleetmq.RESTToken, string) {
	t.Helper()
	tok, v, err := f.svc.CreateRESTToken(f.ctx, acc, control.NewRESTToken{Label: "test", ExpiresInDays: days})
	must(t, err)
	return tok, v
}

// wantErr checks Authenticate refused with exactly want (code and message).
func wantErr(t *testing.T, what string, tok *fleetmq.RESTToken, err error, want *fleetmq.Error) {
	t.Helper()
	if tok != nil || !errors.Is(err, want) || fleetmq.CodeOf(err) != want.Code || err.Error() != want.Message {
		t.Fatalf("%s: got %+v, %v; want %s (%q)", what, tok, err, want.Code, want.Message)
	}
}

func TestAuthenticateRefusals(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		f := newFixture(t, dsn)
		_, value := f.token(t, accA, nil)
		stranger := fleetmq.NewRESTTokenValue() // well-formed, never stored
		changed := value[:20] + string("ab"[boolInt(value[20] == 'a')]) + value[21:]
		cases := []struct {
			header string
			want   *fleetmq.Error
		}{
			{"", restauth.ErrMissingHeader},
			{"   ", restauth.ErrMissingHeader},
			{value, restauth.ErrNotBearer},
			{"Basic " + value, restauth.ErrNotBearer},
			{"Bearer", restauth.ErrNotBearer},
			{"Bearer    ", restauth.ErrNotBearer},
			{"Bearer" + value, restauth.ErrNotBearer},
			{"Bearer " + value + " extra", restauth.ErrNotBearer},
			{"Token " + value, restauth.ErrNotBearer},
			{"Bearer x", restauth.ErrMalformed},
			{"Bearer " + value[:49], restauth.ErrMalformed},
			{"Bearer " + value + "0", restauth.ErrMalformed},
			{"Bearer " + changed, restauth.ErrMalformed},
			{"Bearer " + strings.ToUpper(value), restauth.ErrMalformed},
			{"Bearer " + stranger, restauth.ErrUnknown},
		}
		for _, c := range cases {
			tok, err := f.auth.Authenticate(c.header, t0)
			wantErr(t, "header "+c.header, tok, err, c.want)
		}
		for _, h := range []string{"Bearer " + value, "bearer " + value, "BEARER  " + value, "Bearer\t" + value, "  Bearer " + value + " \t"} {
			tok, err := f.auth.Authenticate(h, t0)
			must(t, err)
			if tok.AccountID != accA {
				t.Fatalf("%q: account %s, want A", h, tok.AccountID)
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestMQTTCredentialsAreNotRESTTokens: a publisher or subscriber password,
// its username, or both as Basic credentials never authenticate here.
func TestMQTTCredentialsAreNotRESTTokens(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		f := newFixture(t, dsn)
		f.token(t, accA, nil) // the index is not empty
		for _, kind := range []string{fleetmq.KindPublisher, fleetmq.KindSubscriber} {
			c, secret, err := f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: kind})
			must(t, err)
			must(t, f.auth.Refresh(f.ctx))
			for _, v := range []string{secret, c.Username, c.Username + ":" + secret, fleetmq.RESTTokenPrefix + secret} {
				tok, err := f.auth.Authenticate("Bearer "+v, t0)
				wantErr(t, kind+" credential as a bearer token", tok, err, restauth.ErrMalformed)
			}
			tok, err := f.auth.Authenticate("Basic "+base64.StdEncoding.EncodeToString([]byte(c.Username+":"+secret)), t0)
			wantErr(t, kind+" credential as Basic auth", tok, err, restauth.ErrNotBearer)
		}
	})
}

func TestAuthenticateTwoAccounts(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		f := newFixture(t, dsn)
		ta, va := f.token(t, accA, nil)
		tb, vb := f.token(t, accB, nil)
		for _, c := range []struct {
			value string
			want  *fleetmq.RESTToken
		}{{va, ta}, {vb, tb}} {
			got, err := f.auth.Authenticate("Bearer "+c.value, t0.Add(time.Minute))
			must(t, err)
			if got.ID != c.want.ID || got.AccountID != c.want.AccountID || got.Hash != c.want.Hash || !got.LastUsedAt.Equal(t0.Add(time.Minute)) {
				t.Fatalf("authenticated %+v, want %+v", got, c.want)
			}
			got.AccountID = "tampered" // a copy: the index is not changed
		}
		got, err := f.auth.Authenticate("Bearer "+va, t0)
		must(t, err)
		if got.AccountID != accA {
			t.Fatalf("the returned token aliased the index: account %q", got.AccountID)
		}
		// Revoking A's token (by B: refused; by A: done) leaves B's working.
		if err := f.svc.RevokeRESTToken(f.ctx, accB, ta.ID); fleetmq.CodeOf(err) != fleetmq.CodeNotFound {
			t.Fatalf("B revoking A's token: %v", err)
		}
		_, err = f.auth.Authenticate("Bearer "+va, t0)
		must(t, err)
		must(t, f.svc.RevokeRESTToken(f.ctx, accA, ta.ID))
		tok, err := f.auth.Authenticate("Bearer "+va, t0)
		wantErr(t, "A's revoked token", tok, err, restauth.ErrRevoked)
		_, err = f.auth.Authenticate("Bearer "+vb, t0)
		must(t, err)
	})
}

func TestRevocationTakesEffectAtOnce(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		f := newFixture(t, dsn)
		// A new token works at once: the hook refreshed the index.
		tok, v := f.token(t, accA, nil)
		_, err := f.auth.Authenticate("Bearer "+v, t0)
		must(t, err)
		// So does a revocation, with no refresh but the hook's.
		must(t, f.svc.RevokeRESTToken(f.ctx, accA, tok.ID))
		got, err := f.auth.Authenticate("Bearer "+v, t0)
		wantErr(t, "revoked through the service", got, err, restauth.ErrRevoked)

		// A revocation by another process (straight in the store, no hook)
		// takes effect at the Refresh the app makes when the control-plane
		// version moves.
		tok2, v2 := f.token(t, accA, nil)
		v0, err := f.store.Version(f.ctx)
		must(t, err)
		must(t, f.store.RevokeRESTToken(f.ctx, accA, tok2.ID, t0))
		if v1, err := f.store.Version(f.ctx); err != nil || v1 == v0 {
			t.Fatalf("revocation did not move the version (%d -> %d, %v)", v0, v1, err)
		}
		_, err = f.auth.Authenticate("Bearer "+v2, t0)
		must(t, err) // not yet seen
		must(t, f.auth.Refresh(f.ctx))
		got, err = f.auth.Authenticate("Bearer "+v2, t0)
		wantErr(t, "revoked in the store, after Refresh", got, err, restauth.ErrRevoked)
	})
}

func TestExpiryAndAccountState(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		f := newFixture(t, dsn)
		tok, v := f.token(t, accA, ptr(1))
		exp := t0.AddDate(0, 0, 1)
		if !tok.ExpiresAt.Equal(exp) {
			t.Fatalf("expires %v, want %v", tok.ExpiresAt, exp)
		}
		_, err := f.auth.Authenticate("Bearer "+v, exp.Add(-time.Microsecond))
		must(t, err)
		got, err := f.auth.Authenticate("Bearer "+v, exp)
		wantErr(t, "at expiry", got, err, restauth.ErrExpired)
		got, err = f.auth.Authenticate("Bearer "+v, exp.AddDate(1, 0, 0))
		wantErr(t, "a year after expiry", got, err, restauth.ErrExpired)
		// Revoked and expired: revoked.
		must(t, f.svc.RevokeRESTToken(f.ctx, accA, tok.ID))
		got, err = f.auth.Authenticate("Bearer "+v, exp)
		wantErr(t, "revoked and expired", got, err, restauth.ErrRevoked)

		// A suspended account's tokens are refused until it is resumed.
		_, vb := f.token(t, accB, nil)
		must(t, f.store.SetSuspended(f.ctx, accB, true))
		must(t, f.auth.Refresh(f.ctx))
		got, err = f.auth.Authenticate("Bearer "+vb, t0)
		wantErr(t, "suspended account", got, err, restauth.ErrAccountSuspended)
		must(t, f.store.SetSuspended(f.ctx, accB, false))
		must(t, f.auth.Refresh(f.ctx))
		_, err = f.auth.Authenticate("Bearer "+vb, t0)
		must(t, err)
	})
}

// TestTokenOfMissingAccount: an index entry whose account is gone (here a
// store that lists no accounts) authenticates nobody.
func TestTokenOfMissingAccount(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), sqlstore.DatabaseFile))
	_, v := f.token(t, accA, nil)
	auth, err := restauth.New(f.ctx, noAccounts{f.store})
	must(t, err)
	got, err := auth.Authenticate("Bearer "+v, t0)
	wantErr(t, "token of a missing account", got, err, restauth.ErrUnknown)
}

type noAccounts struct{ *sqlstore.Store }

func (noAccounts) Accounts(context.Context) ([]*fleetmq.Account, error) { return nil, nil }

// touchCounter counts TouchRESTTokens calls and can fail them.
type touchCounter struct {
	*sqlstore.Store
	calls atomic.Int32
	fail  atomic.Bool
}

func (s *touchCounter) TouchRESTTokens(ctx context.Context, m map[string]time.Time) error {
	s.calls.Add(1)
	if s.fail.Load() {
		return errors.New("database unavailable")
	}
	return s.Store.TouchRESTTokens(ctx, m)
}

func TestLastUseIsFlushed(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		f := newFixture(t, dsn)
		ta, va := f.token(t, accA, nil)
		tb, _ := f.token(t, accB, nil)
		st := &touchCounter{Store: f.store}
		auth, err := restauth.New(f.ctx, st)
		must(t, err)
		lastUsed := func() map[string]time.Time {
			t.Helper()
			out := map[string]time.Time{}
			for _, acc := range []string{accA, accB} {
				ts, err := f.svc.RESTTokens(f.ctx, acc)
				must(t, err)
				for _, tok := range ts {
					out[tok.ID] = tok.LastUsedAt
				}
			}
			return out
		}

		must(t, auth.Flush(f.ctx))
		if n := st.calls.Load(); n != 0 {
			t.Fatalf("Flush with nothing used wrote %d times", n)
		}
		t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
		for _, at := range []time.Time{t1, t2, t1} { // out of order: the latest wins
			_, err := auth.Authenticate("Bearer "+va, at)
			must(t, err)
		}
		if got := lastUsed()[ta.ID]; !got.IsZero() {
			t.Fatalf("last use %v stored before Flush", got)
		}
		must(t, auth.Flush(f.ctx))
		if got := lastUsed(); !got[ta.ID].Equal(t2) || !got[tb.ID].IsZero() {
			t.Fatalf("after Flush: %v, want A's token at %v and B's never used", got, t2)
		}
		must(t, auth.Flush(f.ctx))
		if n := st.calls.Load(); n != 1 {
			t.Fatalf("%d writes after a second Flush with nothing new, want 1", n)
		}

		// A failed Flush keeps the use pending; a Refresh in between loses
		// nothing.
		t3 := t0.Add(3 * time.Minute)
		_, err = auth.Authenticate("Bearer "+va, t3)
		must(t, err)
		st.fail.Store(true)
		if err := auth.Flush(f.ctx); err == nil {
			t.Fatal("Flush on a failing store returned nil")
		}
		st.fail.Store(false)
		must(t, auth.Refresh(f.ctx))
		must(t, auth.Flush(f.ctx))
		if got := lastUsed()[ta.ID]; !got.Equal(t3) {
			t.Fatalf("after a failed Flush, a Refresh and a Flush: %v, want %v", got, t3)
		}
		// A refused request is no use.
		must(t, f.svc.RevokeRESTToken(f.ctx, accA, ta.ID))
		must(t, auth.Refresh(f.ctx))
		_, err = auth.Authenticate("Bearer "+va, t3.Add(time.Hour))
		wantErr(t, "revoked", nil, err, restauth.ErrRevoked)
		must(t, auth.Flush(f.ctx))
		if got := lastUsed()[ta.ID]; !got.Equal(t3) {
			t.Fatalf("a refused request moved the last use to %v", got)
		}
	})
}

// TestConcurrentAuthenticateRefreshFlush runs the three together under the
// race detector: requests never see a half-built index.
func TestConcurrentAuthenticateRefreshFlush(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), sqlstore.DatabaseFile))
	_, va := f.token(t, accA, nil)
	_, vb := f.token(t, accB, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := []string{va, vb}[g%2]
			for i := range 300 {
				if _, err := f.auth.Authenticate("Bearer "+v, t0.Add(time.Duration(i)*time.Second)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 5 {
		must(t, f.auth.Refresh(f.ctx))
		must(t, f.auth.Flush(f.ctx))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	must(t, f.auth.Flush(f.ctx))
	ts, err := f.svc.RESTTokens(f.ctx, accA)
	must(t, err)
	if want := t0.Add(299 * time.Second); !ts[0].LastUsedAt.Equal(want) {
		t.Fatalf("last use %v, want %v", ts[0].LastUsedAt, want)
	}
}

func ptr[T any](v T) *T { return &v }

// extraTokens adds rows to AllRESTTokens as a damaged database might hold.
type extraTokens struct {
	*sqlstore.Store
	extra []*fleetmq.RESTToken
}

func (s extraTokens) AllRESTTokens(ctx context.Context) ([]*fleetmq.RESTToken, error) {
	ts, err := s.Store.AllRESTTokens(ctx)
	return append(ts, s.extra...), err
}

// TestRefreshSkipsDamagedHashes: a stored hash that is not 64 hex digits
// matches nothing and does not stop the other tokens from working.
func TestRefreshSkipsDamagedHashes(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), sqlstore.DatabaseFile))
	_, v := f.token(t, accA, nil)
	good := fleetmq.HashSecret(v)
	var extra []*fleetmq.RESTToken
	for i, h := range []string{"", "abc", good + "00", good[:63], strings.Repeat("zz", 32), strings.Repeat("0", 64)} {
		extra = append(extra, &fleetmq.RESTToken{ID: fmt.Sprintf("bad-%d", i), AccountID: accB, Hash: h, CreatedAt: t0})
	}
	auth, err := restauth.New(f.ctx, extraTokens{f.store, extra})
	must(t, err)
	tok, err := auth.Authenticate("Bearer "+v, t0)
	must(t, err)
	if tok.AccountID != accA {
		t.Fatalf("authenticated as %s", tok.AccountID)
	}
}
