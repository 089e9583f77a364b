package app

// Defaults of the HTTP connection bounds: the HTTP listener never takes
// more than this share of the process's file descriptors, whatever its
// clients do, so MQTT keeps the rest.
const (
	DefaultHTTPMaxConns        = 4096
	DefaultHTTPMaxConnsPerAddr = 256
)
