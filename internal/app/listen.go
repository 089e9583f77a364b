package app

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// Listeners configures the MQTT listeners of a broker.
type Listeners struct {
	Listen    string // MQTT over TCP
	TLSListen string // MQTT over TLS
	TLSCert   string
	TLSKey    string
	WSListen  string // MQTT over WebSocket, path /mqtt
	// MaxConns and MaxConnsPerAddr bound each MQTT listener's open
	// connections, in all and from one IP address (0: no bound).
	MaxConns, MaxConnsPerAddr int
	// MaxConnRatePerAddr bounds new MQTT connections per second from one
	// IP address (0: no bound).
	MaxConnRatePerAddr float64
	// MaxKeepAlive caps clients' keep alive, in seconds (0: no cap; see
	// broker.Options.MaxKeepAlive).
	MaxKeepAlive uint16
	// AllowControlChars is broker.Options.AllowControlChars.
	AllowControlChars bool
	// ProxyFrom is broker.Options.ProxyFrom: the load balancers whose
	// connections open with a PROXY protocol header.
	ProxyFrom []netip.Prefix
}

// Limit puts the listeners' connection bounds into broker options. With
// no MaxConns set, each MQTT listener gets a share of the process's file
// descriptors: the file limit less otherConns (what the process's HTTP
// listeners may hold) and a reserve for the store and the state file.
func (l *Listeners) Limit(o *broker.Options, otherConns int) {
	o.MaxConns, o.MaxConnsPerAddr, o.MaxConnRatePerAddr = l.MaxConns, l.MaxConnsPerAddr, l.MaxConnRatePerAddr
	o.MaxKeepAlive, o.AllowControlChars = l.MaxKeepAlive, l.AllowControlChars
	o.ProxyFrom = l.ProxyFrom
	if o.MaxConns == 0 {
		n := 0
		for _, addr := range []string{l.Listen, l.TLSListen, l.WSListen} {
			if addr != "" {
				n++
			}
		}
		o.MaxConns = mqttConnBudget(fileLimit(), otherConns, n)
	}
}

// Flags registers the listener flags with the given defaults.
func (l *Listeners) Flags(fs *flag.FlagSet, defaultListen string) {
	fs.StringVar(&l.Listen, "listen", defaultListen, "MQTT TCP listen address (empty to disable) [FLEETMQ_MQTT_LISTEN]")
	fs.StringVar(&l.TLSListen, "tls-listen", "", "MQTT over TLS listen address, e.g. :8883 [FLEETMQ_MQTT_TLS_LISTEN]")
	fs.StringVar(&l.TLSCert, "tls-cert", "", "TLS certificate file (PEM) [FLEETMQ_TLS_CERT]")
	fs.StringVar(&l.TLSKey, "tls-key", "", "TLS key file (PEM) [FLEETMQ_TLS_KEY]")
	fs.StringVar(&l.WSListen, "ws-listen", "", "MQTT over WebSocket listen address (path /mqtt), e.g. :8083 [FLEETMQ_MQTT_WS_LISTEN]")
	fs.IntVar(&l.MaxConns, "mqtt-max-conns", 0, "most connections each MQTT listener keeps open; more are closed at accept (0: a share of the process's file limit, less what HTTP may hold and a reserve) [FLEETMQ_MQTT_MAX_CONNS]")
	fs.Float64Var(&l.MaxConnRatePerAddr, "mqtt-max-conn-rate-per-addr", 0, "most new MQTT connections per second from one IP address per listener, in bursts of twice as many (0: no bound) [FLEETMQ_MQTT_MAX_CONN_RATE_PER_ADDR]")
	fs.BoolVar(&l.AllowControlChars, "allow-control-chars", false, "accept the control characters U+0001-U+001F and U+007F-U+009F in client ids, user names and topics (refused by default, as the MQTT specifications allow) [FLEETMQ_ALLOW_CONTROL_CHARS]")
	fs.Var((*keepAliveFlag)(&l.MaxKeepAlive), "max-keepalive", "most seconds of keep alive a client may use (1-65535; 0: no cap): MQTT 5 clients asking for more, or for none, are told this value (Server Keep Alive), MQTT 3.1.1 clients are refused (CONNACK 0x02) [FLEETMQ_MAX_KEEPALIVE]")
	fs.Var((*prefixesFlag)(&l.ProxyFrom), "proxy-protocol-from", "addresses or CIDR ranges of the load balancers in front of the MQTT listeners that send the PROXY protocol (version 1 or 2), comma-separated: their connections must open with it, and the client's address it carries is the one seen; other connections are served as they are (empty: no PROXY protocol) [FLEETMQ_PROXY_PROTOCOL_FROM]")
	fs.IntVar(&l.MaxConnsPerAddr, "mqtt-max-conns-per-addr", 0, "most MQTT connections open from one IP address per listener (0: no bound; devices behind one NAT share an address) [FLEETMQ_MQTT_MAX_CONNS_PER_ADDR]")
}

// The listener flags' environment variables, as cmd/fleetmq's help texts
// name them (a test there checks): an error about a listener names both,
// since either may have set the address.
var listenEnv = map[string]string{
	"-listen":         "FLEETMQ_MQTT_LISTEN",
	"-tls-listen":     "FLEETMQ_MQTT_TLS_LISTEN",
	"-tls-cert":       "FLEETMQ_TLS_CERT",
	"-tls-key":        "FLEETMQ_TLS_KEY",
	"-ws-listen":      "FLEETMQ_MQTT_WS_LISTEN",
	"-http-listen":    "FLEETMQ_HTTP_LISTEN",
	"-metrics-listen": "FLEETMQ_METRICS_LISTEN",
}

// setting names a flag with its variable: "-tls-cert (FLEETMQ_TLS_CERT)".
func setting(flag string) string { return flag + " (" + listenEnv[flag] + ")" }

// ListenError is the error of a listener that could not be opened,
// naming the flag, the address and the variable, then the system's
// reason: "-listen 127.0.0.1:1883 (FLEETMQ_MQTT_LISTEN): address already
// in use". errors.Is still finds the cause (syscall.EADDRINUSE).
func ListenError(flag, addr string, err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		err = op.Err // drop "listen tcp ADDR:", the flag says it
	}
	var sc *os.SyscallError
	if errors.As(err, &sc) {
		err = sc.Err // drop "bind:"
	}
	return fmt.Errorf("%s %s (%s): %w", flag, addr, listenEnv[flag], err)
}

// Validate reports a configuration that cannot work, or that would
// silently not do what it says: TLS files without a TLS listener, or a
// TLS listener without both.
func (l *Listeners) Validate() error {
	switch {
	case l.TLSListen == "" && l.TLSCert != "" && l.TLSKey != "":
		return fmt.Errorf("%s and %s are set but %s is not: set it (e.g. :8883) to serve MQTT over TLS, or unset them",
			setting("-tls-cert"), setting("-tls-key"), setting("-tls-listen"))
	case l.TLSListen == "" && (l.TLSCert != "" || l.TLSKey != ""):
		given := "-tls-cert"
		if l.TLSKey != "" {
			given = "-tls-key"
		}
		return fmt.Errorf("%s is set but %s is not: set it (e.g. :8883) with both -tls-cert and -tls-key to serve MQTT over TLS, or unset %s",
			setting(given), setting("-tls-listen"), given)
	case l.TLSListen != "" && l.TLSCert == "" && l.TLSKey == "":
		return fmt.Errorf("-tls-listen %s (%s) needs %s and %s (PEM files): both are missing",
			l.TLSListen, listenEnv["-tls-listen"], setting("-tls-cert"), setting("-tls-key"))
	case l.TLSListen != "" && (l.TLSCert == "" || l.TLSKey == ""):
		missing := "-tls-cert"
		if l.TLSKey == "" {
			missing = "-tls-key"
		}
		return fmt.Errorf("-tls-listen %s (%s) needs %s and %s (PEM files): %s is missing",
			l.TLSListen, listenEnv["-tls-listen"], setting("-tls-cert"), setting("-tls-key"), missing)
	case l.Listen == "" && l.TLSListen == "" && l.WSListen == "":
		return fmt.Errorf("no listener: set -listen, -tls-listen or -ws-listen")
	}
	return nil
}

// Open opens every configured listener on srv and returns their URLs. On
// error the listeners already opened stay with srv (Close closes them).
func (l *Listeners) Open(srv *broker.Server) ([]string, error) {
	var urls []string
	if l.Listen != "" {
		ln, err := srv.ListenTCP(l.Listen)
		if err != nil {
			return nil, ListenError("-listen", l.Listen, err)
		}
		urls = append(urls, "mqtt://"+ln.Addr().String())
	}
	if l.TLSListen != "" {
		cert, err := tls.LoadX509KeyPair(l.TLSCert, l.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert %s, -tls-key %s: %w", l.TLSCert, l.TLSKey, err)
		}
		ln, err := srv.ListenTLS(l.TLSListen, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, ListenError("-tls-listen", l.TLSListen, err)
		}
		urls = append(urls, "mqtts://"+ln.Addr().String())
	}
	if l.WSListen != "" {
		ln, err := srv.ListenWebSocket(l.WSListen)
		if err != nil {
			return nil, ListenError("-ws-listen", l.WSListen, err)
		}
		urls = append(urls, "ws://"+ln.Addr().String()+"/mqtt")
	}
	return urls, nil
}

// prefixesFlag is a comma-separated list of IP addresses and CIDR ranges.
type prefixesFlag []netip.Prefix

func (p *prefixesFlag) String() string {
	var parts []string
	for _, x := range *p {
		parts = append(parts, x.String())
	}
	return strings.Join(parts, ",")
}

func (p *prefixesFlag) Set(v string) error {
	*p = nil
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if pre, err := netip.ParsePrefix(part); err == nil {
			*p = append(*p, pre.Masked())
			continue
		}
		ip, err := netip.ParseAddr(part)
		if err != nil {
			return fmt.Errorf("%q is neither an IP address nor a CIDR range (10.0.0.5, 10.0.0.0/24)", part)
		}
		*p = append(*p, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	}
	return nil
}

// keepAliveFlag is a keep alive in whole seconds, 0 to 65535.
type keepAliveFlag uint16

func (k *keepAliveFlag) String() string { return strconv.Itoa(int(*k)) }

func (k *keepAliveFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil {
		return fmt.Errorf("want whole seconds from 0 (no cap) to 65535")
	}
	*k = keepAliveFlag(n)
	return nil
}
