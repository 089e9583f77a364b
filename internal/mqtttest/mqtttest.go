// Package mqtttest holds the MQTT clients fleetmq's tests talk to a broker
// with: V5 (paho.golang, MQTT 5), V3 (paho.mqtt.golang, MQTT 3.1.1 and 3.1)
// and Raw (fleetmq's own codec over TCP, for tests that need control over
// every packet). Each client is closed when its test ends, delivers what it
// receives into channels, and has helpers that fail the test when an
// expected packet or message does not come within Timeout.
package mqtttest

import (
	"net"
	"testing"
	"time"
)

// Timeout bounds every wait for something a test expects to happen.
const Timeout = 10 * time.Second

// dial opens a TCP connection to addr, closed when the test ends.
func dial(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, Timeout)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	return nc
}
