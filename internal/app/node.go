package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

// The node row: serve writes the control-plane version it has in force and
// a heartbeat to the store, so an operator command that stored a change
// can wait until the change is enforced here before it returns (see
// control.Service.AwaitApplied). The heartbeat is the machine's clock, not
// Config.Now: it says whether the process is alive, not what day it is for
// the tenants.

// startNode writes this process's node row with the version it starts with.
func (a *App) startNode(ctx context.Context, version int64) error {
	host, _ := os.Hostname()
	now := time.Now().UTC()
	id := strings.ToLower(rand.Text()[:12])
	if a.cluster != nil {
		id = a.cluster.ID() // the name its sessions are claimed with
		// A row of this name left by a start that was killed: this start
		// is another process (the row keeps its start time otherwise).
		if err := a.Store.DeleteNode(ctx, id); err != nil {
			return fmt.Errorf("register this node in the store: %w", err)
		}
	}
	a.node = fleetmq.Node{ID: id, Host: host, PID: os.Getpid(),
		Started: now, Heartbeat: now, Applied: version}
	a.authVersion = version
	if err := a.Store.PutNode(ctx, &a.node); err != nil {
		return fmt.Errorf("register this node in the store: %w", err)
	}
	return nil
}

// applied is called by the policy's reload loop after every version check
// with the version in force (sessions it no longer allows are already
// disconnected): the REST token index follows it, then the node row says
// so, at once when the version moved and every fleetmq.NodeHeartbeat
// otherwise. Only the reload loop calls it.
func (a *App) applied(ctx context.Context, version int64) {
	if version != a.authVersion && a.Auth != nil {
		if err := a.Auth.Refresh(ctx); err != nil {
			if ctx.Err() == nil {
				a.cfg.Logger.Error("refresh REST API tokens", "error", err)
			}
			return // not applied yet: the next check tries again
		}
		a.authVersion = version
	}
	now := time.Now().UTC()
	if version == a.node.Applied && now.Sub(a.node.Heartbeat) < fleetmq.NodeHeartbeat {
		return
	}
	n := a.node
	n.Applied, n.Heartbeat = version, now
	if err := a.Store.PutNode(ctx, &n); err != nil {
		if ctx.Err() == nil {
			a.cfg.Logger.Error("write this node's heartbeat", "error", err)
		}
		return
	}
	a.node = n
}

// stopNode removes the node row on a clean shutdown, so operator commands
// say at once that serve is not running.
func (a *App) stopNode(ctx context.Context) error {
	if err := a.Store.DeleteNode(ctx, a.node.ID); err != nil {
		return fmt.Errorf("remove this node from the store: %w", err)
	}
	return nil
}
