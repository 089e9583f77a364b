package platform

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/lines"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// ReplayScanBudget bounds the history rows one replay examines (a session
// that was away for long, in an account that publishes much): the replay
// stops there with what it found.
const ReplayScanBudget = 200_000

// errReplayFull stops a replay that has found its maximum.
var errReplayFull = errors.New("replay: enough messages")

// ReplaysPerAccount is how many replays of one account run at once on a
// node: when a node dies, its sessions resuming elsewhere replay their
// account's history in a line of their own, beside the other accounts'
// reads of the shared store.
const ReplaysPerAccount = 2

// replayRead bounds one replay's read of history, from when it has its
// place in its account's line (the wait for that place is not bounded:
// a replay that gave up waiting would lose what its session missed).
var replayRead = 20 * time.Second

// Replay is the broker's Options.Replay: a session resumed from another
// node's saved state, or restored from the state file at start, gets the
// QoS 1 and 2 messages of its account in history that one of its filters
// matches, received from that filter's From on, in the order they were
// received. History has every message acknowledged to its publisher, so
// a session that moved, or whose server crashed or was down, misses none
// of them. A call is one read of history, from the earliest From: a
// record only filters starting after it match (a filter subscribed later)
// is skipped, neither given nor counted toward max, so that it cannot
// fill the read ahead of what the session missed. At most
// ReplaysPerAccount replays of an account run at once (the others wait,
// until ctx ends; a call takes one place, whatever its filters' starts),
// each read bounded by replayRead, and the store time they take is
// charged to the account's history reads (slots, when not nil), as its
// REST reads are.
func Replay(h fleetmq.HistoryStore, slots *history.Slots) func(ctx context.Context, id *broker.Identity, filters []broker.ReplayFilter, max int, fn func(*broker.Message)) error {
	replays := &lines.Lines{Per: ReplaysPerAccount}
	return func(ctx context.Context, id *broker.Identity, filters []broker.ReplayFilter, max int, fn func(*broker.Message)) error {
		if len(filters) == 0 {
			return nil
		}
		account := namespaceAccount(id.Namespace)
		release, err := replays.Take(ctx, account)
		if err != nil {
			return fmt.Errorf("waiting for the account's other replays: %w", err)
		}
		defer release()
		ctx, cancel := context.WithTimeout(ctx, replayRead)
		defer cancel()
		h := h
		if slots != nil {
			h = slots.Charged(account, h)
		}
		q := &fleetmq.HistoryQuery{AccountID: account, From: broker.ReplayStart(filters), Ascending: true, ScanBudget: ReplayScanBudget}
		// The filters go to the store as one expression (rows outside it
		// come without their payload), and one client's index serves
		// filters that all name that client.
		var res []string
		client := ""
		for i, f := range filters {
			re, c, err := history.FilterRegex(account, f.Filter)
			if err != nil {
				return err
			}
			res = append(res, "(?:"+re+")")
			if i == 0 || c == client {
				client = c
			} else {
				client = ""
			}
		}
		q.TopicRegex, q.ClientID = strings.Join(res, "|"), client
		n := 0
		err = h.QueryHistory(ctx, q,
			func(r *fleetmq.Record) error {
				if r.QoS == 0 || !broker.ReplayAllows(filters, r.Topic, r.Received) {
					return nil
				}
				fn(replayed(r))
				if n++; n >= max {
					return errReplayFull
				}
				return nil
			})
		if errors.Is(err, errReplayFull) {
			return nil
		}
		return err
	}
}

// replayed is the message a history record was, as the broker delivers
// it (the record is copied: the store reuses it).
func replayed(r *fleetmq.Record) *broker.Message {
	m := &broker.Message{Topic: r.Topic, Payload: append([]byte(nil), r.Payload...), QoS: r.QoS, PublishedQoS: r.PublishedQoS,
		Created: r.Received, Origin: r.AccountID + "\x00" + r.ClientID} // the publisher's session key (No Local)
	p := &m.Properties
	if r.ContentType != "" {
		p.SetString(packet.PropContentType, r.ContentType)
	}
	if r.PayloadFormat != 0 {
		p.SetByte(packet.PropPayloadFormat, r.PayloadFormat)
	}
	for _, u := range r.UserProperties {
		p.User = append(p.User, packet.UserProperty{Key: u.Key, Value: u.Value})
	}
	return m
}
