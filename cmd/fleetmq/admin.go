package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
)

// The operator commands open the store directly: SQLite in the data
// directory, or the PostgreSQL database of -database. SQLite in WAL mode
// lets them write while "fleetmq serve" runs; serve picks the change up
// at its next reload on either database, and a command that changed
// something returns only once every running serve has (awaitApplied).

// adminCmd is one operator subcommand.
type adminCmd struct {
	usage string // "account create -name NAME -email EMAIL [-plan PLAN]"
	help  string
	args  int // positional arguments required
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error
}

// runAdmin dispatches "fleetmq GROUP VERB ...".
func runAdmin(ctx context.Context, group string, cmds map[string]*adminCmd, args []string, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage:\n")
		for _, verb := range sortedKeys(cmds) {
			fmt.Fprintf(w, "  fleetmq %s\n      %s\n", cmds[verb].usage, cmds[verb].help)
		}
		fmt.Fprintf(w, "Every command takes -data DIR (default ./data, or FLEETMQ_DATA) or -database URL (PostgreSQL, or FLEETMQ_DATABASE).\nA command that changes something returns once every running fleetmq serve enforces the change (-wait, default 5s).\n")
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		usage(stderr)
		return flag.ErrHelp
	}
	c := cmds[args[0]]
	if c == nil {
		usage(stderr)
		return fmt.Errorf("unknown command %q", group+" "+args[0])
	}
	fs := flag.NewFlagSet(group+" "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, "Usage: fleetmq %s\n  %s\n", c.usage, c.help); fs.PrintDefaults() }
	var dir, database string
	storeFlags(fs, &dir, &database)
	wait := fs.Duration("wait", 5*time.Second, "after a change, how long to wait until every running fleetmq serve enforces it (0: do not wait)")
	if c.flags != nil {
		c.flags(fs)
	}
	pos, err := parseCommand(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != c.args {
		fs.Usage()
		return fmt.Errorf("%s %s: want %d argument(s), got %d", group, args[0], c.args, len(pos))
	}
	store, err := app.OpenStore(ctx, dir, database)
	if err != nil {
		return err
	}
	defer store.Close()
	svc := control.New(store)
	before, err := store.Version(ctx)
	if err != nil {
		return err
	}
	// The output waits with the command: a script reading it (read -r ID
	// PASSWORD < <(fleetmq ... -print id,password)) goes on only once the
	// change is in force, not as soon as the line is printed.
	var out bytes.Buffer
	if err := c.run(ctx, svc, pos, &out); err != nil {
		stdout.Write(out.Bytes())
		return err
	}
	err = awaitApplied(ctx, svc, before, *wait, stderr)
	if _, werr := stdout.Write(out.Bytes()); werr != nil && err == nil {
		err = werr
	}
	return err
}

// awaitApplied returns once a change the command stored (the control-plane
// version moved from before) is in force on every running fleetmq serve,
// so that what the command made can be used on the next line of a script:
// a credential to connect with, a revocation already enforced. When serve
// is not running, or has not applied the change within wait, it says so on
// stderr; the change is stored either way, and the exit status is 0.
func awaitApplied(ctx context.Context, svc *control.Service, before int64, wait time.Duration, stderr io.Writer) error {
	if wait <= 0 {
		return nil
	}
	if v, err := svc.Store.Version(ctx); err != nil || v == before {
		return err // a read, or a write that changed nothing
	}
	a, err := svc.AwaitApplied(ctx, wait, 20*time.Millisecond)
	if err != nil {
		return fmt.Errorf("stored; could not check that fleetmq serve applied it: %w", err)
	}
	if !a.Running() || !a.Done() {
		fmt.Fprintln(stderr, a)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

func table(out io.Writer, header string, rows func(w io.Writer)) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	return tw.Flush()
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// The fields -print can name, in the order the full output shows them.
var (
	accountFields    = []string{"account_id", "owner", "plan", "password"}
	credentialFields = []string{"id", "kind", "username", "password"}
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
							p.MaxPublisherClients, p.QoS2DailyPool, p.HistoryRetentionDays, p.MaxPublisherClients*3)
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
			help:  "suspend an account: its sessions are disconnected and new connections refused",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if err := svc.Store.SetSuspended(ctx, pos[0], true); err != nil {
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
				if err := svc.Store.SetSuspended(ctx, pos[0], false); err != nil {
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
			help:  "metered usage per UTC day: messages and bytes by effective QoS, QoS 2 pool, demotions, refusals, drops",
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

// planCmds is "fleetmq plan ...".
func planCmds() map[string]*adminCmd {
	var p fleetmq.Plan
	return map[string]*adminCmd{
		"list": {
			usage: "plan list",
			help:  "list the plan catalog",
			run: func(ctx context.Context, svc *control.Service, _ []string, out io.Writer) error {
				ps, err := svc.Store.Plans(ctx)
				if err != nil {
					return err
				}
				return table(out, "PLAN\tMAX_PUBLISHER_CLIENTS\tQOS2_DAILY_POOL\tHISTORY_DAYS\tCATCH-UP_BURST", func(w io.Writer) {
					for _, p := range ps {
						fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", p.Name, p.MaxPublisherClients, p.QoS2DailyPool, p.HistoryRetentionDays, p.MaxPublisherClients*3)
					}
				})
			},
		},
		"set": {
			usage: "plan set NAME -max-clients N -qos2-pool N -retention-days N",
			help:  "add or change a plan of the catalog",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&p.MaxPublisherClients, "max-clients", 0, "max_publisher_clients")
				fs.Int64Var(&p.QoS2DailyPool, "qos2-pool", 0, "QoS 2 messages per account per UTC day")
				fs.IntVar(&p.HistoryRetentionDays, "retention-days", 0, "history retention in days")
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				p.Name = pos[0]
				if err := p.Validate(); err != nil {
					return err
				}
				if err := svc.Store.PutPlan(ctx, p); err != nil {
					return err
				}
				fmt.Fprintf(out, "plan %s: %d clients, QoS 2 pool %d/day, %d days of history\n", p.Name, p.MaxPublisherClients, p.QoS2DailyPool, p.HistoryRetentionDays)
				return nil
			},
		},
	}
}

// clientCmds is "fleetmq client ...".
func clientCmds() map[string]*adminCmd {
	var label string
	var maxQoS int
	var labelSet, qosSet bool
	fl := func(fs *flag.FlagSet) {
		fs.Func("label", "label", func(s string) error { label, labelSet = s, true; return nil })
		fs.Func("max-qos", "max_publish_qos: 0, 1 or 2 (2 needs the qos2 add-on; default 1)", func(s string) error {
			n, err := strconv.Atoi(s)
			maxQoS, qosSet = n, true
			return err
		})
	}
	input := func(id string) control.ClientInput {
		in := control.ClientInput{ClientID: id}
		if labelSet {
			in.Label = &label
		}
		if qosSet {
			in.MaxPublishQoS = &maxQoS
		}
		return in
	}
	return map[string]*adminCmd{
		"add": {
			usage: "client add ACCOUNT_ID CLIENT_ID [-label L] [-max-qos 0|1|2]",
			help:  "register an MQTT client (within the plan's max_publisher_clients)",
			args:  2, flags: fl,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				c, err := svc.CreateClient(ctx, pos[0], input(pos[1]))
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "client %s registered: max_publish_qos %d, history_topic_prefix %s\n", c.ClientID, c.MaxPublishQoS, c.HistoryTopicPrefix())
				return nil
			},
		},
		"set": {
			usage: "client set ACCOUNT_ID CLIENT_ID [-label L] [-max-qos 0|1|2]",
			help:  "change a client's label or max_publish_qos",
			args:  2, flags: fl,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				c, err := svc.UpdateClient(ctx, pos[0], input(pos[1]))
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "client %s: label %q, max_publish_qos %d\n", c.ClientID, c.Label, c.MaxPublishQoS)
				return nil
			},
		},
		"list": {
			usage: "client list ACCOUNT_ID",
			help:  "list an account's MQTT clients",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if _, err := svc.Store.Account(ctx, pos[0]); err != nil {
					return err
				}
				cs, err := svc.Store.Clients(ctx, pos[0])
				if err != nil {
					return err
				}
				return table(out, "CLIENT_ID\tLABEL\tMAX_QOS\tHISTORY_TOPIC_PREFIX\tCREATED", func(w io.Writer) {
					for _, c := range cs {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", c.ClientID, dash(c.Label), c.MaxPublishQoS, c.HistoryTopicPrefix(), when(c.CreatedAt))
					}
				})
			},
		},
		"problems": problemsCmd(true),
		"remove": {
			usage: "client remove ACCOUNT_ID CLIENT_ID",
			help:  "remove a client; its live sessions are disconnected",
			args:  2,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if err := svc.DeleteClient(ctx, pos[0], pos[1]); err != nil {
					return err
				}
				fmt.Fprintf(out, "client %s removed\n", pos[1])
				return nil
			},
		},
	}
}

// credentialCmds is "fleetmq credential ...".
func credentialCmds() map[string]*adminCmd {
	var in control.NewCredential
	var only string
	return map[string]*adminCmd{
		"create": {
			usage: "credential create ACCOUNT_ID -kind publisher|subscriber [-label L] [-expires-in-days N] [-filter F]... [-print FIELDS]",
			help:  "create a fleet publisher credential or a read-only subscriber password; the password is shown once",
			args:  1,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&in.Kind, "kind", "", "publisher (devices, with a registered client id) or subscriber (read-only)")
				fs.StringVar(&in.Label, "label", "", "label")
				fs.IntVar(&in.ExpiresInDays, "expires-in-days", 0, "expiry in days (0: never)")
				fs.Func("filter", "subscriber topic filter within the account (repeatable; default ACCOUNT_ID/#)", func(s string) error {
					in.Filters = append(in.Filters, s)
					return nil
				})
				fs.StringVar(&only, "print", "", "print only these comma-separated fields on one line, for scripts: id,kind,username,password")
			},
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				list, err := printList(only, credentialFields)
				if err != nil {
					return err
				}
				c, secret, err := svc.CreateCredential(ctx, pos[0], in)
				if err != nil {
					return err
				}
				if list != nil {
					return printFields(out, list, map[string]string{"id": c.ID, "kind": c.Kind, "username": c.Username, "password": secret})
				}
				fmt.Fprintf(out, "id:       %s\nkind:     %s\nusername: %s\npassword: %s\nexpires:  %s\n", c.ID, c.Kind, c.Username, secret, when(c.ExpiresAt))
				if c.Kind == fleetmq.KindSubscriber {
					fmt.Fprintf(out, "filters:  %s\n", strings.Join(c.Filters, " "))
				}
				fmt.Fprintln(out, "The password is shown only now and is stored hashed; keep it in a secret manager.")
				return nil
			},
		},
		"list": {
			usage: "credential list ACCOUNT_ID",
			help:  "list an account's credentials (never their passwords)",
			args:  1,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if _, err := svc.Store.Account(ctx, pos[0]); err != nil {
					return err
				}
				cs, err := svc.Store.Credentials(ctx, pos[0], "")
				if err != nil {
					return err
				}
				now := svc.Now()
				return table(out, "ID\tKIND\tUSERNAME\tLABEL\tSTATUS\tEXPIRES\tFILTERS", func(w io.Writer) {
					for _, c := range cs {
						st := "active"
						switch {
						case !c.RevokedAt.IsZero():
							st = "revoked"
						case !c.Active(now):
							st = "expired"
						}
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Kind, c.Username, dash(c.Label), st, when(c.ExpiresAt), dash(strings.Join(c.Filters, " ")))
					}
				})
			},
		},
		"revoke": {
			usage: "credential revoke ACCOUNT_ID CREDENTIAL_ID",
			help:  "revoke a credential; its live sessions are disconnected",
			args:  2,
			run: func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error {
				if err := svc.RevokeCredential(ctx, pos[0], pos[1]); err != nil {
					return err
				}
				fmt.Fprintf(out, "credential %s revoked\n", pos[1])
				return nil
			},
		},
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
				if err := svc.Store.DeleteLayout(ctx, pos[0]); err != nil {
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
