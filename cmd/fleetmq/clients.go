package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
)

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
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Kind, c.Username, dash(c.Label), st, when(c.ExpiresAt), cell(dash(strings.Join(c.Filters, " "))))
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
