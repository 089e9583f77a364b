package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
)

// historyCmds is "fleetmq history ...": stored history for operators.
func historyCmds() map[string]*adminCmd {
	var (
		p             history.Params
		format, field string
		bucket        time.Duration
	)
	filters := func(fs *flag.FlagSet) {
		fs.StringVar(&p.ClientID, "client", "", "only this client id")
		fs.StringVar(&p.Topic, "topic", "", "MQTT topic filter within the account, e.g. ACCOUNT/+/state/#")
		fs.StringVar(&p.TopicRegex, "regex", "", "topic regular expression (RE2), over this account's messages only, e.g. ^ACCOUNT/pump-[0-9]+/state/")
		fs.StringVar(&p.Class, "class", "", "state, event, telemetry or sample")
		fs.StringVar(&p.StationControllerDeviceID, "device", "", "station_controller_device_id")
		fs.StringVar(&p.From, "from", "", "from this time (RFC 3339, inclusive)")
		fs.StringVar(&p.To, "to", "", "until this time (RFC 3339, exclusive)")
	}
	store := func(svc *control.Service) (fleetmq.HistoryStore, error) {
		h, ok := svc.Store.(fleetmq.HistoryStore)
		if !ok {
			return nil, fmt.Errorf("this store keeps no history")
		}
		return h, nil
	}
	return map[string]*adminCmd{
		"query": {
			usage: "history query ACCOUNT [-client ID] [-topic FILTER] [-from T] [-to T] [-limit N] [-cursor C] [-format table|json]",
			help:  "one page of an account's stored messages, newest first (-order asc for oldest first)",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				filters(fs)
				fs.StringVar(&p.Order, "order", "desc", "desc (newest first) or asc")
				fs.StringVar(&p.Limit, "limit", "20", "records on the page")
				fs.StringVar(&p.Cursor, "cursor", "", "continue from a previous page's next cursor")
				fs.StringVar(&format, "format", "table", "table or json")
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				st, err := store(svc)
				if err != nil {
					return err
				}
				q, err := history.Build(pos[0], p, false)
				if err != nil {
					return err
				}
				page, err := history.Page(ctx, st, q)
				if err != nil {
					return err
				}
				switch format {
				case "json":
					var b []byte
					b = append(b, `{"records":[`...)
					for i, r := range page.Records {
						if i > 0 {
							b = append(b, ',')
						}
						b = history.AppendJSON(b, r)
					}
					b = append(b, `],"next_cursor":`...)
					next, _ := json.Marshal(page.Next)
					b = append(b, next...)
					b = append(b, "}\n"...)
					_, err = out.Write(b)
					return err
				case "table":
				default:
					return fmt.Errorf("-format %q: want table or json", format)
				}
				err = table(out, "ID\tRECEIVED\tCLIENT\tTOPIC\tQOS\tPAYLOAD", func(w io.Writer) {
					for _, r := range page.Records {
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.Received.Format("2006-01-02T15:04:05.000000Z"),
							cell(r.ClientID), cell(strings.TrimPrefix(r.Topic, r.AccountID+"/"+r.ClientID+"/")), r.QoS, preview(r.Payload))
					}
				})
				if err == nil && page.Next != "" {
					fmt.Fprintf(out, "next page: -cursor %s\n", page.Next)
				}
				return err
			},
		},
		"export": {
			usage:  "history export ACCOUNT [-format ndjson|json|csv] [filters...]",
			help:   "stream every matching stored message to standard output, oldest first",
			args:   1,
			stream: true,
			flags: func(fs *flag.FlagSet) {
				filters(fs)
				fs.StringVar(&format, "format", "ndjson", "ndjson, json or csv")
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				st, err := store(svc)
				if err != nil {
					return err
				}
				f, ok := history.ParseFormat(format)
				if !ok {
					return fmt.Errorf("-format %q: want ndjson, json or csv", format)
				}
				p.Order = "asc"
				q, err := history.Build(pos[0], p, true)
				if err != nil {
					return err
				}
				return exportHistory(ctx, out, st, q, f)
			},
		},
		"latest": {
			usage: "history latest ACCOUNT CLIENT",
			help:  "the newest stored message of each topic of a client",
			args:  2,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				st, err := store(svc)
				if err != nil {
					return err
				}
				if !fleetmq.ValidAccountID(pos[0]) {
					return fleetmq.Invalid(map[string]string{"account_id": "not an account id"})
				}
				rs, err := st.LatestHistory(ctx, pos[0], pos[1])
				if err != nil {
					return err
				}
				return table(out, "TOPIC\tRECEIVED\tQOS\tPAYLOAD", func(w io.Writer) {
					for _, r := range rs {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", cell(r.Topic), r.Received.Format(time.RFC3339), r.QoS, preview(r.Payload))
					}
				})
			},
		},
		"chart": {
			usage: "history chart ACCOUNT -field NAME -from T -to T [-bucket 1m] [filters...]",
			help:  "min/max/avg/count/last of a numeric JSON payload field per time bucket",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				filters(fs)
				fs.StringVar(&field, "field", "", "JSON field or dotted path, e.g. battery.level")
				fs.DurationVar(&bucket, "bucket", time.Minute, "bucket width")
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				st, err := store(svc)
				if err != nil {
					return err
				}
				q, err := history.Build(pos[0], p, true)
				if err != nil {
					return err
				}
				s, err := history.Aggregate(ctx, st, q, field, bucket)
				if err != nil {
					return err
				}
				err = table(out, "BUCKET\tCOUNT\tMIN\tMAX\tAVG\tLAST", func(w io.Writer) {
					for _, b := range s.Buckets {
						fmt.Fprintf(w, "%s\t%d\t%g\t%g\t%s\t%g\n", b.Start.Format(time.RFC3339), b.Count, b.Min, b.Max,
							strconv.FormatFloat(b.Avg, 'f', -1, 64), b.Last)
					}
				})
				if err == nil && s.Skipped > 0 {
					what := "matching messages have"
					if s.Skipped == 1 {
						what = "matching message has"
					}
					fmt.Fprintf(out, "%d %s no number at %q\n", s.Skipped, what, field)
				}
				return err
			},
		},
		"prune": {
			usage: "history prune",
			help:  "delete history older than each account's plan keeps, now (serve also does it hourly)",
			run: func(ctx context.Context, svc *control.Service, _ []string, out io.Writer) error {
				st, err := store(svc)
				if err != nil {
					return err
				}
				r := &history.Retention{Control: svc.Store, History: st, Now: svc.Now}
				n, err := r.Pass(ctx)
				fmt.Fprintf(out, "deleted %d records\n", n)
				if d := r.DaysDropped(); d > 0 {
					fmt.Fprintf(out, "days of history dropped whole: %d\n", d)
				}
				if d := r.DaysReordered(); d > 0 {
					fmt.Fprintf(out, "days of history reordered by client: %d\n", d)
				}
				return err
			},
		},
	}
}

// exportHistory is "history export": every record of q to out. A store
// that fails midway (a database error, a closed store, an interrupt) ends
// it with an error that says the output is incomplete and how far it got:
// the command exits non-zero, its output (what was exported) stays short.
func exportHistory(ctx context.Context, out io.Writer, st fleetmq.HistoryStore, q *fleetmq.HistoryQuery, f history.Format) error {
	n, err := history.Export(ctx, out, st, q, f)
	if err != nil {
		return fmt.Errorf("history export stopped after %d records, the output is incomplete: %w", n, err)
	}
	return nil
}

// preview is a payload shortened to one table cell.
func preview(p []byte) string {
	const max = 60
	if !utf8.Valid(p) {
		return fmt.Sprintf("(%d bytes, binary)", len(p))
	}
	s := strings.Join(strings.Fields(string(p)), " ")
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max-1]) + "…"
	}
	return s
}
