package app

import "testing"

// TestMQTTConnBudget: without -mqtt-max-conns, MQTT listeners share the
// file descriptors HTTP and the reserve leave, so that neither protocol's
// clients can take the other's (20,000 hostile HTTP connections are held
// to HTTP's bound, MQTT keeps its share).
func TestMQTTConnBudget(t *testing.T) {
	for _, c := range []struct {
		limit            uint64
		other, listeners int
		want             int
	}{
		{20000, 4096, 1, 20000 - 4096 - fdReserve},
		{20000, 4096 * 2, 3, (20000 - 8192 - fdReserve) / 3},
		{1024, 4096, 1, minMQTTConns}, // a small limit: still some MQTT
		{0, 4096, 1, 0},               // unknown: no bound
		{20000, 0, 0, 0},              // no MQTT listener
		{1 << 40, 0, 1, 1<<31 - fdReserve},
	} {
		if got := mqttConnBudget(c.limit, c.other, c.listeners); got != c.want {
			t.Errorf("mqttConnBudget(%d, %d, %d) = %d, want %d", c.limit, c.other, c.listeners, got, c.want)
		}
	}
}
