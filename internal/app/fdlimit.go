package app

// fdReserve is the file descriptors kept for the process's own use
// whatever its clients do: the store's files and connections, the broker's
// state saves, logs.
const fdReserve = 256

// minMQTTConns is the least connection bound derived for an MQTT listener.
const minMQTTConns = 64

// mqttConnBudget is each MQTT listener's connection bound when none is
// set: the process's file limit, less what the HTTP listeners may hold
// (otherConns) and fdReserve, shared by the MQTT listeners. So MQTT can
// never take the descriptors HTTP and the store need, nor HTTP MQTT's. It
// returns 0 (no bound) when the file limit is unknown.
func mqttConnBudget(fileLimit uint64, otherConns, listeners int) int {
	if fileLimit == 0 || listeners == 0 {
		return 0
	}
	left := int64(min(fileLimit, 1<<31)) - int64(otherConns) - fdReserve
	return max(int(left/int64(listeners)), minMQTTConns)
}
