package packet

import "io"

// ByteReader is what ReadPacket reads from: a *bufio.Reader, for one.
type ByteReader interface {
	io.Reader
	io.ByteReader
}

// ReadPacket reads one packet from r and decodes it with Decode at the given
// protocol version. It is for clients (tests, the load harness), which trust
// the server they talk to; the broker parses its own buffers.
//
// The body is read into buf when buf has the room, and into a new slice
// otherwise; ReadPacket returns the slice it used so the caller can pass it
// in again. The packet may alias that slice (see Decode), so a caller that
// keeps packets passes nil each time. An error reading r is returned as it
// is, and a Remaining Length that is not a valid variable byte integer
// yields the *Error of ParseHeader.
func ReadPacket(r ByteReader, buf []byte, version byte) (Packet, []byte, error) {
	var hdr [5]byte
	n := 0
	for {
		b, err := r.ReadByte()
		if err != nil {
			return nil, buf, err
		}
		hdr[n] = b
		n++
		if n >= 2 && b < 0x80 || n == len(hdr) {
			break
		}
	}
	h, rem, _, err := ParseHeader(hdr[:n])
	if err != nil {
		return nil, buf, err
	}
	if cap(buf) < rem {
		buf = make([]byte, rem)
	}
	body := buf[:rem]
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, buf, err
	}
	p, err := Decode(h, body, version)
	return p, buf, err
}
