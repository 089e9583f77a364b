package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

// MaxBuckets bounds one aggregation's buckets.
const MaxBuckets = 10_000

// ChartScanBudget is the most records a chart the portal draws reads
// (HistoryQuery.ScanBudget of its aggregation): about a second of store
// time. A device that publishes 100 messages a second fills a 30-day chart
// with 259 million; the chart then asks for a shorter range rather than
// hold a store connection, and a core, for minutes.
const ChartScanBudget = 1_000_000

// TooManyRecords is Aggregate's error when the query's range holds more
// records than its scan budget.
type TooManyRecords struct{ Budget int }

func (e *TooManyRecords) Error() string {
	return fmt.Sprintf("history: the range holds more than %d records, the most one aggregation reads: narrow it", e.Budget)
}

// Bucket is one time bucket of a numeric payload field.
type Bucket struct {
	Start time.Time `json:"start"`
	Count int64     `json:"count"`
	Min   float64   `json:"min"`
	Max   float64   `json:"max"`
	Avg   float64   `json:"avg"`
	Last  float64   `json:"last"` // value of the newest record in the bucket

	sum float64
}

// Series is the aggregation of one field.
type Series struct {
	Field   string        `json:"field"`
	Bucket  time.Duration `json:"-"`
	Buckets []Bucket      `json:"buckets"` // only buckets with values, oldest first
	// Skipped counts matching records whose payload had no numeric value at
	// the field (not JSON, field missing, not a number).
	Skipped int64 `json:"skipped"`
}

// Aggregate buckets a numeric JSON payload field (a dotted path, e.g.
// "temperature" or "battery.level") of the records of q over time. q needs
// From and To; the order and limit of q are ignored. Records are read in
// time order and never held in memory. q.ScanBudget, if set, bounds the
// records it reads: past it, it returns a *TooManyRecords.
func Aggregate(ctx context.Context, st fleetmq.HistoryStore, q *fleetmq.HistoryQuery, field string, bucket time.Duration) (*Series, error) {
	fields := map[string]string{}
	if q.From.IsZero() || q.To.IsZero() {
		fields["from"] = "an aggregation needs from and to"
	}
	path := strings.Split(field, ".")
	if field == "" || len(path) > 8 || len(field) > 256 {
		fields["field"] = "give a JSON field name or dotted path (at most 8 levels)"
	}
	for _, p := range path {
		if p == "" {
			fields["field"] = "empty level in the field path"
		}
	}
	if bucket < time.Second {
		fields["bucket"] = "at least 1s"
	} else if !q.From.IsZero() && !q.To.IsZero() && q.To.Sub(q.From)/bucket >= MaxBuckets {
		fields["bucket"] = fmt.Sprintf("too small for the range: at most %d buckets", MaxBuckets)
	}
	if len(fields) > 0 {
		return nil, &fleetmq.Error{Code: fleetmq.CodeValidation, Message: "invalid aggregation", Fields: fields}
	}
	qq := *q
	qq.Ascending, qq.After, qq.Limit = true, nil, 0
	if q.ScanBudget > 0 {
		qq.ScanBudget = q.ScanBudget + 1 // the store stops at its budget, even at the end
	}
	s := &Series{Field: field, Bucket: bucket}
	var cur *Bucket
	err := st.QueryHistory(ctx, &qq, func(r *fleetmq.Record) error {
		v, ok := numberAt(r.Payload, path)
		if !ok {
			s.Skipped++
			return nil
		}
		start := q.From.Add(r.Received.Sub(q.From) / bucket * bucket)
		if cur == nil || !cur.Start.Equal(start) {
			s.Buckets = append(s.Buckets, Bucket{Start: start, Min: v, Max: v})
			cur = &s.Buckets[len(s.Buckets)-1]
		}
		cur.Count++
		cur.sum += v
		cur.Min = math.Min(cur.Min, v)
		cur.Max = math.Max(cur.Max, v)
		cur.Last = v
		return nil
	})
	if _, ok := errors.AsType[*fleetmq.ScanBudgetSpent](err); ok {
		return nil, &TooManyRecords{Budget: q.ScanBudget}
	}
	if err != nil {
		return nil, err
	}
	for i := range s.Buckets {
		b := &s.Buckets[i]
		b.Avg = b.sum / float64(b.Count)
	}
	return s, nil
}

// numberAt reads the number at a path of a JSON object payload. Numbers
// written as JSON strings ("21.5") count too; booleans do not.
func numberAt(payload []byte, path []string) (float64, bool) {
	if len(payload) == 0 || payload[0] != '{' || !bytes.Contains(payload, []byte(`"`+path[len(path)-1]+`"`)) {
		return 0, false
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return 0, false
	}
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		if v, ok = m[p]; !ok {
			return 0, false
		}
	}
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return 0, false
	}
	f, err := json.Number(s).Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}
