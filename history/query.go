// Package history turns what users ask of stored history (MQTT topic
// filters, the spec's anchored topic expressions, time ranges, cursors)
// into validated fleetmq.HistoryQuery values, pages and streams the
// results (JSON, NDJSON, CSV), aggregates numeric payload fields over time
// for charts, and runs retention. The REST API, the portal and the CLI all
// go through it; the stores behind it only see validated queries.
package history

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// Page sizes.
const (
	DefaultLimit = 100
	MaxLimit     = 10_000
)

// ScanBudget is how many rows a page (or an export batch) examines at
// most when filters run after the index (fleetmq.HistoryQuery.ScanBudget):
// a page that spends it before it is full ends there, possibly empty, with
// a next cursor after the last row examined. A query sets its own budget
// by setting ScanBudget.
const ScanBudget = 100_000

// Params are the user's filters, as text (query parameters, CLI flags).
// Empty fields do not filter.
type Params struct {
	ClientID string
	// Topic is an MQTT topic filter within the account: its first level is
	// the account id (or a wildcard, which stands for it).
	Topic string
	// TopicRegex is the spec's form: a regular expression anchored with
	// "^{account_id}/" at its start.
	TopicRegex                string
	Class                     string
	StationControllerDeviceID string
	From, To                  string // RFC 3339; From inclusive, To exclusive
	Order                     string // "desc" (newest first, default) or "asc"
	Limit                     string // page size; default DefaultLimit, at most MaxLimit
	Cursor                    string // from a previous page's Next
}

// Build validates p for an account and returns the store query. Errors are
// *fleetmq.Error with code validation_failed and one message per field.
// unlimited leaves Limit at 0 (exports) unless p.Limit is given.
func Build(accountID string, p Params, unlimited bool) (*fleetmq.HistoryQuery, error) {
	q := &fleetmq.HistoryQuery{AccountID: accountID, ClientID: p.ClientID, Class: p.Class,
		StationControllerDeviceID: p.StationControllerDeviceID}
	fields := map[string]string{}
	if !fleetmq.ValidAccountID(accountID) {
		fields["account_id"] = "not an account id"
	}
	if p.ClientID != "" && !fleetmq.ValidClientID(p.ClientID) {
		fields["client_id"] = "not a valid client id"
	}
	if p.Class != "" && !fleetmq.ValidClass(p.Class) {
		fields["class"] = "must be one of state, event, telemetry, sample"
	}
	switch {
	case p.Topic != "" && p.TopicRegex != "":
		fields["topic"] = "give a topic filter or a topic expression, not both"
	case p.Topic != "":
		re, client, err := FilterRegex(accountID, p.Topic)
		if err != nil {
			fields["topic"] = err.Error()
			break
		}
		q.TopicRegex = re
		if client != "" {
			if q.ClientID != "" && q.ClientID != client {
				fields["topic"] = fmt.Sprintf("filter is for client %q, client_id is %q", client, q.ClientID)
			}
			q.ClientID = client
		}
		if class := filterClass(p.Topic); class != "" {
			if q.Class != "" && q.Class != class {
				fields["topic"] = fmt.Sprintf("filter is for class %q, class is %q", class, q.Class)
			}
			q.Class = class
		}
	case p.TopicRegex != "":
		// Any expression: it runs within the account only (the store's
		// account condition), so one naming another account matches
		// nothing.
		if err := fleetmq.CheckTopicRegex(p.TopicRegex); err != nil {
			fields["topic_regex"] = err.Error()
			break
		}
		q.TopicRegex = p.TopicRegex
		// Whole levels in the expression's literal prefix name the client
		// and the class, for the indexes.
		client, class := prefixLevels(p.TopicRegex)
		if q.ClientID == "" {
			q.ClientID = client
		}
		if q.Class == "" {
			q.Class = class
		}
	}
	var err error
	if q.From, err = parseTime(p.From); err != nil {
		fields["from"] = err.Error()
	}
	if q.To, err = parseTime(p.To); err != nil {
		fields["to"] = err.Error()
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		fields["to"] = "must be after from"
	}
	switch strings.ToLower(p.Order) {
	case "", "desc":
	case "asc":
		q.Ascending = true
	default:
		fields["order"] = `must be "asc" or "desc"`
	}
	switch {
	case p.Limit != "":
		n, err := strconv.Atoi(p.Limit)
		if err != nil || n < 1 || n > MaxLimit {
			fields["limit"] = fmt.Sprintf("must be a number from 1 to %d", MaxLimit)
		}
		q.Limit = n
	case !unlimited:
		q.Limit = DefaultLimit
	}
	if p.Cursor != "" {
		pos, asc, err := DecodeCursor(p.Cursor)
		switch {
		case err != nil:
			fields["cursor"] = err.Error()
		case asc != q.Ascending:
			fields["cursor"] = "cursor was made for the other order"
		default:
			q.After = &pos
		}
	}
	if len(fields) > 0 {
		return nil, &fleetmq.Error{Code: fleetmq.CodeValidation, Message: "invalid history query", Fields: fields}
	}
	return q, nil
}

// parseTime reads a bound of a query's window: an RFC 3339 time, not
// before the Unix epoch (no record is; and the zero time.Time, year 1,
// would mean "no bound").
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 time like 2026-11-22T10:00:00Z")
	}
	if t.Before(time.Unix(0, 0)) {
		return time.Time{}, fmt.Errorf("must be 1970-01-01T00:00:00Z or later")
	}
	return t.UTC(), nil
}

// FilterRegex translates an MQTT topic filter within an account into an
// anchored regular expression over platform topics. A first level of "+"
// or "#" stands for the account. When the filter names one client (its
// second level is literal) that client id is returned too, so the store
// can use its per-client index.
func FilterRegex(accountID, filter string) (re, clientID string, err error) {
	if err := topic.ValidateFilter(filter); err != nil {
		return "", "", fmt.Errorf("not a valid MQTT topic filter")
	}
	if strings.HasPrefix(filter, "$") {
		return "", "", fmt.Errorf("shared and $ filters are not history filters")
	}
	levels := strings.Split(filter, "/")
	switch levels[0] {
	case accountID, "+":
		levels[0] = accountID
	case "#":
		levels = []string{accountID, "#"}
	default:
		return "", "", fmt.Errorf("filter must start with the account id %s/", accountID)
	}
	var b strings.Builder
	b.WriteString("^")
	for i, l := range levels {
		switch {
		case l == "#":
			// '#' also matches the parent level: "a/#" matches "a".
			b.WriteString("(/.*)?")
		default:
			if i > 0 {
				b.WriteString("/")
			}
			if l == "+" {
				b.WriteString("[^/]*")
			} else {
				b.WriteString(regexp.QuoteMeta(l))
			}
		}
	}
	b.WriteString("$")
	if len(levels) > 2 || len(levels) == 2 && levels[1] != "#" {
		if l := levels[1]; l != "+" && l != "#" {
			clientID = l
		}
	}
	return b.String(), clientID, nil
}

// filterClass is the class a topic filter names: its third level (the
// platform layout is {account_id}/{client_id}/{class}/...) when that is
// literal. A literal that is not a class is returned as is: it matches no
// stored topic, and as a class filter it lets the store answer from the
// class index at once.
func filterClass(filter string) string {
	levels := strings.Split(filter, "/")
	if len(levels) < 3 || levels[0] == "#" {
		return ""
	}
	if l := levels[2]; l != "+" && l != "#" {
		return l
	}
	return ""
}

// prefixLevels returns the client and the class an anchored topic
// expression names in its literal prefix ("" for a level the prefix does
// not hold whole, i.e. followed by "/").
func prefixLevels(expr string) (client, class string) {
	levels := strings.Split(fleetmq.TopicRegexPrefix(expr), "/")
	// levels[0] is the account; a level is whole when another follows it.
	if len(levels) > 2 && fleetmq.ValidClientID(levels[1]) {
		client = levels[1]
	}
	if len(levels) > 3 && client != "" {
		class = levels[2]
	}
	return client, class
}

// Cursors are opaque to users: base64url of "v1.{a|d}.{received_us}.{id}".
const cursorVersion = "v1"

// EncodeCursor returns the cursor that continues after pos in the given
// order.
func EncodeCursor(pos fleetmq.Position, ascending bool) string {
	dir := "d"
	if ascending {
		dir = "a"
	}
	s := cursorVersion + "." + dir + "." + strconv.FormatInt(pos.Received.UnixMicro(), 10) + "." + strconv.FormatInt(pos.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// DecodeCursor parses a cursor from EncodeCursor.
func DecodeCursor(c string) (pos fleetmq.Position, ascending bool, err error) {
	bad := fmt.Errorf("not a cursor from this API")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return pos, false, bad
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 4 || parts[0] != cursorVersion || parts[1] != "a" && parts[1] != "d" {
		return pos, false, bad
	}
	us, err1 := strconv.ParseInt(parts[2], 10, 64)
	id, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || id < 0 {
		return pos, false, bad
	}
	return fleetmq.Position{Received: time.UnixMicro(us).UTC(), ID: id}, parts[1] == "a", nil
}

// PageResult is one page of records and the cursor of the next ("" when
// this is the last page).
type PageResult struct {
	Records []*fleetmq.Record
	Next    string
}

// Page runs a query with a limit and returns its page. It asks the store
// for one record more than the limit to know whether a next page exists.
// A page examines at most q.ScanBudget rows (ScanBudget when 0): when they
// run out first, the page holds what they matched, maybe nothing, and Next
// continues after the last row examined.
func Page(ctx context.Context, st fleetmq.HistoryStore, q *fleetmq.HistoryQuery) (*PageResult, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	qq := *q
	qq.Limit = limit + 1
	if qq.ScanBudget <= 0 {
		qq.ScanBudget = ScanBudget
	}
	res := &PageResult{Records: make([]*fleetmq.Record, 0, min(limit, 1024))}
	more := false
	err := st.QueryHistory(ctx, &qq, func(r *fleetmq.Record) error {
		if len(res.Records) == limit {
			more = true
			return nil
		}
		res.Records = append(res.Records, Clone(r))
		return nil
	})
	var spent *fleetmq.ScanBudgetSpent
	switch {
	case more:
		res.Next = EncodeCursor(res.Records[len(res.Records)-1].Position(), q.Ascending)
	case errors.As(err, &spent):
		res.Next = EncodeCursor(spent.Last, q.Ascending)
	case err != nil:
		return nil, err
	}
	return res, nil
}

// Clone copies a record out of a store callback (which reuses it).
func Clone(r *fleetmq.Record) *fleetmq.Record {
	c := *r
	c.Payload = append([]byte(nil), r.Payload...)
	c.UserProperties = append([]fleetmq.UserProperty(nil), r.UserProperties...)
	if len(c.UserProperties) == 0 {
		c.UserProperties = nil
	}
	return &c
}
