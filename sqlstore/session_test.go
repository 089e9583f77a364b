package sqlstore_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/sqlstore"
)

func portalSession(acc, hash string, created time.Time) *fleetmq.PortalSession {
	return &fleetmq.PortalSession{IDHash: fleetmq.HashSecret(hash), AccountID: acc, CreatedAt: created, LastSeenAt: created}
}

func TestPortalSessions(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		v0, err := s.Version(ctx)
		must(t, err)

		a1 := portalSession(accA, "a1", t0)
		a2 := portalSession(accA, "a2", t0.Add(time.Minute))
		b1 := portalSession(accB, "b1", t0)
		for _, ps := range []*fleetmq.PortalSession{a1, a2, b1} {
			must(t, s.CreatePortalSession(ctx, ps))
		}
		wantCode(t, "a session id twice", s.CreatePortalSession(ctx, portalSession(accB, "a1", t0)), fleetmq.CodeConflict)
		wantCode(t, "a session of an unknown account", s.CreatePortalSession(ctx,
			portalSession("00000000-0000-4000-8000-000000000000", "x", t0)), fleetmq.CodeNotFound)

		got, err := s.PortalSession(ctx, a1.IDHash)
		must(t, err)
		if !reflect.DeepEqual(got, a1) {
			t.Fatalf("PortalSession(a1) = %+v, want %+v", got, a1)
		}
		_, err = s.PortalSession(ctx, fleetmq.HashSecret("nope"))
		wantCode(t, "an unknown session", err, fleetmq.CodeNotFound)

		// Touch moves last-seen forward only.
		must(t, s.TouchPortalSession(ctx, a1.IDHash, t0.Add(10*time.Minute)))
		must(t, s.TouchPortalSession(ctx, a1.IDHash, t0.Add(5*time.Minute)))
		must(t, s.TouchPortalSession(ctx, fleetmq.HashSecret("nope"), t0))
		got, err = s.PortalSession(ctx, a1.IDHash)
		must(t, err)
		if !got.LastSeenAt.Equal(t0.Add(10*time.Minute)) || !got.CreatedAt.Equal(t0) {
			t.Fatalf("after touches: %+v, want last seen t0+10m, created t0", got)
		}

		// Signing out everywhere else in A keeps the named session and B's.
		n, err := s.DeletePortalSessions(ctx, accA, a1.IDHash)
		must(t, err)
		if n != 1 {
			t.Fatalf("DeletePortalSessions(A, keep a1) deleted %d, want 1 (a2)", n)
		}
		_, err = s.PortalSession(ctx, a2.IDHash)
		wantCode(t, "a2 after deleting A's others", err, fleetmq.CodeNotFound)
		for _, ps := range []*fleetmq.PortalSession{a1, b1} {
			if _, err := s.PortalSession(ctx, ps.IDHash); err != nil {
				t.Fatalf("%s gone after deleting A's other sessions: %v", ps.AccountID, err)
			}
		}

		// Stale: b1 was last seen at t0, a1 at t0+10m.
		n, err = s.DeleteStalePortalSessions(ctx, t0.Add(time.Minute), t0.Add(-time.Hour))
		must(t, err)
		if n != 1 {
			t.Fatalf("idle deletion removed %d, want 1 (b1)", n)
		}
		_, err = s.PortalSession(ctx, b1.IDHash)
		wantCode(t, "b1 after the idle deletion", err, fleetmq.CodeNotFound)
		n, err = s.DeleteStalePortalSessions(ctx, t0.Add(-time.Hour), t0.Add(time.Second))
		must(t, err)
		if n != 1 {
			t.Fatalf("absolute deletion removed %d, want 1 (a1)", n)
		}

		must(t, s.CreatePortalSession(ctx, a2))
		must(t, s.DeletePortalSession(ctx, a2.IDHash))
		must(t, s.DeletePortalSession(ctx, a2.IDHash))
		_, err = s.PortalSession(ctx, a2.IDHash)
		wantCode(t, "a2 after sign-out", err, fleetmq.CodeNotFound)

		if v, err := s.Version(ctx); err != nil || v != v0 {
			t.Fatalf("control version moved from %d to %d (%v): sessions are not control-plane state", v0, v, err)
		}
	})
}

func TestSetOwnerPasswordHash(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		v0, err := s.Version(ctx)
		must(t, err)
		t0 := time.Now().UTC().Truncate(time.Second)
		for _, ps := range []*fleetmq.PortalSession{portalSession(accA, "a1", t0), portalSession(accA, "a2", t0), portalSession(accB, "b1", t0)} {
			must(t, s.CreatePortalSession(ctx, ps))
		}
		signedOut, err := s.SetOwnerPasswordHash(ctx, accA, "new-hash-a")
		must(t, err)
		if signedOut != 2 {
			t.Fatalf("the password change signed out %d sessions, want account A's 2", signedOut)
		}
		for id, want := range map[string]bool{"a1": false, "a2": false, "b1": true} {
			_, err := s.PortalSession(ctx, fleetmq.HashSecret(id))
			if got := err == nil; got != want {
				t.Fatalf("session %s after A's password change: present %v, want %v (%v)", id, got, want, err)
			}
		}
		_, err = s.SetOwnerPasswordHash(ctx, "00000000-0000-4000-8000-000000000000", "h")
		wantCode(t, "an unknown account", err, fleetmq.CodeNotFound)
		for _, c := range []struct{ email, id, hash string }{{"a@example.com", accA, "new-hash-a"}, {"B@example.com", accB, "hash-b"}} {
			id, hash, err := s.OwnerPasswordHash(ctx, c.email)
			must(t, err)
			if id != c.id || hash != c.hash {
				t.Fatalf("OwnerPasswordHash(%s) = %s, %s; want %s, %s", c.email, id, hash, c.id, c.hash)
			}
		}
		if v, err := s.Version(ctx); err != nil || v != v0 {
			t.Fatalf("control version moved from %d to %d (%v)", v0, v, err)
		}
	})
}
