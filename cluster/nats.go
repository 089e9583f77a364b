package cluster

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSOptions says which NATS a node uses: an existing one (URL), or a
// server embedded in the node and routed to the other nodes' (the rest).
type NATSOptions struct {
	// URL is an existing NATS cluster's servers, comma-separated
	// (nats://host:4222,...); empty for the embedded server.
	URL string
	// Name names this node to NATS (the embedded server's name, the
	// connections' name).
	Name string
	// ClusterListen is the embedded server's route listener, HOST:PORT
	// (port 0: any free port, see NATS.ClusterAddr).
	ClusterListen string
	// Routes are the other nodes' route listeners, HOST:PORT or
	// nats-route://HOST:PORT. A node needs one it can reach; NATS tells
	// it of the others.
	Routes []string
	// RouteTLS, when set, is the TLS of the routes, both ways: the server
	// presents its certificate and requires the other node's, signed by
	// the configured authorities.
	RouteTLS *tls.Config
	// RouteSecret, when set, is a secret every node of the cluster shares:
	// a route is accepted only from a node that presents it.
	RouteSecret string
	// MaxPayload bounds one message between the nodes (bytes); it must
	// hold the largest MQTT message accepted plus its envelope.
	MaxPayload int32
	Logger     *slog.Logger
}

// NATS is the NATS a node uses.
type NATS struct {
	opts   NATSOptions
	server *server.Server // nil when the NATS is the operator's
	token  string         // the embedded server's client token
}

// ClusterName is the name of the NATS cluster the embedded servers form.
const ClusterName = "fleetmq"

// routeUser is the user a node presents with the shared route secret.
const routeUser = "fleetmq"

// StartNATS starts the embedded server (when no URL is given) and waits
// until it takes connections.
func StartNATS(o NATSOptions) (*NATS, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	n := &NATS{opts: o}
	if o.URL != "" {
		return n, nil
	}
	host, port, err := splitHostPort(o.ClusterListen)
	if err != nil {
		return nil, fmt.Errorf("cluster listen address %q: %w", o.ClusterListen, err)
	}
	var routes []string
	for _, r := range o.Routes {
		if !strings.Contains(r, "://") {
			r = "nats-route://" + r
		}
		if o.RouteSecret != "" {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("cluster route %q: %w", r, err)
			}
			u.User = url.UserPassword(routeUser, o.RouteSecret)
			r = u.String()
		}
		routes = append(routes, r)
	}
	sopts := &server.Options{
		ServerName: o.Name,
		// The node's own connections are in-process; the client listener
		// (any free port on loopback) is there because the server starts
		// its routes only once it has one. It takes a token made at
		// start that only this process knows: another local process
		// could otherwise read and write every tenant's messages.
		Host:          "127.0.0.1",
		Port:          server.RANDOM_PORT,
		Authorization: rand.Text(),
		NoSigs:        true,
		MaxPayload:    o.MaxPayload,
		// A subject is a topic's levels: MQTT allows topics far longer
		// than NATS's default control line (4 KiB).
		MaxControlLine: 80 << 10,
		Cluster: server.ClusterOpts{
			Name:           ClusterName,
			Host:           host,
			Port:           port,
			TLSConfig:      o.RouteTLS,
			TLSTimeout:     5,
			ConnectRetries: -1,   // a route to a node that is down is tried again for good,
			ConnectBackoff: true, // less and less often (up to every 30 s)
		},
	}
	if len(routes) > 0 {
		sopts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
	}
	if port == 0 {
		sopts.Cluster.Port = server.RANDOM_PORT
	}
	if o.RouteSecret != "" {
		sopts.Cluster.Username, sopts.Cluster.Password = routeUser, o.RouteSecret
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	s.SetLoggerV2(natsLogger{o.Logger.With("component", "nats")}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded NATS: not ready within 10 s (is the cluster listen address free?)")
	}
	n.server, n.token = s, sopts.Authorization
	return n, nil
}

// ClusterAddr is the embedded server's route listener, empty when the
// NATS is the operator's.
func (n *NATS) ClusterAddr() string {
	if n.server == nil {
		return ""
	}
	if a := n.server.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Routes is how many other nodes' servers the embedded server is routed
// to (a node counts once, whatever the connections of its route pool);
// -1 when the NATS is the operator's.
func (n *NATS) Routes() int {
	if n.server == nil {
		return -1
	}
	return n.server.NumRemotes()
}

// Connect opens a connection to the NATS: in-process to the embedded
// server, else to the operator's, reconnecting for good.
func (n *NATS) Connect(purpose string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{
		nats.Name("fleetmq " + n.opts.Name + " " + purpose),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}, extra...)
	if n.server != nil {
		opts = append(opts, nats.InProcessServer(n.server), nats.Token(n.token))
		return nats.Connect("", opts...)
	}
	return nats.Connect(n.opts.URL, opts...)
}

// Close stops the embedded server.
func (n *NATS) Close() {
	if n.server != nil {
		n.server.Shutdown()
		n.server.WaitForShutdown()
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q", p)
	}
	return host, port, nil
}

// natsLogger hands the embedded server's log lines to slog.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) Noticef(f string, v ...any) { n.l.Debug(fmt.Sprintf(f, v...)) }
func (n natsLogger) Warnf(f string, v ...any)   { n.l.Warn(fmt.Sprintf(f, v...)) }
func (n natsLogger) Fatalf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n natsLogger) Errorf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n natsLogger) Debugf(f string, v ...any)  { n.l.Debug(fmt.Sprintf(f, v...)) }
func (n natsLogger) Tracef(f string, v ...any)  {}
