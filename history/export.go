package history

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq"
)

// Format is an export format.
type Format string

// Export formats.
const (
	JSON   Format = "json"   // one JSON array
	NDJSON Format = "ndjson" // one JSON object per line
	CSV    Format = "csv"    // RFC 4180, with a header row
)

// ParseFormat accepts a format name or a media type.
func ParseFormat(s string) (Format, bool) {
	switch s {
	case "json", "application/json":
		return JSON, true
	case "ndjson", "jsonl", "application/x-ndjson", "application/jsonl":
		return NDJSON, true
	case "csv", "text/csv":
		return CSV, true
	}
	return "", false
}

// ContentType is the media type of a format.
func (f Format) ContentType() string {
	switch f {
	case NDJSON:
		return "application/x-ndjson"
	case CSV:
		return "text/csv; charset=utf-8"
	}
	return "application/json"
}

// ExportBatch is how many records Export reads from the store at a time;
// a batch also ends once its encoding reaches exportBatchBytes (large
// payloads), and goes out in writes of exportWrite bytes.
const (
	ExportBatch      = 1000
	exportBatchBytes = 4 << 20
	exportWrite      = 64 << 10
)

// errBatchFull ends a batch's query early, at exportBatchBytes.
var errBatchFull = errors.New("export batch full")

// Export writes every record of q to w in the format and returns how many
// it wrote (on an error, those of the batches it wrote whole). It reads
// the store in batches of ExportBatch (each continuing
// after the last record of the one before), each examining at most
// q.ScanBudget rows (ScanBudget when 0; a batch that spends it continues
// after the last row it examined), and writes a batch only after
// the store has given its connection back: a reader that stops reading
// holds a socket, never a store connection, and memory stays flat however
// large the result. Records stored while an export runs appear in it when
// they come later in its order.
func Export(ctx context.Context, w io.Writer, st fleetmq.HistoryStore, q *fleetmq.HistoryQuery, f Format) (int64, error) {
	var (
		n, sent int64  // records encoded, records of the batches written
		out     []byte // one batch, encoded while the store reads it
	)
	switch f {
	case JSON:
		out = append(out, '[')
	case CSV:
		out = append(out, CSVHeader...)
	}
	qq := *q
	if qq.ScanBudget <= 0 {
		qq.ScanBudget = ScanBudget
	}
	for {
		qq.Limit = ExportBatch
		if q.Limit > 0 {
			qq.Limit = min(ExportBatch, q.Limit-int(n))
		}
		got, full := 0, false
		var last fleetmq.Position
		err := st.QueryHistory(ctx, &qq, func(r *fleetmq.Record) error {
			switch f {
			case CSV:
				out = AppendCSV(out, r)
			case JSON:
				if n > 0 {
					out = append(out, ',')
				}
				out = AppendJSON(append(out, '\n'), r)
			default:
				out = append(AppendJSON(out, r), '\n')
			}
			n++
			got++
			last = r.Position()
			if len(out) >= exportBatchBytes {
				full = true
				return errBatchFull
			}
			return nil
		})
		var spent *fleetmq.ScanBudgetSpent
		switch {
		case errors.As(err, &spent):
			// Not the end: the next batch goes on after the rows examined.
			full, last = true, spent.Last
		case err != nil && !full:
			return sent, err
		}
		done := !full && got < qq.Limit || q.Limit > 0 && int(n) >= q.Limit
		if done && f == JSON {
			if n > 0 {
				out = append(out, '\n')
			}
			out = append(out, "]\n"...)
		}
		// The batch goes out only now, with the store's connection given
		// back, in pieces (a deadline per write suits a slow reader).
		for rest := out; len(rest) > 0; {
			k := min(len(rest), exportWrite)
			if _, err := w.Write(rest[:k]); err != nil {
				return sent, err
			}
			rest = rest[k:]
		}
		sent = n
		if done {
			return n, nil
		}
		out = out[:0]
		qq.After = &last
	}
}

// AppendJSON appends the JSON object of a record (the REST API's record
// representation): a payload that is JSON is embedded as JSON, any other
// payload is base64 with "payload_encoding": "base64".
func AppendJSON(b []byte, r *fleetmq.Record) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, r.ID, 10)
	b = append(b, `,"account_id":`...)
	b = appendString(b, r.AccountID)
	b = append(b, `,"client_id":`...)
	b = appendString(b, r.ClientID)
	b = append(b, `,"topic":`...)
	b = appendString(b, r.Topic)
	b = append(b, `,"class":`...)
	b = appendString(b, r.Class)
	b = append(b, `,"qos":`...)
	b = strconv.AppendUint(b, uint64(r.QoS), 10)
	b = append(b, `,"published_qos":`...)
	b = strconv.AppendUint(b, uint64(r.PublishedQoS), 10)
	b = append(b, `,"retain":`...)
	b = strconv.AppendBool(b, r.Retain)
	b = append(b, `,"received_at":"`...)
	b = r.Received.UTC().AppendFormat(b, timeFormat)
	b = append(b, '"')
	if r.StationControllerDeviceID != "" {
		b = append(b, `,"station_controller_device_id":`...)
		b = appendString(b, r.StationControllerDeviceID)
	}
	if r.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = appendString(b, r.ContentType)
	}
	if r.PayloadFormat != 0 {
		b = append(b, `,"payload_format":`...)
		b = strconv.AppendUint(b, uint64(r.PayloadFormat), 10)
	}
	if len(r.UserProperties) > 0 {
		b = append(b, `,"user_properties":[`...)
		for i, u := range r.UserProperties {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":`...)
			b = appendString(b, u.Key)
			b = append(b, `,"value":`...)
			b = appendString(b, u.Value)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	enc := PayloadEncoding(r.Payload)
	b = append(b, `,"payload_encoding":"`...)
	b = append(b, enc...)
	b = append(b, `","payload":`...)
	b = appendPayload(b, r.Payload, enc)
	return append(b, '}')
}

// PayloadEncoding is how a payload is represented in JSON: "json" when it
// is a JSON value (embedded as is), else "base64" (a base64 string).
func PayloadEncoding(p []byte) string {
	if isJSONPayload(p) {
		return "json"
	}
	return "base64"
}

// EncodePayload returns a payload's JSON representation and its
// encoding, by the rule of AppendJSON (the REST API's live view uses it
// for retained messages).
func EncodePayload(p []byte) (encoding string, value json.RawMessage) {
	enc := PayloadEncoding(p)
	return enc, appendPayload(nil, p, enc)
}

// appendPayload appends a payload as JSON in the given encoding.
func appendPayload(b, p []byte, enc string) []byte {
	if enc == "json" {
		return appendCompact(b, p)
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, '"')
}

// timeFormat is RFC 3339 with microseconds (what the store keeps).
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// isJSONPayload reports whether a payload is a JSON value that can be
// embedded as is.
func isJSONPayload(p []byte) bool {
	return len(p) > 0 && json.Valid(p)
}

// appendCompact appends valid JSON without insignificant whitespace (so an
// NDJSON line never breaks).
func appendCompact(b, p []byte) []byte {
	if bytes.IndexByte(p, '\n') < 0 && bytes.IndexByte(p, '\r') < 0 {
		return append(b, p...)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, p); err != nil {
		return append(b, p...) // not reached: p is valid JSON
	}
	return append(b, out.Bytes()...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			if r == utf8.RuneError {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, `\u202`...)
				b = append(b, hex[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// CSVHeader is the header row of CSV exports.
const CSVHeader = "id,received_at,account_id,client_id,topic,class,qos,published_qos,retain,station_controller_device_id,content_type,payload_encoding,payload\n"

// AppendCSV appends one CSV row (RFC 4180 quoting). A payload that is
// valid UTF-8 is written as text ("payload_encoding" utf-8), any other as
// base64.
func AppendCSV(b []byte, r *fleetmq.Record) []byte {
	b = strconv.AppendInt(b, r.ID, 10)
	b = append(b, ',')
	b = r.Received.UTC().AppendFormat(b, timeFormat)
	for _, f := range []string{r.AccountID, r.ClientID, r.Topic, r.Class} {
		b = append(b, ',')
		b = appendCSVField(b, f)
	}
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(r.QoS), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(r.PublishedQoS), 10)
	b = append(b, ',')
	b = strconv.AppendBool(b, r.Retain)
	b = append(b, ',')
	b = appendCSVField(b, r.StationControllerDeviceID)
	b = append(b, ',')
	b = appendCSVField(b, r.ContentType)
	if utf8.Valid(r.Payload) {
		b = append(b, ",utf-8,"...)
		b = appendCSVField(b, string(r.Payload))
	} else {
		b = append(b, ",base64,"...)
		b = base64.StdEncoding.AppendEncode(b, r.Payload)
	}
	return append(b, '\n')
}

func appendCSVField(b []byte, s string) []byte {
	quote := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', ',', '\n', '\r':
			quote = true
		}
	}
	if len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		quote = true
	}
	if !quote {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// Record is the JSON form of a record, for clients of the API that decode
// it (tests, the CLI).
type Record struct {
	ID                        int64                  `json:"id"`
	AccountID                 string                 `json:"account_id"`
	ClientID                  string                 `json:"client_id"`
	Topic                     string                 `json:"topic"`
	Class                     string                 `json:"class"`
	QoS                       byte                   `json:"qos"`
	PublishedQoS              byte                   `json:"published_qos"`
	Retain                    bool                   `json:"retain"`
	ReceivedAt                time.Time              `json:"received_at"`
	StationControllerDeviceID string                 `json:"station_controller_device_id,omitempty"`
	ContentType               string                 `json:"content_type,omitempty"`
	PayloadFormat             byte                   `json:"payload_format,omitempty"`
	UserProperties            []fleetmq.UserProperty `json:"user_properties,omitempty"`
	PayloadEncoding           string                 `json:"payload_encoding"`
	Payload                   json.RawMessage        `json:"payload"`
}

// Bytes returns the payload bytes of a decoded record.
func (r *Record) Bytes() ([]byte, error) {
	switch r.PayloadEncoding {
	case "json":
		return r.Payload, nil
	case "base64":
		var s string
		if err := json.Unmarshal(r.Payload, &s); err != nil {
			return nil, err
		}
		return base64.StdEncoding.DecodeString(s)
	}
	return nil, fmt.Errorf("unknown payload encoding %q", r.PayloadEncoding)
}
