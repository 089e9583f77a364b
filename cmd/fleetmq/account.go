package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

// accountCmds is "fleetmq account ..."; stdin is set-password's.
func accountCmds(stdin io.Reader) map[string]*adminCmd {
	var name, email, plan, only string
	var days int
	var fromStdin bool
	return map[string]*adminCmd{
		"create": {
			usage: "account create -name NAME -email OWNER_EMAIL [-plan PLAN] [-print FIELDS]",
			help:  "create an account; prints its id and the owner's first portal password (shown once)",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&name, "name", "", "account name")
				fs.StringVar(&email, "email", "", "owner's e-mail (portal sign-in)")
				fs.StringVar(&plan, "plan", "", "base plan (see: fleetmq plan list)")
				fs.StringVar(&only, "print", "", "print only these comma-separated fields on one line, for scripts: account_id,owner,plan,password")
			},
			run: func(ctx context.Context, svc *control.Service, _ []string, out io.Writer) error {
				list, err := printList(only, accountFields)
				if err != nil {
					return err
				}
				a, pw, err := svc.CreateAccount(ctx, control.NewAccount{Name: name, OwnerEmail: email, Plan: plan})
				if err != nil {
					return err
				}
				if list != nil {
					return printFields(out, list, map[string]string{"account_id": a.ID, "owner": a.OwnerEmail, "plan": dash(a.Plan), "password": pw})
				}
				fmt.Fprintf(out, "account_id:      %s\nowner:           %s\nplan:            %s\nportal password: %s\n", a.ID, a.OwnerEmail, dash(a.Plan), pw)
				fmt.Fprintln(out, "The password is shown only now; the owner should change it after signing in.")
				return nil
			},
		},
		"list": {
			usage: "account list",
			help:  "list accounts",
			run: func(ctx context.Context, svc *control.Service, _ []string, out io.Writer) error {
				as, err := svc.Store.Accounts(ctx)
				if err != nil {
					return err
				}
				return table(out, "ACCOUNT_ID\tNAME\tOWNER\tPLAN\tADD-ONS\tSTATUS\tCREATED", func(w io.Writer) {
					for _, a := range as {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Name, a.OwnerEmail, dash(a.Plan), addOnList(a), status(a), when(a.CreatedAt))
					}
				})
			},
		},
		"show": {
			usage: "account show ACCOUNT_ID",
			help:  "show an account, its plan, add-ons, clients and subscription history",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				a, err := svc.Store.Account(ctx, pos[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "account_id: %s\nname:       %s\nowner:      %s\nstatus:     %s\nplan:       %s\nadd-ons:    %s\ncreated:    %s\n",
					a.ID, a.Name, a.OwnerEmail, status(a), dash(a.Plan), addOnList(a), when(a.CreatedAt))
				if a.Plan != "" {
					if p, err := svc.Store.Plan(ctx, a.Plan); err == nil {
						fmt.Fprintf(out, "limits:     %d publisher clients, QoS 2 pool %d/day, history %d days, catch-up burst %d\n",
							p.MaxPublisherClients, p.QoS2DailyPool, p.HistoryRetentionDays, p.MaxQueued())
						fmt.Fprintf(out, "publishing: per client %s; per account %s\n",
							rateText(int64(p.MaxPublishRate), "msg/s", p.MaxPublishBytesRate),
							rateText(int64(p.MaxAccountPublishRate), "msg/s", p.MaxAccountPublishBytesRate))
					}
				}
				cs, err := svc.Store.Clients(ctx, a.ID)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "clients:    %d\n", len(cs))
				changes, err := svc.Store.SubscriptionChanges(ctx, a.ID)
				if err != nil {
					return err
				}
				if len(changes) > 0 {
					fmt.Fprintln(out, "subscription history:")
					for _, c := range changes {
						fmt.Fprintf(out, "  %s  %-9s %s\n", when(c.At), c.Kind, dash(c.Value))
					}
				}
				return nil
			},
		},
		"suspend": {
			usage: "account suspend ACCOUNT_ID",
			help:  "suspend an account: its sessions are disconnected, new connections, its REST API tokens and its owner's portal sign-in refused",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if err := svc.SetSuspended(ctx, pos[0], true); err != nil {
					return err
				}
				fmt.Fprintf(out, "account %s suspended\n", pos[0])
				return nil
			},
		},
		"resume": {
			usage: "account resume ACCOUNT_ID",
			help:  "lift a suspension",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if err := svc.SetSuspended(ctx, pos[0], false); err != nil {
					return err
				}
				fmt.Fprintf(out, "account %s active\n", pos[0])
				return nil
			},
		},
		"set-plan": {
			usage: "account set-plan ACCOUNT_ID PLAN|none",
			help:  "set the base plan (recorded with its time)",
			args:  2,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				p := pos[1]
				if p == "none" {
					p = ""
				}
				if err := svc.SetPlan(ctx, pos[0], p); err != nil {
					return err
				}
				fmt.Fprintf(out, "account %s plan: %s\n", pos[0], pos[1])
				return nil
			},
		},
		"addon": {
			usage: "account addon ACCOUNT_ID ADDON on|off",
			help:  "switch an add-on: " + addOnIDs(),
			args:  3,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				x, ok := fleetmq.ParseAddOn(pos[1])
				if !ok {
					return fmt.Errorf("unknown add-on %q (one of %s)", pos[1], addOnIDs())
				}
				on := pos[2] == "on"
				if !on && pos[2] != "off" {
					return fmt.Errorf("want on or off, got %q", pos[2])
				}
				if err := svc.SetAddOn(ctx, pos[0], x, on); err != nil {
					return err
				}
				fmt.Fprintf(out, "account %s: %s %s\n", pos[0], x.Title(), pos[2])
				return nil
			},
		},
		"problems": problemsCmd(false),
		"set-password": {
			usage: "account set-password ACCOUNT_ID [-stdin]",
			help:  "set a new portal password for the account's owner: a random one, printed once, or the first line of standard input (-stdin); signs out every portal session of the account",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				fs.BoolVar(&fromStdin, "stdin", false, "read the new password from the first line of standard input instead of generating one")
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				a, err := svc.Store.Account(ctx, pos[0])
				if err != nil {
					return err
				}
				if !fromStdin {
					pw, n, err := svc.ResetOwnerPassword(ctx, a.ID)
					if err != nil {
						return err
					}
					fmt.Fprintf(out, "account_id:      %s\nowner:           %s\nportal password: %s\n", a.ID, a.OwnerEmail, pw)
					fmt.Fprintf(out, "The password is shown only now; the owner should change it after signing in. %s.\n", sessions(n))
					return nil
				}
				pw, err := readLine(stdin)
				if err != nil {
					return fmt.Errorf("-stdin: %w", err)
				}
				n, err := svc.SetOwnerPassword(ctx, a.ID, pw)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "portal password of %s (account %s) set. %s.\n", a.OwnerEmail, a.ID, sessions(n))
				return nil
			},
		},
		"usage": {
			usage: "account usage ACCOUNT_ID [-days N]",
			help:  "metered usage per UTC day: messages and bytes by effective QoS, QoS 2 pool, demotions, refusals, drops; then messages per client (serve writes these every -client-usage-interval, 1 minute)",
			args:  1,
			flags: func(fs *flag.FlagSet) { fs.IntVar(&days, "days", 7, "days back from today") },
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if days < 1 || days > 3660 {
					return errors.New("-days must be 1..3660")
				}
				if _, err := svc.Store.Account(ctx, pos[0]); err != nil {
					return err
				}
				now := svc.Now().UTC()
				from := now.AddDate(0, 0, -(days - 1)).Format(time.DateOnly)
				us, err := svc.Store.Usage(ctx, pos[0], from, now.Format(time.DateOnly))
				if err != nil {
					return err
				}
				if err := table(out, "DAY\tQOS0\tQOS1\tQOS2\tBYTES\tQOS2_POOL_USED\tDEMOTED\tREFUSED\tDROPS", func(w io.Writer) {
					for _, u := range us {
						fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", u.Day, u.Messages[0], u.Messages[1], u.Messages[2],
							u.Bytes[0]+u.Bytes[1]+u.Bytes[2], u.PoolUsed, u.Demotions, u.Refused, dropList(u.Drops))
					}
				}); err != nil {
					return err
				}
				cu, err := svc.Store.ClientUsage(ctx, pos[0], from, now.Format(time.DateOnly))
				if err != nil || len(cu) == 0 {
					return err
				}
				fmt.Fprintln(out)
				return table(out, "CLIENT_ID\tQOS0\tQOS1\tQOS2\tQOS_MIX", func(w io.Writer) {
					for _, c := range cu {
						fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\n", c.ClientID, c.Messages[0], c.Messages[1], c.Messages[2], qosMix(c.Messages))
					}
				})
			},
		},
	}
}

// readLine reads the first line of r, without its line ending.
func readLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("no password on standard input (one line expected)")
	}
	return line, nil
}

// sessions says how many portal sessions were signed out.
func sessions(n int64) string {
	if n == 1 {
		return "1 portal session signed out"
	}
	return strconv.FormatInt(n, 10) + " portal sessions signed out"
}

func status(a *fleetmq.Account) string {
	if a.Suspended {
		return "suspended"
	}
	return "active"
}

func addOnList(a *fleetmq.Account) string {
	var on []string
	for _, x := range fleetmq.AddOns {
		if a.HasAddOn(x) {
			on = append(on, string(x))
		}
	}
	return dash(strings.Join(on, ","))
}

func addOnIDs() string {
	ids := make([]string, len(fleetmq.AddOns))
	for i, x := range fleetmq.AddOns {
		ids[i] = string(x)
	}
	return strings.Join(ids, ", ")
}

func dropList(d map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(d) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, d[k]))
	}
	return dash(strings.Join(parts, ","))
}

func qosMix(m [3]int64) string {
	total := m[0] + m[1] + m[2]
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("Q0 %d%% Q1 %d%% Q2 %d%%", m[0]*100/total, m[1]*100/total, m[2]*100/total)
}
