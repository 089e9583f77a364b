package api_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
)

func itoa(n int) string { return strconv.Itoa(n) }

// historyPage is GET /history's json page.
type historyPage struct {
	Records    []history.Record `json:"records"`
	NextCursor string           `json:"next_cursor"`
}

// sent is a message a test published, as history should return it.
type sent struct {
	client, topic, class string
	qos, publishedQoS    byte
	payload              []byte
	at                   time.Time
	device               string
}

// key identifies a record by what was sent (ids are the store's).
func (s sent) key() string {
	return fmt.Sprintf("%s|%s|%d|%d|%s|%s", s.client, s.topic, s.qos, s.publishedQoS, s.at.UTC().Format(time.RFC3339Nano), s.payload)
}

// recordKey is key of a returned record.
func recordKey(t *testing.T, r history.Record) string {
	t.Helper()
	p, err := r.Bytes()
	if err != nil {
		t.Fatalf("record %d: payload: %v", r.ID, err)
	}
	return fmt.Sprintf("%s|%s|%d|%d|%s|%s", r.ClientID, r.Topic, r.QoS, r.PublishedQoS, r.ReceivedAt.UTC().Format(time.RFC3339Nano), p)
}

// histFixture is an account whose devices published known messages, next
// to an account B whose devices have the same client ids and topics.
type histFixture struct {
	e    *env
	A, B *tenant
	sent []sent // A's, in publish order (so in id order)
}

// newHistFixture publishes, as A's devices dev1 and dev2 over MQTT, 31
// messages one second apart (every class, JSON and binary payloads, a
// station controller tag, QoS 0, 1 and 2), and a few messages of B's
// dev1, and waits until history holds them all. edit changes the app's
// configuration.
func newHistFixture(t *testing.T, edit ...func(*app.Config)) *histFixture {
	t.Helper()
	e := start(t, edit...)
	f := &histFixture{e: e}
	f.A = e.tenant(t, "A", "starter", allAddOns, "dev1", "dev2")
	f.B = e.tenant(t, "B", "starter", allAddOns, "dev1")
	e.synced(t)
	devs := map[string]*mqtttest.V5{
		"dev1": e.dial(t, "dev1", f.A.PubUser, f.A.PubPass),
		"dev2": e.dial(t, "dev2", f.A.PubUser, f.A.PubPass),
	}
	classes := []string{"state", "event", "telemetry", "sample"}
	zeros := map[string]int64{}
	for i := 0; i < 31; i++ {
		e.clock.Add(time.Second)
		client := []string{"dev1", "dev2"}[i%2]
		class := classes[i%4]
		s := sent{client: client, class: class, topic: f.A.topic(client, class+"/m"+itoa(i%3)), qos: 1, publishedQoS: 1, at: e.clock.Now()}
		switch {
		case i%5 == 0:
			s.payload = []byte{0xff, 0x00, byte(i), '\n', ','} // not UTF-8: base64
		case i%5 == 1:
			s.payload = []byte("plain text, with \"quotes\"\nand a line break " + itoa(i))
		case i == 7:
			s.device = "sc-7"
			s.payload = []byte(`{"station_controller_device_id":"sc-7","v":7}`)
		default:
			s.payload = []byte(`{"n":` + itoa(i) + `,"s":"x"}`)
		}
		switch i {
		case 3: // QoS 2 on telemetry: effective 1
			s.publishedQoS = 2
		case 4: // QoS 2 on state: effective 2 (add-on, pool)
			s.publishedQoS, s.qos = 2, 2
		case 10, 20: // QoS 0: stored without an acknowledgement
			s.publishedQoS, s.qos = 0, 0
		}
		devs[client].Pub(t, s.topic, s.publishedQoS, string(s.payload))
		if s.qos == 0 {
			// Not acknowledged: the clock must not move on before the
			// broker took it (the live view counts it then).
			zeros[client]++
			eventually(t, "the broker to take a QoS 0 message", func() bool {
				l, _ := e.Policy.LivePublisher(f.A.ID, client, e.clock.Now())
				return l.Today[0] == zeros[client]
			})
		}
		f.sent = append(f.sent, s)
	}
	bdev := e.dial(t, "dev1", f.B.PubUser, f.B.PubPass)
	for i := 0; i < 4; i++ {
		bdev.Pub(t, f.B.topic("dev1", "state/m0"), 1, `{"b":`+itoa(i)+`}`)
	}
	eventually(t, "history to hold A's QoS 0 messages", func() bool {
		// An export, which reads past any scan budget.
		r := e.get(t, f.A.Token, "/history?format=ndjson").ok(t, http.StatusOK, nil)
		return len(decodeNDJSON(t, r)) == len(f.sent)
	})
	return f
}

// want returns the keys of A's messages that pass keep, newest first
// (desc) or oldest first.
func (f *histFixture) want(asc bool, keep func(sent) bool) []string {
	var out []string
	for _, s := range f.sent {
		if keep == nil || keep(s) {
			out = append(out, s.key())
		}
	}
	if !asc {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// pageJSON pages through GET /history (format json) with query and
// returns every record, checking that pages are at most limit long.
func (e *env) pageJSON(t *testing.T, token, query string, limit int) (recs []history.Record, pages int) {
	t.Helper()
	cursor := ""
	for {
		pages++
		if pages > 1000 {
			t.Fatal("the cursor never ends")
		}
		q := join(query, "limit="+itoa(limit))
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		var p historyPage
		r := e.get(t, token, "/history?"+q).ok(t, http.StatusOK, &p)
		if len(p.Records) > limit || len(p.Records) == 0 && p.NextCursor != "" {
			t.Fatalf("%s: %d records and next cursor %q with limit %d", r, len(p.Records), p.NextCursor, limit)
		}
		if h := r.Header.Get("X-Next-Cursor"); h != p.NextCursor {
			t.Fatalf("%s: X-Next-Cursor %q, next_cursor %q", r, h, p.NextCursor)
		}
		recs = append(recs, p.Records...)
		if p.NextCursor == "" {
			return recs, pages
		}
		cursor = p.NextCursor
	}
}

// linesPage is one ndjson or csv page.
type linesPage struct {
	records []history.Record
	next    string // X-Next-Cursor
	link    string // the Link header's URL
}

// getLines GETs a history path and decodes an ndjson or csv body.
func (e *env) getLines(t *testing.T, token, path string, headers ...string) (*response, linesPage) {
	t.Helper()
	r := e.get(t, token, path, headers...).ok(t, http.StatusOK, nil)
	var lp linesPage
	ct := r.Header.Get("Content-Type")
	switch {
	case ct == "application/x-ndjson":
		lp.records = decodeNDJSON(t, r)
	case strings.HasPrefix(ct, "text/csv"):
		lp.records = decodeCSV(t, r)
	default:
		t.Fatalf("%s: want ndjson or csv", r)
	}
	if r.Header.Get("X-RateLimit-Limit") == "" || r.Header.Get("X-RateLimit-Used") == "" {
		t.Fatalf("%s: a streamed answer without X-RateLimit-* headers", r)
	}
	lp.next = r.Header.Get("X-Next-Cursor")
	if l := r.Header.Get("Link"); l != "" {
		m := regexp.MustCompile(`^<([^>]+)>; rel="next"$`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("%s: Link %q", r, l)
		}
		lp.link = m[1]
	}
	if (lp.next == "") != (lp.link == "") {
		t.Fatalf("%s: X-Next-Cursor %q but Link %q", r, lp.next, lp.link)
	}
	return r, lp
}

func decodeNDJSON(t *testing.T, r *response) []history.Record {
	t.Helper()
	var out []history.Record
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec history.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s: line %q: %v", r, sc.Text(), err)
		}
		out = append(out, rec)
	}
	if len(r.Body) > 0 && r.Body[len(r.Body)-1] != '\n' {
		t.Fatalf("%s: the last line is not terminated", r)
	}
	return out
}

func decodeCSV(t *testing.T, r *response) []history.Record {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(r.Body)).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", r, err)
	}
	if len(rows) == 0 || strings.Join(rows[0], ",")+"\n" != history.CSVHeader {
		t.Fatalf("%s: header row %v", r, rows)
	}
	var out []history.Record
	for _, row := range rows[1:] {
		m := map[string]string{}
		for i, name := range rows[0] {
			m[name] = row[i]
		}
		id, _ := strconv.ParseInt(m["id"], 10, 64)
		at, err := time.Parse(time.RFC3339Nano, m["received_at"])
		if err != nil {
			t.Fatalf("%s: received_at %q", r, m["received_at"])
		}
		qos, _ := strconv.Atoi(m["qos"])
		pqos, _ := strconv.Atoi(m["published_qos"])
		rec := history.Record{ID: id, AccountID: m["account_id"], ClientID: m["client_id"], Topic: m["topic"], Class: m["class"],
			QoS: byte(qos), PublishedQoS: byte(pqos), Retain: m["retain"] == "true", ReceivedAt: at,
			StationControllerDeviceID: m["station_controller_device_id"], PayloadEncoding: "base64"}
		payload := []byte(m["payload"])
		switch m["payload_encoding"] {
		case "utf-8":
		case "base64":
			if payload, err = base64.StdEncoding.DecodeString(m["payload"]); err != nil {
				t.Fatalf("%s: payload %q", r, m["payload"])
			}
		default:
			t.Fatalf("%s: payload_encoding %q", r, m["payload_encoding"])
		}
		rec.Payload, _ = json.Marshal(base64.StdEncoding.EncodeToString(payload))
		out = append(out, rec)
	}
	return out
}

// pageLines pages through an ndjson or csv history query by following the
// Link header, and returns every record.
func (e *env) pageLines(t *testing.T, token, path string, limit int, headers ...string) []history.Record {
	t.Helper()
	var out []history.Record
	for pages := 1; ; pages++ {
		if pages > 1000 {
			t.Fatal("the Link never ends")
		}
		r, lp := e.getLines(t, token, path, headers...)
		if len(lp.records) > limit {
			t.Fatalf("%s: %d records with limit %d", r, len(lp.records), limit)
		}
		out = append(out, lp.records...)
		if lp.link == "" {
			return out
		}
		if !strings.HasPrefix(lp.link, "/api/v1/subscriber/history?") || !strings.Contains(lp.link, "cursor="+url.QueryEscape(lp.next)) {
			t.Fatalf("%s: Link %q does not carry the cursor %q", r, lp.link, lp.next)
		}
		path = strings.TrimPrefix(lp.link, "/api/v1/subscriber")
	}
}

// keys checks the records are unique, A's, and returns their keys.
func (f *histFixture) keys(t *testing.T, recs []history.Record) []string {
	t.Helper()
	seen := map[int64]bool{}
	var out []string
	for _, r := range recs {
		if seen[r.ID] {
			t.Fatalf("record %d twice", r.ID)
		}
		seen[r.ID] = true
		if r.AccountID != f.A.ID || !strings.HasPrefix(r.Topic, f.A.ID+"/") {
			t.Fatalf("record %d of account %s (%s) in A's history", r.ID, r.AccountID, r.Topic)
		}
		out = append(out, recordKey(t, r))
	}
	return out
}

func sameKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d\ngot  %q\nwant %q", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %q, want %q", what, i, got[i], want[i])
		}
	}
}

// TestHistoryRecords: messages published over MQTT come back from GET
// /history with their fields: topic, class, effective and published QoS,
// the time the broker received them, the station controller tag, a JSON
// payload as JSON and any other payload base64.
func TestHistoryRecords(t *testing.T) {
	t.Parallel()
	f := newHistFixture(t)
	var p historyPage
	f.e.get(t, f.A.Token, "/history?order=asc&limit=1000").ok(t, http.StatusOK, &p)
	sameKeys(t, "all, oldest first", f.keys(t, p.Records), f.want(true, nil))
	for i, r := range p.Records {
		s := f.sent[i]
		if r.Class != s.class || r.StationControllerDeviceID != s.device || r.Retain {
			t.Fatalf("record %d: %+v, sent %+v", i, r, s)
		}
		wantEnc := "json"
		if json.Valid(s.payload) {
			var a, b any
			json.Unmarshal(r.Payload, &a)
			json.Unmarshal(s.payload, &b)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("record %d: JSON payload %s, sent %s", i, r.Payload, s.payload)
			}
		} else {
			wantEnc = "base64"
		}
		if r.PayloadEncoding != wantEnc {
			t.Fatalf("record %d: payload_encoding %q, want %q (payload %q)", i, r.PayloadEncoding, wantEnc, s.payload)
		}
	}
	if p.NextCursor != "" {
		t.Fatalf("one page holds everything, but next_cursor is %q", p.NextCursor)
	}
	// The default is 100 newest first.
	f.e.get(t, f.A.Token, "/history").ok(t, http.StatusOK, &p)
	sameKeys(t, "default", f.keys(t, p.Records), f.want(false, nil))
}

// join joins query string parts, leaving out empty ones.
func join(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "&")
}

// TestHistoryPaging: json pages (next_cursor), ndjson and csv pages
// (X-Next-Cursor and Link, the format chosen by parameter or Accept) in
// both orders return every record exactly once, in order, for page sizes
// that do and do not divide the total; ndjson and csv without a limit
// stream the whole result, oldest first, with no cursor.
func TestHistoryPaging(t *testing.T) {
	t.Parallel()
	f := newHistFixture(t)
	e, tok := f.e, f.A.Token
	n := len(f.sent)
	for _, order := range []string{"", "order=desc", "order=asc"} {
		want := f.want(order == "order=asc", nil)
		for _, limit := range []int{1, 7, n, 10000} {
			what := fmt.Sprintf("json %q limit %d", order, limit)
			recs, pages := e.pageJSON(t, tok, order, limit)
			sameKeys(t, what, f.keys(t, recs), want)
			if wantPages := max((n+limit-1)/limit, 1); pages != wantPages {
				t.Fatalf("%s: %d pages, want %d", what, pages, wantPages)
			}
		}
		for _, limit := range []int{1, 8, n} {
			for _, v := range []struct {
				name    string
				query   string
				headers []string
			}{
				{"format=ndjson", "format=ndjson", nil},
				{"format=csv", "format=csv", nil},
				{"Accept ndjson", "", []string{"Accept", "application/x-ndjson"}},
				{"Accept csv", "", []string{"Accept", "text/csv"}},
				{"format wins over Accept", "format=ndjson", []string{"Accept", "text/csv"}},
			} {
				what := fmt.Sprintf("%s %q limit %d", v.name, order, limit)
				recs := e.pageLines(t, tok, "/history?"+join(v.query, order, "limit="+itoa(limit)), limit, v.headers...)
				sameKeys(t, what, f.keys(t, recs), want)
			}
		}
	}
	// format=ndjson must really be ndjson when Accept says csv.
	if r, _ := e.getLines(t, tok, "/history?format=ndjson&limit=3", "Accept", "text/csv"); r.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%s: format=ndjson answered as csv", r)
	}
	if r, _ := e.getLines(t, tok, "/history?limit=3", "Accept", "text/csv"); !strings.HasPrefix(r.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("%s: Accept text/csv not honoured", r)
	}

	// Whole exports: no limit, oldest first unless asked, no cursor.
	for _, v := range []struct {
		query   string
		headers []string
		asc     bool
	}{
		{"format=ndjson", nil, true},
		{"format=csv", nil, true},
		{"", []string{"Accept", "application/x-ndjson"}, true},
		{"", []string{"Accept", "text/csv"}, true},
		{"format=ndjson&order=desc", nil, false},
		{"format=csv&order=asc", nil, true},
	} {
		r, lp := e.getLines(t, tok, "/history?"+v.query, v.headers...)
		if lp.next != "" {
			t.Fatalf("%s: an export with a next cursor", r)
		}
		sameKeys(t, r.Path+fmt.Sprint(v.headers), f.keys(t, lp.records), f.want(v.asc, nil))
	}
	// A json request without a limit is a page of 100, not an export.
	var p historyPage
	e.get(t, tok, "/history?format=json").ok(t, http.StatusOK, &p)
	sameKeys(t, "format=json", f.keys(t, p.Records), f.want(false, nil))

	// A cursor keeps its place while new messages arrive: the next page
	// continues after the last record seen, and the newer message is on a
	// new first page.
	var first historyPage
	e.get(t, tok, "/history?limit=10").ok(t, http.StatusOK, &first)
	e.clock.Add(time.Second)
	dev := e.dial(t, "dev1", f.A.PubUser, f.A.PubPass)
	dev.Pub(t, f.A.topic("dev1", "event/late"), 1, "late")
	var second historyPage
	e.get(t, tok, "/history?limit=10&cursor="+url.QueryEscape(first.NextCursor)).ok(t, http.StatusOK, &second)
	sameKeys(t, "the second page after a new message", f.keys(t, second.Records), f.want(false, nil)[10:20])
	e.get(t, tok, "/history?limit=1").ok(t, http.StatusOK, &p)
	if len(p.Records) != 1 || p.Records[0].Topic != f.A.topic("dev1", "event/late") {
		t.Fatalf("the newest record is %+v, want the late message", p.Records)
	}
}

// TestHistoryFilters: client_id, topic (MQTT filters, the first level
// standing for the account), topic_regex, class, station controller,
// from/to (from inclusive, to exclusive) and order, alone and together, in
// json and in paged ndjson, select exactly the records they say.
func TestHistoryFilters(t *testing.T) {
	t.Parallel()
	f := newHistFixture(t)
	e, tok, A := f.e, f.A.Token, f.A
	at := func(i int) time.Time { return f.sent[i].at }
	ts := func(i int) string { return url.QueryEscape(at(i).Format(time.RFC3339)) }
	for _, c := range []struct {
		query string
		keep  func(sent) bool
	}{
		{"client_id=dev2", func(s sent) bool { return s.client == "dev2" }},
		{"client_id=dev3", func(s sent) bool { return false }},
		{"topic=" + url.QueryEscape(A.ID+"/dev1/state/#"), func(s sent) bool { return s.client == "dev1" && s.class == "state" }},
		{"topic=" + url.QueryEscape("+/+/event/#"), func(s sent) bool { return s.class == "event" }},
		{"topic=" + url.QueryEscape("#"), func(s sent) bool { return true }},
		{"topic=" + url.QueryEscape(A.ID+"/+/telemetry/m1"), func(s sent) bool { return s.class == "telemetry" && strings.HasSuffix(s.topic, "/m1") }},
		{"topic=" + url.QueryEscape(A.ID+"/dev2/#") + "&client_id=dev2", func(s sent) bool { return s.client == "dev2" }},
		{"topic_regex=" + url.QueryEscape("^"+A.ID+"/dev[12]/(telemetry|sample)/m[02]$"), func(s sent) bool {
			return (s.class == "telemetry" || s.class == "sample") && !strings.HasSuffix(s.topic, "/m1")
		}},
		{"class=sample", func(s sent) bool { return s.class == "sample" }},
		{"class=state&client_id=dev1", func(s sent) bool { return s.class == "state" && s.client == "dev1" }},
		{"station_controller_device_id=sc-7", func(s sent) bool { return s.device == "sc-7" }},
		{"station_controller_device_id=sc-8", func(s sent) bool { return false }},
		{"from=" + ts(10), func(s sent) bool { return !s.at.Before(at(10)) }},
		{"to=" + ts(10), func(s sent) bool { return s.at.Before(at(10)) }},
		{"from=" + ts(5) + "&to=" + ts(12), func(s sent) bool { return !s.at.Before(at(5)) && s.at.Before(at(12)) }},
		{"from=" + url.QueryEscape(at(5).Add(500*time.Millisecond).Format(time.RFC3339Nano)) + "&to=" + ts(9) + "&client_id=dev1",
			func(s sent) bool { return s.at.After(at(5)) && s.at.Before(at(9)) && s.client == "dev1" }},
		{"from=" + url.QueryEscape(at(30).Add(time.Second).Format(time.RFC3339)), func(s sent) bool { return false }},
		{"from=" + url.QueryEscape(at(5).In(time.FixedZone("X", 5*3600)).Format(time.RFC3339)), func(s sent) bool { return !s.at.Before(at(5)) }},
	} {
		for _, order := range []string{"order=desc", "order=asc"} {
			want := f.want(order == "order=asc", c.keep)
			q := join(c.query, order)
			recs, _ := e.pageJSON(t, tok, q, 4)
			sameKeys(t, q, f.keys(t, recs), want)
			recs = e.pageLines(t, tok, "/history?"+join(q, "format=ndjson", "limit=5"), 5)
			sameKeys(t, q+" (ndjson)", f.keys(t, recs), want)
		}
	}
}

// TestHistoryScanBudget: with a scan budget of 2 rows a page, a filter
// that matches nothing answers pages with no records and a next cursor
// until the account's rows are examined, and the last page has none;
// a sparse filter's pages (some empty) add up to exactly its records, in
// order, in json and in paged ndjson; an unpaged export returns them all
// at once.
func TestHistoryScanBudget(t *testing.T) {
	t.Parallel()
	f := newHistFixture(t, func(c *app.Config) { c.HistoryScanBudget = 2 })
	e, tok, A := f.e, f.A.Token, f.A

	// follow pages through next cursors (json, or ndjson's X-Next-Cursor)
	// and returns the records and how many pages were empty with a next
	// cursor.
	follow := func(query string, ndjson bool) (recs []history.Record, pages, empty int) {
		cursor := ""
		for {
			pages++
			if pages > 100 {
				t.Fatalf("%s: the cursor never ends", query)
			}
			q := query
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			var page []history.Record
			next := ""
			if ndjson {
				_, lp := e.getLines(t, tok, "/history?"+q+"&format=ndjson")
				page, next = lp.records, lp.next
			} else {
				var p historyPage
				r := e.get(t, tok, "/history?"+q).ok(t, http.StatusOK, &p)
				if h := r.Header.Get("X-Next-Cursor"); h != p.NextCursor {
					t.Fatalf("%s: X-Next-Cursor %q, next_cursor %q", r, h, p.NextCursor)
				}
				page, next = p.Records, p.NextCursor
			}
			if len(page) == 0 && next != "" {
				empty++
			}
			recs = append(recs, page...)
			if next == "" {
				return recs, pages, empty
			}
			cursor = next
		}
	}

	nothing := "topic_regex=" + url.QueryEscape("^"+A.ID+"/dev[0-9]/(state|event)/none$") + "&limit=10"
	recs, pages, empty := follow(nothing, false)
	// 31 rows of A (B's are not in A's index range), 2 a page: 15 pages
	// end on the budget, the 16th on the end.
	if len(recs) != 0 || pages != 16 || empty != 15 {
		t.Fatalf("filter matching nothing: %d records, %d pages, %d empty with a next cursor; want 0, 16, 15", len(recs), pages, empty)
	}

	sparse := func(s sent) bool { return s.client == "dev1" && strings.HasSuffix(s.topic, "/m1") }
	for _, order := range []string{"desc", "asc"} {
		q := join("topic="+url.QueryEscape(A.ID+"/dev1/+/m1"), "order="+order, "limit=2")
		want := f.want(order == "asc", sparse)
		for _, ndjson := range []bool{false, true} {
			recs, _, empty := follow(q, ndjson)
			sameKeys(t, fmt.Sprintf("%s (ndjson %v)", q, ndjson), f.keys(t, recs), want)
			if empty == 0 {
				t.Errorf("%s (ndjson %v): no empty page with a next cursor; the budget of 2 should leave some", q, ndjson)
			}
		}
		r := e.get(t, tok, "/history?"+join("topic="+url.QueryEscape(A.ID+"/dev1/+/m1"), "order="+order, "format=ndjson")).ok(t, http.StatusOK, nil)
		if r.Header.Get("X-Next-Cursor") != "" {
			t.Errorf("export: X-Next-Cursor %q", r.Header.Get("X-Next-Cursor"))
		}
		sameKeys(t, "export "+order, f.keys(t, decodeNDJSON(t, r)), want)
	}
}

// TestHistoryQueryTimeout: a page whose query runs out of its time is a
// 422 that says how to narrow it (here the limit is a nanosecond, so every
// query runs out), and gives its slot back: more such requests than
// history.RequestsPerAccount, one after the other, are each a 422, not a 429.
// (The 429 for requests at once: internal/app's stalled-exports test.)
func TestHistoryQueryTimeout(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.Config) { c.HistoryQueryTimeout = time.Nanosecond })
	A := e.tenant(t, "A", "starter", allAddOns)
	for range history.RequestsPerAccount + 1 {
		p := e.get(t, A.Token, "/history").problem(t, http.StatusUnprocessableEntity, fleetmq.CodeValidation)
		if !strings.Contains(p.Detail, "narrow it with from and to, client_id, or a topic filter") {
			t.Fatalf("detail %q", p.Detail)
		}
	}
}

// TestHistoryStoreTime: an account whose history reads have spent their
// store time (history.StoreTimeBurst, earned back at one second per
// second) gets 429 rate_limited on GET /history with the seconds until it
// has some again in Retry-After and in the detail; another account's
// history is unaffected; once the time has passed, the account reads
// again.
func TestHistoryStoreTime(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	B := e.tenant(t, "B", "starter", allAddOns)
	e.HistorySlots.Charge(A.ID, history.StoreTimeBurst+3*time.Second) // as two heavy reads at once would
	r := e.get(t, A.Token, "/history")
	p := r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	if got := r.Header.Get("Retry-After"); got != "4" { // 3 s and a millisecond
		t.Fatalf("Retry-After %q, want 4", got)
	}
	if !strings.Contains(p.Detail, "store time") || !strings.Contains(p.Detail, "retry in 4 s") {
		t.Fatalf("detail %q", p.Detail)
	}
	e.get(t, B.Token, "/history").ok(t, http.StatusOK, nil)
	e.clock.Add(4 * time.Second)
	e.get(t, A.Token, "/history").ok(t, http.StatusOK, nil)
}
