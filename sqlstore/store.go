// Package sqlstore keeps fleetmq's stores in SQL databases through
// database/sql: SQLite (the embedded default, one file in the data
// directory) today, PostgreSQL with the history issue. Schema changes are
// embedded, numbered migrations applied in order at Open.
//
// Every control-plane write runs in a transaction that also moves the
// control_version counter, so the broker (which polls Version) reloads its
// snapshot within its poll interval of any change, from any process.
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/fleetmq/fleetmq"
)

//go:embed migrations
var migrations embed.FS

// Store is a fleetmq store on one database.
type Store struct {
	db *sql.DB
}

var (
	_ fleetmq.ControlStore = (*Store)(nil)
	_ fleetmq.UsageStore   = (*Store)(nil)
)

// DatabaseFile is the SQLite file inside a data directory.
const DatabaseFile = "fleetmq.db"

// OpenDir opens (creating if needed) the SQLite store in a data directory
// and applies pending migrations.
func OpenDir(ctx context.Context, dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	return OpenSQLite(ctx, filepath.Join(dir, DatabaseFile))
}

// OpenSQLite opens (creating if needed) a SQLite database file. WAL mode
// lets the operator CLI write while fleetmq serve reads; writers wait for
// each other up to the busy timeout.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	dsn := "file:" + path + "?_journal_mode=WAL&_busy_timeout=10000&_foreign_keys=on&_synchronous=NORMAL&_txlock=immediate"
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// DB exposes the database for stores built on the same connection.
func (s *Store) DB() *sql.DB { return s.db }

// migrate applies the embedded migrations not yet recorded.
func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
		return err
	}
	entries, err := fs.ReadDir(migrations, "migrations/sqlite")
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return fmt.Errorf("migration %s: name must start with a number", e.Name())
		}
		err = s.tx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil || n > 0 {
				return err
			}
			body, err := fs.ReadFile(migrations, "migrations/sqlite/"+e.Name())
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("%s: %w", e.Name(), err)
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`, v, e.Name())
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// tx runs f in a transaction, committing if it returns nil.
func (s *Store) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// write runs a control-plane change and moves the change version with it.
func (s *Store) write(ctx context.Context, f func(*sql.Tx) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if err := f(tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE meta SET value = value + 1 WHERE key = 'control_version'`)
		return err
	})
}

// isUnique reports a uniqueness violation.
func isUnique(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintUnique || errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey
}
