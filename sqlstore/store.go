// Package sqlstore keeps fleetmq's stores in SQL databases through
// database/sql: SQLite (the embedded default, one file in the data
// directory) or PostgreSQL (through pgx), with one code path. Queries are
// written once, with ? placeholders, and rebound for PostgreSQL; the few
// differences live in the dialect and the per-dialect migration folders.
// Schema changes are embedded, numbered migrations applied in order at Open.
//
// Every control-plane write runs in a transaction that also moves the
// control_version counter, so the broker (which polls Version) reloads its
// snapshot within its poll interval of any change, from any process.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/fleetmq/fleetmq"
)

//go:embed migrations
var migrations embed.FS

// dialect is the SQL database behind a Store.
type dialect int

const (
	sqliteDialect dialect = iota
	postgresDialect
)

// String names the dialect; it is also its migrations folder.
func (d dialect) String() string {
	if d == postgresDialect {
		return "postgres"
	}
	return "sqlite"
}

// Store is a fleetmq store on one database, reached through three pools of
// connections so that no kind of work can take the connections another
// needs (see the Pool constants):
//   - db serves the control plane and the platform's own bookkeeping: the
//     change-version poll, readiness, usage, nodes, retention;
//   - ingest serves the history writer's commits and nothing else, so
//     acknowledgements never wait for a free connection behind tenants'
//     reads;
//   - reads serves tenants' history reads (pages, exports, latest values,
//     charts), however slow they are.
type Store struct {
	db      *sql.DB
	ingest  *sql.DB
	reads   *sql.DB
	dialect dialect
	// maxPages is SetMaxPages's limit: 0 never set, -1 lifted.
	maxPages atomic.Int64
	// SQLite: the checkpointer's connection, and its stop.
	ckpt     *sql.DB
	stopCkpt chan struct{}
	ckptDone chan struct{}
	ckptOnce sync.Once
	// walFrames is the WAL's length at the checkpointer's last pass.
	walFrames atomic.Int64
	// writeTurn (SQLite only; capacity 1) is held by this process's write
	// in progress: see takeWriteTurn.
	writeTurn chan struct{}
	// appendStmts (SQLite only) are the history writer's statements.
	appendStmts *appendStmts
	// SQLite: the history rows not yet folded, and FoldRows when the
	// store opened.
	tail     foldTail
	foldRows int
	// History's day partitions as last read.
	days historyDays
}

var (
	_ fleetmq.ControlStore = (*Store)(nil)
	_ fleetmq.UsageStore   = (*Store)(nil)
)

// DatabaseFile is the SQLite file inside a data directory.
const DatabaseFile = "fleetmq.db"

// IsPostgres reports whether a DSN names a PostgreSQL database
// (postgres:// or postgresql:// URL).
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open opens the store a DSN names: a postgres:// or postgresql:// URL is
// PostgreSQL, anything else the path of a SQLite file. Pending migrations
// are applied.
func Open(ctx context.Context, dsn string) (*Store, error) {
	if IsPostgres(dsn) {
		return OpenPostgres(ctx, dsn)
	}
	if dsn == "" {
		return nil, errors.New("sqlstore: empty database name")
	}
	return OpenSQLite(ctx, dsn)
}

// OpenDir opens (creating if needed) the SQLite store in a data directory
// and applies pending migrations.
func OpenDir(ctx context.Context, dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	return OpenSQLite(ctx, filepath.Join(dir, DatabaseFile))
}

// sqliteURI is the SQLite URI of a file path: its '%', '?' and '#' escaped,
// so that a path holding them names that file and not a shorter path with
// query parameters or a fragment (two data directories "x#1" and "x#2"
// would both open "x"), and an absolute path after an empty authority, so
// that one starting with "//" is not read as a host.
func sqliteURI(path string) string {
	var b strings.Builder
	b.WriteString("file:")
	if strings.HasPrefix(path, "/") {
		b.WriteString("//")
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '%', '?', '#':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// OpenSQLite opens (creating if needed) a SQLite database file. WAL mode
// lets the operator CLI write while fleetmq serve reads; writers wait for
// each other up to the busy timeout. Commits are synchronous (FULL): the WAL
// is synced before a commit returns, so what ingest acknowledged survives a
// power cut or an OS crash, not only a crash of the process (NORMAL would
// cost about a fifth less per message at low rates, and that guarantee).
// Each connection reads through mmap (see sqliteDriver); the control
// pool's connections have a 64 MiB page cache.
//
// The history writer's connection has 8 MiB: at the end of every commit
// SQLite walks the cache's hash table to drop pages past the end of the
// file, and with 64 MiB that walk took 7-15% of the process's CPU under a
// fleet's steady commits (pcache1TruncateUnsafe in perf), under 2% with
// 8 MiB; the pages it reads come from mmap and the OS page cache.
//
// The reads pool's connections are query-only (SQLite refuses a write on
// them) with a smaller page cache: their reads go through mmap.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	dsn := sqliteURI(path) + "?_journal_mode=WAL&_busy_timeout=10000&_foreign_keys=on&_synchronous=FULL&_txlock=immediate"
	open := func(params string, conns int) *sql.DB {
		db, _ := sql.Open(sqliteDriver, dsn+params) // sql.Open only checks the driver name
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		return db
	}
	s := &Store{
		db:        open("&_cache_size=-65536", SQLitePool.Control),
		ingest:    open("&_cache_size=-8192", SQLitePool.Ingest),
		reads:     open("&_cache_size=-16384&_query_only=true", SQLitePool.Reads),
		ckpt:      open("&_cache_size=-2048", 1),
		dialect:   sqliteDialect,
		writeTurn: make(chan struct{}, 1),
	}
	if err := s.migrateSQLite(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	if err := s.prepareAppend(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s.foldRows = FoldRows
	if err := s.rereadSQLiteDays(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	given, err := lastID(ctx, s.db)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := s.tail.load(ctx, s.db, s.days.list(), given); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s.stopCkpt, s.ckptDone = make(chan struct{}), make(chan struct{})
	go s.checkpoint(CheckpointInterval)
	return s, nil
}

// migrateSQLite is migrate on SQLite, tried again while the file is busy
// (for up to about 10 s, within ctx): processes opening a new file at
// once (serve and a CLI command on a fresh data directory) race to switch
// it to WAL, and SQLite answers the losers "database is locked" at once,
// without waiting as busy_timeout has it wait for a lock.
func (s *Store) migrateSQLite(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := s.migrate(ctx)
		var se sqlite3.Error
		if err == nil || !errors.As(err, &se) || (se.Code != sqlite3.ErrBusy && se.Code != sqlite3.ErrLocked) || attempt == 100 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(min(attempt, 10)) * 10 * time.Millisecond):
		}
	}
}

// CheckpointInterval is how often a SQLite store copies what its WAL
// holds into the database file, from a connection of its own.
var CheckpointInterval = 250 * time.Millisecond

// restartFrames is the WAL length (frames, a page each) past which the
// history writer finishes a checkpoint itself after a commit, so that the
// WAL starts over.
const restartFrames = 4096

// checkpoint runs SQLite's WAL checkpoints off the commit path, every
// interval until Close: no connection checkpoints when it commits
// (wal_autocheckpoint is off, see sqliteDriver), so a history commit,
// and the acknowledgements waiting for it, never carries the copy of the
// WAL into the database file and its sync. A passive checkpoint waits for
// no reader or writer and copies each page's newest frame once.
//
// The WAL starts over only at a write that begins when everything in it
// has been copied, which a steady writer's back-to-back commits leave no
// time for; so when the WAL has grown past restartFrames, the history
// writer copies the little the background pass left, between two commits
// and after acknowledging the first (AfterCommit).
func (s *Store) checkpoint(interval time.Duration) {
	defer close(s.ckptDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopCkpt:
			return
		case <-t.C:
			// A failure (the disk) is the next commit's to report.
			var busy, frames, copied int
			if s.ckpt.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied) == nil {
				s.walFrames.Store(int64(frames))
			}
		}
	}
}

// AfterCommit is the history writer's turn for upkeep between two commits,
// after the first's acknowledgements: on SQLite, when the WAL has grown
// past restartFrames, a checkpoint of what the background pass left, so
// the next commit starts the WAL over.
func (s *Store) AfterCommit(ctx context.Context) {
	if s.dialect != sqliteDialect || s.walFrames.Load() < restartFrames {
		return
	}
	s.walFrames.Store(0)
	s.ingest.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
}

// HistoryWriters is how many history commits the store takes at once
// (ingest.Options.Writers): SQLite has one writer; PostgreSQL one per
// connection of the ingest pool.
func (s *Store) HistoryWriters() int {
	if s.dialect == postgresDialect {
		return PostgresPool.Ingest
	}
	return 1
}

// Pools are the sizes of a store's connection pools.
type Pools struct {
	Control int // the control plane and the platform's bookkeeping
	Ingest  int // the history writer's commits only
	Reads   int // tenants' history reads
}

// The pool sizes. SQLite has one writer at a time whatever the number of
// connections: the ingest writer's single connection never waits for a
// pooled one, only (briefly) for its turn at SQLite's write lock. On
// PostgreSQL each history writer (HistoryWriters) has its connection.
var (
	SQLitePool   = Pools{Control: 3, Ingest: 1, Reads: 4}
	PostgresPool = Pools{Control: 6, Ingest: 2, Reads: 8}
)

// ReadStatementTimeout stops, on PostgreSQL, any statement of the reads
// pool that runs longer: a safety net under the callers' own deadlines
// (the REST API stops a history page sooner), so that a forgotten query
// cannot hold a connection for ever.
const ReadStatementTimeout = 60 * time.Second

// OpenPostgres opens a PostgreSQL database (a postgres:// URL, see
// https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS)
// and applies pending migrations. The database must exist; several
// processes may open it at once (migrations take an advisory lock).
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	open := func(conns, idle int, params map[string]string) *sql.DB {
		c := cfg.Copy()
		for k, v := range params {
			c.RuntimeParams[k] = v
		}
		db := stdlib.OpenDB(*c)
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(idle)
		return db
	}
	s := &Store{
		db:     open(PostgresPool.Control, 2, nil),
		ingest: open(PostgresPool.Ingest, PostgresPool.Ingest, nil),
		// Reads are planned with their values (no generic plans), so that
		// a time range prunes history's days when it is planned: a plan
		// that prunes them only when it runs locks every day's table and
		// indexes first.
		reads: open(PostgresPool.Reads, 2, map[string]string{
			"statement_timeout": strconv.FormatInt(ReadStatementTimeout.Milliseconds(), 10),
			"plan_cache_mode":   "force_custom_plan",
		}),
		dialect: postgresDialect,
	}
	if err := s.db.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres %s: %w", redact(dsn), err)
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("migrate postgres %s: %w", redact(dsn), err)
	}
	return s, nil
}

// redact hides the password of a URL DSN in messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Backend names the store's database: "sqlite" or "postgres".
func (s *Store) Backend() string { return s.dialect.String() }

// rebind turns a query written with ? placeholders into the store's
// dialect: $1, $2, ... on PostgreSQL. A ? inside a quoted string literal or
// identifier is left alone.
func (s *Store) rebind(q string) string {
	if s.dialect != postgresDialect || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	var quote byte // the open quote, 0 outside literals
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0 // a doubled quote closes and reopens: same result
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Close closes the database's pools.
func (s *Store) Close() error {
	var ckptErr error
	if s.ckpt != nil {
		s.ckptOnce.Do(func() {
			if s.stopCkpt != nil {
				close(s.stopCkpt)
				<-s.ckptDone
			}
		})
		ckptErr = s.ckpt.Close()
	}
	return errors.Join(s.appendStmts.close(), s.reads.Close(), s.ingest.Close(), s.db.Close(), ckptErr)
}

// DB exposes the database for stores built on the same connection.
func (s *Store) DB() *sql.DB { return s.db }

// migrationLock is the PostgreSQL advisory lock key that serialises
// migrations of concurrently starting processes ("fleetmq" in ASCII).
const migrationLock int64 = 0x666c656574_6d71

// migrate applies the embedded migrations of the store's dialect not yet
// recorded, in order, in one transaction: a failure leaves the schema as
// it was. On PostgreSQL the transaction first takes an advisory lock, so
// processes starting together apply each migration once; SQLite's
// immediate transactions already take the write lock at BEGIN. A database
// that records a migration this binary does not know is refused.
func (s *Store) migrate(ctx context.Context) error {
	dir := "migrations/" + s.dialect.String()
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return s.tx(ctx, func(tx *sql.Tx) error {
		if s.dialect == postgresDialect {
			if _, err := tx.ExecContext(ctx, s.rebind(`SELECT pg_advisory_xact_lock(?)`), migrationLock); err != nil {
				return fmt.Errorf("migration lock: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
			return err
		}
		known := 0
		for _, e := range entries {
			num, _, ok := strings.Cut(e.Name(), "_")
			v, err := strconv.Atoi(num)
			if !ok || err != nil {
				return fmt.Errorf("migration %s: name must start with a number", e.Name())
			}
			known = max(known, v)
			var n int
			if err := tx.QueryRowContext(ctx, s.rebind(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), v).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				continue
			}
			body, err := fs.ReadFile(migrations, dir+"/"+e.Name())
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("%s: %w", e.Name(), err)
			}
			if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO schema_migrations (version, name) VALUES (?, ?)`), v, e.Name()); err != nil {
				return err
			}
		}
		var newest sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&newest); err != nil {
			return err
		}
		if newest.Int64 > int64(known) {
			return fmt.Errorf("the database has schema version %d; this fleetmq knows up to %d (upgrade fleetmq)", newest.Int64, known)
		}
		return nil
	})
}

// tx runs f in a transaction, committing if it returns nil.
func (s *Store) tx(ctx context.Context, f func(*sql.Tx) error) error {
	return s.txOn(ctx, s.db, f)
}

// txOn is tx on one of the store's pools.
func (s *Store) txOn(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	return s.txOnThen(ctx, db, f, nil)
}

// txOnThen is txOn that then calls then (if not nil) with the outcome
// (nil: committed) while it still holds the write turn.
func (s *Store) txOnThen(ctx context.Context, db *sql.DB, f func(*sql.Tx) error, then func(error)) (err error) {
	done, err := s.takeWriteTurn(ctx)
	if err != nil {
		return err
	}
	defer done()
	if then != nil {
		defer func() { then(err) }() // before done
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if n := s.maxPages.Load(); n != 0 {
		if n < 0 {
			n = sqliteMaxPages
		}
		if _, err := tx.ExecContext(ctx, "PRAGMA max_page_count = "+strconv.FormatInt(n, 10)); err != nil {
			tx.Rollback()
			return err
		}
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// takeWriteTurn waits, on SQLite, until no other write of this process is
// in progress, and returns the function that ends the turn; on PostgreSQL
// it returns at once. SQLite has one writer at a time: a write that found
// the write lock taken would wait in SQLite's busy handler, which retries
// after sleeps of 1, 2, 5, 10, 15, 20, 25... ms, so that a history commit
// behind a 10 ms bookkeeping write could start 8 ms after it ended (and
// its publishers' acknowledgements with it). Turns taken here are handed
// over at once, in arrival order; other processes (the CLI) still meet
// the busy handler, rarely.
func (s *Store) takeWriteTurn(ctx context.Context) (done func(), err error) {
	if s.writeTurn == nil {
		return func() {}, nil
	}
	select {
	case s.writeTurn <- struct{}{}:
		return s.endWriteTurn, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Store) endWriteTurn() { <-s.writeTurn }

// exec runs one writing statement on the control pool, in its write turn.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	done, err := s.takeWriteTurn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.db.ExecContext(ctx, s.rebind(query), args...)
}

// write runs a control-plane change and moves the change version with it.
// The version moves first: its row lock makes control-plane writes take
// turns on PostgreSQL as SQLite's immediate transactions do, so a check
// and the write it guards (a client count and the insert, say) see no
// concurrent change; under PostgreSQL's read committed isolation each
// statement after the lock sees every write committed before it.
func (s *Store) write(ctx context.Context, f func(*sql.Tx) error) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = value + 1 WHERE key = 'control_version'`); err != nil {
			return err
		}
		return f(tx)
	})
}

// sqliteMaxPages is SQLite's own limit on a database's pages.
const sqliteMaxPages = 0xfffffffe

// SetMaxPages makes a SQLite store refuse to grow past n pages (never
// below its current size), as a full disk would: writes that need a new
// page fail with "database or disk is full". n <= 0 lifts the limit. It
// is for tests of what a full disk does; the limit is applied to the
// connection of each transaction as it begins. It does nothing on
// PostgreSQL.
func (s *Store) SetMaxPages(n int64) {
	if s.dialect != sqliteDialect {
		return
	}
	if n <= 0 {
		n = -1
	}
	s.maxPages.Store(n)
}

// isUnique reports a uniqueness (or primary key) violation on either
// database.
func isUnique(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" // unique_violation
}

// RecordError reports whether a write failed because of what was written
// (a value the database cannot hold: a constraint, a type or a size), not
// because the database fails (full, locked, gone): retrying such a write
// cannot succeed. The ingest writer sets such records aside.
func (s *Store) RecordError(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrConstraint, sqlite3.ErrMismatch, sqlite3.ErrTooBig, sqlite3.ErrRange:
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	// Class 22 is a data exception (NUL in text, a value out of range),
	// 23 an integrity constraint. A connection that could not be made
	// failed before anything was written.
	var ce *pgconn.ConnectError
	return !errors.As(err, &ce) && errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23"))
}

// StoreFault reports whether a write failed for the store's own reasons,
// whatever it was given: a full disk or database (SQLite's SQLITE_FULL,
// PostgreSQL's class 53), an I/O error (SQLITE_IOERR, class 58), a
// database file that cannot be opened or written (SQLITE_CANTOPEN,
// SQLITE_READONLY, SQLITE_CORRUPT, SQLITE_NOTADB), one busy or locked past
// the busy timeout, out of memory, a connection that failed (class 08, or
// one the server refused, whatever its SQLSTATE),
// a server shutting down (class 57), a transaction rolled back for
// another's (class 40), or a connection lost before the server answered
// (pgx's errors without a SQLSTATE). The ingest writer retries such a write, and never
// refuses its records to their publishers, even when other records went
// in meanwhile (a full disk can still take a small one).
func (s *Store) StoreFault(err error) bool {
	// A connection that could not be made, whatever the server said (a
	// database that takes no connections, a password changed, too many
	// clients): nothing of the write reached the database.
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrFull, sqlite3.ErrIoErr, sqlite3.ErrCantOpen, sqlite3.ErrReadonly, sqlite3.ErrCorrupt,
			sqlite3.ErrNotADB, sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrNomem, sqlite3.ErrProtocol:
			return true
		}
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "08P01", "53400": // a protocol violation, a configured limit: perhaps the record's
			return false
		}
		switch pe.Code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
		return false
	}
	// A connection lost before the server could answer (pgx reports those
	// without a SQLSTATE).
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || pgconn.Timeout(err)
}

// TransientError reports whether a write failed because the store cannot
// take it now but will without anything changing on the writer's side: on
// PostgreSQL, a day of history closed while it is reordered (SQLSTATE
// 55006, raised by history_day_closed), a day a drop is working on, or a
// lock not granted in time (55P03). The ingest writer keeps such records, in order, and retries
// them; it never refuses them to their publishers.
func (s *Store) TransientError(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, errDayBusy) || errors.As(err, &pe) && (pe.Code == "55006" || pe.Code == "55P03")
}

// sqliteDriver is go-sqlite3 with fleetmq's per-connection settings:
// history reads are random accesses over a large file, which mmap serves
// from the page cache without a read system call each; no connection
// checkpoints the WAL when it commits (the store's checkpointer does, in
// the background: see Store.checkpoint); and a WAL file that grew past
// 64 MiB is cut back to that when it starts over.
const sqliteDriver = "sqlite3_fleetmq"

func init() {
	sql.Register(sqliteDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec("PRAGMA mmap_size = 17179869184; PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 67108864", nil)
		return err
	}})
}
