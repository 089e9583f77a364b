package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestCLIHistory: the operator's history commands on a data directory with
// two accounts' stored messages.
func TestCLIHistory(t *testing.T) {
	dir := t.TempDir()
	a := field(t, mustCLI(t, dir, "account", "create", "-name", "A", "-email", "a@example.com", "-plan", "starter"), "account_id")
	b := field(t, mustCLI(t, dir, "account", "create", "-name", "B", "-email", "b@example.com", "-plan", "scale"), "account_id")

	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(dir, sqlstore.DatabaseFile))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	var recs []*fleetmq.Record
	for _, acc := range []string{a, b} {
		for i := range 5 {
			recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: "pump", Topic: acc + "/pump/telemetry/t", Class: "telemetry",
				QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, `{"temp": %d, "acc": %q}`, 20+i, acc[:4]), Received: now.Add(time.Duration(i-5) * time.Minute)})
		}
		// Older than the starter plan keeps.
		recs = append(recs, &fleetmq.Record{AccountID: acc, ClientID: "pump", Topic: acc + "/pump/state/s", Class: "state",
			Payload: []byte("ancient"), Received: now.Add(-8 * 24 * time.Hour)})
	}
	if err := st.AppendHistory(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	st.Close()

	out := mustCLI(t, dir, "history", "query", a, "-limit", "2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.Contains(lines[1], `"temp": 24`) ||
		!strings.HasPrefix(lines[3], "next page: -cursor ") {
		t.Fatalf("history query -limit 2:\n%s", out)
	}
	cursor := strings.TrimPrefix(strings.Split(strings.TrimSpace(out), "\n")[3], "next page: -cursor ")
	out = mustCLI(t, dir, "history", "query", a, "-limit", "2", "-cursor", cursor, "-format", "json")
	var page struct {
		Records    []history.Record `json:"records"`
		NextCursor string           `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Records) != 2 || page.NextCursor == "" {
		t.Fatalf("second page as JSON: %v\n%s", err, out)
	}
	if p, _ := page.Records[0].Bytes(); !strings.Contains(string(p), `"temp": 22`) || page.Records[0].AccountID != a {
		t.Errorf("second page starts with %s of %s", p, page.Records[0].AccountID)
	}

	out = mustCLI(t, dir, "history", "export", a, "-topic", a+"/+/telemetry/#", "-format", "csv")
	if rows := strings.Split(strings.TrimSpace(out), "\n"); len(rows) != 6 || strings.Contains(out, b) {
		t.Errorf("CSV export of A's telemetry: %d rows (want header + 5), other account present: %v\n%s", len(rows), strings.Contains(out, b), out)
	}
	out = mustCLI(t, dir, "history", "chart", a, "-field", "temp", "-bucket", "1h",
		"-from", now.Add(-time.Hour).Format(time.RFC3339), "-to", now.Add(time.Hour).Format(time.RFC3339))
	if !strings.Contains(out, "5      20   24   22   24") {
		t.Errorf("chart of temp:\n%s", out)
	}
	out = mustCLI(t, dir, "history", "latest", a, "pump")
	if !strings.Contains(out, a+"/pump/telemetry/t") || !strings.Contains(out, "ancient") || strings.Contains(out, b) {
		t.Errorf("latest:\n%s", out)
	}

	if out := mustCLI(t, dir, "history", "prune"); !strings.Contains(out, "deleted 1 records") {
		t.Errorf("prune: %s (want A's 8-day-old record deleted, B's kept on the 90-day plan)", out)
	}
	if out := mustCLI(t, dir, "history", "latest", a, "pump"); strings.Contains(out, "ancient") {
		t.Errorf("latest after prune still shows the deleted record:\n%s", out)
	}
	if out := mustCLI(t, dir, "history", "latest", b, "pump"); !strings.Contains(out, "ancient") {
		t.Errorf("B's record on the scale plan was pruned:\n%s", out)
	}

	cliErr(t, dir, "must start with the account id", "history", "query", a, "-topic", b+"/#")
	cliErr(t, dir, "not a valid regular expression", "history", "export", a, "-regex", "^"+a+"/(")
	if out := mustCLI(t, dir, "history", "export", a, "-regex", "^"+b+"/"); strings.TrimSpace(out) != "" {
		t.Errorf("an expression naming account B, run for A, exported:\n%s", out)
	}
	cliErr(t, dir, "cursor", "history", "query", a, "-cursor", "garbage")
	cliErr(t, dir, "want ndjson, json or csv", "history", "export", a, "-format", "xml")
	cliErr(t, dir, "needs from and to", "history", "chart", a, "-field", "temp")
}

// closingStore is a history store whose database is closed before its
// failAt-th read (from 1).
type closingStore struct {
	*sqlstore.Store
	failAt, calls int
}

func (c *closingStore) QueryHistory(ctx context.Context, q *fleetmq.HistoryQuery, fn func(*fleetmq.Record) error) error {
	if c.calls++; c.calls == c.failAt {
		c.Store.Close()
	}
	return c.Store.QueryHistory(ctx, q, fn)
}

// TestCLIExportFailingMidway: "history export" whose store fails after
// the first batch ends with an error (the command exits non-zero) that
// says the output is incomplete, not with a short output that looks
// done; the same export completes when the store holds.
func TestCLIExportFailingMidway(t *testing.T) {
	const acc = "aaaaaaaa-0000-4000-8000-000000000001"
	const records = 2*history.ExportBatch + 10
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), sqlstore.DatabaseFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	at := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	recs := make([]*fleetmq.Record, records)
	for i := range recs {
		recs[i] = &fleetmq.Record{AccountID: acc, ClientID: "pump", Topic: acc + "/pump/telemetry/t", Class: "telemetry",
			QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, `{"n":%d}`, i), Received: at.Add(time.Duration(i) * time.Millisecond)}
	}
	if err := st.AppendHistory(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	q, err := history.Build(acc, history.Params{Order: "asc"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := exportHistory(context.Background(), &out, &closingStore{Store: st}, q, history.NDJSON); err != nil || strings.Count(out.String(), "\n") != records {
		t.Fatalf("export: %d lines, %v; want %d", strings.Count(out.String(), "\n"), err, records)
	}
	out.Reset()
	err = exportHistory(context.Background(), &out, &closingStore{Store: st, failAt: 2}, q, history.NDJSON)
	want := fmt.Sprintf("history export stopped after %d records, the output is incomplete: ", history.ExportBatch)
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(out.String(), "\n") != history.ExportBatch {
		t.Fatalf("export whose store closes after the first batch: %d lines, error %v; want %d lines and an error %q...",
			strings.Count(out.String(), "\n"), err, history.ExportBatch, want)
	}
}

// brokenPipe is a standard output that takes nothing: a reader such as
// head(1) that has gone. It records the size of each write.
type brokenPipe struct{ writes []int }

func (b *brokenPipe) Write(p []byte) (int, error) {
	b.writes = append(b.writes, len(p))
	return 0, errors.New("broken pipe")
}

// TestCLIExportStreams: "history export" writes to standard output as it
// reads, a batch at a time, instead of holding the whole export in memory
// until the end: piped into a reader that goes away (| head), it stops
// after its first write, having read one batch, and says why.
func TestCLIExportStreams(t *testing.T) {
	dir := t.TempDir()
	a := field(t, mustCLI(t, dir, "account", "create", "-name", "A", "-email", "a@example.com", "-plan", "starter"), "account_id")
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(dir, sqlstore.DatabaseFile))
	if err != nil {
		t.Fatal(err)
	}
	const records = 3 * history.ExportBatch
	now := time.Now().UTC().Truncate(time.Second)
	recs := make([]*fleetmq.Record, records)
	for i := range recs {
		recs[i] = &fleetmq.Record{AccountID: a, ClientID: "pump", Topic: a + "/pump/telemetry/t", Class: "telemetry",
			QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, `{"n":%d}`, i), Received: now.Add(time.Duration(i-records) * time.Millisecond)}
	}
	if err := st.AppendHistory(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	st.Close()
	whole := mustCLI(t, dir, "history", "export", a)
	if n := strings.Count(whole, "\n"); n != records {
		t.Fatalf("export: %d lines, want %d", n, records)
	}

	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var out brokenPipe
	var errOut bytes.Buffer
	err = run(ctx, []string{"history", "export", "-data", dir, a}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "the output is incomplete") || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("export into a closed pipe: %v, want the write's error saying the output is incomplete", err)
	}
	if len(out.writes) != 1 || out.writes[0] >= len(whole)/2 {
		t.Fatalf("export into a closed pipe wrote %v bytes, want one write of about a batch (the whole export is %d bytes)", out.writes, len(whole))
	}
}

// TestCLITablesEscapeControlCharacters: what tenants wrote (a payload, a
// topic published with control characters allowed) reaches the
// operator's terminal in a command's table as escapes, never as the
// terminal commands it may hold (a title change, a screen clear), nor as
// rows and cells of its own (a topic's newline and tabs).
func TestCLITablesEscapeControlCharacters(t *testing.T) {
	dir := t.TempDir()
	a := field(t, mustCLI(t, dir, "account", "create", "-name", "A", "-email", "a@example.com", "-plan", "starter"), "account_id")
	st, err := sqlstore.OpenSQLite(context.Background(), filepath.Join(dir, sqlstore.DatabaseFile))
	if err != nil {
		t.Fatal(err)
	}
	rec := &fleetmq.Record{AccountID: a, ClientID: "pump", Topic: a + "/pump/telemetry/\x1b[2J", Class: "telemetry",
		Payload: []byte("\x1b]0;owned\x07 temp \u009b31m"), Received: time.Now().UTC().Add(-time.Minute)}
	// A topic whose tab and newline would make a row of their own.
	forged := &fleetmq.Record{AccountID: a, ClientID: "pump", Topic: a + "/pump/telemetry/x\nFORGED\t2026-01-01T00:00:00Z\t2\tvalve open", Class: "telemetry",
		Payload: []byte("1"), Received: time.Now().UTC().Add(-2 * time.Minute)}
	if err := st.AppendHistory(context.Background(), []*fleetmq.Record{rec, forged}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, args := range [][]string{{"history", "query", a}, {"history", "latest", a, "pump"}} {
		out := mustCLI(t, dir, args...)
		if strings.Contains(out, "\nFORGED") || !strings.Contains(out, `x\nFORGED\t2026`) {
			t.Fatalf("%s: a topic's newline and tabs made a row of their own:\n%s", strings.Join(args[:2], " "), out)
		}
		if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && unicode.IsControl(r) }); i >= 0 {
			t.Fatalf("%s: a control character (%q) reached the terminal:\n%q", strings.Join(args[:2], " "), out[i:i+1], out)
		}
		for _, want := range []string{`telemetry/\x1b[2J`, `\x1b]0;owned\a temp \u009b31m`} {
			if !strings.Contains(out, want) {
				t.Fatalf("%s: no %s in\n%s", strings.Join(args[:2], " "), want, out)
			}
		}
	}
}
