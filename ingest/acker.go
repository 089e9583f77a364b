package ingest

import (
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Acker acknowledges a record to its publisher once it is stored (PUBACK
// for QoS 1, PUBREC for QoS 2), or refuses it when it could not be stored
// after all; *broker.Message is one.
//
// It is an alias of an interface literal, as platform.Acker is: the two
// are then one type, so *Writer is the broker policy's sink
// (platform.Options.Sink) without ingest importing platform.
type Acker = interface {
	Ack()
	Refuse(code packet.ReasonCode, reason string)
}

// groupAcker is an Acker whose acknowledgement can be written with the
// others of its commit (*broker.Message): the writer acknowledges a
// commit's records into one group and flushes it once, from its own
// goroutine, instead of starting a goroutine per publisher's connection.
type groupAcker interface {
	AckTo(g *broker.Acks)
}
