package sqlstore

import "testing"

func TestRebind(t *testing.T) {
	pg := &Store{dialect: postgresDialect}
	lite := &Store{dialect: sqliteDialect}
	for _, c := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT a FROM t WHERE a = ? AND b = ?`, `SELECT a FROM t WHERE a = $1 AND b = $2`},
		{`UPDATE meta SET value = value + 1 WHERE key = 'control_version'`, `UPDATE meta SET value = value + 1 WHERE key = 'control_version'`},
		// ? in literals and quoted identifiers is text, not a parameter;
		// a doubled quote stays inside the literal.
		{`SELECT '?', "a?b", ? FROM t WHERE x = 'it''s ?' AND y = ?`, `SELECT '?', "a?b", $1 FROM t WHERE x = 'it''s ?' AND y = $2`},
		{`INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, `INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`},
	} {
		if got := pg.rebind(c.in); got != c.want {
			t.Errorf("postgres rebind(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := lite.rebind(c.in); got != c.in {
			t.Errorf("sqlite rebind(%q) = %q, want it unchanged", c.in, got)
		}
	}
}

func TestIsPostgresAndRedact(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://u@h/db":           true,
		"postgresql://u:p@h:5433/db":  true,
		"/var/lib/fleetmq/fleetmq.db": false,
		"data/fleetmq.db":             false,
		"":                            false,
	} {
		if got := IsPostgres(dsn); got != want {
			t.Errorf("IsPostgres(%q) = %v, want %v", dsn, got, want)
		}
	}
	if got := redact("postgres://fleet:s3cret@db.example:5432/fleetmq?sslmode=require"); got != "postgres://fleet:xxxxx@db.example:5432/fleetmq?sslmode=require" {
		t.Errorf("redact = %q", got)
	}
}
