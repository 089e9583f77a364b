package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq"
)

// maxChunk bounds the rows of one SELECT of QueryHistory when filters run
// after the index: the rows are read in keyset chunks (each continuing
// after the last row of the one before), so a query that stops early
// (its limit reached) leaves at most one chunk unread, and PostgreSQL,
// which sends a result whole, sends no more than that.
const maxChunk = 8192

// historyPlan is how a query uses the indexes: the conditions of one index
// (account, then device, client or class, then the time window and the
// keyset position) go into SQL; the other filters run on the rows that
// index yields, counted against the query's scan budget.
type historyPlan struct {
	index string
	// The index's equality columns and their values, then the time window
	// (nil: open).
	eq       []string
	eqArgs   []any
	from, to *int64
	// Filters on the rows: "" does not filter.
	client, class, device string
	re                    *regexp.Regexp
	// The literal prefix of re, as a byte range of topics (upper "": none),
	// so that rows outside it come without their payload.
	prefix, upper string
	// unfolded, on SQLite, is the condition on col (the id column) that
	// picks the client's unfolded rows of a day's table ("": none; nil:
	// read every row after the fold's mark).
	unfolded func(col, table string) string
}

// planHistory picks the index of a query: the device index when it names a
// device (a device's records are a small part of its client's), else the
// client index, else the class index, else the account's time index.
func planHistory(q *fleetmq.HistoryQuery) (*historyPlan, error) {
	if q.AccountID == "" {
		return nil, &fleetmq.Error{Code: fleetmq.CodeValidation, Message: "history query without an account"}
	}
	p := &historyPlan{index: "history_account_time", eq: []string{"account_id"}, eqArgs: []any{q.AccountID},
		client: q.ClientID, class: q.Class, device: q.StationControllerDeviceID}
	if q.TopicRegex != "" {
		var err error
		if p.re, err = regexp.Compile(q.TopicRegex); err != nil {
			return nil, &fleetmq.Error{Code: fleetmq.CodeValidation, Message: "topic expression: " + err.Error()}
		}
		if prefix := textPrefix(fleetmq.TopicRegexPrefix(q.TopicRegex)); prefix != "" {
			p.prefix = prefix
			p.upper, _ = prefixUpperBound(prefix)
		}
	}
	switch {
	case p.device != "":
		p.index = "history_device_time"
		p.eq, p.eqArgs = append(p.eq, "station_controller_device_id"), append(p.eqArgs, p.device)
		p.device = ""
	case p.client != "":
		p.index = "history_client_time"
		p.eq, p.eqArgs = append(p.eq, "client_id"), append(p.eqArgs, p.client)
		p.client = ""
	case p.class != "":
		p.index = "history_class_time"
		p.eq, p.eqArgs = append(p.eq, "class"), append(p.eqArgs, p.class)
		p.class = ""
	}
	if !q.From.IsZero() {
		p.from = new(ceilMicro(q.From))
	}
	if !q.To.IsZero() {
		p.to = new(ceilMicro(q.To))
	}
	return p, nil
}

// ceilMicro is t in Unix microseconds, rounded up: records are stored to
// the microsecond, so one at r is at or after a from of t exactly when
// r >= ceilMicro(t), and before a to of t exactly when r < ceilMicro(t)
// (a time between two microseconds neither drops the record just before
// it from a window that ends there nor lets it into one that starts
// there).
func ceilMicro(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Sub(time.UnixMicro(us)) > 0 {
		us++
	}
	return us
}

// conds are the index's conditions on the columns of the table alias t
// ("" for none), with the keyset position after (nil: none), cmp being
// "<" (newest first) or ">".
func (p *historyPlan) conds(t string, after *fleetmq.Position, cmp string) ([]string, []any) {
	if t != "" {
		t += "."
	}
	var where []string
	args := append([]any(nil), p.eqArgs...)
	for _, c := range p.eq {
		where = append(where, t+c+" = ?")
	}
	if p.index == "history_device_time" {
		// The device index is partial (devices only): this condition lets
		// both planners see that it applies.
		where = append(where, t+"station_controller_device_id <> ''")
	}
	// Each side of the time range gets one bound, the tighter of the
	// window's and the keyset position's: SQLite starts the index range at
	// one of them and filters by the other, so a page of a time window that
	// started at the window's edge scanned every row from there to its
	// position (an export of 900,000 records ran at 18,000 a second).
	from, to := p.from, p.to
	if after != nil {
		at := after.Received.UnixMicro()
		keyset := "(" + t + "received_us, " + t + "id) " + cmp + " (?, ?)"
		switch {
		case cmp == ">" && (from == nil || at >= *from):
			from = nil // the position is past the window's start
		case cmp == "<" && (to == nil || at < *to):
			to = nil // the position is before the window's end
		default:
			keyset = "" // the window's edge is the tighter bound
		}
		if keyset != "" {
			where = append(where, keyset)
			args = append(args, at, after.ID)
		}
	}
	if from != nil {
		where = append(where, t+"received_us >= ?")
		args = append(args, *from)
	}
	if to != nil {
		where = append(where, t+"received_us < ?")
		args = append(args, *to)
	}
	return where, args
}

// filtered reports whether rows are filtered after the index.
func (p *historyPlan) filtered() bool {
	return p.client != "" || p.class != "" || p.device != "" || p.re != nil
}

// match applies the filters that run after the index.
func (p *historyPlan) match(r *fleetmq.Record) bool {
	return (p.client == "" || r.ClientID == p.client) && (p.class == "" || r.Class == p.class) &&
		(p.device == "" || r.StationControllerDeviceID == p.device) && (p.re == nil || p.re.MatchString(r.Topic))
}

// payloadColumn selects the payload only of the rows that pass the
// equality filters and the topic expression's literal prefix (the others
// come without it); the topic expression runs here after it. t is the
// history table's alias ("" for none).
func (p *historyPlan) payloadColumn(t string) (string, []any) {
	if t != "" {
		t += "."
	}
	var cond []string
	var args []any
	if p.prefix != "" {
		cond = append(cond, t+"topic >= ?")
		args = append(args, p.prefix)
		if p.upper != "" {
			cond = append(cond, t+"topic < ?")
			args = append(args, p.upper)
		}
	}
	for _, f := range []struct{ col, v string }{{"client_id", p.client}, {"class", p.class}, {"station_controller_device_id", p.device}} {
		if f.v != "" {
			cond = append(cond, t+f.col+" = ?")
			args = append(args, f.v)
		}
	}
	if len(cond) == 0 {
		return t + "payload", nil
	}
	return "CASE WHEN " + strings.Join(cond, " AND ") + " THEN " + t + "payload END", args
}

// selectSQL is the SELECT of up to n rows of a table of history (on
// SQLite a day's; on PostgreSQL history, which finds its days itself)
// after a position (nil: from the start) in the query's order. SQLite is
// told the index (without statistics it may prefer the account's time
// index for a time window); PostgreSQL picks it from the equality
// conditions and its statistics. SQLite's client index is a table kept
// behind the writer: see selectByClientSQLite.
func (p *historyPlan) selectSQL(d dialect, part dayPartition, ascending bool, after *fleetmq.Position, n int) (string, []any) {
	dir, cmp := "DESC", "<"
	if ascending {
		dir, cmp = "ASC", ">"
	}
	switch {
	case d == sqliteDialect && p.index == "history_client_time" && !part.clustered:
		return p.selectByClientSQLite(part.name, dir, cmp, after, n)
	case d == sqliteDialect && p.index != "history_client_time" && part.clustered:
		return p.selectByIndexTableSQLite(part.name, dir, cmp, after, n)
	}
	payload, args := p.payloadColumn("")
	where, condArgs := p.conds("", after, cmp)
	from := part.name
	if d == sqliteDialect {
		from += " INDEXED BY " + dayIndex(part.name, p.index)
	}
	if d == postgresDialect && after != nil {
		// The position's time as a bound of its own: PostgreSQL skips the
		// day partitions out of range by received_us alone, not by the
		// row comparison.
		where = append(where, "received_us "+cmp+"= ?")
		condArgs = append(condArgs, after.Received.UnixMicro())
	}
	return "SELECT id, " + middleColumns("", payload) + ", received_us FROM " + from + " WHERE " +
		strings.Join(where, " AND ") + " ORDER BY received_us " + dir + ", id " + dir + fmt.Sprintf(" LIMIT %d", n), append(args, condArgs...)
}

// selectByClientSQLite is selectSQL for a client's rows in a day's table
// on SQLite: the folded ones from its client index, in its order (its
// received_us and id are the result's, so the merge reads no more of it
// than it returns), merged with the client's unfolded ones that its
// client index does not have (rows are folded client by client), read by
// their ids (historyPlan.unfolded) and sorted.
func (p *historyPlan) selectByClientSQLite(table, dir, cmp string, after *fleetmq.Position, n int) (string, []any) {
	payload, args := p.payloadColumn("h")
	folded, foldedArgs := p.conds("c", after, cmp)
	args = append(args, foldedArgs...)
	query := "SELECT c.id AS id, " + middleColumns("h", payload) + ", c.received_us AS received_us" +
		" FROM " + clientTable(table) + " c CROSS JOIN " + table + " h ON h.id = c.id AND h.account_id = c.account_id AND h.client_id = c.client_id WHERE " +
		strings.Join(folded, " AND ")
	rows := "h." + unfoldedRows
	if p.unfolded != nil {
		rows = p.unfolded("h.id", table)
	}
	if rows != "" {
		tailPayload, tailPayloadArgs := p.payloadColumn("h")
		tail, tailArgs := p.conds("h", after, cmp)
		args = append(append(args, tailPayloadArgs...), tailArgs...)
		query += " UNION ALL SELECT h.id, " + middleColumns("h", tailPayload) + ", h.received_us FROM " + table + " h NOT INDEXED WHERE " +
			rows + " AND " + strings.Join(tail, " AND ") +
			" AND NOT EXISTS (SELECT 1 FROM " + clientTable(table) + " c WHERE c.account_id = h.account_id AND c.client_id = h.client_id" +
			" AND c.received_us = h.received_us AND c.id = h.id)"
	}
	return query + " ORDER BY received_us " + dir + ", id " + dir + fmt.Sprintf(" LIMIT %d", n), args
}

// selectByIndexTableSQLite is selectSQL on SQLite for a day in client
// order read by another index than the client's: the entries of its index
// table, in its order, each joined with its row by the row's pos.
func (p *historyPlan) selectByIndexTableSQLite(table, dir, cmp string, after *fleetmq.Position, n int) (string, []any) {
	payload, args := p.payloadColumn("h")
	where, condArgs := p.conds("i", after, cmp)
	return "SELECT i.id, " + middleColumns("h", payload) + ", i.received_us FROM " + dayIndex(table, p.index) + " i CROSS JOIN " + table +
		" h ON h.pos = i.pos WHERE " +
		strings.Join(where, " AND ") + " ORDER BY i.received_us " + dir + ", i.id " + dir + fmt.Sprintf(" LIMIT %d", n), append(args, condArgs...)
}

// middleColumns are the columns scanHistory reads between id and
// received_us, of the table alias t ("" for none), the payload being the
// expression given.
func middleColumns(t, payload string) string {
	if t != "" {
		t += "."
	}
	cols := []string{"account_id", "client_id", "topic", "class", "qos", "published_qos", "retain", "", "content_type",
		"payload_format", "user_properties", "station_controller_device_id"}
	for i, c := range cols {
		if c == "" {
			cols[i] = payload
			continue
		}
		cols[i] = t + c
	}
	return strings.Join(cols, ", ")
}

// QueryHistory implements fleetmq.HistoryStore. The account, the time
// window, the keyset position and one of device, client or class run in
// SQL on the index that has them (planHistory); the other filters, the
// topic expression included (so both backends apply exactly Go's regexp
// semantics), run here on the rows that index yields, at most
// q.ScanBudget of them.
func (s *Store) QueryHistory(ctx context.Context, q *fleetmq.HistoryQuery, fn func(*fleetmq.Record) error) (err error) {
	var fnErr error // returned as it is: it is fn's, not the store's
	defer func() {
		if err != fnErr {
			wrap(&err, "query history")
		}
	}()
	p, err := planHistory(q)
	if err != nil {
		return err
	}
	if s.dialect == postgresDialect && !(storableText(q.AccountID) && storableText(q.ClientID) && storableText(q.Class) &&
		storableText(q.StationControllerDeviceID)) {
		return nil // a value PostgreSQL cannot hold: no record has it
	}
	if p.index == "history_client_time" && s.dialect == sqliteDialect {
		listed, err := s.tail.current(ctx, s.reads)
		if err != nil {
			return err
		}
		if listed {
			p.unfolded = func(col, table string) string { return s.tail.unfoldedCond(col, q.AccountID, q.ClientID, table) }
		}
	}
	after := q.After
	size := maxChunk
	if q.Limit > 0 {
		size = min(q.Limit, maxChunk)
	}
	var (
		r                 fleetmq.Record
		matched, examined int
		last              fleetmq.Position
		stop, retried     bool
	)
	// The tables to read, in the query's order: on SQLite the days that
	// overlap its window.
	tables := []dayPartition{{name: "history"}}
	if s.dialect == sqliteDialect {
		if err := s.freshDays(ctx); err != nil {
			return err
		}
		tables = s.days.overlapping(p.from, p.to, !q.Ascending)
		if after != nil {
			// The days wholly before a keyset position (after it, newest
			// first) hold nothing the page asks for.
			at := after.Received.UnixMicro()
			tables = slices.DeleteFunc(tables, func(t dayPartition) bool {
				return q.Ascending && t.hi <= at || !q.Ascending && t.lo > at
			})
		}
	}
	for len(tables) > 0 {
		n := size
		if q.Limit > 0 && !p.filtered() {
			n = q.Limit - matched // every row matches: ask for exactly the rest
		}
		if q.ScanBudget > 0 {
			n = min(n, q.ScanBudget-examined)
		}
		chunkSQL, chunkArgs := p.selectSQL(s.dialect, tables[0], q.Ascending, after, n)
		got := 0
		err := s.scanHistory(ctx, s.rebind(chunkSQL), chunkArgs, &r, func(props sql.NullString) error {
			got++
			examined++
			last = r.Position()
			if !p.match(&r) {
				return nil
			}
			r.UserProperties = r.UserProperties[:0]
			if props.Valid {
				if err := json.Unmarshal([]byte(props.String), &r.UserProperties); err != nil {
					return fmt.Errorf("history record %d: user properties: %w", r.ID, err)
				}
			}
			if len(r.UserProperties) == 0 {
				r.UserProperties = nil
			}
			if err := fn(&r); err != nil {
				fnErr = err
				return err
			}
			matched++
			if q.Limit > 0 && matched >= q.Limit {
				stop = true
				return errStopScan
			}
			return nil
		})
		switch {
		case stop:
			return nil
		case noSuchTable(err) && got == 0:
			// A day that was dropped since this process read the days
			// (its records had expired) is passed over; one that was
			// reordered since is read in its new table from the position
			// reached; one that is still there is read again, once.
			if rerr := s.rereadSQLiteDays(ctx); rerr != nil {
				return errors.Join(err, rerr)
			}
			now, ok := s.days.partition(tables[0].lo)
			switch {
			case !ok || now.hi != tables[0].hi:
				tables = tables[1:]
			case now.name != tables[0].name:
				tables[0] = now
			case retried:
				return err
			default:
				retried = true
			}
			continue
		case err != nil:
			return err
		case got < n:
			tables = tables[1:] // the end of the table
			if len(tables) == 0 {
				return nil // and of the query
			}
		}
		if q.ScanBudget > 0 && examined >= q.ScanBudget {
			return &fleetmq.ScanBudgetSpent{Last: last}
		}
		if got > 0 {
			pos := last
			after = &pos
		}
		size = min(size*2, maxChunk)
	}
	return nil
}

// errStopScan ends a scanHistory early.
var errStopScan = errors.New("sqlstore: stop scan")

// scanHistory runs a history SELECT and calls each with r set to each row
// in turn (the payload is only valid during the call), but for the user
// properties, which it passes as their JSON. An error from each ends the
// scan; errStopScan ends it without one.
func (s *Store) scanHistory(ctx context.Context, query string, args []any, r *fleetmq.Record, each func(props sql.NullString) error) error {
	rows, err := s.reads.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		payload  sql.RawBytes
		props    sql.NullString
		received int64
	)
	for rows.Next() {
		if err := rows.Scan(&r.ID, &r.AccountID, &r.ClientID, &r.Topic, &r.Class, &r.QoS, &r.PublishedQoS, &r.Retain,
			&payload, &r.ContentType, &r.PayloadFormat, &props, &r.StationControllerDeviceID, &received); err != nil {
			return err
		}
		r.Payload = payload
		r.Received = time.UnixMicro(received).UTC()
		if err := each(props); err != nil {
			return err
		}
	}
	return rows.Err()
}

// prefixUpperBound is the smallest text greater than every string with
// the prefix (byte order, which is code point order in UTF-8), if there is
// one: the prefix with its last character that has a next one replaced by
// it, and the characters after it dropped. The prefix is text (textPrefix)
// and so is the bound: PostgreSQL refuses a parameter that is not UTF-8,
// which the next byte of a character's last often is not (0x7f, 0xbf).
func prefixUpperBound(prefix string) (string, bool) {
	for end := len(prefix); end > 0; {
		r, size := utf8.DecodeLastRuneInString(prefix[:end])
		end -= size
		switch {
		case r == utf8.MaxRune:
			continue
		case r == 0xd7ff:
			r = 0xe000 // past the surrogates, which are not characters
		default:
			r++
		}
		return prefix[:end] + string(r), true
	}
	return "", false
}

// textPrefix is the longest start of s that PostgreSQL can hold as text:
// valid UTF-8 without NUL. A topic expression's literal prefix is cut
// there; what it cuts cannot be in a stored topic anyway.
func textPrefix(s string) string {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == 0 || r == utf8.RuneError && size == 1 {
			return s[:i]
		}
		i += size
	}
	return s
}

// storableText reports whether PostgreSQL can hold s as text (valid UTF-8
// without NUL): a value that it cannot hold matches no stored one, and as
// a parameter makes the statement fail.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
