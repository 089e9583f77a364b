package sqlstore_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// restToken returns a token of acc created at t0+minute minutes.
func restToken(acc, id string, minute int) *fleetmq.RESTToken {
	return &fleetmq.RESTToken{ID: id, AccountID: acc, Label: "label " + id, Prefix: "svc_mqtt_rest_" + id[:4],
		Hash: fleetmq.HashSecret("value of " + id), CreatedAt: t0.Add(time.Duration(minute) * time.Minute)}
}

func ids(ts []*fleetmq.RESTToken) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func TestRESTTokensStayInTheirAccount(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		a1 := restToken(accA, "a1-token", 1)
		a1.ExpiresAt = t0.Add(30 * 24 * time.Hour)
		a1.LastUsedAt = t0.Add(90 * time.Second)
		a2 := restToken(accA, "a2-token", 2)
		a3 := restToken(accA, "a3-token", 2) // same creation time as a2: the id breaks the tie
		b1 := restToken(accB, "b1-token", 0)
		for _, tok := range []*fleetmq.RESTToken{a1, a2, a3, b1} {
			must(t, s.CreateRESTToken(ctx, tok))
		}

		got, err := s.RESTTokens(ctx, accA)
		must(t, err)
		if want := []string{"a3-token", "a2-token", "a1-token"}; !reflect.DeepEqual(ids(got), want) {
			t.Fatalf("RESTTokens(A) = %v, want %v (newest first, A's only)", ids(got), want)
		}
		if !reflect.DeepEqual(got[2], a1) {
			t.Fatalf("a1 read back as\n%+v\nwant\n%+v", got[2], a1)
		}
		got, err = s.RESTTokens(ctx, accB)
		must(t, err)
		if !reflect.DeepEqual(ids(got), []string{"b1-token"}) || !reflect.DeepEqual(got[0], b1) {
			t.Fatalf("RESTTokens(B) = %+v, want b1 only", got)
		}
		bBefore := got

		// A cannot revoke B's token, nor an unknown one.
		wantCode(t, "A revoking B's token", s.RevokeRESTToken(ctx, accA, "b1-token", t0), fleetmq.CodeNotFound)
		wantCode(t, "A revoking an unknown token", s.RevokeRESTToken(ctx, accA, "nope", t0), fleetmq.CodeNotFound)
		wantCode(t, "B revoking A's token", s.RevokeRESTToken(ctx, accB, "a1-token", t0), fleetmq.CodeNotFound)
		got, err = s.RESTTokens(ctx, accB)
		must(t, err)
		if !reflect.DeepEqual(got, bBefore) {
			t.Fatalf("B's tokens changed: %+v", got)
		}

		// Revoking twice keeps the first time; revoked tokens stay listed.
		at := t0.Add(time.Hour)
		must(t, s.RevokeRESTToken(ctx, accA, "a2-token", at))
		must(t, s.RevokeRESTToken(ctx, accA, "a2-token", at.Add(time.Hour)))
		got, err = s.RESTTokens(ctx, accA)
		must(t, err)
		if len(got) != 3 || got[1].ID != "a2-token" || !got[1].RevokedAt.Equal(at) || got[0].Revoked() || got[2].Revoked() {
			t.Fatalf("after revoking a2 twice: %+v", got)
		}

		all, err := s.AllRESTTokens(ctx)
		must(t, err)
		byID := map[string]*fleetmq.RESTToken{}
		for _, tok := range all {
			byID[tok.ID] = tok
		}
		if len(all) != 4 || byID["b1-token"].AccountID != accB || !byID["a2-token"].Revoked() || byID["a1-token"].Hash != a1.Hash {
			t.Fatalf("AllRESTTokens = %+v, want both accounts' 4, revoked included", all)
		}

		// Unknown account, taken id, taken hash.
		wantCode(t, "token of a missing account", s.CreateRESTToken(ctx, restToken("00000000-0000-4000-8000-000000000000", "x1-token", 3)), fleetmq.CodeNotFound)
		wantCode(t, "taken id", s.CreateRESTToken(ctx, restToken(accB, "a1-token", 3)), fleetmq.CodeConflict)
		dup := restToken(accB, "b2-token", 3)
		dup.Hash = a1.Hash
		wantCode(t, "taken hash (in another account)", s.CreateRESTToken(ctx, dup), fleetmq.CodeConflict)
		all, err = s.AllRESTTokens(ctx)
		must(t, err)
		if len(all) != 4 {
			t.Fatalf("refused creations left %d tokens, want 4", len(all))
		}
	})
}

func TestCreateRESTTokenLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		max := fleetmq.MaxActiveRESTTokens

		// Concurrent creations: exactly the limit pass.
		const tries = 2*fleetmq.MaxActiveRESTTokens + 4
		raceToLimit(t, "CreateRESTToken", tries, max, func(i int) error {
			return s.CreateRESTToken(ctx, restToken(accA, fmt.Sprintf("a-%02d-token", i), 1))
		})
		toks, err := s.RESTTokens(ctx, accA)
		must(t, err)
		if len(toks) != max {
			t.Fatalf("A has %d tokens, want %d", len(toks), max)
		}
		// B's limit is its own.
		must(t, s.CreateRESTToken(ctx, restToken(accB, "b-00-token", 1)))

		// A revoked token no longer counts.
		wantCode(t, "11th token", s.CreateRESTToken(ctx, restToken(accA, "a-n1-token", 2)), fleetmq.CodeConflict)
		must(t, s.RevokeRESTToken(ctx, accA, toks[0].ID, t0.Add(2*time.Minute)))
		must(t, s.CreateRESTToken(ctx, restToken(accA, "a-n1-token", 2)))
		wantCode(t, "11th token again", s.CreateRESTToken(ctx, restToken(accA, "a-n2-token", 3)), fleetmq.CodeConflict)

		// An expired one neither: expiry is judged at the new token's
		// creation time, and a token is expired from its ExpiresAt on.
		must(t, s.RevokeRESTToken(ctx, accA, "a-n1-token", t0.Add(3*time.Minute)))
		exp := restToken(accA, "a-n3-token", 3)
		exp.ExpiresAt = t0.Add(10 * time.Minute)
		must(t, s.CreateRESTToken(ctx, exp))
		wantCode(t, "11th while the expiring one is active", s.CreateRESTToken(ctx, restToken(accA, "a-n4-token", 9)), fleetmq.CodeConflict)
		must(t, s.CreateRESTToken(ctx, restToken(accA, "a-n4-token", 10)))
		toks, err = s.RESTTokens(ctx, accA)
		must(t, err)
		if len(toks) != max+3 {
			t.Fatalf("A has %d tokens, want %d (2 revoked, 1 expired, %d active)", len(toks), max+3, max)
		}
		active := 0
		for _, tok := range toks {
			if tok.Active(t0.Add(10 * time.Minute)) {
				active++
			}
		}
		if active != max {
			t.Fatalf("%d active tokens, want %d", active, max)
		}
	})
}

// TestCreateRESTTokenRefusedWhileSuspended: a suspended account cannot
// get a new REST API token, whoever asks the store (the check is in the
// creating write itself); another account still can, and the suspended one
// can again once resumed.
func TestCreateRESTTokenRefusedWhileSuspended(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		must(t, s.SetSuspended(ctx, accA, true))
		err := s.CreateRESTToken(ctx, restToken(accA, "a-00-token", 1))
		wantCode(t, "token of a suspended account", err, fleetmq.CodeConflict)
		toks, err := s.RESTTokens(ctx, accA)
		must(t, err)
		if len(toks) != 0 {
			t.Fatalf("a suspended account got tokens %v", ids(toks))
		}
		must(t, s.CreateRESTToken(ctx, restToken(accB, "b-00-token", 1)))
		must(t, s.SetSuspended(ctx, accA, false))
		must(t, s.CreateRESTToken(ctx, restToken(accA, "a-01-token", 2)))
	})
}

func TestRESTTokenVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		version := func() int64 {
			t.Helper()
			v, err := s.Version(ctx)
			must(t, err)
			return v
		}
		moves := func(what string, f func() error) {
			t.Helper()
			before := version()
			must(t, f())
			if version() == before {
				t.Fatalf("%s did not move the version", what)
			}
		}
		stays := func(what string, f func() error) {
			t.Helper()
			before := version()
			f()
			if v := version(); v != before {
				t.Fatalf("%s moved the version from %d to %d", what, before, v)
			}
		}
		moves("CreateRESTToken", func() error { return s.CreateRESTToken(ctx, restToken(accA, "a1-token", 1)) })
		moves("RevokeRESTToken", func() error { return s.RevokeRESTToken(ctx, accA, "a1-token", t0) })
		stays("reads", func() error {
			_, err1 := s.RESTTokens(ctx, accA)
			_, err2 := s.AllRESTTokens(ctx)
			_, err3 := s.RESTRequests(ctx, t0.Truncate(time.Hour))
			must(t, err1)
			must(t, err2)
			must(t, err3)
			return nil
		})
		// Bookkeeping on every request must not make the broker reload.
		stays("TouchRESTTokens", func() error {
			return s.TouchRESTTokens(ctx, map[string]time.Time{"a1-token": t0})
		})
		stays("AddRESTRequests", func() error {
			return s.AddRESTRequests(ctx, t0.Truncate(time.Hour), map[string]int64{"a1-token": 3})
		})
		stays("a refused creation", func() error {
			wantCode(t, "duplicate", s.CreateRESTToken(ctx, restToken(accA, "a1-token", 1)), fleetmq.CodeConflict)
			return nil
		})
		stays("a refused revocation", func() error {
			wantCode(t, "B's revocation of A's", s.RevokeRESTToken(ctx, accB, "a1-token", t0), fleetmq.CodeNotFound)
			return nil
		})
	})
}

func TestTouchRESTTokensNeverMovesBack(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		must(t, s.CreateRESTToken(ctx, restToken(accA, "a1-token", 1)))
		must(t, s.CreateRESTToken(ctx, restToken(accA, "a2-token", 1)))
		must(t, s.CreateRESTToken(ctx, restToken(accB, "b1-token", 1)))
		lastUsed := func() map[string]time.Time {
			t.Helper()
			all, err := s.AllRESTTokens(ctx)
			must(t, err)
			out := map[string]time.Time{}
			for _, tok := range all {
				out[tok.ID] = tok.LastUsedAt
			}
			return out
		}
		t1, t2 := t0.Add(time.Hour+time.Microsecond), t0.Add(2*time.Hour)
		must(t, s.TouchRESTTokens(ctx, nil))
		must(t, s.TouchRESTTokens(ctx, map[string]time.Time{"a1-token": t2, "b1-token": t1, "gone-token": t2}))
		must(t, s.TouchRESTTokens(ctx, map[string]time.Time{"a1-token": t1, "b1-token": t2}))
		want := map[string]time.Time{"a1-token": t2, "a2-token": {}, "b1-token": t2}
		if got := lastUsed(); !reflect.DeepEqual(got, want) {
			t.Fatalf("last used = %v, want %v (never backwards, never used stays zero)", got, want)
		}
	})
}

func TestRESTRequestWindows(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		w := t0.Truncate(time.Hour)
		counts := func(window time.Time) map[string]int64 {
			t.Helper()
			c, err := s.RESTRequests(ctx, window)
			must(t, err)
			return c
		}
		if c := counts(w); len(c) != 0 {
			t.Fatalf("empty store: %v", c)
		}
		must(t, s.AddRESTRequests(ctx, w, map[string]int64{"tok-a": 3, "tok-b": 1}))
		must(t, s.AddRESTRequests(ctx, w, map[string]int64{"tok-a": 2, "tok-c": 0}))
		must(t, s.AddRESTRequests(ctx, w.Add(time.Hour), map[string]int64{"tok-a": 7}))
		must(t, s.AddRESTRequests(ctx, w, nil))
		if c := counts(w); !reflect.DeepEqual(c, map[string]int64{"tok-a": 5, "tok-b": 1}) {
			t.Fatalf("window %v: %v, want tok-a 5, tok-b 1", w, c)
		}
		if c := counts(w.Add(time.Hour)); !reflect.DeepEqual(c, map[string]int64{"tok-a": 7}) {
			t.Fatalf("next window: %v, want tok-a 7", c)
		}
		// Adding to w+2h keeps w (two hours back) ...
		must(t, s.AddRESTRequests(ctx, w.Add(2*time.Hour), map[string]int64{"tok-b": 1}))
		if c := counts(w); c["tok-a"] != 5 {
			t.Fatalf("window w deleted too early: %v", c)
		}
		// ... and adding to w+3h deletes it.
		must(t, s.AddRESTRequests(ctx, w.Add(3*time.Hour), map[string]int64{"tok-b": 1}))
		if c := counts(w); len(c) != 0 {
			t.Fatalf("window w kept after w+3h: %v", c)
		}
		if c := counts(w.Add(time.Hour)); c["tok-a"] != 7 {
			t.Fatalf("window w+1h deleted with w: %v", c)
		}
	})
}

// TestRESTTokensMigrationOnExistingData: a database made before 0003 (here:
// with every migration, then 0003's tables dropped and unrecorded) takes
// the migration at the next open and keeps its data.
func TestRESTTokensMigrationOnExistingData(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := open(t, dsn)
		twoAccounts(t, s)
		for _, q := range []string{`DROP TABLE rest_requests`, `DROP TABLE rest_tokens`, `DELETE FROM schema_migrations WHERE version = 3`} {
			_, err := s.DB().ExecContext(ctx, q)
			must(t, err)
		}
		must(t, s.Close())
		s = open(t, dsn)
		defer s.Close()
		must(t, s.CreateRESTToken(ctx, restToken(accA, "a1-token", 1)))
		got, err := s.RESTTokens(ctx, accA)
		must(t, err)
		if len(got) != 1 {
			t.Fatalf("after migrating: %+v", got)
		}
	})
}
