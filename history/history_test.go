package history_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/sqlstore"
)

const (
	accA = "aaaaaaaa-0000-4000-8000-000000000001"
	accB = "bbbbbbbb-0000-4000-8000-000000000002"
)

// t0 is the receive time of the first test record.
var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// forEachStore runs f on a fresh SQLite store and a fresh PostgreSQL
// database (skipped without FLEETMQ_TEST_POSTGRES, see internal/pgtest).
func forEachStore(t *testing.T, f func(t *testing.T, st *sqlstore.Store)) {
	pgtest.ForEachDSN(t, func(t *testing.T, dsn string) {
		st, err := sqlstore.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
}

func rec(acc, client, sub string, at time.Time, payload string) *fleetmq.Record {
	class, _, _ := strings.Cut(sub, "/")
	return &fleetmq.Record{AccountID: acc, ClientID: client, Topic: acc + "/" + client + "/" + sub, Class: class,
		QoS: 1, PublishedQoS: 1, Payload: []byte(payload), Received: at}
}

func appendAll(t *testing.T, st fleetmq.HistoryStore, recs ...*fleetmq.Record) {
	t.Helper()
	if err := st.AppendHistory(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

// query builds p for the account and returns the matching records' topics
// and payloads as "topic payload" lines, in order.
func query(t *testing.T, st fleetmq.HistoryStore, acc string, p history.Params) []string {
	t.Helper()
	q, err := history.Build(acc, p, true)
	if err != nil {
		t.Fatalf("Build(%+v): %v", p, err)
	}
	var out []string
	err = st.QueryHistory(context.Background(), q, func(r *fleetmq.Record) error {
		if r.AccountID != acc {
			t.Errorf("record of account %s in a query of %s", r.AccountID, acc)
		}
		out = append(out, r.Topic[len(acc)+1:]+" "+string(r.Payload))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equal(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// TestQueryFilters: every filter of a history query, on two accounts that
// use the same client ids and topics; neither ever sees the other's records.
func TestQueryFilters(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
		for _, acc := range []string{accA, accB} {
			tag := acc[:1]
			d := rec(acc, "pump-1", "telemetry/flow", at(3), `{"station_controller_device_id":"sc-9","flow":3}`)
			d.StationControllerDeviceID = "sc-9"
			appendAll(t, st,
				rec(acc, "pump-1", "state/summary", at(0), tag+"0"),
				rec(acc, "pump-1", "event/alarm/high", at(1), tag+"1"),
				rec(acc, "pump-2", "state/summary", at(2), tag+"2"),
				d,
				rec(acc, "pump-2", "sample/a/b/c", at(4), tag+"4"),
			)
		}
		flow := `telemetry/flow {"station_controller_device_id":"sc-9","flow":3}`
		equal(t, "no filter (newest first)", query(t, st, accA, history.Params{}),
			"pump-2/sample/a/b/c a4", "pump-1/"+flow, "pump-2/state/summary a2", "pump-1/event/alarm/high a1", "pump-1/state/summary a0")
		equal(t, "account B", query(t, st, accB, history.Params{Order: "asc", Limit: "2"}),
			"pump-1/state/summary b0", "pump-1/event/alarm/high b1")
		equal(t, "client_id", query(t, st, accA, history.Params{ClientID: "pump-2", Order: "asc"}),
			"pump-2/state/summary a2", "pump-2/sample/a/b/c a4")
		equal(t, "class", query(t, st, accA, history.Params{Class: "state", Order: "asc"}),
			"pump-1/state/summary a0", "pump-2/state/summary a2")
		equal(t, "device", query(t, st, accA, history.Params{StationControllerDeviceID: "sc-9"}), "pump-1/"+flow)
		equal(t, "from/to", query(t, st, accA, history.Params{From: at(1).Format(time.RFC3339), To: at(3).Format(time.RFC3339), Order: "asc"}),
			"pump-1/event/alarm/high a1", "pump-2/state/summary a2")

		for _, tc := range []struct {
			filter string
			want   []string
		}{
			{accA + "/+/state/summary", []string{"pump-1/state/summary a0", "pump-2/state/summary a2"}},
			{accA + "/pump-1/#", []string{"pump-1/state/summary a0", "pump-1/event/alarm/high a1", "pump-1/" + flow}},
			{accA + "/+/event/+/high", []string{"pump-1/event/alarm/high a1"}},
			{accA + "/+/sample/#", []string{"pump-2/sample/a/b/c a4"}},
			{accA + "/+/sample/a/+", nil},
			{"+/pump-2/#", []string{"pump-2/state/summary a2", "pump-2/sample/a/b/c a4"}}, // first-level wildcard = the account
			{"#", []string{"pump-1/state/summary a0", "pump-1/event/alarm/high a1", "pump-2/state/summary a2", "pump-1/" + flow, "pump-2/sample/a/b/c a4"}},
			{accA + "/pump-1/state/summary", []string{"pump-1/state/summary a0"}},
			{accA + "/pump-1/state", nil}, // no wildcard: exact topic only
		} {
			equal(t, "topic "+tc.filter, query(t, st, accA, history.Params{Topic: tc.filter, Order: "asc"}), tc.want...)
		}
		// Topic expressions: any RE2 expression, applied within the
		// caller's account only. The examples of docs/history.md and the
		// service's form (the account id's pattern) included.
		uuid := `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/`
		for _, tc := range []struct {
			expr string
			want []string
		}{
			{"^" + accA + "/pump-[12]/state/", []string{"pump-1/state/summary a0", "pump-2/state/summary a2"}},
			{"^" + accA + "/pump-[0-9]+/state/", []string{"pump-1/state/summary a0", "pump-2/state/summary a2"}},
			{"^" + accA + "/pump-1/(state|event)/", []string{"pump-1/state/summary a0", "pump-1/event/alarm/high a1"}},
			{uuid + "pump-2/", []string{"pump-2/state/summary a2", "pump-2/sample/a/b/c a4"}},
			{"/sample/", []string{"pump-2/sample/a/b/c a4"}}, // unanchored: anywhere in the topic
			{"^" + accB + "/", nil},                      // another account's: nothing of it
			{"^" + accB + "/pump-1/state/summary$", nil}, // ... whatever its literal levels name
			{"^" + accA + "/pump-1/event/|^" + accB + "/", []string{"pump-1/event/alarm/high a1"}},
			{".*", []string{"pump-1/state/summary a0", "pump-1/event/alarm/high a1", "pump-2/state/summary a2", "pump-1/" + flow, "pump-2/sample/a/b/c a4"}},
		} {
			equal(t, "expression "+tc.expr, query(t, st, accA, history.Params{TopicRegex: tc.expr, Order: "asc"}), tc.want...)
		}
		equal(t, "topic filter and client agree", query(t, st, accA, history.Params{Topic: accA + "/pump-1/state/#", ClientID: "pump-1"}),
			"pump-1/state/summary a0")
	})
}

// TestFiltersTakeAnyText: what a tenant types is only ever a value. A
// topic filter with % or _ matches those characters and nothing else (two
// accounts with the same topics); an expression whose literal start ends
// in a character whose last UTF-8 byte is 0x7f or 0xbf (¿), or that holds
// NUL, and a device tag that is not UTF-8 or holds NUL, answer on
// PostgreSQL as on SQLite (they failed there: the first two made an upper
// bound, the others parameters, that are not UTF-8 text).
func TestFiltersTakeAnyText(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
		for _, acc := range []string{accA, accB} {
			tag := acc[:1]
			appendAll(t, st,
				rec(acc, "pump-1", "state/a_b", at(0), tag+"0"),
				rec(acc, "pump-1", "state/aXb", at(1), tag+"1"),
				rec(acc, "pump-1", "state/a%b", at(2), tag+"2"),
				rec(acc, "pump-1", "state/aYYb", at(3), tag+"3"),
				rec(acc, "pump-1", "state/¿qué", at(4), tag+"4"),
				rec(acc, "pump-1", "state/del\x7f", at(5), tag+"5"),
			)
		}
		for _, tc := range []struct {
			p    history.Params
			want []string
		}{
			{history.Params{Topic: accA + "/+/state/a_b"}, []string{"pump-1/state/a_b a0"}},
			{history.Params{Topic: accA + "/+/state/a%b"}, []string{"pump-1/state/a%b a2"}},
			{history.Params{Topic: accA + "/pump-1/state/a%"}, nil},
			{history.Params{TopicRegex: "^" + accA + "/pump-1/state/¿"}, []string{"pump-1/state/¿qué a4"}},
			{history.Params{TopicRegex: "^" + accA + "/pump-1/state/del\x7f"}, []string{"pump-1/state/del\x7f a5"}},
			{history.Params{TopicRegex: "^" + accA + "/pump-1/state/a\\x00"}, nil},
			{history.Params{TopicRegex: "^" + accA + "/pump-1/st\\x00ate/"}, nil},
			{history.Params{StationControllerDeviceID: "sc\x00"}, nil},
			{history.Params{StationControllerDeviceID: "sc\xff"}, nil},
		} {
			tc.p.Order = "asc"
			equal(t, fmt.Sprintf("%+q", tc.p), query(t, st, accA, tc.p), tc.want...)
		}
		latest, err := st.LatestHistory(context.Background(), accA, "pump\x00")
		if err != nil || len(latest) != 0 {
			t.Errorf("latest of a client id with NUL: %v, %v; want nothing", latest, err)
		}
	})
}

// TestBuildRefuses: invalid input is refused field by field, and nothing
// reaches another account.
func TestBuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		p     history.Params
		field string
	}{
		{history.Params{Topic: accB + "/#"}, "topic"}, // another account's filter
		{history.Params{TopicRegex: "^" + accA + "/("}, "topic_regex"},
		{history.Params{TopicRegex: strings.Repeat("x", fleetmq.MaxTopicRegexLen+1)}, "topic_regex"},
		{history.Params{Topic: "$share/g/#"}, "topic"},
		{history.Params{Topic: accA + "/a/#/b"}, "topic"},
		{history.Params{Topic: accA + "/#", TopicRegex: "^" + accA + "/"}, "topic"},
		{history.Params{Topic: accA + "/pump-1/#", ClientID: "pump-2"}, "topic"},
		{history.Params{Topic: "+/+/state/#", Class: "event"}, "topic"}, // the third level is the class
		{history.Params{ClientID: "bad id!"}, "client_id"},
		{history.Params{Class: "logs"}, "class"},
		{history.Params{From: "yesterday"}, "from"},
		{history.Params{From: "2026-11-22T10:00:00Z", To: "2026-11-22T09:00:00Z"}, "to"},
		{history.Params{Order: "up"}, "order"},
		{history.Params{Limit: "0"}, "limit"},
		{history.Params{Limit: "10001"}, "limit"},
		{history.Params{Cursor: "bm9wZQ"}, "cursor"},
		{history.Params{Cursor: history.EncodeCursor(fleetmq.Position{Received: t0, ID: 3}, true)}, "cursor"}, // made for asc
	} {
		_, err := history.Build(accA, tc.p, false)
		var fe *fleetmq.Error
		if !errors.As(err, &fe) || fe.Code != fleetmq.CodeValidation || fe.Fields[tc.field] == "" {
			t.Errorf("Build(%+v) = %v, want a validation error on %s", tc.p, err, tc.field)
		}
	}
	if _, err := history.Build("not-an-account", history.Params{}, false); err == nil {
		t.Error("query of an invalid account id accepted")
	}
}

// TestPagination: pages of a large result cover every record exactly once,
// in order, both ways; records arriving between pages do not disturb a
// newest-first walk.
func TestPagination(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		var recs []*fleetmq.Record
		for i := range 250 {
			// Pairs of records share a receive time: the id breaks the tie.
			recs = append(recs, rec(accA, "c1", "telemetry/x", t0.Add(time.Duration(i/2)*time.Second), fmt.Sprint(i)))
		}
		appendAll(t, st, recs...)
		appendAll(t, st, rec(accB, "c1", "telemetry/x", t0, "other account"))

		for _, order := range []string{"desc", "asc"} {
			var got []string
			p := history.Params{Order: order, Limit: "100"}
			pages := 0
			for {
				q, err := history.Build(accA, p, false)
				if err != nil {
					t.Fatal(err)
				}
				page, err := history.Page(context.Background(), st, q)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				for _, r := range page.Records {
					got = append(got, string(r.Payload))
				}
				if page.Next == "" {
					break
				}
				if pages == 1 && order == "desc" {
					// A record arriving now is newer than the walk: not in it.
					appendAll(t, st, rec(accA, "c1", "telemetry/x", t0.Add(time.Hour), "late"))
				}
				p.Cursor = page.Next
			}
			if order == "asc" {
				// The record that arrived during the first walk comes last.
				if got[len(got)-1] != "late" {
					t.Fatalf("asc: last record %q, want the late one", got[len(got)-1])
				}
				got = got[:len(got)-1]
			}
			if pages != 3 || len(got) != 250 {
				t.Fatalf("%s: %d pages, %d records, want 3 pages of 250 records", order, pages, len(got))
			}
			for i := range got {
				want := i
				if order == "desc" {
					want = 249 - i
				}
				if got[i] != fmt.Sprint(want) {
					t.Fatalf("%s: record %d is %q, want %d", order, i, got[i], want)
				}
			}
		}
	})
}

// TestExport: the three export formats carry every field; JSON payloads are
// embedded, binary payloads are base64, and nothing of the other account
// appears.
func TestExport(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		j := rec(accA, "c1", "state/s", t0, "{\n  \"temp\": 21.5,\n  \"station_controller_device_id\": \"sc-1\"\n}")
		j.StationControllerDeviceID, j.QoS, j.PublishedQoS, j.Retain = "sc-1", 1, 2, true
		j.ContentType, j.PayloadFormat = "application/json", 1
		j.UserProperties = []fleetmq.UserProperty{{Key: "unit", Value: "°C"}, {Key: "quote", Value: `a "b", c`}}
		bin := rec(accA, "c2", "sample/raw", t0.Add(time.Second), "")
		bin.Payload = []byte{0, 1, 2, 0xff, '\n'}
		text := rec(accA, "c2", "event/e", t0.Add(2*time.Second), "plain, \"quoted\"\ntext")
		appendAll(t, st, j, bin, text, rec(accB, "c1", "state/s", t0, `{"secret":1}`))

		export := func(f history.Format) string {
			q, err := history.Build(accA, history.Params{Order: "asc"}, true)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			n, err := history.Export(context.Background(), &b, st, q, f)
			if err != nil || n != 3 {
				t.Fatalf("export %s: %d records, %v", f, n, err)
			}
			return b.String()
		}

		var arr []history.Record
		if err := json.Unmarshal([]byte(export(history.JSON)), &arr); err != nil || len(arr) != 3 {
			t.Fatalf("JSON export: %v (%d records)", err, len(arr))
		}
		nd := strings.Split(strings.TrimSuffix(export(history.NDJSON), "\n"), "\n")
		if len(nd) != 3 {
			t.Fatalf("NDJSON export has %d lines, want 3: %q", len(nd), nd)
		}
		for i, line := range nd {
			var r history.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("NDJSON line %d: %v", i, err)
			}
			if fmt.Sprint(r) != fmt.Sprint(arr[i]) {
				t.Errorf("NDJSON record %d differs from the JSON export:\n%+v\n%+v", i, r, arr[i])
			}
		}
		r := arr[0]
		if r.Topic != accA+"/c1/state/s" || r.Class != "state" || r.QoS != 1 || r.PublishedQoS != 2 || !r.Retain ||
			r.StationControllerDeviceID != "sc-1" || r.ContentType != "application/json" || r.PayloadFormat != 1 ||
			len(r.UserProperties) != 2 || r.UserProperties[0].Value != "°C" || !r.ReceivedAt.Equal(t0) || r.PayloadEncoding != "json" {
			t.Errorf("JSON record: %+v", r)
		}
		var payload struct{ Temp float64 }
		if err := json.Unmarshal(r.Payload, &payload); err != nil || payload.Temp != 21.5 {
			t.Errorf("JSON payload not embedded as JSON: %s", r.Payload)
		}
		if b, err := arr[1].Bytes(); err != nil || !bytes.Equal(b, bin.Payload) || arr[1].PayloadEncoding != "base64" {
			t.Errorf("binary payload: %q %v (%s)", b, err, arr[1].PayloadEncoding)
		}
		if b, _ := arr[2].Bytes(); string(b) != string(text.Payload) {
			t.Errorf("text payload: %q", b)
		}

		rows, err := csv.NewReader(strings.NewReader(export(history.CSV))).ReadAll()
		if err != nil || len(rows) != 4 {
			t.Fatalf("CSV export: %v (%d rows)", err, len(rows))
		}
		head := strings.Join(rows[0], ",")
		col := func(row []string, name string) string {
			for i, h := range rows[0] {
				if h == name {
					return row[i]
				}
			}
			t.Fatalf("CSV has no column %s: %s", name, head)
			return ""
		}
		if col(rows[3], "payload") != string(text.Payload) || col(rows[3], "payload_encoding") != "utf-8" {
			t.Errorf("CSV text payload: %q", rows[3])
		}
		if col(rows[2], "payload_encoding") != "base64" || col(rows[2], "payload") != "AAEC/wo=" {
			t.Errorf("CSV binary payload: %q", rows[2])
		}
		if col(rows[1], "station_controller_device_id") != "sc-1" || col(rows[1], "received_at") != "2026-11-20T12:00:00.000000Z" {
			t.Errorf("CSV row: %q", rows[1])
		}
	})
}

// TestExportInBatches: an export longer than one batch, in either order
// and with a limit, writes exactly the records the query matches, in its
// order, with records at the same instant neither lost nor repeated at
// the batches' seams; and a store the writer fails on stops it.
func TestExportInBatches(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		var recs []*fleetmq.Record
		for i := range 2*history.ExportBatch + 7 {
			// Three records per microsecond, so batches end inside an instant.
			recs = append(recs, rec(accA, "c1", "telemetry/t", t0.Add(time.Duration(i/3)*time.Microsecond), fmt.Sprint(i)))
		}
		appendAll(t, st, recs...)
		appendAll(t, st, rec(accB, "c1", "telemetry/t", t0, "B"))
		for _, tc := range []struct {
			order string
			limit string
			want  int
		}{{"asc", "", len(recs)}, {"desc", "", len(recs)}, {"asc", "1500", 1500}} {
			q, err := history.Build(accA, history.Params{Order: tc.order, Limit: tc.limit}, true)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			n, err := history.Export(context.Background(), &b, st, q, history.NDJSON)
			lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			if err != nil || n != int64(tc.want) || len(lines) != tc.want {
				t.Fatalf("%s limit %q: %d records, %d lines, %v; want %d", tc.order, tc.limit, n, len(lines), err, tc.want)
			}
			for i, line := range lines {
				var r history.Record
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				want := i
				if tc.order == "desc" {
					want = len(recs) - 1 - i
				}
				if string(r.Payload) != fmt.Sprint(want) {
					t.Fatalf("%s limit %q: line %d is record %s, want %d", tc.order, tc.limit, i, r.Payload, want)
				}
			}
		}
	})
}

// TestAggregate: a numeric payload field bucketed over time, with records
// that lack it counted as skipped.
func TestAggregate(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
		appendAll(t, st,
			rec(accA, "c1", "telemetry/t", at(0), `{"temp": 20}`),
			rec(accA, "c1", "telemetry/t", at(30), `{"temp": 22}`),
			rec(accA, "c1", "telemetry/t", at(59), `{"temp": "24.5"}`),
			rec(accA, "c1", "telemetry/t", at(61), `{"battery": {"level": 80}, "temp": 19}`),
			rec(accA, "c1", "telemetry/t", at(62), `{"temp": true}`),
			rec(accA, "c1", "telemetry/t", at(63), `not json`),
			rec(accA, "c1", "telemetry/t", at(200), `{"temp": 30}`),
			rec(accB, "c1", "telemetry/t", at(10), `{"temp": 1000}`),
		)
		q, err := history.Build(accA, history.Params{ClientID: "c1", From: at(0).Format(time.RFC3339), To: at(300).Format(time.RFC3339)}, true)
		if err != nil {
			t.Fatal(err)
		}
		s, err := history.Aggregate(context.Background(), st, q, "temp", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(s.Skipped)
		for _, b := range s.Buckets {
			got += fmt.Sprintf(" [%s n=%d min=%g max=%g avg=%.2f last=%g]", b.Start.Format("15:04:05"), b.Count, b.Min, b.Max, b.Avg, b.Last)
		}
		want := "2 [12:00:00 n=3 min=20 max=24.5 avg=22.17 last=24.5] [12:01:00 n=1 min=19 max=19 avg=19.00 last=19] [12:03:00 n=1 min=30 max=30 avg=30.00 last=30]"
		if got != want {
			t.Errorf("aggregate temp:\n got %s\nwant %s", got, want)
		}
		s, err = history.Aggregate(context.Background(), st, q, "battery.level", time.Hour)
		if err != nil || len(s.Buckets) != 1 || s.Buckets[0].Last != 80 || s.Skipped != 6 {
			t.Errorf("aggregate battery.level: %+v %v", s, err)
		}
		// A range with more records than the scan budget is refused, not
		// read to its end.
		small := *q
		small.ScanBudget = 4
		if _, err := history.Aggregate(context.Background(), st, &small, "temp", time.Minute); !errors.As(err, new(*history.TooManyRecords)) {
			t.Errorf("an aggregation over 7 records with a scan budget of 4: %v, want TooManyRecords", err)
		}
		small.ScanBudget = 7
		if s, err := history.Aggregate(context.Background(), st, &small, "temp", time.Minute); err != nil || len(s.Buckets) != 3 {
			t.Errorf("an aggregation over 7 records with a scan budget of 7: %+v, %v", s, err)
		}
		if _, err := history.Aggregate(context.Background(), st, q, "temp", time.Millisecond); err == nil {
			t.Error("a bucket under 1s accepted")
		}
		noRange, _ := history.Build(accA, history.Params{}, true)
		if _, err := history.Aggregate(context.Background(), st, noRange, "temp", time.Minute); err == nil {
			t.Error("an aggregation without a time range accepted")
		}
	})
}

// TestLatestAndRetention: the newest record per topic of a client, and
// retention by each account's plan (starter keeps 7 days, scale 90).
func TestLatestAndRetention(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		ctx := context.Background()
		now := t0.Add(30 * 24 * time.Hour)
		for acc, plan := range map[string]string{accA: "starter", accB: "scale"} {
			if err := st.CreateAccount(ctx, &fleetmq.Account{ID: acc, Name: plan, OwnerEmail: plan + "@example.com", Plan: plan, CreatedAt: t0}, "x"); err != nil {
				t.Fatal(err)
			}
			appendAll(t, st,
				rec(acc, "c1", "state/a", now.Add(-10*24*time.Hour), "old a"),
				rec(acc, "c1", "state/b", now.Add(-9*24*time.Hour), "old b"),
				rec(acc, "c1", "state/a", now.Add(-time.Hour), "new a"),
				rec(acc, "c2", "state/a", now.Add(-time.Hour), "c2 a"),
			)
		}
		latest := func(acc string) (out []string) {
			rs, err := st.LatestHistory(ctx, acc, "c1")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.AccountID != acc || r.ClientID != "c1" {
					t.Errorf("latest of %s/c1 returned %s/%s", acc, r.AccountID, r.ClientID)
				}
				out = append(out, string(r.Payload))
			}
			return out
		}
		equal(t, "latest before retention", latest(accA), "new a", "old b")

		ret := &history.Retention{Control: st, History: st, Now: func() time.Time { return now }, Batch: 1, Pause: time.Millisecond}
		n, err := ret.Pass(ctx)
		if err != nil || n != 2 {
			t.Fatalf("retention pass deleted %d, %v; want the 2 starter records older than 7 days", n, err)
		}
		equal(t, "account A after retention", query(t, st, accA, history.Params{Order: "asc"}), "c1/state/a new a", "c2/state/a c2 a")
		equal(t, "account B (90 days) untouched", query(t, st, accB, history.Params{Order: "asc"}),
			"c1/state/a old a", "c1/state/b old b", "c1/state/a new a", "c2/state/a c2 a")
		equal(t, "latest after retention", latest(accA), "new a")
		equal(t, "latest of B", latest(accB), "new a", "old b")
	})
}

// TestRetentionDropsDays: history is one table (PostgreSQL: partition) per
// UTC day, and a pass drops the days in which no account that keeps them
// has records: the day 35 days back (starter keeps 7 days, growth 30, and
// the scale account, which keeps 90, has records of the last hour only),
// and deletes rows of the days it keeps (20 and 8 days back, which hold
// growth's records). Each account keeps what its plan keeps. A record of a
// dropped day stored late gets its day back, and the next pass drops it
// again.
func TestRetentionDropsDays(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		ctx := context.Background()
		now := t0.Add(40 * 24 * time.Hour)
		const accC = "cccccccc-0000-4000-8000-000000000003"
		for acc, plan := range map[string]string{accA: "starter", accB: "growth", accC: "scale"} {
			if err := st.CreateAccount(ctx, &fleetmq.Account{ID: acc, Name: plan, OwnerEmail: plan + "@example.com", Plan: plan, CreatedAt: t0}, "x"); err != nil {
				t.Fatal(err)
			}
			if acc == accC {
				appendAll(t, st, rec(acc, "c1", "state/a", now.Add(-time.Hour), "1 hour"))
				continue
			}
			appendAll(t, st,
				rec(acc, "c1", "state/gone", now.Add(-35*24*time.Hour), "35 days"),
				rec(acc, "c1", "state/a", now.Add(-20*24*time.Hour), "20 days"),
				rec(acc, "c1", "state/a", now.Add(-8*24*time.Hour), "8 days"),
				rec(acc, "c1", "state/a", now.Add(-time.Hour), "1 hour"),
			)
		}
		days := func() (n int) {
			// Days in arrival order and days reordered by client (the
			// pass reorders the days that ended).
			q := `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name GLOB 'history_[dc][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]'`
			if st.Backend() == "postgres" {
				q = `SELECT COUNT(*) FROM pg_inherits WHERE inhparent = 'history'::regclass`
			}
			if err := st.DB().QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if got := days(); got != 4 {
			t.Fatalf("%d day partitions before the pass; want 4, one per day with records", got)
		}

		ret := &history.Retention{Control: st, History: st, Now: func() time.Time { return now }, Batch: 1, Pause: time.Millisecond}
		n, err := ret.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The day 35 days back is dropped whole; A's two rows of 20 and 8
		// days are deleted.
		wantRows, wantDays := int64(2), int64(1)
		if got := days(); got != 4 {
			t.Errorf("%d day partitions after the pass; want 4 (the 3 days kept, today's among them, and tomorrow's made ahead)", got)
		}
		if n != wantRows || ret.DaysDropped() != wantDays {
			t.Fatalf("pass deleted %d rows and dropped %d days; want %d and %d", n, ret.DaysDropped(), wantRows, wantDays)
		}
		equal(t, "account A (7 days)", query(t, st, accA, history.Params{Order: "asc"}), "c1/state/a 1 hour")
		equal(t, "account B (30 days)", query(t, st, accB, history.Params{Order: "asc"}),
			"c1/state/a 20 days", "c1/state/a 8 days", "c1/state/a 1 hour")
		equal(t, "account C (90 days)", query(t, st, accC, history.Params{Order: "asc"}), "c1/state/a 1 hour")
		for _, acc := range []string{accA, accB, accC} {
			rs, err := st.LatestHistory(ctx, acc, "c1")
			if err != nil || len(rs) != 1 || string(rs[0].Payload) != "1 hour" {
				t.Errorf("latest of %s after the pass: %d records, %v; want state/a's newest only (state/gone's record was dropped)", acc, len(rs), err)
			}
		}

		// A late record of the dropped day: stored, then dropped again.
		appendAll(t, st, rec(accB, "c1", "state/late", now.Add(-35*24*time.Hour), "late"))
		equal(t, "B's late record", query(t, st, accB, history.Params{Order: "asc", Topic: accB + "/c1/state/late"}), "c1/state/late late")
		latestOfB := func() (out []string) {
			rs, err := st.LatestHistory(ctx, accB, "c1")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				out = append(out, r.Topic[len(accB)+1:]+" "+string(r.Payload))
			}
			return out
		}
		equal(t, "B's latest values with the late record", latestOfB(), "c1/state/a 1 hour", "c1/state/late late")
		if _, err := ret.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		equal(t, "B's late record after the next pass", query(t, st, accB, history.Params{Order: "asc", Topic: accB + "/c1/state/late"}))
		equal(t, "B's latest values after the next pass", latestOfB(), "c1/state/a 1 hour")
		if entries := latestEntries(t, st, accB, "c1"); len(entries) != 1 {
			t.Errorf("B's latest entries after the next pass: %v; want state/a's only (the late record's day was dropped)", entries)
		}
		equal(t, "account B after the next pass", query(t, st, accB, history.Params{Order: "asc"}),
			"c1/state/a 20 days", "c1/state/a 8 days", "c1/state/a 1 hour")
	})
}

// TestExportLargePayloads: batches that end at their encoded size rather
// than their count (large payloads) lose and repeat nothing either.
func TestExportLargePayloads(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		const n = 70
		big := strings.Repeat("x", 100<<10) // ~100 KiB each: several byte-bounded batches
		for i := range n {
			appendAll(t, st, rec(accA, "c1", "sample/raw", t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("%03d%s", i, big)))
		}
		q, err := history.Build(accA, history.Params{Order: "asc"}, true)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		got, err := history.Export(context.Background(), &b, st, q, history.NDJSON)
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if err != nil || got != n || len(lines) != n {
			t.Fatalf("%d records, %d lines, %v; want %d", got, len(lines), err, n)
		}
		for i, line := range lines {
			var r history.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			if p, _ := r.Bytes(); !strings.HasPrefix(string(p), fmt.Sprintf("%03d", i)) {
				t.Fatalf("line %d holds record %.3s", i, p)
			}
		}
	})
}

// TestRetentionKeepsLatestConsistent: the latest value of each topic is
// the newest record of the topic that exists, at every point a reader can
// see while retention deletes in batches, and when a pass is cut short:
// an entry goes with the record it names, in the same transaction, not
// before (the topic would lose its latest value while its records are
// still there) nor after.
func TestRetentionKeepsLatestConsistent(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		ctx := context.Background()
		now := t0.Add(30 * 24 * time.Hour)
		if err := st.CreateAccount(ctx, &fleetmq.Account{ID: accA, Name: "A", OwnerEmail: "a@example.com", Plan: "starter", CreatedAt: t0}, "x"); err != nil {
			t.Fatal(err)
		}
		day := 24 * time.Hour
		appendAll(t, st,
			rec(accA, "c1", "state/a", now.Add(-12*day), "a1"),
			rec(accA, "c1", "state/a", now.Add(-11*day), "a2"),
			rec(accA, "c1", "state/b", now.Add(-10*day), "b1"),
			rec(accA, "c1", "state/c", now.Add(-9*day), "c1"),
			rec(accA, "c1", "state/e", now.Add(-9*day+time.Hour), "e1"),
			rec(accA, "c1", "state/c", now.Add(-time.Hour), "c2"),
			rec(accA, "c1", "state/d", now.Add(-time.Hour), "d1"),
		)
		if _, err := st.FoldHistory(ctx); err != nil { // SQLite: the latest entries are in their table
			t.Fatal(err)
		}
		// consistent checks that the latest values are the newest record
		// of each of c1's topics that a query finds, and returns how many
		// records c1 has.
		consistent := func(what string) int {
			t.Helper()
			q, err := history.Build(accA, history.Params{ClientID: "c1", Order: "asc"}, true)
			if err != nil {
				t.Fatal(err)
			}
			want, newest, n := map[string]string{}, map[string]string{}, 0
			if err := st.QueryHistory(ctx, q, func(r *fleetmq.Record) error {
				// Oldest first: the last one stays.
				want[r.Topic], newest[r.Topic], n = string(r.Payload), fmt.Sprint(r.Received.UnixMicro(), r.ID), n+1
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// The table itself, which LatestHistory reads through the
			// records: an entry for each topic's newest record, and none
			// for a record that is gone.
			if entries := latestEntries(t, st, accA, "c1"); fmt.Sprint(entries) != fmt.Sprint(newest) {
				t.Errorf("%s: latest entries %v; the newest records of the topics are %v", what, entries, newest)
			}
			rs, err := st.LatestHistory(ctx, accA, "c1")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range rs {
				got[r.Topic] = string(r.Payload)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: latest values %v; the newest records of the topics are %v", what, got, want)
			}
			return n
		}
		consistent("before retention")
		cut := now.Add(-7 * day)
		for i := 1; ; i++ {
			n, err := st.DeleteHistory(ctx, accA, cut, 1)
			if err != nil {
				t.Fatal(err)
			}
			consistent(fmt.Sprintf("after batch %d of retention", i))
			if n < 1 {
				break
			}
		}
		if n := consistent("after retention"); n != 2 {
			t.Errorf("c1 has %d records after retention, want 2 (c2 and d1)", n)
		}

		// A pass cut short after its first batch (the server stopping)
		// leaves them consistent too.
		appendAll(t, st,
			rec(accA, "c1", "state/a", now.Add(-12*day), "a1"),
			rec(accA, "c1", "state/b", now.Add(-10*day), "b1"),
			rec(accA, "c1", "state/b", now.Add(-10*day+time.Minute), "b2"),
		)
		if _, err := st.FoldHistory(ctx); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ret := &history.Retention{Control: st, History: cutShort{HistoryStore: st, cancel: cancel}, Now: func() time.Time { return now }, Batch: 1, Pause: time.Millisecond}
		if _, err := ret.Pass(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("a pass cut short: %v, want context.Canceled", err)
		}
		if n := consistent("after a pass cut short"); n != 4 {
			t.Errorf("c1 has %d records after a pass cut after one batch, want 4", n)
		}
	})
}

// latestEntries reads the latest-per-topic table's entries of a client
// (all folded on SQLite): topic -> "received_us record_id".
func latestEntries(t *testing.T, st *sqlstore.Store, acc, client string) map[string]string {
	t.Helper()
	q := `SELECT topic, received_us, record_id FROM history_latest WHERE account_id = ? AND client_id = ?`
	if st.Backend() == "postgres" {
		q = `SELECT topic, received_us, record_id FROM history_latest WHERE account_id = $1 AND client_id = $2`
	}
	rows, err := st.DB().QueryContext(context.Background(), q, acc, client)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var topic string
		var us, id int64
		if err := rows.Scan(&topic, &us, &id); err != nil {
			t.Fatal(err)
		}
		out[topic] = fmt.Sprint(us, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// cutShort is a history store whose context is cancelled by its first
// delete, once that delete is done.
type cutShort struct {
	fleetmq.HistoryStore
	cancel func()
}

func (c cutShort) DeleteHistory(ctx context.Context, accountID string, before time.Time, limit int) (int64, error) {
	defer c.cancel()
	return c.HistoryStore.DeleteHistory(ctx, accountID, before, limit)
}

// TestPagesAfterABatchStoredInHalves: the ingest writer stores a batch the
// store refused in halves, and a record of the first half that failed
// again alone after the second half went in gets a later id than the
// records after it (on PostgreSQL ids come from a sequence at commit; on
// SQLite from the row order). Pages, cursors, scan-budget continuations
// and exports follow (received_us, id), a total order of values a record
// never changes: every record comes exactly once, in that order, however
// its id compares with its neighbours'. Records of the same microsecond
// come in id order.
func TestPagesAfterABatchStoredInHalves(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		ctx := context.Background()
		var batch []*fleetmq.Record
		for i := range 12 {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			if i == 6 || i == 7 {
				at = t0.Add(5 * time.Millisecond) // 5, 6 and 7 in one microsecond
			}
			sub := "telemetry/x"
			if i%3 == 0 {
				sub = "state/y"
			}
			batch = append(batch, rec(accA, "c1", sub, at, fmt.Sprint(i)))
		}
		// The whole batch and its first half were refused; the second half
		// went in, then the first half's records one by one, 5 last.
		appendAll(t, st, batch[6:]...)
		for i := range 6 {
			appendAll(t, st, batch[i])
		}
		if !(batch[5].ID > batch[6].ID && batch[0].ID > batch[11].ID) {
			t.Fatalf("ids %d (record 5), %d (6), %d (0), %d (11): the test wants records stored alone after later ones to have later ids",
				batch[5].ID, batch[6].ID, batch[0].ID, batch[11].ID)
		}
		// The order every read must follow: time, then id.
		want := func(desc bool, keep func(*fleetmq.Record) bool) (out []string) {
			rs := slices.Clone(batch)
			slices.SortFunc(rs, func(a, b *fleetmq.Record) int {
				if c := a.Received.Compare(b.Received); c != 0 {
					return c
				}
				return cmp.Compare(a.ID, b.ID)
			})
			if desc {
				slices.Reverse(rs)
			}
			for _, r := range rs {
				if keep(r) {
					out = append(out, string(r.Payload))
				}
			}
			return out
		}
		all := func(*fleetmq.Record) bool { return true }
		onlyX := func(r *fleetmq.Record) bool { return strings.HasSuffix(r.Topic, "telemetry/x") }
		for _, order := range []string{"asc", "desc"} {
			for _, limit := range []int{1, 2, 5} {
				for _, budget := range []int{0, 2} { // 2: pages that end at their scan budget
					for _, filter := range []struct {
						regex string
						keep  func(*fleetmq.Record) bool
					}{{"", all}, {"^" + accA + "/c1/telemetry/", onlyX}} {
						var got []string
						p := history.Params{Order: order, Limit: fmt.Sprint(limit), TopicRegex: filter.regex}
						for pages := 0; ; pages++ {
							q, err := history.Build(accA, p, false)
							if err != nil {
								t.Fatal(err)
							}
							q.ScanBudget = budget
							page, err := history.Page(ctx, st, q)
							if err != nil {
								t.Fatal(err)
							}
							for _, r := range page.Records {
								got = append(got, string(r.Payload))
							}
							if page.Next == "" || pages > 100 {
								break
							}
							p.Cursor = page.Next
						}
						what := fmt.Sprintf("%s pages of %d, scan budget %d, regex %q", order, limit, budget, filter.regex)
						equal(t, what, got, want(order == "desc", filter.keep)...)
					}
				}
			}
			// An export reads in batches, each after the last record (or
			// the last row examined) of the one before.
			q, err := history.Build(accA, history.Params{Order: order}, true)
			if err != nil {
				t.Fatal(err)
			}
			q.ScanBudget = 2
			var b bytes.Buffer
			if _, err := history.Export(ctx, &b, st, q, history.NDJSON); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
				var r history.Record
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				p, _ := r.Bytes()
				got = append(got, string(p))
			}
			equal(t, order+" export", got, want(order == "desc", all)...)
		}
	})
}
