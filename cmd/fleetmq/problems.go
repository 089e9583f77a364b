package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// problemsCmd is "client problems ACCOUNT_ID CLIENT_ID" (perClient) or
// "account problems ACCOUNT_ID": the recent refusals, server-side closes
// and drops of one client or of all an account's clients, as the account's
// owner sees them in the portal and the REST API.
func problemsCmd(perClient bool) *adminCmd {
	var since time.Duration
	var limit int
	c := &adminCmd{
		usage: "account problems ACCOUNT_ID [-since 24h] [-limit N]",
		help:  "the recent problems of every MQTT client of an account: refused connects, publishes and subscriptions with topic and reason, connections the server ended, messages not delivered",
		args:  1,
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&since, "since", fleetmq.ProblemsKeptFor, "how far back (problems are kept 7 days)")
			fs.IntVar(&limit, "limit", 100, "most problems listed, most recent first (1..1000)")
		},
	}
	if perClient {
		c.usage = "client problems ACCOUNT_ID CLIENT_ID [-since 24h] [-limit N]"
		c.help = "why a client's data does not arrive: its recent refused connects, publishes and subscriptions with topic and reason, connections the server ended, messages it did not get"
		c.args = 2
	}
	c.run = func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
		if limit < 1 || limit > 1000 {
			return errors.New("-limit must be 1..1000")
		}
		if since <= 0 {
			return fmt.Errorf("-since must be positive, e.g. 24h (got %s)", since)
		}
		if _, err := svc.Store.Account(ctx, pos[0]); err != nil {
			return err
		}
		client := ""
		if perClient {
			client = pos[1]
		}
		ps, err := svc.Store.Problems(ctx, pos[0], client, svc.Now().Add(-since), limit)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			fmt.Fprintf(out, "no problems in the last %s\n", since)
			return nil
		}
		return table(out, "LAST\tCLIENT_ID\tWHAT\tCOUNT\tTOPIC\tQOS\tREASON\tDETAIL", func(w io.Writer) {
			for _, p := range ps {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", p.Last.UTC().Format(time.RFC3339), cell(p.ClientID),
					strings.ReplaceAll(p.Kind, "_", " "), p.Count, cell(dash(p.Topic)), p.QoS, cell(reasonOf(p)), cell(p.Detail))
			}
		})
	}
	return c
}

// reasonOf is a problem's reason as the CLI shows it: with the MQTT
// reason code when there is one ("0x90 topic_name_invalid").
func reasonOf(p fleetmq.ClientProblem) string {
	if p.Code == 0 {
		return p.Reason
	}
	return fmt.Sprintf("0x%02X %s", p.Code, p.Reason)
}
