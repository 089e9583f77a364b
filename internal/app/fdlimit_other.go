//go:build !unix

package app

// fileLimit is unknown here: MQTT listeners get no derived bound.
func fileLimit() uint64 { return 0 }
