package app

import (
	"crypto/tls"
	"flag"
	"fmt"

	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// Listeners configures the MQTT listeners of a broker.
type Listeners struct {
	Listen    string // MQTT over TCP
	TLSListen string // MQTT over TLS
	TLSCert   string
	TLSKey    string
	WSListen  string // MQTT over WebSocket, path /mqtt
}

// Flags registers the listener flags with the given defaults.
func (l *Listeners) Flags(fs *flag.FlagSet, defaultListen string) {
	fs.StringVar(&l.Listen, "listen", defaultListen, "MQTT TCP listen address (empty to disable) [FLEETMQ_MQTT_LISTEN]")
	fs.StringVar(&l.TLSListen, "tls-listen", "", "MQTT over TLS listen address, e.g. :8883 [FLEETMQ_MQTT_TLS_LISTEN]")
	fs.StringVar(&l.TLSCert, "tls-cert", "", "TLS certificate file (PEM) [FLEETMQ_TLS_CERT]")
	fs.StringVar(&l.TLSKey, "tls-key", "", "TLS key file (PEM) [FLEETMQ_TLS_KEY]")
	fs.StringVar(&l.WSListen, "ws-listen", "", "MQTT over WebSocket listen address (path /mqtt), e.g. :8083 [FLEETMQ_MQTT_WS_LISTEN]")
}

// Validate reports a configuration that cannot work.
func (l *Listeners) Validate() error {
	if l.Listen == "" && l.TLSListen == "" && l.WSListen == "" {
		return fmt.Errorf("no listener: set -listen, -tls-listen or -ws-listen")
	}
	if l.TLSListen != "" && (l.TLSCert == "" || l.TLSKey == "") {
		return fmt.Errorf("-tls-listen needs -tls-cert and -tls-key")
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
			return nil, err
		}
		urls = append(urls, "mqtt://"+ln.Addr().String())
	}
	if l.TLSListen != "" {
		cert, err := tls.LoadX509KeyPair(l.TLSCert, l.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load TLS key pair: %w", err)
		}
		ln, err := srv.ListenTLS(l.TLSListen, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		urls = append(urls, "mqtts://"+ln.Addr().String())
	}
	if l.WSListen != "" {
		ln, err := srv.ListenWebSocket(l.WSListen)
		if err != nil {
			return nil, err
		}
		urls = append(urls, "ws://"+ln.Addr().String()+"/mqtt")
	}
	return urls, nil
}
