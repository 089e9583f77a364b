package packet

// MaxVarint is the largest value a variable byte integer can hold, and so the
// largest Remaining Length of a packet (256 MB - 1).
const MaxVarint = 268435455

// AppendVarint appends v as an MQTT variable byte integer (1 to 4 bytes,
// minimal encoding). v must be in [0, MaxVarint]; other values are reduced to
// their low 28 bits (a negative v is written as 0). It never allocates when
// dst has 4 bytes of spare capacity.
func AppendVarint(dst []byte, v int) []byte {
	if v < 0 {
		v = 0
	}
	v &= MaxVarint
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// Varint decodes the variable byte integer at the start of b and returns its
// value and the number of bytes it took. It returns ErrIncomplete if b ends
// inside the integer, and an *Error with Code MalformedPacket if the integer
// is longer than 4 bytes or not minimally encoded (a trailing 0x00 byte,
// which MQTT-1.5.5-1 forbids).
func Varint(b []byte) (v int, n int, err error) {
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0, ErrIncomplete
		}
		c := b[i]
		v |= int(c&0x7F) << (7 * i)
		if c&0x80 == 0 {
			if i > 0 && c == 0 {
				return 0, 0, malformed("variable byte integer is not minimally encoded")
			}
			return v, i + 1, nil
		}
	}
	return 0, 0, malformed("variable byte integer is longer than 4 bytes")
}

// varintSize is the number of bytes AppendVarint writes for v.
func varintSize(v int) int {
	switch {
	case v < 1<<7:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<21:
		return 3
	default:
		return 4
	}
}
