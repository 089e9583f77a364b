package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fleetmq/fleetmq/control"
)

// sessionCounter is a store that counts the sessions each node of a
// cluster holds (sqlstore.Store).
type sessionCounter interface {
	SessionsPerNode(ctx context.Context) (map[string]int64, error)
}

// nodeCmds are "fleetmq node ...": the running serve processes on the
// database (the nodes of a cluster).
func nodeCmds() map[string]*adminCmd {
	return map[string]*adminCmd{
		"list": {
			usage: "node list",
			help:  "list the running fleetmq serve processes (a cluster's nodes): host, start, last heartbeat, the control-plane version they enforce, the MQTT sessions they hold",
			run: func(ctx context.Context, svc *control.Service, _ []string, out io.Writer) error {
				nodes, err := svc.Store.Nodes(ctx)
				if err != nil {
					return err
				}
				var sessions map[string]int64
				if sc, ok := svc.Store.(sessionCounter); ok {
					if sessions, err = sc.SessionsPerNode(ctx); err != nil {
						return err
					}
				}
				version, err := svc.Store.Version(ctx)
				if err != nil {
					return err
				}
				now := svc.Now()
				return table(out, "NODE\tHOST\tPID\tSTARTED\tHEARTBEAT\tSTATE\tAPPLIED\tSESSIONS", func(w io.Writer) {
					for _, n := range nodes {
						state := "live"
						switch {
						case !n.Live(now):
							state = "stale"
						case n.Applied < version:
							state = "behind"
						}
						held := "-"
						if c, ok := sessions[n.ID]; ok {
							held = fmt.Sprint(c)
						}
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s ago\t%s\t%d\t%s\n", n.ID, n.Host, n.PID, when(n.Started),
							now.Sub(n.Heartbeat).Round(time.Second), state, n.Applied, held)
					}
				})
			},
		},
	}
}
