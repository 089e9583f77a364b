package cluster

import (
	"encoding/binary"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// OwnerStore keeps the claims of a cluster's sessions, each claim made in
// one transaction that returns the claim it replaced (sqlstore.Store is
// one).
type OwnerStore interface {
	ClaimSession(key, node string) (epoch int64, oldNode string, oldEpoch int64, err error)
	ReleaseSession(key string, epoch int64) (bool, error)
	SessionOwner(key string) (node string, epoch int64, err error)
}

// Owners is the broker.SessionOwners of a cluster: the claims are rows of
// the database (OwnerStore), whose epochs order them; a claim that
// replaces another node's tells that node on NATS (a subject per node),
// and the node's Watch hears it and closes the session's connection
// there (MQTT 5: DISCONNECT 0x8E Session taken over).
//
// A notice is sent once: a node that cannot be reached at that moment
// keeps the old connection until it ends by itself (its claim is no
// longer the session's, so its end frees nothing of the new owner's).
type Owners struct {
	store OwnerStore
	nc    *nats.Conn
	log   *slog.Logger
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
	return &Owners{store: store, nc: nc, log: log}, nil
}

// ownersSubject is where a node hears of its claims taken by others.
func ownersSubject(node string) string {
	var b strings.Builder
	b.WriteString("fleetmq.owners.")
	writeToken(&b, node)
	return b.String()
}

// Claim makes node the owner of key and tells the node it replaces.
func (o *Owners) Claim(key, node string) (broker.Claim, error) {
	epoch, oldNode, oldEpoch, err := o.store.ClaimSession(key, node)
	if err != nil {
		return broker.Claim{}, err
	}
	if oldNode != "" && oldNode != node {
		b := binary.AppendUvarint(nil, uint64(oldEpoch))
		if err := o.nc.Publish(ownersSubject(oldNode), append(b, key...)); err != nil {
			o.log.Warn("cluster: the node that had a session could not be told of its takeover", "node", oldNode, "error", err)
		}
	}
	return broker.Claim{Key: key, Node: node, Epoch: uint64(epoch)}, nil
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
		epoch, k := binary.Uvarint(msg.Data)
		if k <= 0 {
			return
		}
		lost(broker.Claim{Key: string(msg.Data[k:]), Node: node, Epoch: epoch})
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
