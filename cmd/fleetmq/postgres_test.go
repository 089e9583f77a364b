package main

import (
	"context"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestCLIOnPostgres: with -database (or FLEETMQ_DATABASE) the operator
// commands and serve keep the control plane in PostgreSQL, not in the data
// directory's SQLite: an account created with --database is listed from
// PostgreSQL, and credentials created there work on a serve started on the
// same database.
func TestCLIOnPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()

	A := createAccount(t, dir, "Acme", "owner@acme.example", "--database", dsn, "-plan", "starter")
	t.Setenv("FLEETMQ_DATABASE", dsn)
	B := createAccount(t, dir, "Beta", "owner@beta.example", "-plan", "growth")
	byFlag := mustCLI(t, dir, "account", "list", "-database", dsn)
	byEnv := mustCLI(t, dir, "account", "list")
	if byFlag != byEnv {
		t.Fatalf("account list with -database:\n%s\nwith FLEETMQ_DATABASE:\n%s", byFlag, byEnv)
	}
	if r := row(byFlag, A.ID); !strings.Contains(strings.Join(r, " "), "owner@acme.example starter") {
		t.Fatalf("account list on PostgreSQL, A's row %q:\n%s", r, byFlag)
	}
	if r := row(byFlag, B.ID); !strings.Contains(strings.Join(r, " "), "owner@beta.example growth") {
		t.Fatalf("account list on PostgreSQL, B's row %q:\n%s", r, byFlag)
	}

	// The accounts are in PostgreSQL ...
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Backend() != "postgres" {
		t.Fatalf("the DSN opened a %s store", st.Backend())
	}
	if as, err := st.Accounts(ctx); err != nil || len(as) != 2 {
		t.Fatalf("PostgreSQL has %d accounts (%v), want 2", len(as), err)
	}
	// ... and not in the data directory's SQLite (FLEETMQ_DATABASE empty).
	t.Setenv("FLEETMQ_DATABASE", "")
	if out := mustCLI(t, dir, "account", "list"); row(out, A.ID) != nil || row(out, B.ID) != nil {
		t.Fatalf("the SQLite store in the data directory lists PostgreSQL's accounts:\n%s", out)
	}

	// serve on the same database: the CLI's clients and credentials work.
	mqttAddr, _, _, _ := serve(t, dir, "--database", dsn)
	t.Setenv("FLEETMQ_DATABASE", dsn)
	mustCLI(t, dir, "client", "add", A.ID, "dev1")
	pub := createCredential(t, dir, A.ID, "-kind", "publisher")
	sub := createCredential(t, dir, A.ID, "-kind", "subscriber")
	s := connectNow(t, "A's subscriber connects", mqttAddr, "sub-a", sub.Username, sub.Password, nil)
	p := connectNow(t, "A's publisher connects", mqttAddr, "dev1", pub.Username, pub.Password, nil)
	s.MustSubscribe(t, paho.SubscribeOptions{Topic: A.ID + "/#", QoS: 1})
	p.Pub(t, A.ID+"/dev1/state/door", 1, "open")
	s.ExpectOn(t, A.ID+"/dev1/state/door", "open")
}
