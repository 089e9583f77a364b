// Package pgtest gives tests a fresh PostgreSQL database each.
//
// The server comes from FLEETMQ_TEST_POSTGRES, a postgres:// URL whose user
// may CREATE DATABASE (scripts/test.sh starts a throwaway cluster and sets
// it). DSN creates a database with a random name on that server and drops
// it when the test ends, so tests stay independent and may run in
// parallel. Without the variable the test is skipped, unless
// FLEETMQ_REQUIRE_TOOLS=1, when it fails.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// EnvVar names the server tests use.
const EnvVar = "FLEETMQ_TEST_POSTGRES"

// timeout bounds each administrative statement (connect, create, drop).
const timeout = 30 * time.Second

// Server returns the server DSN from FLEETMQ_TEST_POSTGRES, skipping the
// test when it is unset (failing it under FLEETMQ_REQUIRE_TOOLS=1).
func Server(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvVar)
	if dsn == "" {
		if os.Getenv("FLEETMQ_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s is not set (FLEETMQ_REQUIRE_TOOLS=1): the PostgreSQL tests need a server; scripts/test.sh starts one", EnvVar)
		}
		t.Skipf("%s not set: PostgreSQL tests skipped (see docs/operator.md, \"Running the tests on PostgreSQL\")", EnvVar)
	}
	return dsn
}

// DSN creates a fresh, empty database on the test server and returns its
// postgres:// URL. The database is dropped (connections and all) when the
// test and its cleanups registered later have finished.
func DSN(t testing.TB) string {
	t.Helper()
	server := Server(t)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL, got %q", EnvVar, redacted(server))
	}
	name := randomName()
	admin := open(t, server)
	exec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() {
		// WITH (FORCE) ends connections a test left open (PostgreSQL 13+).
		exec(t, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close()
	})
	db := *u
	db.Path = "/" + name
	return db.String()
}

// randomName is a database name no other test picks.
func randomName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "fleetmq_test_" + hex.EncodeToString(b)
}

func open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("pgtest: connect to %s: %v", redacted(dsn), err)
	}
	return db
}

func exec(t testing.TB, db *sql.DB, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("pgtest: %s: %v", stmt, err)
	}
}

// redacted hides a URL's password.
func redacted(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// ForEachDSN runs f once per store backend, as parallel subtests named
// "sqlite" and "postgres", each with the DSN of a new, empty database: a
// SQLite file in the subtest's temp directory, or a PostgreSQL database
// from DSN (skipped without FLEETMQ_TEST_POSTGRES). The contract suites of
// every store run through it, so both backends always run the same tests.
func ForEachDSN(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dsn := filepath.Join(t.TempDir(), "fleetmq.db")
			if backend == "postgres" {
				dsn = DSN(t)
			}
			f(t, dsn)
		})
	}
}
