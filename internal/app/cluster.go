package app

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmq/fleetmq/internal/metrics"
	"github.com/fleetmq/fleetmq/platform"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/cluster"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// ClusterConfig makes serve one node of a cluster: several fleetmq
// processes on one PostgreSQL database and one NATS cluster (see
// docs/cluster.md). It is on when NATSURL or Listen is set.
type ClusterConfig struct {
	// NodeID names the node (in logs, metrics and NATS); default a random
	// name per start.
	NodeID string // default for serve: made at the first start and kept in the data directory (NodeIDFile)
	// NATSURL is an existing NATS cluster's servers; empty: a NATS server
	// embedded in this process, listening for the other nodes' routes on
	// Listen and routed to Routes.
	NATSURL string
	Listen  string
	Routes  string // comma-separated HOST:PORT of other nodes' Listen
	// TLSCert, TLSKey and TLSCA secure the embedded server's routes: each
	// node presents its certificate and requires one signed by TLSCA.
	TLSCert, TLSKey, TLSCA string
	// Secret, when set, is required of every node that opens a route to
	// this one (and presented on the routes this one opens).
	Secret string
}

// On reports whether the process is a node of a cluster.
func (c ClusterConfig) On() bool { return c.NATSURL != "" || c.Listen != "" }

// Flags registers the cluster's flags.
func (c *ClusterConfig) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.NodeID, "node-id", "", "this node's name in a cluster (default for serve: one made at its first start and kept in the data directory; for broker: random at each start) [FLEETMQ_NODE_ID]")
	fs.StringVar(&c.NATSURL, "nats-url", "", "run as a cluster node on this existing NATS cluster, e.g. nats://nats1:4222,nats://nats2:4222 (needs -database) [FLEETMQ_NATS_URL]")
	fs.StringVar(&c.Listen, "cluster-listen", "", "run as a cluster node with NATS embedded, listening for the other nodes' routes on HOST:PORT, e.g. 10.0.0.1:6222 (needs -database) [FLEETMQ_CLUSTER_LISTEN]")
	fs.StringVar(&c.Routes, "cluster-routes", "", "other nodes' -cluster-listen addresses, comma-separated; one reachable node is enough [FLEETMQ_CLUSTER_ROUTES]")
	fs.StringVar(&c.TLSCert, "cluster-tls-cert", "", "certificate (PEM) this node presents on the routes between nodes [FLEETMQ_CLUSTER_TLS_CERT]")
	fs.StringVar(&c.TLSKey, "cluster-tls-key", "", "private key (PEM) of -cluster-tls-cert [FLEETMQ_CLUSTER_TLS_KEY]")
	fs.StringVar(&c.TLSCA, "cluster-tls-ca", "", "certificate authorities (PEM) a node's route certificate must be signed by [FLEETMQ_CLUSTER_TLS_CA]")
	fs.StringVar(&c.Secret, "cluster-secret", "", "a secret all the nodes share: a node that does not present it cannot open a route to this one (set it through the variable, not on the command line) [FLEETMQ_CLUSTER_SECRET]")
}

// Validate checks the cluster's settings against the store's: a node of
// serve's cluster needs PostgreSQL.
func (c ClusterConfig) Validate(database string) error {
	if err := c.ValidateFlags(); err != nil || !c.On() {
		return err
	}
	if !strings.HasPrefix(database, "postgres://") && !strings.HasPrefix(database, "postgresql://") {
		return errors.New("a cluster node needs PostgreSQL: set -database postgres://... (FLEETMQ_DATABASE); SQLite is the store of one process")
	}
	return nil
}

// ValidateFlags checks that the cluster's flags go together.
func (c ClusterConfig) ValidateFlags() error {
	if !c.On() {
		if c.Routes != "" || c.TLSCert != "" || c.TLSKey != "" || c.TLSCA != "" || c.Secret != "" {
			return errors.New("-cluster-routes, -cluster-secret and -cluster-tls-* need -cluster-listen (FLEETMQ_CLUSTER_LISTEN)")
		}
		return nil
	}
	if c.NATSURL != "" && c.Listen != "" {
		return errors.New("-nats-url and -cluster-listen: one or the other (an existing NATS, or NATS embedded in each node)")
	}
	if c.NATSURL != "" && (c.Routes != "" || c.TLSCert != "" || c.Secret != "") {
		return errors.New("-cluster-routes, -cluster-secret and -cluster-tls-* are for the embedded NATS (-cluster-listen), not for -nats-url")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") || (c.TLSCert != "" && c.TLSCA == "") {
		return errors.New("-cluster-tls-cert, -cluster-tls-key and -cluster-tls-ca go together")
	}
	return nil
}

// ClusterNode is what a cluster node runs beside its broker.
type ClusterNode struct {
	id       string
	nats     *cluster.NATS
	router   *cluster.Router
	retained *cluster.Retained
	owners   *cluster.Owners // nil for bare brokers
	rates    *cluster.Rates  // nil for bare brokers
}

// ClusterStore is what a cluster keeps in the database beside the
// platform's data: retained messages and the sessions' claims
// (sqlstore.Store is one).
type ClusterStore interface {
	fleetmq.RetainedStore
	cluster.OwnerStore
}

// StartCluster starts the embedded NATS (or connects to the operator's)
// and the router, and sets them in the broker's options. The broker made
// with them must be given to Attach before it takes connections.
//
// store keeps the cluster's retained messages and session claims (nil:
// bare brokers, which exchange retained messages only while they run and
// keep their sessions each to itself).
func StartCluster(ctx context.Context, c ClusterConfig, opts *broker.Options, store ClusterStore, now time.Time, log *slog.Logger) (*ClusterNode, error) {
	n := &ClusterNode{id: c.NodeID}
	if n.id == "" {
		n.id = "node-" + strings.ToLower(rand.Text()[:8])
	}
	no := cluster.NATSOptions{URL: c.NATSURL, Name: n.id, ClusterListen: c.Listen, Logger: log, RouteSecret: c.Secret,
		MaxPayload: int32(max(opts.MaxPacketSize, broker.DefaultMaxPacketSize)) + 64<<10}
	for r := range strings.SplitSeq(c.Routes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			no.Routes = append(no.Routes, r)
		}
	}
	if c.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCert, KeyFile: c.TLSKey, CaFile: c.TLSCA, Verify: true})
		if err != nil {
			return nil, fmt.Errorf("cluster TLS: %w", err)
		}
		// The authority checks both ends: the routes this node opens
		// too, not only those it accepts.
		tc.RootCAs = tc.ClientCAs
		no.RouteTLS = tc
	}
	var err error
	if n.nats, err = cluster.StartNATS(no); err != nil {
		return nil, err
	}
	if n.router, err = cluster.NewRouter(n.nats, n.id, log); err != nil {
		n.nats.Close()
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	var rs fleetmq.RetainedStore
	if store != nil {
		rs = store
	}
	if n.retained, err = cluster.NewRetained(ctx, n.nats, n.id, rs, now, log); err != nil {
		n.router.Close()
		n.nats.Close()
		return nil, fmt.Errorf("load the cluster's retained messages: %w", err)
	}
	opts.Router, opts.Node, opts.Retained = n.router, n.id, n.retained
	if store != nil {
		if n.owners, err = cluster.NewOwners(n.nats, n.id, store, log); err != nil {
			n.Close()
			return nil, fmt.Errorf("connect to NATS: %w", err)
		}
		n.owners.Tenant = platform.SessionAccount // claims line up by account
		opts.Owners, opts.States = n.owners, n.owners
	}
	return n, nil
}

// Attach gives the router the broker it delivers other nodes' messages to.
func (n *ClusterNode) Attach(s *broker.Server) { n.router.Attach(s) }

// ID is the node's name.
func (n *ClusterNode) ID() string { return n.id }

// RouteAddr is the embedded NATS's route listener ("" with -nats-url).
func (n *ClusterNode) RouteAddr() string { return n.nats.ClusterAddr() }

// ShareRates splits the accounts' plan publish rates with the other
// nodes (cluster.Rates), so that an account gets its plan's rate in the
// whole cluster.
func (n *ClusterNode) ShareRates(src cluster.RateSource, log *slog.Logger) error {
	r, err := cluster.StartRates(n.nats, n.id, src, log)
	if err != nil {
		return fmt.Errorf("share the accounts' publish rates: %w", err)
	}
	n.rates = r
	return nil
}

// Close stops the router, then the embedded NATS.
func (n *ClusterNode) Close() {
	if n == nil {
		return
	}
	if n.rates != nil {
		n.rates.Close()
	}
	n.router.Close()
	n.retained.Close()
	if n.owners != nil {
		n.owners.Close()
	}
	n.nats.Close()
}

// ClusterStats is a node's view of the cluster, for metrics and readiness.
type ClusterStats struct {
	Sent, SendErrors, Received, Duplicates, SharedReceived, Malformed int64
	Interest                                                          int64 // filters of interest held on NATS
	RetainedReceived, RetainedUnstored                                int64
	SharedRerouted, SharedLost                                        int64 // shared-subscription messages handed back to their group; dropped after going round
	Dropped                                                           int64 // live copies NATS dropped: the node fell behind
	Routes                                                            int   // embedded NATS routes to other nodes, -1 with -nats-url
	Connected                                                         bool  // the node's NATS connections are up
}

// Stats reads the node's counters.
func (n *ClusterNode) Stats() ClusterStats {
	rs := n.router.Stats()
	s := ClusterStats{Sent: rs.Sent.Load(), SendErrors: rs.SendErrors.Load(), Received: rs.Received.Load(),
		Duplicates: rs.Duplicates.Load(), SharedReceived: rs.SharedReceived.Load(),
		SharedRerouted: rs.SharedRerouted.Load(), SharedLost: rs.SharedLost.Load(), Malformed: rs.Malformed.Load() + n.retained.Malformed.Load(),
		Interest: rs.Interest.Load(), RetainedReceived: n.retained.Received.Load(), RetainedUnstored: n.retained.Unstored.Load(),
		Routes: n.nats.Routes(), Connected: n.router.Connected(), Dropped: n.router.Dropped()}
	if n.owners != nil {
		s.Malformed += n.owners.Malformed.Load()
	}
	return s
}

// RegisterCluster exposes a node's cluster traffic.
func RegisterCluster(reg prometheus.Registerer, n *ClusterNode) {
	one := func(name, help string, kind prometheus.ValueType, f func(ClusterStats) int64) metrics.Family[ClusterStats] {
		return metrics.Value(name, help, kind, func(s ClusterStats) float64 { return float64(f(s)) })
	}
	reg.MustRegister(metrics.NewSnapshot(n.Stats,
		one("fleetmq_cluster_messages_sent_total", "Messages accepted here and published to the other nodes.", metrics.Counter, func(s ClusterStats) int64 { return s.Sent }),
		one("fleetmq_cluster_send_errors_total", "Messages NATS refused to take to the other nodes.", metrics.Counter, func(s ClusterStats) int64 { return s.SendErrors }),
		one("fleetmq_cluster_messages_received_total", "Messages from other nodes delivered to this node's subscribers.", metrics.Counter, func(s ClusterStats) int64 { return s.Received }),
		one("fleetmq_cluster_duplicates_total", "Copies of a message from another node already delivered (it matched several of this node's filters).", metrics.Counter, func(s ClusterStats) int64 { return s.Duplicates }),
		one("fleetmq_cluster_shared_received_total", "Messages this node's queue groups took for its shared subscriptions.", metrics.Counter, func(s ClusterStats) int64 { return s.SharedReceived }),
		one("fleetmq_cluster_shared_rerouted_total", "Shared-subscription messages this node had no member for any more (its last one had just left) and handed back to their group.", metrics.Counter, func(s ClusterStats) int64 { return s.SharedRerouted }),
		one("fleetmq_cluster_shared_lost_total", "Shared-subscription messages dropped after going round their group without finding a member.", metrics.Counter, func(s ClusterStats) int64 { return s.SharedLost }),
		one("fleetmq_cluster_dropped_total", "Messages from other nodes NATS dropped because this node fell behind (live copies; history has every message).", metrics.Counter, func(s ClusterStats) int64 { return s.Dropped }),
		one("fleetmq_cluster_malformed_total", "Messages between nodes that did not decode.", metrics.Counter, func(s ClusterStats) int64 { return s.Malformed }),
		one("fleetmq_cluster_interest_filters", "Filters of this node's sessions held as interest on NATS.", metrics.Gauge, func(s ClusterStats) int64 { return s.Interest }),
		one("fleetmq_cluster_retained_received_total", "Retained messages set here from other nodes.", metrics.Counter, func(s ClusterStats) int64 { return s.RetainedReceived }),
		one("fleetmq_cluster_retained_unstored_total", "Retained messages the database did not take after retries (dropped from the store; the other nodes have them).", metrics.Counter, func(s ClusterStats) int64 { return s.RetainedUnstored }),
		one("fleetmq_cluster_routes", "NATS routes from this node's embedded server to other nodes (-1: an external NATS).", metrics.Gauge, func(s ClusterStats) int64 { return int64(s.Routes) }),
	))
}

// ready reports why the node cannot serve its part of the cluster: its
// NATS connections are down, or its embedded server has no route while
// the database lists other live nodes (it is cut off from them: messages
// would not cross).
func (n *ClusterNode) ready(ctx context.Context, nodes fleetmq.NodeStore, now time.Time) error {
	st := n.Stats()
	if !st.Connected {
		return errors.New("cluster: not connected to NATS")
	}
	if st.Routes != 0 {
		return nil
	}
	all, err := nodes.Nodes(ctx)
	if err != nil {
		return err
	}
	others := 0
	for _, x := range all {
		if x.ID != n.id && x.Live(now) {
			others++
		}
	}
	if others > 0 {
		return fmt.Errorf("cluster: no NATS route to the other %d live nodes", others)
	}
	return nil
}

// NodeIDFile keeps, in the data directory, the name a cluster node got
// at its first start when -node-id was not given: the node keeps it, and
// with it the sessions it claimed, across restarts.
const NodeIDFile = "node-id"

// dataDirNodeID returns the node name kept in dir, made and kept there at
// the first start.
func dataDirNodeID(dir string) (string, error) {
	path := filepath.Join(dir, NodeIDFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := "node-" + strings.ToLower(rand.Text()[:8])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", err
	}
	return id, nil
}
