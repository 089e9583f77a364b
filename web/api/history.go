package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/netlimit"
)

// HistoryPage is a page of stored history (format json).
type HistoryPage struct {
	Records    []history.Record `json:"records"`
	NextCursor string           `json:"next_cursor,omitempty" doc:"Pass as cursor for the next page; absent on the last page. A page with fewer records than the limit, even none, can have one (the page examined as many records as it may): follow it."`
}

type historyInput struct {
	ClientID   string `query:"client_id" maxLength:"128" doc:"Only this client."`
	Topic      string `query:"topic" maxLength:"1024" doc:"An MQTT topic filter within the account, e.g. {account_id}/+/state/#. A first level of + or # stands for the account." example:"2c9654d9-9c8e-437b-a391-699d4fb8c874/+/telemetry/#"`
	TopicRegex string `query:"topic_regex" maxLength:"1024" doc:"A regular expression (RE2, at most 1,024 characters) matched against the stored topic {account_id}/{client_id}/..., over this account's messages only (an expression naming another account matches nothing). A leading ^ and literal text narrow what is read." example:"^2c9654d9-9c8e-437b-a391-699d4fb8c874/pump-[0-9]+/state/"`
	Class      string `query:"class" enum:"state,event,telemetry,sample" doc:"Only this topic class."`
	Device     string `query:"station_controller_device_id" maxLength:"200" doc:"Only records whose payload carries this station_controller_device_id."`
	From       string `query:"from" format:"date-time" doc:"Received at or after (RFC 3339)."`
	To         string `query:"to" format:"date-time" doc:"Received before (RFC 3339)."`
	Order      string `query:"order" enum:"asc,desc" doc:"desc (newest first) is the default for pages; asc for whole exports."`
	Limit      int    `query:"limit" minimum:"1" maximum:"10000" doc:"Page size, default 100. With format ndjson or csv and no limit, the whole result is streamed."`
	Cursor     string `query:"cursor" maxLength:"200" doc:"next_cursor of the previous page (or the X-Next-Cursor header)."`
	Format     string `query:"format" enum:"json,ndjson,csv" doc:"Default json, or what the Accept header asks for (application/x-ndjson, text/csv)."`
	Accept     string `header:"Accept"`
}

func (a *API) registerHistory() {
	o := op("getHistory", http.MethodGet, "/history", "Stored history",
		"Messages the platform stored, filtered and paged with an opaque cursor (pages deep in history cost the same as the first). "+
			"A page examines at most 100,000 stored records: when a filter matches few of them, the page holds fewer records than the limit, or none, and still has a next cursor; "+
			"only the absence of a next cursor means the end. "+
			"`json` returns a page object; `ndjson` and `csv` return one record per line, the whole result streamed when no limit is given "+
			"(then the default order is oldest first), or a page with its next cursor in `X-Next-Cursor` and a `Link: rel=\"next\"` header. "+
			"A payload that is JSON is returned as JSON (`payload_encoding: json`), any other payload base64-encoded; in CSV, UTF-8 text is written as is.",
		fleetmq.AddOnHistoryDownload, http.StatusOK, http.StatusUnprocessableEntity)
	schema := a.huma.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(HistoryPage{}), true, "HistoryPage")
	o.Responses = map[string]*huma.Response{
		"200": {
			Description: "A page (json), or records one per line (ndjson, csv).",
			Headers: map[string]*huma.Param{
				"X-Next-Cursor": {Description: "ndjson and csv pages: the cursor of the next page (absent on the last; present on a short or empty page that examined as many records as it may).", Schema: &huma.Schema{Type: "string"}},
				"Link":          {Description: "The next page's URL, rel=\"next\".", Schema: &huma.Schema{Type: "string"}},
			},
			Content: map[string]*huma.MediaType{
				"application/json":     {Schema: schema},
				"application/x-ndjson": {Schema: &huma.Schema{Type: "string", Description: "One record object (as in HistoryPage.records) per line."}},
				"text/csv":             {Schema: &huma.Schema{Type: "string", Description: "A header row, then id,received_at,account_id,client_id,topic,class,qos,published_qos,retain,station_controller_device_id,content_type,payload_encoding,payload."}},
			},
		},
	}
	huma.Register(a.huma, o, func(ctx context.Context, in *historyInput) (*huma.StreamResponse, error) {
		p := caller(ctx)
		f := history.JSON
		switch {
		case in.Format != "":
			f, _ = history.ParseFormat(in.Format)
		case in.Accept != "":
			f = acceptedFormat(in.Accept)
		}
		paged := f == history.JSON || in.Limit > 0
		params := history.Params{ClientID: in.ClientID, Topic: in.Topic, TopicRegex: in.TopicRegex, Class: in.Class,
			StationControllerDeviceID: in.Device, From: in.From, To: in.To, Order: in.Order, Cursor: in.Cursor}
		if in.Limit > 0 {
			params.Limit = strconv.Itoa(in.Limit)
		}
		if !paged && in.Order == "" {
			params.Order = "asc"
		}
		q, err := history.Build(p.account.ID, params, !paged)
		if err != nil {
			return nil, a.fail(ctx, err, "query")
		}
		q.ScanBudget = a.deps.ScanBudget
		release, full := a.takeQuery(ctx, p.account.ID)
		if full != nil {
			return nil, full
		}
		st := a.deps.HistorySlots.Charged(p.account.ID, a.deps.Store)
		if !paged {
			return &huma.StreamResponse{Body: func(hc huma.Context) {
				defer release()
				r, w := humago.Unwrap(hc)
				hc.SetHeader("Content-Type", f.ContentType())
				out := &exportWriter{hc: hc, rc: http.NewResponseController(w), timeout: ExportWriteTimeout}
				n, err := history.Export(ctx, out, st, q, f)
				if err == nil {
					if !out.started { // an empty NDJSON export writes nothing
						hc.SetStatus(http.StatusOK)
					}
					return
				}
				if !out.started {
					// Nothing is sent (the first batch failed): the status
					// can still say so.
					a.writeHuma(hc, a.fail(ctx, err, "export"))
					return
				}
				switch {
				case out.err != nil:
					a.deps.Logger.Warn("api: history export cut off: the client stopped reading", "account", p.account.ID, "records", n, "error", err)
				case ctx.Err() != nil:
					a.deps.Logger.Warn("api: history export ended early: the request ended", "account", p.account.ID, "records", n, "error", err)
				default:
					a.deps.Logger.Error("api: history export failed midway", "account", p.account.ID, "records", n, "error", err)
				}
				abortResponse(w, r)
			}}, nil
		}
		defer release()
		qctx, cancel := context.WithTimeout(ctx, a.deps.QueryTimeout)
		defer cancel()
		page, err := history.Page(qctx, st, q)
		if err != nil {
			if p := queryProblem(ctx, err, a.deps.QueryTimeout); p != nil {
				return nil, p
			}
			return nil, a.fail(ctx, err, "query")
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			hc.SetHeader("Content-Type", f.ContentType())
			if page.Next != "" {
				u := hc.URL()
				v := u.Query()
				v.Set("cursor", page.Next)
				hc.SetHeader("X-Next-Cursor", page.Next)
				hc.SetHeader("Link", "<"+Prefix+"/history?"+v.Encode()+`>; rel="next"`)
			}
			hc.SetStatus(http.StatusOK)
			writePage(hc.BodyWriter(), page, f)
		}}, nil
	})
}

// ExportWriteTimeout bounds each write of a streamed export: a client that
// takes none of it for this long is cut off.
const ExportWriteTimeout = 30 * time.Second

// exportWriter is the body of a streamed export. The status (200) goes
// with the first write, once the store has given the first batch, so an
// export whose first read fails is answered with an error status. Every
// write has its own deadline, so a long export runs as long as the client
// keeps reading, and no longer once it stops.
type exportWriter struct {
	hc      huma.Context
	rc      *http.ResponseController
	timeout time.Duration
	started bool  // the status is sent
	err     error // a write failed: the client stopped reading or left
}

func (e *exportWriter) Write(p []byte) (int, error) {
	if !e.started {
		e.started = true
		e.hc.SetStatus(http.StatusOK)
	}
	if err := e.rc.SetWriteDeadline(time.Now().Add(e.timeout)); err != nil {
		e.err = err
		return 0, err
	}
	n, err := e.hc.BodyWriter().Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// abortResponse ends a response whose status and part of whose body are
// sent, so that no client can take the part for the whole: the export
// behind it failed. The body has no length (an export's is not known
// ahead), so on HTTP/1.1 it is chunked, and net/http, told to abort,
// closes the connection without the last chunk (curl exits with 18, Go's
// client reads io.ErrUnexpectedEOF); on HTTP/2 it resets the stream. An
// HTTP/1.0 body (a client, or a proxy, speaking 1.0) ends where its
// connection ends, so a connection closed would pass for a complete
// body: it is reset instead (curl exits with 56, "Connection reset by
// peer"; a proxy sees its upstream fail, not end).
func abortResponse(w http.ResponseWriter, r *http.Request) {
	if !r.ProtoAtLeast(1, 1) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			resetConn(conn)
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// resetConn closes a connection with a TCP reset rather than an orderly
// end (SO_LINGER 0) when there is TCP under its wrappers (those with a
// NetConn method: the HTTP listener's, TLS), else just closes it.
func resetConn(conn net.Conn) {
	if tc, ok := netlimit.Under[*net.TCPConn](conn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// writePage writes a page in a format.
func writePage(w interface{ Write([]byte) (int, error) }, page *history.PageResult, f history.Format) {
	bw := bufio.NewWriterSize(w, 64<<10)
	var buf []byte
	switch f {
	case history.JSON:
		bw.WriteString(`{"records":[`)
		for i, r := range page.Records {
			buf = buf[:0]
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = history.AppendJSON(buf, r)
			bw.Write(buf)
		}
		bw.WriteString("]")
		if page.Next != "" {
			c, _ := json.Marshal(page.Next)
			bw.WriteString(`,"next_cursor":`)
			bw.Write(c)
		}
		bw.WriteString("}\n")
	case history.CSV:
		bw.WriteString(history.CSVHeader)
		for _, r := range page.Records {
			buf = history.AppendCSV(buf[:0], r)
			bw.Write(buf)
		}
	default:
		for _, r := range page.Records {
			buf = append(history.AppendJSON(buf[:0], r), '\n')
			bw.Write(buf)
		}
	}
	bw.Flush()
}

// acceptedFormat picks the history format an Accept header prefers: the
// media type of json, ndjson or csv with the highest q (the first on a
// tie), json when it names none of them.
func acceptedFormat(accept string) history.Format {
	best, bestQ := history.JSON, -1.0
	for _, part := range strings.Split(accept, ",") {
		media, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		f, ok := history.ParseFormat(strings.ToLower(strings.TrimSpace(media)))
		if !ok {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
				if n, err := strconv.ParseFloat(v, 64); err == nil {
					q = n
				}
			}
		}
		if q > bestQ && q > 0 {
			best, bestQ = f, q
		}
	}
	return best
}
