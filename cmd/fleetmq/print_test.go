package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// TestPrintForScripts: -print gives exactly the fields asked for, on one
// line in the order asked, and the password printed is the one that works
// (the owner's hash matches it); a misspelt field names the known ones and
// creates nothing.
func TestPrintForScripts(t *testing.T) {
	dir := t.TempDir()
	out := mustCLI(t, dir, "account", "create", "-name", "Acme", "-email", "o@acme.example", "-plan", "starter", "-print", "password,account_id")
	f := strings.Fields(out)
	if len(f) != 2 || strings.Count(out, "\n") != 1 || !fleetmq.ValidAccountID(f[1]) {
		t.Fatalf("account create -print password,account_id printed %q", out)
	}
	acc := f[1]
	st := openStore(t, dir)
	if ok, err := control.CheckPassword(ownerHash(t, st, "o@acme.example", acc), f[0]); !ok || err != nil {
		t.Fatalf("the printed password %q is not the owner's (%v)", f[0], err)
	}

	out = mustCLI(t, dir, "credential", "create", acc, "-kind", "subscriber", "-print", "username,password")
	f = strings.Fields(out)
	if len(f) != 2 || !strings.HasPrefix(f[0], "sub-") || len(f[1]) < 16 {
		t.Fatalf("credential create -print username,password printed %q", out)
	}
	cs, err := st.Credentials(context.Background(), acc, "")
	if err != nil || len(cs) != 1 || cs[0].Username != f[0] {
		t.Fatalf("stored credentials %+v (%v), want the one printed", cs, err)
	}

	cliErr(t, dir, `-print: unknown field "secret" (one of id,kind,username,password)`, "credential", "create", acc, "-kind", "publisher", "-print", "id,secret")
	cliErr(t, dir, `-print: unknown field "id" (one of account_id,owner,plan,password)`, "account", "create", "-name", "Bolt", "-email", "o@bolt.example", "-print", "id")
	if as, _ := st.Accounts(context.Background()); len(as) != 1 {
		t.Fatalf("%d accounts after a refused -print, want 1", len(as))
	}
	if cs, _ := st.Credentials(context.Background(), acc, ""); len(cs) != 1 {
		t.Fatalf("%d credentials after a refused -print, want 1", len(cs))
	}
}
