package portal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
)

// HistoryPageSize is how many records a device page lists at a time.
const HistoryPageSize = 50

// chartRanges are the time ranges a device chart offers, with the bucket
// each one is drawn in.
var chartRanges = []struct {
	Key    string
	Label  string
	Span   time.Duration
	Bucket time.Duration
}{
	{"1h", "Last hour", time.Hour, time.Minute},
	{"6h", "Last 6 hours", 6 * time.Hour, 5 * time.Minute},
	{"24h", "Last 24 hours", 24 * time.Hour, 15 * time.Minute},
	{"7d", "Last 7 days", 7 * 24 * time.Hour, 2 * time.Hour},
	{"30d", "Last 30 days", 30 * 24 * time.Hour, 12 * time.Hour},
}

// chartScanBudget is the most records one chart reads (a variable for
// tests, atomic: a test sets it back while an HTTP server's goroutines,
// started before, serve the next test's requests).
var chartScanBudget atomic.Int64

func init() { chartScanBudget.Store(history.ChartScanBudget) }

// recordRow is a stored or retained message in a table.
type recordRow struct {
	Topic        string // the subpath under {account_id}/{client_id}/
	FullTopic    string
	Class        string
	QoS          byte
	PublishedQoS byte
	Retain       bool
	Payload      string
	JSON         bool
	Size         int
	Received     time.Time
	Expires      time.Time // retained: when it stops being retained
	Device       string    // station_controller_device_id
}

// deviceData is a device page.
type deviceData struct {
	Client   *fleetmq.MQTTClient
	Row      clientRow
	Prefix   string // {account_id}/{client_id}/
	Retained []recordRow
	Latest   []recordRow
	History  []recordRow
	Class    string
	Cursor   string
	Older    string // URL of the next (older) page, "" on the last
	Newest   string // URL of the first page
	Chart    chartData
	Problems []problemRow
}

// chartData is the chart form and its result.
type chartData struct {
	Field   string
	Range   string
	Topic   string
	Ranges  []struct{ Key, Label string }
	Fields  []string // numeric fields seen in the latest messages
	Error   string
	From    time.Time
	To      time.Time
	Series  *history.Series
	Stats   struct{ Min, Max, Avg, Last string }
	Count   int64
	Action  string
	Buckets []history.Bucket // newest first, for the table
}

func (p *Portal) device(c *call) {
	cl := p.clientOf(c)
	if cl == nil {
		return
	}
	// The page reads history (latest values, a page, a chart): it takes
	// one of the account's history slots, shared with the REST API, and
	// its reads stop after HistoryTimeout.
	release, retry, ok := p.deps.HistorySlots.Take(c.acc.ID)
	if !ok {
		msg := "Your account is running " + strconv.Itoa(history.RequestsPerAccount) +
			" history requests already (exports or pages through the REST API, or device pages). Reload this page when one has finished."
		if retry > 0 {
			msg = "Your account's history reads (exports or pages through the REST API, or device pages) have used the database time they may use for now. Reload this page in " +
				strconv.Itoa(history.RetrySeconds(retry)) + " s."
		}
		c.w.Header().Set("Retry-After", strconv.Itoa(history.RetrySeconds(retry)))
		c.render(http.StatusTooManyRequests, "error", "Busy", "clients", "clients", errorData{Status: http.StatusTooManyRequests,
			Heading: "History is busy", Message: msg})
		return
	}
	defer release()
	hist := p.deps.HistorySlots.Charged(c.acc.ID, p.deps.Store)
	ctx, cancel := context.WithTimeout(c.ctx, HistoryTimeout)
	defer cancel()
	c.ctx = ctx
	q := c.r.URL.Query()
	d := &deviceData{Client: cl, Prefix: cl.HistoryTopicPrefix() + "/", Class: q.Get("class"), Cursor: q.Get("cursor")}
	d.Row = clientRow{MQTTClient: cl}
	if p.deps.Policy != nil {
		d.Row.Live, d.Row.Known = p.deps.Policy.LivePublisher(c.acc.ID, cl.ClientID, c.now)
		for _, m := range d.Row.Live.Retained {
			r := rowOf(d.Prefix, m.Topic, m.Payload)
			r.QoS, r.Received, r.Expires, r.Retain = byte(m.QoS), m.Received, m.Expires, true
			d.Retained = append(d.Retained, r)
		}
	}
	problems, err := p.deps.Store.Problems(c.ctx, c.acc.ID, cl.ClientID, problemsSince(c.now), DeviceProblems)
	if err != nil {
		c.fail(err)
		return
	}
	d.Problems = problemRows(problems, d.Prefix, nil)
	latest, err := hist.LatestHistory(c.ctx, c.acc.ID, cl.ClientID)
	if err != nil {
		c.fail(err)
		return
	}
	retained := map[string]string{}
	for _, r := range d.Retained {
		retained[r.FullTopic] = r.Payload
	}
	for _, r := range latest {
		row := recordOf(d.Prefix, r)
		if p, ok := retained[r.Topic]; ok && p == row.Payload {
			continue // the retained row above shows it
		}
		d.Latest = append(d.Latest, row)
	}

	// Recent history, newest first, HistoryPageSize at a time.
	hq, err := history.Build(c.acc.ID, history.Params{ClientID: cl.ClientID, Class: d.Class, Limit: strconv.Itoa(HistoryPageSize), Cursor: d.Cursor}, false)
	if err != nil {
		// A hand-edited class or cursor: show the newest page instead.
		d.Class, d.Cursor = "", ""
		hq, _ = history.Build(c.acc.ID, history.Params{ClientID: cl.ClientID, Limit: strconv.Itoa(HistoryPageSize)}, false)
	}
	page, err := history.Page(c.ctx, hist, hq)
	if err != nil {
		c.fail(err)
		return
	}
	for _, r := range page.Records {
		d.History = append(d.History, recordOf(d.Prefix, r))
	}
	base := clientURL(cl.ClientID)
	if page.Next != "" {
		d.Older = withQuery(base, q, map[string]string{"cursor": page.Next, "class": d.Class}) + "#history"
	}
	d.Newest = withQuery(base, q, map[string]string{"cursor": "", "class": d.Class}) + "#history"

	d.Chart = p.chart(c, cl, q, latest)
	d.Chart.Action = base + "#chart"
	c.render(http.StatusOK, "device", cl.ClientID, "clients", "clients", d)
}

// withQuery returns path with q's parameters, changed by set ("" drops).
func withQuery(path string, q url.Values, set map[string]string) string {
	v := url.Values{}
	for k, vs := range q {
		v[k] = append([]string(nil), vs...)
	}
	for k, s := range set {
		if s == "" {
			v.Del(k)
		} else {
			v.Set(k, s)
		}
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// chart aggregates the chosen numeric field over the chosen range.
func (p *Portal) chart(c *call, cl *fleetmq.MQTTClient, q url.Values, latest []*fleetmq.Record) chartData {
	ch := chartData{Field: strings.TrimSpace(q.Get("field")), Range: q.Get("range"), Topic: strings.Trim(strings.TrimSpace(q.Get("topic")), "/")}
	for _, r := range chartRanges {
		ch.Ranges = append(ch.Ranges, struct{ Key, Label string }{r.Key, r.Label})
	}
	ch.Fields = numericFields(latest)
	if ch.Field == "" && len(ch.Fields) > 0 {
		ch.Field = ch.Fields[0]
	}
	span, bucket := 24*time.Hour, 15*time.Minute
	found := false
	for _, r := range chartRanges {
		if r.Key == ch.Range {
			span, bucket, found = r.Span, r.Bucket, true
		}
	}
	if !found {
		ch.Range = "24h"
	}
	if ch.Field == "" {
		return ch
	}
	// Buckets line up with the clock: the range ends at the end of the
	// current bucket.
	ch.To = c.now.Truncate(bucket).Add(bucket)
	ch.From = ch.To.Add(-span)
	params := history.Params{ClientID: cl.ClientID, From: ch.From.Format(time.RFC3339Nano), To: ch.To.Format(time.RFC3339Nano)}
	if ch.Topic != "" {
		params.Topic = cl.HistoryTopicPrefix() + "/" + ch.Topic
	}
	hq, err := history.Build(c.acc.ID, params, true)
	if err != nil {
		ch.Error = "The topic filter is not valid: give a topic under this client, such as telemetry/temp_probe or telemetry/#."
		return ch
	}
	hq.ScanBudget = int(chartScanBudget.Load())
	s, err := history.Aggregate(c.ctx, p.deps.HistorySlots.Charged(c.acc.ID, p.deps.Store), hq, ch.Field, bucket)
	if err != nil {
		if tm, ok := errors.AsType[*history.TooManyRecords](err); ok {
			ch.Error = fmt.Sprintf("This range holds more than %s records, more than a chart reads. Choose a shorter range, or a topic.", num(tm.Budget))
			return ch
		}
		if fleetmq.CodeOf(err) == fleetmq.CodeValidation {
			ch.Error = "The field name is not valid: give a JSON field such as temperature, or a dotted path such as battery.level."
			return ch
		}
		p.deps.Logger.Error("portal: chart", "error", err)
		ch.Error = "The chart could not be drawn. Try again in a moment."
		return ch
	}
	ch.Series = s
	if len(s.Buckets) > 0 {
		lo, hi, sum := s.Buckets[0].Min, s.Buckets[0].Max, 0.0
		for _, b := range s.Buckets {
			lo, hi = min(lo, b.Min), max(hi, b.Max)
			sum += b.Avg * float64(b.Count)
			ch.Count += b.Count
		}
		ch.Stats.Min, ch.Stats.Max = trimZero(lo), trimZero(hi)
		ch.Stats.Avg = trimZero(sum / float64(ch.Count))
		ch.Stats.Last = trimZero(s.Buckets[len(s.Buckets)-1].Last)
		for i := len(s.Buckets) - 1; i >= 0; i-- {
			ch.Buckets = append(ch.Buckets, s.Buckets[i])
		}
	}
	return ch
}

// ChartSVG draws the chart.
func (ch chartData) ChartSVG() template.HTML {
	if ch.Series == nil {
		return ""
	}
	return lineSVG(ch.Series, ch.From, ch.To)
}

// numericFields lists the numeric fields (top level and one level down)
// of the JSON object payloads of records, telemetry first.
func numericFields(recs []*fleetmq.Record) []string {
	seen := map[string]bool{}
	var tele, other []string
	for _, r := range recs {
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(r.Payload))
		d.UseNumber()
		if len(r.Payload) == 0 || r.Payload[0] != '{' || d.Decode(&m) != nil {
			continue
		}
		var found []string
		for k, v := range m {
			switch x := v.(type) {
			case json.Number:
				found = append(found, k)
			case map[string]any:
				for k2, v2 := range x {
					if _, ok := v2.(json.Number); ok {
						found = append(found, k+"."+k2)
					}
				}
			}
		}
		sort.Strings(found)
		for _, f := range found {
			if seen[f] || strings.ContainsAny(f, " \t") {
				continue
			}
			seen[f] = true
			if r.Class == fleetmq.ClassTelemetry {
				tele = append(tele, f)
			} else {
				other = append(other, f)
			}
		}
	}
	return append(tele, other...)
}

// recordOf turns a stored record into a row.
func recordOf(prefix string, r *fleetmq.Record) recordRow {
	row := rowOf(prefix, r.Topic, r.Payload)
	row.Class, row.QoS, row.PublishedQoS, row.Retain, row.Received = r.Class, r.QoS, r.PublishedQoS, r.Retain, r.Received
	row.Device = r.StationControllerDeviceID
	return row
}

func rowOf(prefix, topic string, payload []byte) recordRow {
	text, isJSON := preview(payload, 240)
	sub := strings.TrimPrefix(topic, prefix)
	class, _, _ := strings.Cut(sub, "/")
	return recordRow{Topic: sub, FullTopic: topic, Class: class, Payload: text, JSON: isJSON, Size: len(payload)}
}

// preview shows a payload as text: compact JSON, or UTF-8 text, cut to
// about n characters; binary payloads by their size.
func preview(b []byte, n int) (string, bool) {
	if len(b) == 0 {
		return "(empty)", false
	}
	isJSON := false
	if json.Valid(b) {
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			b, isJSON = buf.Bytes(), true
		}
	}
	if !utf8.Valid(b) {
		return strconv.Itoa(len(b)) + " bytes (binary)", false
	}
	s := string(b)
	for _, r := range s {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return strconv.Itoa(len(b)) + " bytes (binary)", false
		}
	}
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n]) + "…"
	}
	return s, isJSON
}
