package packet

import (
	"reflect"
	"testing"
)

// DecodeAck must agree with Decode on every golden acknowledgement, also
// when the destination is reused with leftovers from a previous ack.
func TestDecodeAckMatchesDecode(t *testing.T) {
	var reused Ack
	reused.Properties.SetReasonString("left over")
	n := 0
	for _, g := range goldenAll() {
		want, ok := g.packet.(*Ack)
		if !ok || g.encodeOnly {
			continue
		}
		header, remaining, hn, err := ParseHeader(g.raw)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		body := g.raw[hn : hn+remaining]
		if err := DecodeAck(header, body, g.version, &reused); err != nil {
			t.Fatalf("%s: DecodeAck: %v", g.name, err)
		}
		if !reflect.DeepEqual(&reused, want) {
			t.Errorf("%s: DecodeAck = %#v, want %#v", g.name, &reused, want)
		}
		n++
	}
	if n < 8 {
		t.Fatalf("only %d golden acks checked", n)
	}
	if err := DecodeAck(byte(PUBLISH)<<4, []byte{0, 1}, Version5, &reused); err == nil {
		t.Error("DecodeAck accepted a PUBLISH header")
	}
	if err := DecodeAck(byte(PUBREL)<<4, []byte{0, 1}, Version5, &reused); err == nil {
		t.Error("DecodeAck accepted PUBREL with flags 0 (must be 0b0010)")
	}
}
