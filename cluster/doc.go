// Package cluster joins several fleetmq nodes into one MQTT service. The
// nodes share PostgreSQL (the store: control plane, history, counters)
// and a NATS cluster, which moves messages between them: either a NATS
// server embedded in each node (the nats-server module, with routes
// between the nodes), or a NATS the operator already runs.
//
// Router is the broker.Router of a node in a cluster: a message accepted
// on one node is published on a NATS subject derived from its topic, and
// each node holds NATS interest for the filters its own sessions
// subscribe to, so a node receives only what its sessions want. A shared
// subscription's group becomes a NATS queue group, so one node of the
// group takes each message.
//
// The coordination is the engines': NATS interest and queue groups,
// PostgreSQL rows. Nothing here is a consensus protocol of its own.
package cluster
