package packet

import (
	"reflect"
	"testing"
)

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
	n := 0
	for _, g := range goldenAll() {
		want, ok := g.packet.(*Publish)
		if !ok || g.encodeOnly {
			continue
		}
		header, remaining, hn, err := ParseHeader(g.raw)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		body := g.raw[hn : hn+remaining]
		if err := DecodePublish(header, body, g.version, reused); err != nil {
			t.Fatalf("%s: DecodePublish: %v", g.name, err)
		}
		if !reflect.DeepEqual(reused, want) {
			t.Errorf("%s: DecodePublish = %#v, want %#v", g.name, reused, want)
		}
		n++
	}
	if n < 4 {
		t.Fatalf("only %d golden PUBLISHes checked", n)
	}
	if err := DecodePublish(byte(PUBACK)<<4, []byte{0, 1}, Version5, reused); err == nil {
		t.Error("DecodePublish accepted a PUBACK header")
	}
	if err := DecodePublish(byte(PUBLISH)<<4|0b0110, []byte{0, 1, 'a'}, Version311, reused); err == nil {
		t.Error("DecodePublish accepted QoS 3")
	}
}
