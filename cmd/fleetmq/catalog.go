package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// planCmds is "fleetmq plan ...".
func planCmds() map[string]*adminCmd {
	var p fleetmq.Plan
	var rates control.PlanRates
	return map[string]*adminCmd{
		"list": {
			usage: "plan list",
			help:  "list the plan catalog (publish rates: per client, and per account; 0: unlimited)",
			run: func(ctx context.Context, svc *control.Service, _ []string, out io.Writer) error {
				ps, err := svc.Store.Plans(ctx)
				if err != nil {
					return err
				}
				return table(out, "PLAN\tMAX_PUBLISHER_CLIENTS\tQOS2_DAILY_POOL\tHISTORY_DAYS\tCATCH-UP_BURST\tPUBLISH_RATE\tPUBLISH_BYTES_RATE\tACCOUNT_PUBLISH_RATE\tACCOUNT_PUBLISH_BYTES_RATE", func(w io.Writer) {
					for _, p := range ps {
						fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Name, p.MaxPublisherClients, p.QoS2DailyPool, p.HistoryRetentionDays, p.MaxQueued(),
							p.MaxPublishRate, p.MaxPublishBytesRate, p.MaxAccountPublishRate, p.MaxAccountPublishBytesRate)
					}
				})
			},
		},
		"show": {
			usage: "plan show NAME",
			help:  "show a plan of the catalog",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				p, err := svc.Store.Plan(ctx, pos[0])
				if err != nil {
					return err
				}
				printPlan(out, p)
				return nil
			},
		},
		"set": {
			usage: "plan set NAME -max-clients N -qos2-pool N -retention-days N [-publish-rate N] [-publish-bytes-rate N] [-account-publish-rate N] [-account-publish-bytes-rate N]",
			help:  "add or change a plan of the catalog; a publish rate not given keeps the plan's (a new plan gets starter's), 0 is unlimited",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&p.MaxPublisherClients, "max-clients", 0, "max_publisher_clients")
				fs.Int64Var(&p.QoS2DailyPool, "qos2-pool", 0, "QoS 2 messages per account per UTC day")
				fs.IntVar(&p.HistoryRetentionDays, "retention-days", 0, "history retention in days")
				fs.Func("publish-rate", "PUBLISH packets per second per connected client (0: unlimited)", intFlag(&rates.Publish))
				fs.Func("publish-bytes-rate", "topic and payload bytes per second per connected client (0: unlimited)", int64Flag(&rates.PublishBytes))
				fs.Func("account-publish-rate", "PUBLISH packets per second of all the account's clients together (0: unlimited)", intFlag(&rates.AccountPublish))
				fs.Func("account-publish-bytes-rate", "topic and payload bytes per second of all the account's clients together (0: unlimited)", int64Flag(&rates.AccountPublishBytes))
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				p.Name = pos[0]
				if err := svc.PutPlan(ctx, &p, rates); err != nil {
					return err
				}
				printPlan(out, &p)
				return nil
			},
		},
	}
}

// printPlan writes a plan's fields, one per line.
func printPlan(out io.Writer, p *fleetmq.Plan) {
	fmt.Fprintf(out, "plan:                  %s\nmax_publisher_clients: %d\nqos2_daily_pool:       %d\nhistory_days:          %d\ncatch-up_burst:        %d\n",
		p.Name, p.MaxPublisherClients, p.QoS2DailyPool, p.HistoryRetentionDays, p.MaxQueued())
	fmt.Fprintf(out, "publish_rate:          %s\naccount_publish_rate:  %s\n",
		rateText(int64(p.MaxPublishRate), "msg/s", int64(p.MaxPublishBytesRate)),
		rateText(int64(p.MaxAccountPublishRate), "msg/s", p.MaxAccountPublishBytesRate))
}

// rateText says a plan's message and byte rates, 0 as unlimited.
func rateText(msgs int64, unit string, bytes int64) string {
	f := func(n int64, unit string) string {
		if n == 0 {
			return "unlimited " + unit
		}
		return strconv.FormatInt(n, 10) + " " + unit
	}
	return f(msgs, unit) + ", " + f(bytes, "bytes/s")
}

// intFlag and int64Flag parse a flag into *dst, which is nil until the
// flag is given.
func intFlag(dst **int) func(string) error {
	return func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("not a whole number")
		}
		*dst = &n
		return nil
	}
}

func int64Flag(dst **int64) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("not a whole number")
		}
		*dst = &n
		return nil
	}
}

// layoutCmds is "fleetmq layout ...".
func layoutCmds() map[string]*adminCmd {
	var l fleetmq.Layout
	var client string
	return map[string]*adminCmd{
		"add": {
			usage: "layout add NAME -root WIRE_ROOT -rule 'PATTERN=SUBPATH'... [-fanout]",
			help:  "register (or replace) a vendor wire layout, e.g. -rule 'acme/{client_id}/status=state/summary' -rule 'acme/{client_id}/sensor/+=telemetry/{1}'",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&l.WireRoot, "root", "", "wire root (first topic level of the vendor tree)")
				fs.BoolVar(&l.Fanout, "fanout", false, "also deliver normalized messages to subscribers on the platform path")
				fs.Func("rule", "PATTERN=SUBPATH (repeatable; first match wins)", func(s string) error {
					l.Rules = append(l.Rules, s)
					return nil
				})
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				l.Name = pos[0]
				if err := svc.PutLayout(ctx, &l); err != nil {
					return err
				}
				fmt.Fprintf(out, "layout %s registered for wire root %q (%d rules, fanout %v)\n", l.Name, l.WireRoot, len(l.Rules), l.Fanout)
				return nil
			},
		},
		"list": {
			usage: "layout list",
			help:  "list the vendor layouts",
			run: func(ctx context.Context, svc *control.Service, _ []string, out io.Writer) error {
				ls, err := svc.Store.Layouts(ctx)
				if err != nil {
					return err
				}
				return table(out, "NAME\tWIRE_ROOT\tFANOUT\tRULES", func(w io.Writer) {
					for _, l := range ls {
						fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", l.Name, l.WireRoot, l.Fanout, strings.Join(l.Rules, "  "))
					}
				})
			},
		},
		"remove": {
			usage: "layout remove NAME",
			help:  "remove a vendor layout; publishes on its wire root are refused from then on",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if err := svc.DeleteLayout(ctx, pos[0]); err != nil {
					return err
				}
				fmt.Fprintf(out, "layout %s removed\n", pos[0])
				return nil
			},
		},
		"dry-run": {
			usage: "layout dry-run WIRE_TOPIC [-client CLIENT_ID]",
			help:  "show how a publish on a wire topic would be normalized (or why it would be refused)",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&client, "client", "", "the connecting client's id (checked against the topic's {client_id})")
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				r, err := svc.DryRunLayout(ctx, pos[0])
				if err != nil {
					return err
				}
				if r.Layout == "" {
					fmt.Fprintf(out, "refused: %s\n", r.Reason)
					return nil
				}
				if client != "" && client != r.ClientID {
					fmt.Fprintf(out, "refused: the topic names client %q but the connecting client is %q\n", r.ClientID, client)
					return nil
				}
				fmt.Fprintf(out, "layout:   %s\nclient:   %s\nplatform: {account_id}/%s/%s\nfanout:   %v\n", r.Layout, r.ClientID, r.ClientID, r.Subpath, r.Fanout)
				return nil
			},
		},
	}
}
