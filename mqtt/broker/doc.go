// Package broker is fleetmq's MQTT 3.1.1 and 5 broker core (MQTT 3.1 is
// served as 3.1.1 with 3.1's CONNECT rules): listeners (TCP, TLS,
// WebSocket), connections, sessions, QoS 0/1/2 flows in both directions,
// the per-session inflight window and bounded queue, retained messages with a
// maximum age, wills, keep alive, topic aliases and shared subscriptions.
//
// The package knows nothing of tenants. Everything tenant-specific is decided
// by a Policy: who may connect (and in which namespace their session lives),
// which filters they may subscribe to, and how each PUBLISH is treated (refused,
// or accepted with an internal topic, an effective QoS and a retained expiry).
// OpenPolicy allows everything and is what `fleetmq broker` runs.
//
// Data flow of a PUBLISH: the connection's reader goroutine decodes it, asks
// the Policy, hands the Message to Policy.Accepted (which may defer the
// acknowledgement until the message is durable), matches the internal topic
// in the subscription index and appends a reference to each subscriber's
// session queue. A session moves queued messages into its inflight window
// (QoS 1/2) and encodes them into its connection's write buffer, which a
// short-lived writer goroutine flushes. No I/O and no global lock happen on
// that path: the index is sharded by first topic level and each session has
// its own mutex.
package broker
