package packet

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// TestReadPacket reads every golden packet of a version from one stream,
// in order, reusing one body buffer, and then meets the end of the stream.
func TestReadPacket(t *testing.T) {
	for _, version := range []byte{Version311, Version5} {
		var stream []byte
		var want []golden
		for _, g := range goldenAll() {
			if g.version == version && !g.encodeOnly {
				stream = append(stream, g.raw...)
				want = append(want, g)
			}
		}
		if len(want) < 10 {
			t.Fatalf("version %d: only %d golden packets", version, len(want))
		}
		r := bufio.NewReader(bytes.NewReader(stream))
		var buf []byte
		for _, g := range want {
			var p Packet
			var err error
			p, buf, err = ReadPacket(r, buf, version)
			if err != nil {
				t.Fatalf("%s: %v", g.name, err)
			}
			if !reflect.DeepEqual(p, g.packet) {
				t.Fatalf("%s: got %#v, want %#v", g.name, p, g.packet)
			}
		}
		if _, _, err := ReadPacket(r, buf, version); err != io.EOF {
			t.Fatalf("version %d: at the end of the stream: %v, want io.EOF", version, err)
		}
	}
}

// TestReadPacketBadInput: a stream cut inside a packet and a Remaining
// Length of five bytes are errors, not packets.
func TestReadPacketBadInput(t *testing.T) {
	cut := raw(0x30, 10, 0, 3, "a/b")
	if _, _, err := ReadPacket(bufio.NewReader(bytes.NewReader(cut)), nil, Version311); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut body: %v, want io.ErrUnexpectedEOF", err)
	}
	long := raw(0x30, 0x80, 0x80, 0x80, 0x80, 0x01)
	_, _, err := ReadPacket(bufio.NewReader(bytes.NewReader(long)), nil, Version311)
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != MalformedPacket {
		t.Fatalf("five-byte Remaining Length: %v, want a malformed packet", err)
	}
}
