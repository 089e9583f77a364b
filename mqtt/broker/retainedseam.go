package broker

import "time"

// Retained keeps the retained message of each topic. The server sets it
// for every accepted message with the RETAIN flag (before routing it),
// matches it for each new subscription, sweeps it every
// Options.SweepInterval, and asks a Policy's questions of it
// (Server.RetainedUnder).
//
// The single-node store (MemoryRetained, the default of
// Options.Retained) keeps the messages in memory and is saved with the
// server's state. A cluster store keeps them where every node reads them
// (a JetStream key-value bucket keyed by topic): a message retained
// through one node is matched by a subscription on any other.
//
// The contract a second implementation must meet (the suite in
// internal/contract, Retained, checks it):
//   - Set(m) makes m the retained message of m.Topic, replacing the one
//     before; an empty Payload clears the topic instead. Set is called on
//     the publishing goroutine: it must not block on I/O for long (a
//     cluster store writes locally at once and replicates behind). Two
//     Sets of one topic from one goroutine leave the later one.
//   - Match(filter, now) returns the retained messages whose topics match
//     the filter (an MQTT filter, never a shared one), leaving out every
//     one expired at now (Expiry not zero and not after now), even before
//     a sweep; leading wildcards ("#", "+") do not match topics that
//     begin with '$'. The order is unspecified. The messages returned
//     keep the Created and Expiry they were set with (delivery reckons
//     the remaining Message Expiry from them) and are read-only.
//   - Sweep(now, maxAge) removes the messages expired at now, and with
//     maxAge > 0 those created maxAge or more before now, and reports how
//     many it removed.
//   - Under(topic) reports the messages stored under topic's first level
//     (count and payload bytes) and the payload size of the one on topic
//     itself (-1 when none): what bounds one tenant's retained state.
//     Len is the number stored in all.
//   - Reserve(m, maxCount, maxBytes) takes room for m under its topic's
//     first level when the messages stored there and the room reserved
//     for others leave m room within maxCount messages and maxBytes
//     payload bytes (replacing a message takes no message of room), in
//     one step with the check: reservations made at the same moment
//     never pass the bound together. Set(m) turns m's room into the room
//     it takes; Release(m) gives back the room of a message reserved for
//     and not Set (nothing for one without). MemoryRetained's are the
//     ones to embed.
//   - All methods are safe for concurrent use.
type Retained interface {
	Set(m *Message)
	Reserve(m *Message, maxCount int, maxBytes int64) (count int, bytes int64, ok bool)
	Release(m *Message)
	Match(filter string, now time.Time) []*Message
	Sweep(now time.Time, maxAge time.Duration) int
	Under(topic string) (count int, bytes int64, current int)
	Len() int64
}
