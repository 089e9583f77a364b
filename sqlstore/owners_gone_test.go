package sqlstore_test

import (
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestSessionClaimsEndWithTheirOwner: removing a client removes the
// claim (and saved state) of its device's session, and revoking a
// subscriber password those of its sessions, in the same write, so no
// node resumes or restores them later; sessions of another client,
// another password (whose id the revoked one's begins), and of the same
// client id in another account keep theirs.
func TestSessionClaimsEndWithTheirOwner(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		must(t, s.CreateClient(ctx, client(accA, "dev1", 1), 10))
		must(t, s.CreateClient(ctx, client(accA, "dev2", 1), 10))
		must(t, s.CreateClient(ctx, client(accB, "dev1", 1), 10))
		must(t, s.CreateCredential(ctx, cred(accA, "c1", "sub-one", fleetmq.KindSubscriber)))
		must(t, s.CreateCredential(ctx, cred(accA, "c10", "sub-ten", fleetmq.KindSubscriber)))
		keys := map[string]bool{ // key: whether it is to stay
			accA + "\x00dev1": false, accA + "\x00dev2": true, accB + "\x00dev1": true,
			accA + "/c1\x00follower": false, accA + "/c1\x00other": false, accA + "/c10\x00follower": true,
		}
		for k := range keys {
			_, _, _, err := s.ClaimSession(k, "n1", false)
			must(t, err)
			_, epoch, err := s.SessionOwner(k)
			must(t, err)
			must(t, s.SaveSessionState(k, "n1", epoch, []byte("state")))
		}
		must(t, s.DeleteClient(ctx, accA, "dev1"))
		must(t, s.RevokeCredential(ctx, accA, "c1", t0))
		for k, stays := range keys {
			node, _, err := s.SessionOwner(k)
			must(t, err)
			if stays != (node == "n1") {
				t.Errorf("session %q: owner %q, want it to stay: %v", k, node, stays)
			}
			// A claim made now is the first: no state to resume.
			epoch, _, _, err := s.ClaimSession(k, "n2", false)
			must(t, err)
			state, _, ok, err := s.TakeSessionState(k, epoch)
			must(t, err)
			if stays != (ok && string(state) == "state") {
				t.Errorf("session %q: state %q (%v) after the removals, want it kept: %v", k, state, ok, stays)
			}
		}
	})
}
