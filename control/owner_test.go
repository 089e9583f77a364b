package control_test

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// TestSetOwnerPassword: the new password's hash is stored, every portal
// session of the account ends and none of another account's; a short or
// huge password is invalid and an unknown account not found, changing
// nothing.
func TestSetOwnerPassword(t *testing.T) {
	f := newFixture(t)
	f.twoAccounts(t, "")
	for i, acc := range []string{accA, accA, accB} {
		must(t, f.store.CreatePortalSession(f.ctx, &fleetmq.PortalSession{IDHash: strings.Repeat(string(rune('a'+i)), 64), AccountID: acc, CreatedAt: t0, LastSeenAt: t0}))
	}
	const pw = "a long enough passphrase"
	n, err := f.svc.SetOwnerPassword(f.ctx, accA, pw)
	must(t, err)
	if n != 2 {
		t.Fatalf("%d sessions signed out, want A's 2", n)
	}
	_, hash, err := f.store.OwnerPasswordHash(f.ctx, accA[:8]+"@example.com")
	must(t, err)
	if ok, err := control.CheckPassword(hash, pw); !ok || err != nil {
		t.Fatalf("stored hash does not check the new password: %v", err)
	}
	if _, err := f.store.PortalSession(f.ctx, strings.Repeat("c", 64)); err != nil {
		t.Fatalf("B's session after A's password change: %v", err)
	}

	_, err = f.svc.SetOwnerPassword(f.ctx, accA, "short")
	invalid(t, "9 characters", err, "password")
	_, err = f.svc.SetOwnerPassword(f.ctx, accA, strings.Repeat("x", control.MaxPasswordLen+1))
	invalid(t, "too long", err, "password")
	_, err = f.svc.SetOwnerPassword(f.ctx, "00000000-0000-4000-8000-000000000000", pw)
	domainErr(t, "unknown account", err, fleetmq.CodeNotFound)
	if _, h, _ := f.store.OwnerPasswordHash(f.ctx, accA[:8]+"@example.com"); h != hash {
		t.Fatal("a refused change replaced the hash")
	}

	gen, _, err := f.svc.ResetOwnerPassword(f.ctx, accA)
	must(t, err)
	_, hash, _ = f.store.OwnerPasswordHash(f.ctx, accA[:8]+"@example.com")
	if ok, _ := control.CheckPassword(hash, gen); !ok || len(gen) < 20 {
		t.Fatalf("generated password %q (%d characters) does not sign in", gen, len(gen))
	}
}
