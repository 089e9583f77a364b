package cluster

import (
	"errors"
	"testing"

	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// A forwarded message carries its layout's version (docs/cluster.md): one
// of a version this node does not read is refused as malformed (the
// receiver drops and counts it), never decoded as if it were its own.
func TestEnvelopeOfAnotherVersionRefused(t *testing.T) {
	m := &broker.Message{Topic: "acct/dev/state/x", QoS: 1, PublishedQoS: 1, Payload: []byte("x"), Origin: "acct\x00dev"}
	b := appendEnvelope(nil, "node-a", 7, m)
	node, seq, got, err := decode(b)
	if err != nil || node != "node-a" || seq != 7 || got.Topic != m.Topic || got.Origin != m.Origin {
		t.Fatalf("decode of its own version = %q %d %+v %v", node, seq, got, err)
	}
	for _, v := range []byte{0, envelopeVersion + 1, 0xff} {
		other := append([]byte{v}, b[1:]...)
		if _, _, _, err := decode(other); !errors.Is(err, errEnvelope) {
			t.Errorf("an envelope of version %d: %v, want errEnvelope", v, err)
		}
	}
}
