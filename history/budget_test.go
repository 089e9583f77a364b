package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// budgetStore fills a store with 200 records of account A and 200 of
// account B at the same times (three records per instant, so budgets end
// inside an instant): clients pump-0..2, classes state and telemetry,
// topics {class}/t0..t4, and a station controller on every seventh.
// It returns A's records, with their ids.
func budgetStore(t *testing.T, st *sqlstore.Store) []*fleetmq.Record {
	t.Helper()
	var a []*fleetmq.Record
	for _, acc := range []string{accA, accB} {
		var recs []*fleetmq.Record
		for i := range 200 {
			class := []string{"state", "telemetry"}[i%2]
			r := rec(acc, fmt.Sprintf("pump-%d", i%3), fmt.Sprintf("%s/t%d", class, i%5), t0.Add(time.Duration(i/3)*time.Millisecond), fmt.Sprint(i))
			if i%7 == 0 {
				r.StationControllerDeviceID = fmt.Sprintf("sc-%d", i%2)
			}
			recs = append(recs, r)
		}
		appendAll(t, st, recs...)
		if acc == accA {
			a = recs
		}
	}
	return a
}

// budgetShapes are filter shapes over budgetStore, each with the records
// of A it selects; they use each index, with filters after it.
func budgetShapes() []struct {
	name string
	p    history.Params
	keep func(*fleetmq.Record) bool
} {
	topicIs := func(sub string) func(*fleetmq.Record) bool {
		return func(r *fleetmq.Record) bool { return strings.HasSuffix(r.Topic, "/"+sub) }
	}
	return []struct {
		name string
		p    history.Params
		keep func(*fleetmq.Record) bool
	}{
		{"topic filter matching nothing (class index)", history.Params{Topic: accA + "/+/telemetry/none"}, func(*fleetmq.Record) bool { return false }},
		{"topic expression matching nothing (account index)", history.Params{TopicRegex: "^" + accA + "/pump-[0-9]+/(state|telemetry)/none$"},
			func(*fleetmq.Record) bool { return false }},
		{"topic filter on the class index", history.Params{Topic: "+/+/telemetry/t3"}, topicIs("telemetry/t3")},
		{"topic expression on the account index", history.Params{TopicRegex: "^" + accA + "/[^/]+/[a-z]+/t[14]$"},
			func(r *fleetmq.Record) bool {
				return topicIs("state/t1")(r) || topicIs("state/t4")(r) || topicIs("telemetry/t1")(r) || topicIs("telemetry/t4")(r)
			}},
		{"client index, class after it", history.Params{ClientID: "pump-1", Class: "state"},
			func(r *fleetmq.Record) bool { return r.ClientID == "pump-1" && r.Class == "state" }},
		{"device index, client after it", history.Params{StationControllerDeviceID: "sc-1", ClientID: "pump-2"},
			func(r *fleetmq.Record) bool { return r.StationControllerDeviceID == "sc-1" && r.ClientID == "pump-2" }},
		{"no filter", history.Params{}, func(*fleetmq.Record) bool { return true }},
	}
}

// want is the payloads of the records that pass keep, in the order.
func wantPayloads(recs []*fleetmq.Record, keep func(*fleetmq.Record) bool, asc bool) []string {
	var sel []*fleetmq.Record
	for _, r := range recs {
		if keep(r) {
			sel = append(sel, r)
		}
	}
	sort.Slice(sel, func(i, j int) bool {
		a, b := sel[i], sel[j]
		if !a.Received.Equal(b.Received) {
			return a.Received.Before(b.Received) == asc
		}
		return (a.ID < b.ID) == asc
	})
	out := []string{}
	for _, r := range sel {
		out = append(out, string(r.Payload))
	}
	return out
}

// TestScanBudgetPages: with a scan budget smaller than the store, every
// filter shape, followed through its next cursors, returns exactly the
// records it selects, in order, each once, however the budget cuts the
// pages (pages end inside an instant, and some are empty with a next
// cursor); a filter that matches nothing answers its first page with no
// records and a next cursor. The other account's records never appear.
func TestScanBudgetPages(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		recs := budgetStore(t, st)
		const budget = 16
		for _, sh := range budgetShapes() {
			for _, order := range []string{"desc", "asc"} {
				for _, limit := range []string{"4", "50"} {
					want := wantPayloads(recs, sh.keep, order == "asc")
					p := sh.p
					p.Order, p.Limit = order, limit
					var got []string
					pages, empty := 0, 0
					for {
						q, err := history.Build(accA, p, false)
						if err != nil {
							t.Fatal(err)
						}
						q.ScanBudget = budget
						page, err := history.Page(context.Background(), st, q)
						if err != nil {
							t.Fatal(err)
						}
						pages++
						if pages > 1000 {
							t.Fatalf("%s %s limit %s: the cursor never ends", sh.name, order, limit)
						}
						for _, r := range page.Records {
							if r.AccountID != accA {
								t.Fatalf("%s: record of account %s", sh.name, r.AccountID)
							}
							got = append(got, string(r.Payload))
						}
						if len(page.Records) == 0 && page.Next != "" {
							empty++
						}
						if page.Next == "" {
							break
						}
						p.Cursor = page.Next
					}
					if strings.Join(got, ",") != strings.Join(want, ",") {
						t.Errorf("%s %s limit %s:\n got %v\nwant %v", sh.name, order, limit, got, want)
					}
					if len(want) == 0 && (pages < 2 || empty != pages-1) {
						t.Errorf("%s %s: %d pages, %d of them empty with a next cursor; want the budget to end every page but the last", sh.name, order, pages, empty)
					}
				}
			}
		}
	})
}

// TestScanBudgetCountsTheIndexRange: what a budget counts is the rows the
// query's index yields: on the account's index, A's rows only, never B's
// (the index starts with the account), so a filter that matches nothing
// needs ceil(200/budget) pages; on the class index, A's rows of that class.
// The store reports where the budget ran out: the last row it examined.
func TestScanBudgetCountsTheIndexRange(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		recs := budgetStore(t, st)
		const budget = 16
		for _, tc := range []struct {
			p     history.Params
			rows  int // of A, in the index range
			pages int
		}{
			{history.Params{TopicRegex: "^" + accA + "/pump-[0-9]+/(state|telemetry)/none$"}, 200, 13},
			{history.Params{Topic: accA + "/+/telemetry/none"}, 100, 7},
			{history.Params{Topic: accA + "/+/event/#"}, 0, 1},          // class index: no event record, no row examined
			{history.Params{Topic: accA + "/+/nothing/#"}, 0, 1},        // no such class either
			{history.Params{ClientID: "pump-0", Class: "event"}, 67, 5}, // client index
		} {
			pages := 0
			p := tc.p
			for {
				q, err := history.Build(accA, p, false)
				if err != nil {
					t.Fatal(err)
				}
				q.ScanBudget = budget
				page, err := history.Page(context.Background(), st, q)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				if len(page.Records) != 0 || pages > 100 {
					t.Fatalf("%+v: %d records on page %d", tc.p, len(page.Records), pages)
				}
				if page.Next == "" {
					break
				}
				p.Cursor = page.Next
			}
			if pages != tc.pages {
				t.Errorf("%+v: %d pages, want %d (%d rows, budget %d)", tc.p, pages, tc.pages, tc.rows, budget)
			}
		}

		// The first budget of a newest-first scan of A's index ends at A's
		// 16th newest record.
		q, err := history.Build(accA, history.Params{TopicRegex: "^" + accA + "/none$"}, true)
		if err != nil {
			t.Fatal(err)
		}
		q.ScanBudget = budget
		err = st.QueryHistory(context.Background(), q, func(*fleetmq.Record) error { return errors.New("a match") })
		var spent *fleetmq.ScanBudgetSpent
		if !errors.As(err, &spent) {
			t.Fatalf("QueryHistory = %v, want ScanBudgetSpent", err)
		}
		newest := append([]*fleetmq.Record(nil), recs...)
		sort.Slice(newest, func(i, j int) bool { return newest[i].ID > newest[j].ID })
		if want := newest[budget-1].Position(); !spent.Last.Received.Equal(want.Received) || spent.Last.ID != want.ID {
			t.Errorf("budget spent at %+v, want %+v", spent.Last, want)
		}
	})
}

// TestExportFollowsTheBudget: an export reads past every budget by itself
// and returns the whole result, on each index.
func TestExportFollowsTheBudget(t *testing.T) {
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		recs := budgetStore(t, st)
		for _, sh := range budgetShapes() {
			for _, order := range []string{"desc", "asc"} {
				p := sh.p
				p.Order = order
				q, err := history.Build(accA, p, true)
				if err != nil {
					t.Fatal(err)
				}
				q.ScanBudget = 9
				var b bytes.Buffer
				n, err := history.Export(context.Background(), &b, st, q, history.NDJSON)
				if err != nil {
					t.Fatal(err)
				}
				got := []string{}
				for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
					if line == "" {
						continue
					}
					var r history.Record
					if err := json.Unmarshal([]byte(line), &r); err != nil {
						t.Fatal(err)
					}
					if r.AccountID != accA {
						t.Fatalf("%s: record of account %s", sh.name, r.AccountID)
					}
					got = append(got, string(r.Payload))
				}
				want := wantPayloads(recs, sh.keep, order == "asc")
				if n != int64(len(want)) || strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("%s %s: %d records\n got %v\nwant %v", sh.name, order, n, got, want)
				}
			}
		}
	})
}
