package packet

import (
	"errors"
	"fmt"
	"strings"
)

// ErrIncomplete is returned by ParseHeader and Varint when the input ends
// before the fixed header (or variable byte integer) does: read more bytes
// and try again. It is not a protocol error.
var ErrIncomplete = errors.New("mqtt: incomplete fixed header")

// Error is a protocol error found while decoding, or a value that cannot be
// encoded. Code is the reason code the broker should answer with: for a
// decoding error under v5 that is the DISCONNECT (or CONNACK) reason code,
// typically MalformedPacket or ProtocolError.
type Error struct {
	Code   ReasonCode
	Reason string // what exactly is wrong, for logs
}

// Errorf returns an *Error with the given code and a formatted reason.
func Errorf(code ReasonCode, format string, args ...any) *Error {
	return &Error{Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Error returns for example "mqtt: malformed packet: invalid UTF-8 in topic name".
func (e *Error) Error() string {
	s := "mqtt: " + strings.ToLower(e.Code.String())
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// malformed and protocolErr keep the decoders short.
func malformed(format string, args ...any) *Error {
	return Errorf(MalformedPacket, format, args...)
}

func protocolErr(format string, args ...any) *Error {
	return Errorf(ProtocolError, format, args...)
}
