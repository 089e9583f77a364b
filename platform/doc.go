// Package platform holds fleetmq's tenancy rules and plugs them into the
// broker as a broker.Policy: who may connect (fleet publisher credentials
// with a registered client id, read-only subscriber passwords), where each
// may publish and subscribe (confined to its account), the topic taxonomy
// (state/, event/, telemetry/, sample/), vendor wire layouts normalized to
// the platform path, per-client maximum publish QoS, the effective QoS with
// the daily QoS 2 pool and its demotion, per-plan catch-up bounds, and
// metering. The retained maximum age (24 h) is not among them: the broker
// applies it (broker.Options.RetainedMaxAge, which internal/app sets).
//
// The rules are pure functions in rules.go and pool.go, in the root
// package's vocabulary (topic classes, platform topics, vendor layouts and
// their LayoutIndex.Match, the plan's catch-up bound) and mqtt/topic's
// Covers; the Policy applies them to an in-memory snapshot of the control
// plane that is reloaded when the store's change version moves, so no rule
// does I/O per message.
package platform
