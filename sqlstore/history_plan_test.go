package sqlstore

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/pgtest"
)

// TestHistoryPlansUseAnIndex: every shape of history query reads one index
// in the query's order (no full scan, no sort), the one planHistory means,
// with the time window and the keyset position as its range. PostgreSQL
// runs with sequential scans and sorts disabled, so on the tiny test table
// the plan shows whether an index can serve the query, not the cost of one
// page.
func TestHistoryPlansUseAnIndex(t *testing.T) {
	const acc = "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a"
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	after := &fleetmq.Position{Received: t0.Add(-30 * time.Minute), ID: 42} // inside the windows below
	shapes := []struct {
		name  string
		q     fleetmq.HistoryQuery
		index string
	}{
		{"account", fleetmq.HistoryQuery{}, "history_account_time"},
		{"account, time window", fleetmq.HistoryQuery{From: t0.Add(-time.Hour), To: t0}, "history_account_time"},
		{"account, topic expression", fleetmq.HistoryQuery{TopicRegex: "^" + acc + "/[^/]*/telemetry/none$"}, "history_account_time"},
		{"client", fleetmq.HistoryQuery{ClientID: "pump-1"}, "history_client_time"},
		{"client, class, expression", fleetmq.HistoryQuery{ClientID: "pump-1", Class: "state", TopicRegex: "^" + acc + "/pump-1/state/x$"}, "history_client_time"},
		{"class", fleetmq.HistoryQuery{Class: "state"}, "history_class_time"},
		{"class, time window", fleetmq.HistoryQuery{Class: "event", From: t0.Add(-time.Hour), To: t0}, "history_class_time"},
		{"device", fleetmq.HistoryQuery{StationControllerDeviceID: "sc-9"}, "history_device_time"},
		{"device, client, class", fleetmq.HistoryQuery{StationControllerDeviceID: "sc-9", ClientID: "pump-1", Class: "state"}, "history_device_time"},
	}
	pgtest.ForEachDSN(t, func(t *testing.T, dsn string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		conn, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if s.dialect == postgresDialect {
			if _, err := conn.ExecContext(ctx, "SET enable_seqscan = off; SET enable_sort = off; SET enable_bitmapscan = off"); err != nil {
				t.Fatal(err)
			}
			// Three days around t0, so that a query spans partitions.
			noErr(t, s.PrepareHistoryDays(ctx, t0.Add(-24*time.Hour)))
			noErr(t, s.PrepareHistoryDays(ctx, t0.Add(24*time.Hour)))
		}
		// SQLite reads one day's table at a time: t0's.
		table := "history"
		if s.dialect == sqliteDialect {
			noErr(t, s.PrepareHistoryDays(ctx, t0))
			table = dayTable(dayStart(t0.UnixMicro()))
		}
		for _, sh := range shapes {
			for _, asc := range []bool{false, true} {
				q := sh.q
				q.AccountID, q.Ascending = acc, asc
				p, err := planHistory(&q)
				if err != nil {
					t.Fatal(err)
				}
				if p.index != sh.index {
					t.Errorf("%s: planned on %s, want %s", sh.name, p.index, sh.index)
				}
				query, args := p.selectSQL(s.dialect, dayPartition{name: table}, asc, after, 100)
				// One bound per side of the time range: with the window's
				// edge and the keyset position both, SQLite ranges the
				// index on one and scans from it to the other.
				edge, keyset := "received_us >= ?", "id) > (?, ?)"
				if !asc {
					edge, keyset = "received_us < ?", "id) < (?, ?)"
				}
				if s.dialect == sqliteDialect && strings.Contains(query, edge) && strings.Contains(query, keyset) {
					t.Errorf("%s (ascending %v): both the window's edge and the keyset position bound the range:\n%s", sh.name, asc, query)
				}
				explain := "EXPLAIN QUERY PLAN "
				if s.dialect == postgresDialect {
					explain = "EXPLAIN "
				}
				rows, err := conn.QueryContext(ctx, s.rebind(explain+query), args...)
				if err != nil {
					t.Fatalf("%s: %v", sh.name, err)
				}
				var plan []string
				cols, _ := rows.Columns()
				for rows.Next() {
					vals := make([]any, len(cols))
					ptrs := make([]any, len(cols))
					for i := range vals {
						ptrs[i] = &vals[i]
					}
					if err := rows.Scan(ptrs...); err != nil {
						t.Fatal(err)
					}
					// SQLite: id, parent, notused, detail; PostgreSQL: one text column.
					line := vals[len(vals)-1]
					if b, ok := line.([]byte); ok {
						line = string(b)
					}
					plan = append(plan, line.(string))
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				rows.Close()
				text := strings.Join(plan, "\n")
				bad := []string{"TEMP B-TREE", "Sort", "Seq Scan", "Bitmap"}
				want := "USING INDEX " + dayIndex(table, sh.index) + " "
				if s.dialect == postgresDialect {
					// Each day's copy of the index, the days in the
					// query's order (an Append, not a Merge Append, which
					// would sort); a time window reads only its days.
					want = " using " + strings.Replace(sh.index, "history_", "history_d20261120_", 1) + " on history_d20261120"
					if strings.Contains(text, "Merge Append") {
						t.Errorf("%s (ascending %v): plan does not read the days in order:\n%s", sh.name, asc, text)
					}
					if !sh.q.From.IsZero() && (strings.Contains(text, "history_d20261119") || strings.Contains(text, "history_d20261121")) {
						t.Errorf("%s (ascending %v): plan reads days outside the window:\n%s", sh.name, asc, text)
					}
				}
				if s.dialect == sqliteDialect && sh.index == "history_client_time" {
					// SQLite's client index is the day's table
					// history_dYYYYMMDD_client, merged with the unfolded
					// rows, here as a process whose list of them is not
					// current reads them: the ids after the fold's mark,
					// read in that range and sorted (TestUnfoldedRowsReadByID
					// has them by id): the merge reads the client index in
					// order, with no sort.
					want = "SEARCH c USING PRIMARY KEY (account_id=? AND client_id=?"
					folded, unfolded, ok := strings.Cut(text, "\nRIGHT\n")
					if !ok || !strings.Contains(text, "MERGE (UNION ALL)") || !strings.Contains(unfolded, "SEARCH h USING INTEGER PRIMARY KEY (rowid>?)") ||
						strings.Contains(unfolded, "USING INDEX "+table) || strings.Contains(unfolded, "SCAN "+table) {
						t.Errorf("%s (ascending %v): the unfolded rows are not read as the range after the mark:\n%s", sh.name, asc, text)
					}
					text = folded
				}
				if !strings.Contains(text, want) {
					t.Errorf("%s (ascending %v): plan does not use %s:\n%s", sh.name, asc, sh.index, text)
				}
				for _, b := range bad {
					if strings.Contains(text, b) {
						t.Errorf("%s (ascending %v): plan has %q:\n%s", sh.name, asc, b, text)
					}
				}
				if s.dialect == sqliteDialect && !strings.Contains(text, "received_us") {
					t.Errorf("%s: the keyset position is not part of the index range:\n%s", sh.name, text)
				}
			}
		}
	})
}

// TestUnfoldedRowsReadByID: on SQLite a query by client reads the
// client's unfolded rows by the ids the store lists (each a lookup of the
// day's table by its key, then its client index's entry), or by the
// range of them past maxListedIDs; never a scan of the day's table or one
// of its other indexes.
func TestUnfoldedRowsReadByID(t *testing.T) {
	ctx := context.Background()
	s := openFoldStore(t)
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	noErr(t, s.PrepareHistoryDays(ctx, t0))
	table := dayTable(dayStart(t0.UnixMicro()))
	for _, c := range []struct{ rows, want string }{
		{"h.id IN (3, 5, 8)", "SEARCH h USING INTEGER PRIMARY KEY (rowid=?)"},
		{"h.id BETWEEN 3 AND 5000", "SEARCH h USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"},
	} {
		q := fleetmq.HistoryQuery{AccountID: foldAccA, ClientID: "pump-1", From: t0.Add(-time.Hour)}
		p, err := planHistory(&q)
		noErr(t, err)
		p.unfolded = func(string, string) string { return c.rows }
		query, args := p.selectSQL(sqliteDialect, dayPartition{name: table}, false, nil, 100)
		text := sqlitePlan(t, s.db, query, args...)
		_, unfolded, ok := strings.Cut(text, "\nRIGHT\n")
		if !ok || !strings.Contains(unfolded, c.want) || !strings.Contains(unfolded, "SEARCH c USING PRIMARY KEY") ||
			strings.Contains(unfolded, "SCAN") || strings.Contains(unfolded, "USING INDEX") {
			t.Errorf("unfolded rows %s: plan does not read them by id:\n%s", c.rows, text)
		}
	}
}

// sqlitePlan is SQLite's query plan of query, a line per step.
func sqlitePlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+query, args...)
	noErr(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		noErr(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	noErr(t, rows.Err())
	return strings.Join(plan, "\n")
}
