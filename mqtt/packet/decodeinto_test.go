package packet

import (
	"reflect"
	"testing"
)

// decodeIntoMatchesDecode checks that decode, decoding into reused, which
// holds leftovers from a previous packet, agrees with Decode on every
// golden packet of reused's type, and returns how many it checked.
func decodeIntoMatchesDecode[P any](t *testing.T, name string, reused *P, decode func(header byte, body []byte, version byte, into *P) error) int {
	t.Helper()
	n := 0
	for _, g := range goldenAll() {
		want, ok := any(g.packet).(*P)
		if !ok || g.encodeOnly {
			continue
		}
		header, remaining, hn, err := ParseHeader(g.raw)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		if err := decode(header, g.raw[hn:hn+remaining], g.version, reused); err != nil {
			t.Fatalf("%s: %s: %v", g.name, name, err)
		}
		if !reflect.DeepEqual(reused, want) {
			t.Errorf("%s: %s = %#v, want %#v", g.name, name, reused, want)
		}
		n++
	}
	return n
}

// DecodeAck must agree with Decode on every golden acknowledgement, also
// when the destination is reused with leftovers from a previous ack.
func TestDecodeAckMatchesDecode(t *testing.T) {
	var reused Ack
	reused.Properties.SetReasonString("left over")
	if n := decodeIntoMatchesDecode(t, "DecodeAck", &reused, DecodeAck); n < 8 {
		t.Fatalf("only %d golden acks checked", n)
	}
	if err := DecodeAck(byte(PUBLISH)<<4, []byte{0, 1}, Version5, &reused); err == nil {
		t.Error("DecodeAck accepted a PUBLISH header")
	}
	if err := DecodeAck(byte(PUBREL)<<4, []byte{0, 1}, Version5, &reused); err == nil {
		t.Error("DecodeAck accepted PUBREL with flags 0 (must be 0b0010)")
	}
}

// DecodePublish must agree with Decode on every golden PUBLISH, also when
// the destination is reused with leftovers from a previous packet: the
// broker decodes into pooled packets, and a property or payload left over
// would reach the next message's subscribers.
func TestDecodePublishMatchesDecode(t *testing.T) {
	reused := &Publish{Dup: true, QoS: 2, Retain: true, Topic: "left/over", PacketID: 9, Payload: []byte("left over")}
	reused.Properties.SetReasonString("left over")
	reused.Properties.User = []UserProperty{{Key: "left", Value: "over"}}
	reused.Properties.TopicAlias = 3
	reused.Properties.Mark(PropTopicAlias)
	if n := decodeIntoMatchesDecode(t, "DecodePublish", reused, DecodePublish); n < 4 {
		t.Fatalf("only %d golden PUBLISHes checked", n)
	}
	if err := DecodePublish(byte(PUBACK)<<4, []byte{0, 1}, Version5, reused); err == nil {
		t.Error("DecodePublish accepted a PUBACK header")
	}
	if err := DecodePublish(byte(PUBLISH)<<4|0b0110, []byte{0, 1, 'a'}, Version311, reused); err == nil {
		t.Error("DecodePublish accepted QoS 3")
	}
}
