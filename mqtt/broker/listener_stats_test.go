package broker_test

import (
	"crypto/tls"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// TestConnectionsByListener: Stats counts open connections by the listener
// they came through, and a connection that ends leaves its listener's
// count.
func TestConnectionsByListener(t *testing.T) {
	if got := broker.ListenerNames(); len(got) != 3 || got[0] != "tcp" || got[1] != "tls" || got[2] != "websocket" {
		t.Fatalf("ListenerNames() = %v", got)
	}
	cert, pool := testkit.SelfSigned(t)
	b := startBroker(t, broker.Options{})
	tlsLn, err := b.ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	wsLn, err := b.ListenWebSocket("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp1 := mqtttest.DialV5(t, b.Addr, mqtttest.Clean("tcp-1"))
	mqtttest.DialV5(t, b.Addr, mqtttest.Clean("tcp-2"))
	tc, err := tls.Dial("tcp", tlsLn.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	mqtttest.DialV5Over(t, tc, mqtttest.Clean("tls-1"))
	ws := mqtttest.DialV5Over(t, hdDialWS(t, wsURL(wsLn.Addr().String()), "mqtt"), mqtttest.Clean("ws-1"))

	if st := b.Stats(); st.ConnectionsBy != [3]int64{2, 1, 1} || st.Connections != 4 {
		t.Fatalf("by listener %v of %d, want [2 1 1] of 4", st.ConnectionsBy, st.Connections)
	}
	ws.Disconnect(&paho.Disconnect{})
	tcp1.Disconnect(&paho.Disconnect{})
	eventually(t, "the WebSocket and one TCP connection to end", func() bool {
		st := b.Stats()
		return st.ConnectionsBy == [3]int64{1, 1, 0} && st.Connections == 2
	})
}
