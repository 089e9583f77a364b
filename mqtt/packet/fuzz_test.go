package packet

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecode feeds arbitrary packets to Decode. Decode must not panic, must
// not modify its input, and must fail only with an *Error. A packet it
// accepts must encode, and decoding that encoding must give the same packet
// back, whose encoding is in turn the same bytes (the encoder's forms are
// canonical).
func FuzzDecode(f *testing.F) {
	for _, g := range goldenAll() {
		if g.encodeOnly {
			continue
		}
		header, rem, n, err := ParseHeader(g.raw)
		if err != nil || n+rem != len(g.raw) {
			f.Fatalf("%s: bad golden packet", g.name)
		}
		f.Add(header, g.raw[n:], g.version)
	}
	for _, c := range badPackets {
		f.Add(c.header, c.body, c.version)
	}
	f.Fuzz(func(t *testing.T, header byte, body []byte, version byte) {
		orig := bytes.Clone(body)
		p, err := Decode(header, body, version)
		if !bytes.Equal(body, orig) {
			t.Fatalf("Decode modified its input")
		}
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Decode error %v (%T) is not an *Error", err, err)
			}
			if _, isConnect := p.(*Connect); p != nil && !isConnect {
				t.Fatalf("Decode returned %#v with error %v", p, err)
			}
			return
		}
		if p == nil || reflect.ValueOf(p).IsNil() {
			t.Fatalf("Decode returned no packet and no error")
		}
		if p.Type() != Type(header>>4) {
			t.Fatalf("decoded %s from a %s header", p.Type(), Type(header>>4))
		}
		enc, err := Encode(nil, p, version)
		if err != nil {
			t.Fatalf("decoded packet %#v does not encode: %v", p, err)
		}
		header2, rem, n, err := ParseHeader(enc)
		if err != nil || n+rem != len(enc) {
			t.Fatalf("encoding % X has a bad fixed header: %v", enc, err)
		}
		want := header
		if t := Type(header >> 4); version == Version31 && t != PUBLISH && fixedFlags[t] != 0 {
			want &^= 0b1000 // 3.1's DUP on PUBREL, SUBSCRIBE, UNSUBSCRIBE is not kept
		}
		if header2 != want {
			t.Fatalf("header 0x%02X encoded as 0x%02X", header, header2)
		}
		if pub, ok := p.(*Publish); ok && PublishSize(pub, version) != len(enc) {
			t.Fatalf("PublishSize %d, encoded %d bytes", PublishSize(pub, version), len(enc))
		}
		p2, err := Decode(header2, enc[n:], version)
		if err != nil {
			t.Fatalf("re-decoding % X: %v", enc, err)
		}
		if !reflect.DeepEqual(p, p2) {
			t.Fatalf("round trip changed the packet\nfirst:  %#v\nsecond: %#v", p, p2)
		}
		enc2, err := Encode(nil, p2, version)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n% X\n% X (%v)", enc, enc2, err)
		}
	})
}

// FuzzParseHeader checks ParseHeader on arbitrary input: it never panics,
// reports ErrIncomplete only when more bytes could still complete a valid
// header, and what it accepts is the minimal encoding of the value returned.
func FuzzParseHeader(f *testing.F) {
	for _, g := range goldenAll() {
		f.Add(g.raw)
	}
	f.Add([]byte{0x30, 0xFF, 0xFF, 0xFF, 0x7F})
	f.Add([]byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{0x30, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		header, remaining, n, err := ParseHeader(b)
		switch {
		case err == ErrIncomplete:
			if len(b) >= 5 {
				t.Fatalf("ErrIncomplete with %d bytes", len(b))
			}
			for _, c := range b[min(1, len(b)):] {
				if c&0x80 == 0 {
					t.Fatalf("ErrIncomplete although % X holds a complete length", b)
				}
			}
		case err != nil:
			var perr *Error
			if !errors.As(err, &perr) || perr.Code != MalformedPacket {
				t.Fatalf("error %v is not a Malformed Packet *Error", err)
			}
		default:
			if n < 2 || n > 5 || n > len(b) {
				t.Fatalf("n = %d for % X", n, b)
			}
			if header != b[0] || remaining < 0 || remaining > MaxVarint {
				t.Fatalf("got header 0x%02X remaining %d from % X", header, remaining, b)
			}
			if enc := AppendVarint(nil, remaining); !bytes.Equal(enc, b[1:n]) {
				t.Fatalf("accepted % X for %d, minimal encoding is % X", b[1:n], remaining, enc)
			}
		}
	})
}
