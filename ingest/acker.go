package ingest

import "github.com/fleetmq/fleetmq/mqtt/packet"

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
