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
// The steps of a PUBLISH, in the order the code runs them (publish.go):
//
//  1. The connection's reader goroutine decodes the packet and applies the
//     topic alias; the topic name is checked, the client's maximum QoS and
//     (QoS 1/2) the Receive Maximum the server gave it (inbound.go).
//  2. A QoS 2 packet id the session already holds is a copy: it is answered
//     PUBREC, or waits for the first copy's, and goes no further
//     (session.receive2).
//  3. The Policy decides: refused (answered with a reason code) or accepted,
//     with the internal topic, the effective QoS and the retained expiry.
//  4. The Message is routed at once: retained if it says so, matched in the
//     subscription index and appended, as one shared *Message, to each
//     subscriber's session queue (route.go). A session moves what is queued
//     into its inflight window and encodes it into its connection's write
//     buffer, which the publisher's reader or a short-lived writer goroutine
//     flushes (write.go).
//  5. Policy.Accepted takes the message (the platform stores it); the
//     PUBACK or PUBREC goes out when the policy acknowledges it (Message.Ack,
//     after the commit: "acked means stored"), or at once if it does not
//     defer.
//
// No I/O and no global lock happen on that path: the index is sharded by
// first topic level and each session has its own mutex; docs/broker.md has
// the lock order.
package broker
