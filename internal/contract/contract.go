// Package contract holds the test suites of the seams through which
// fleetmq's state becomes shared by several nodes: the router, retained
// messages, session ownership, the daily QoS 2 pool, the REST rate-limit
// counters, metering and control-plane change notices. Each suite is a
// function taking a *testing.T and a constructor of the implementation
// under test; the single-node implementations run them in their own
// packages' tests, and a cluster implementation runs the same functions
// unchanged (docs/cluster-seams.md).
//
// The suites assert behaviour, not internals; they never sleep to
// synchronise: they poll with a deadline (testkit.Eventually) where an
// implementation may act later, and pass times in explicitly where the
// contract is about the clock.
package contract

import "time"

// within bounds every wait on an implementation's asynchronous work.
const within = 10 * time.Second
