package packet

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
	"unsafe"
)

// reader walks a packet body. Every read checks the bounds and reports a
// field that runs past the end as a Malformed Packet, so decoders never index
// out of range.
type reader struct {
	b   []byte
	off int
	// alias makes strings share memory with b (unsafe.String) instead of
	// copying. Only PUBLISH decodes this way: its strings live as long as its
	// payload, which aliases b anyway.
	alias bool
}

func (r *reader) rest() int { return len(r.b) - r.off }

func tooShort(what string) *Error {
	return malformed("%s runs past the end of the packet", what)
}

func (r *reader) byte(what string) (byte, error) {
	if r.off >= len(r.b) {
		return 0, tooShort(what)
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) uint16(what string) (uint16, error) {
	if r.rest() < 2 {
		return 0, tooShort(what)
	}
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v, nil
}

func (r *reader) uint32(what string) (uint32, error) {
	if r.rest() < 4 {
		return 0, tooShort(what)
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v, nil
}

func (r *reader) varint(what string) (int, error) {
	v, n, err := Varint(r.b[r.off:])
	if err == ErrIncomplete {
		return 0, tooShort(what)
	}
	if err != nil {
		return 0, malformed("%s: %s", what, err.(*Error).Reason)
	}
	r.off += n
	return v, nil
}

// bytes reads a two-byte length and that many bytes. The result aliases r.b
// with its capacity cut to its length, so appending to it cannot overwrite
// the rest of the body. Empty data is returned as nil.
func (r *reader) bytes(what string) ([]byte, error) {
	n, err := r.uint16(what)
	if err != nil {
		return nil, err
	}
	if int(n) > r.rest() {
		r.off -= 2
		return nil, tooShort(what)
	}
	if n == 0 {
		return nil, nil
	}
	end := r.off + int(n)
	b := r.b[r.off:end:end]
	r.off = end
	return b, nil
}

// string reads a UTF-8 Encoded String and validates it.
func (r *reader) string(what string) (string, error) {
	b, err := r.bytes(what)
	if err != nil {
		return "", err
	}
	if err := checkUTF8(b, what); err != nil {
		return "", err
	}
	return r.str(b), nil
}

// str turns validated bytes into a string, aliasing or copying per r.alias.
func (r *reader) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if r.alias {
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	return string(b)
}

// checkUTF8 enforces MQTT-1.5.4-1 and -2: well-formed UTF-8 (Go's decoder
// also rejects surrogates and overlong forms) and no U+0000. Other control
// characters are allowed; the spec only says they SHOULD NOT be sent.
func checkUTF8(b []byte, what string) error {
	if bytes.IndexByte(b, 0) >= 0 {
		return malformed("%s contains U+0000", what)
	}
	if !utf8.Valid(b) {
		return malformed("invalid UTF-8 in %s", what)
	}
	return nil
}
