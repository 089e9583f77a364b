package sqlstore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestDataDirectoryNamesWithURICharacters: a data directory whose name
// holds a character that means something in a SQLite URI ('#', '?', '%')
// keeps its database inside it, and two such directories never share one:
// before, "x#1" and "x#2" both opened a database file "x" beside them.
func TestDataDirectoryNamesWithURICharacters(t *testing.T) {
	parent := t.TempDir()
	for i, name := range []string{"x#1", "x#2", "y?mode=ro", "z%41"} {
		dir := filepath.Join(parent, name)
		s, err := sqlstore.OpenDir(ctxT(t), dir)
		if err != nil {
			t.Fatalf("open %q: %v", name, err)
		}
		ctx := ctxT(t)
		id := []string{accA, accB, "00000000-0000-4000-8000-00000000000c", "00000000-0000-4000-8000-00000000000d"}[i]
		must(t, s.CreateAccount(ctx, &fleetmq.Account{ID: id, Name: name, OwnerEmail: "o@example.com", CreatedAt: t0.Add(time.Duration(i) * time.Second)}, "h"))
		as, err := s.Accounts(ctx)
		must(t, err)
		if len(as) != 1 || as[0].ID != id {
			t.Fatalf("data directory %q holds %d accounts (%v), want only its own: it shares a database with another directory", name, len(as), as)
		}
		must(t, s.Close())
		if _, err := os.Stat(filepath.Join(dir, sqlstore.DatabaseFile)); err != nil {
			t.Fatalf("data directory %q: its database is not inside it: %v", name, err)
		}
	}
	ents, err := os.ReadDir(parent)
	must(t, err)
	for _, e := range ents {
		if !e.IsDir() {
			t.Errorf("a file %q was created beside the data directories", e.Name())
		}
	}
}
