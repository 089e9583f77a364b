package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmq/fleetmq/internal/lines"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// OwnerStore keeps the claims of a cluster's sessions, each claim made in
// one transaction that returns the claim it replaced (sqlstore.Store is
// one).
type OwnerStore interface {
	ClaimSession(key, node string, fresh bool) (epoch int64, oldNode string, oldEpoch int64, err error)
	ReleaseSession(key string, epoch int64) (bool, error)
	SessionOwner(key string) (node string, epoch int64, err error)
	SaveSessionState(key, node string, epoch int64, state []byte) error
	SessionRound(node string, at time.Time) error
	TakeSessionState(key string, epoch int64) (state []byte, through time.Time, ok bool, err error)
}

// handOffWait bounds how long a claim that resumes a session waits for
// the node that had it to save the session's state. A node that is gone
// answers at once (NATS has no one on its subject); one that does not
// answer in time leaves the state it saved last.
const handOffWait = 800 * time.Millisecond

// maxHandOffs bounds the takeover notices a node handles at once (each
// saves a session's state in the database).
const maxHandOffs = 64

// Owners is the broker.SessionOwners and broker.SessionStates of a
// cluster: the claims are rows of the database (OwnerStore), whose epochs
// order them, and the sessions' states are kept in the same rows. A claim
// that replaces another node's tells that node on NATS (a subject per
// node); the node's Watch hears it, closes the session's connection there
// (MQTT 5: DISCONNECT 0x8E Session taken over), saves the session's state
// and answers; a claim that resumes the session (not fresh) waits for
// that answer (handOffWait) before it returns, so the new node reads the
// state the old one left.
//
// A notice is sent once: a node that cannot be reached at that moment
// keeps the old connection until it ends by itself (its claim is no
// longer the session's, so its end frees nothing of the new owner's, and
// it can no longer save the session's state).
type Owners struct {
	store    OwnerStore
	nc       *nats.Conn
	log      *slog.Logger
	handOffs chan struct{} // a token per notice being handled
	tenants  lines.Lines   // claims under way per tenant (claimsPerTenant each)
	// Tenant names the tenant of a session key, whose claims wait in a
	// line of their own (the platform's: the account; default: the
	// key's namespace).
	Tenant func(key string) string
	// Malformed counts the notices heard that did not decode (a layout
	// version this node does not read among them).
	Malformed atomic.Int64
}

// noticeVersion is the layout of a notice of a session taken over: this
// version (a byte), whether the claim is fresh (a byte, 0 or 1), the
// replaced claim's epoch (a uvarint), then the session's key.
const noticeVersion = 1

// appendNotice appends the notice of key's claim of epoch replaced to b.
func appendNotice(b []byte, key string, epoch uint64, fresh bool) []byte {
	flag := byte(0)
	if fresh {
		flag = 1
	}
	b = append(b, noticeVersion, flag)
	b = binary.AppendUvarint(b, epoch)
	return append(b, key...)
}

// decodeNotice reads what appendNotice wrote.
func decodeNotice(b []byte) (key string, epoch uint64, fresh, ok bool) {
	if len(b) < 3 || b[0] != noticeVersion || b[1] > 1 {
		return "", 0, false, false
	}
	epoch, k := binary.Uvarint(b[2:])
	if k <= 0 {
		return "", 0, false, false
	}
	return string(b[2+k:]), epoch, b[1] == 1, true
}

// NewOwners connects a node's session claims to the NATS for notices.
func NewOwners(n *NATS, node string, store OwnerStore, log *slog.Logger) (*Owners, error) {
	if log == nil {
		log = slog.Default()
	}
	nc, err := n.Connect("session owners")
	if err != nil {
		return nil, err
	}
	return &Owners{store: store, nc: nc, log: log, handOffs: make(chan struct{}, maxHandOffs), tenants: lines.Lines{Per: claimsPerTenant}}, nil
}

// ownersSubject is where a node hears of its claims taken by others.
func ownersSubject(node string) string {
	var b strings.Builder
	b.WriteString("fleetmq.owners.")
	writeToken(&b, node)
	return b.String()
}

// Claim makes node the owner of key and tells the node it replaces; a
// claim that is not fresh waits for that node's hand-over.
func (o *Owners) Claim(key, node string, fresh bool) (broker.Claim, error) {
	ctx, cancel := context.WithTimeout(context.Background(), claimWait)
	release, err := o.tenants.Take(ctx, o.tenant(key))
	cancel()
	if err != nil {
		return broker.Claim{}, fmt.Errorf("waiting for the account's other claims: %w", err)
	}
	epoch, oldNode, oldEpoch, err := o.store.ClaimSession(key, node, fresh)
	release()
	if err != nil {
		return broker.Claim{}, err
	}
	c := broker.Claim{Key: key, Node: node, Epoch: uint64(epoch), From: oldNode}
	if oldNode == "" || oldNode == node {
		return c, nil
	}
	notice := appendNotice(nil, key, uint64(oldEpoch), fresh)
	subject := ownersSubject(oldNode)
	if fresh {
		err = o.nc.Publish(subject, notice)
	} else if _, err = o.nc.Request(subject, notice, handOffWait); errors.Is(err, nats.ErrNoResponders) {
		err = nil // the node is gone: the state it saved last is there
	}
	if err != nil {
		o.log.Warn("cluster: the node that had a session could not be told of its takeover", "node", oldNode, "error", err)
	}
	return c, nil
}

// Save stores the state of the session c holds (broker.SessionStates).
func (o *Owners) Save(c broker.Claim, state []byte) error {
	return o.store.SaveSessionState(c.Key, c.Node, int64(c.Epoch), state)
}

// Round records a node's round of saves.
func (o *Owners) Round(node string, at time.Time) error { return o.store.SessionRound(node, at) }

// Take returns the state left for c's session and makes it c's.
func (o *Owners) Take(c broker.Claim) ([]byte, time.Time, bool, error) {
	return o.store.TakeSessionState(c.Key, int64(c.Epoch))
}

// Release removes c when it still holds its key.
func (o *Owners) Release(c broker.Claim) (bool, error) {
	return o.store.ReleaseSession(c.Key, int64(c.Epoch))
}

// Owner returns the claim holding key.
func (o *Owners) Owner(key string) (broker.Claim, bool, error) {
	node, epoch, err := o.store.SessionOwner(key)
	if err != nil || node == "" {
		return broker.Claim{}, false, err
	}
	return broker.Claim{Key: key, Node: node, Epoch: uint64(epoch)}, true, nil
}

// Watch calls lost with each of node's claims another node replaced.
func (o *Owners) Watch(node string, lost func(old broker.Claim)) (stop func()) {
	sub, err := o.nc.Subscribe(ownersSubject(node), func(msg *nats.Msg) {
		key, epoch, fresh, ok := decodeNotice(msg.Data)
		if !ok {
			// Not answered: a claim that waits goes on after
			// handOffWait, as when this node cannot be reached.
			if n := o.Malformed.Add(1); n&(n-1) == 0 { // 1st, 2nd, 4th, 8th...
				o.log.Warn("cluster: a notice of a session taken over did not decode (another release's layout?)", "bytes", len(msg.Data))
			}
			return
		}
		old := broker.Claim{Key: key, Node: node, Epoch: epoch, Fresh: fresh}
		// lost saves the session's state: notices are handled side by
		// side (up to maxHandOffs), each answered once it returned.
		o.handOffs <- struct{}{}
		go func() {
			defer func() { <-o.handOffs }()
			lost(old)
			if msg.Reply != "" {
				msg.Respond(nil)
			}
		}()
	})
	if err != nil {
		o.log.Error("cluster: cannot hear of this node's sessions taken over by others", "error", err)
		return func() {}
	}
	o.nc.Flush()
	return func() { sub.Unsubscribe() }
}

// Close closes the notices' connection.
func (o *Owners) Close() { o.nc.Close() }

// claimWait bounds a CONNECT's wait for its account's line of claims
// (refused with Server unavailable past it: the client tries again).
const claimWait = 10 * time.Second

// claimsPerTenant bounds the claims one tenant has under way on a node at
// once: a reconnect storm of one account's devices (its node died) takes
// at most this many of the database connections the claims share with
// every other account's CONNECTs, whose claims pass beside it.
const claimsPerTenant = 2

// tenant is the tenant of a session key (Tenant, or its namespace).
func (o *Owners) tenant(key string) string {
	if o.Tenant != nil {
		return o.Tenant(key)
	}
	ns, _, _ := strings.Cut(key, "\x00")
	return ns
}
