package packet

import (
	"encoding/binary"
	"slices"
)

// Encode appends the encoded packet p to dst for a connection at protocol
// level version (Version5 encodes MQTT 5, anything else MQTT 3.1.1; CONNECT
// uses its own ProtocolLevel). On error dst is returned unchanged.
//
// The encoding follows the decoder's canonical forms: v5 acknowledgements,
// DISCONNECT and AUTH are written in their short forms when the reason code
// is Success and there are no properties (and acknowledgements and
// DISCONNECT with the reason code alone when there are no properties);
// properties are written in ascending identifier order and only those the
// spec allows in the packet, so for example the Will Properties of a CONNECT
// can be reused for the will PUBLISH (Will Delay Interval is then left out).
// Under 3.1.1 no properties are written, CONNACK carries V3ReturnCode of its
// reason code, SUBACK failure codes become 0x80 and UNSUBACK has no codes.
//
// Encode only fails, with an *Error, for a value that cannot be put on the
// wire: a string or binary field over 65535 bytes, a QoS, Will QoS or Retain
// Handling over 2, a Remaining Length over MaxVarint (Code PacketTooLarge),
// an Ack of another kind, AUTH under 3.1.1, a nil or unknown Packet. It does
// not refuse packets that are merely invalid (packet identifier 0, no topic
// filters, ...), so tests can produce them.
func Encode(dst []byte, p Packet, version byte) ([]byte, error) {
	switch p := p.(type) {
	case *Publish:
		if p == nil {
			break
		}
		if err := checkPublish(p, version); err != nil {
			return dst, err
		}
		return AppendPublish(dst, p, version), nil
	case *Ack:
		if p == nil {
			break
		}
		if p.Kind < PUBACK || p.Kind > PUBCOMP {
			return dst, malformed("Ack of kind %s", p.Kind)
		}
		if version == Version5 {
			if err := checkProps(&p.Properties, allowedProps[p.Kind]); err != nil {
				return dst, err
			}
		}
		return AppendAck(dst, p, version), nil
	}
	if p == nil || isNilPacket(p) {
		return dst, malformed("cannot encode a nil packet")
	}
	w := writer{b: dst, v5: version == Version5}
	start := w.begin()
	var header byte
	switch p := p.(type) {
	case *Connect:
		header = byte(CONNECT) << 4
		w.v5 = p.ProtocolLevel == Version5
		w.connect(p)
	case *Connack:
		header = byte(CONNACK) << 4
		w.connack(p)
	case *Subscribe:
		header = byte(SUBSCRIBE)<<4 | fixedFlags[SUBSCRIBE]
		w.subscribe(p)
	case *Suback:
		header = byte(SUBACK) << 4
		w.suback(p)
	case *Unsubscribe:
		header = byte(UNSUBSCRIBE)<<4 | fixedFlags[UNSUBSCRIBE]
		w.unsubscribe(p)
	case *Unsuback:
		header = byte(UNSUBACK) << 4
		w.unsuback(p)
	case *Pingreq:
		header = byte(PINGREQ) << 4
	case *Pingresp:
		header = byte(PINGRESP) << 4
	case *Disconnect:
		header = byte(DISCONNECT) << 4
		if w.v5 {
			w.reason(p.ReasonCode, &p.Properties, DISCONNECT, true)
		}
	case *Auth:
		if !w.v5 {
			return dst, protocolErr("AUTH is not an MQTT 3.1.1 packet")
		}
		header = byte(AUTH) << 4
		w.reason(p.ReasonCode, &p.Properties, AUTH, false)
	default:
		return dst, malformed("cannot encode %T", p)
	}
	if w.err != nil {
		return dst, w.err
	}
	return w.finish(start, header)
}

func isNilPacket(p Packet) bool {
	switch p := p.(type) {
	case *Publish:
		return p == nil
	case *Ack:
		return p == nil
	case *Connect:
		return p == nil
	case *Connack:
		return p == nil
	case *Subscribe:
		return p == nil
	case *Suback:
		return p == nil
	case *Unsubscribe:
		return p == nil
	case *Unsuback:
		return p == nil
	case *Pingreq:
		return p == nil
	case *Pingresp:
		return p == nil
	case *Disconnect:
		return p == nil
	case *Auth:
		return p == nil
	}
	return false
}

// AppendPublish appends p encoded for protocol level version to dst. It is
// the allocation-free path for the broker's writers: nothing is allocated
// when dst has PublishSize(p, version) bytes of spare capacity.
//
// It does not validate p: Encode does (QoS at most 2, strings up to 65535
// bytes, size within MaxVarint). Broker code that forwards decoded messages
// can call it directly, since a decoded PUBLISH always satisfies those rules.
func AppendPublish(dst []byte, p *Publish, version byte) []byte {
	rem, pl := publishRemaining(p, version)
	dst = slices.Grow(dst, 1+varintSize(rem)+rem)
	header := byte(PUBLISH)<<4 | (p.QoS&3)<<1
	if p.Dup {
		header |= 0b1000
	}
	if p.Retain {
		header |= 1
	}
	dst = AppendVarint(append(dst, header), rem)
	dst = appendString(dst, p.Topic)
	if p.QoS&3 != 0 {
		dst = binary.BigEndian.AppendUint16(dst, p.PacketID)
	}
	if version == Version5 {
		dst = appendProps(dst, &p.Properties, allowedProps[PUBLISH], pl)
	}
	return append(dst, p.Payload...)
}

// PublishSize returns the size in bytes of p encoded for protocol level
// version, fixed header included: what the broker compares with the
// client's Maximum Packet Size.
func PublishSize(p *Publish, version byte) int {
	rem, _ := publishRemaining(p, version)
	return 1 + varintSize(rem) + rem
}

// publishRemaining returns the Remaining Length of p and the size of its
// properties (0 under 3.1.1).
func publishRemaining(p *Publish, version byte) (rem, propLen int) {
	rem = 2 + len(p.Topic) + len(p.Payload)
	if p.QoS&3 != 0 {
		rem += 2
	}
	if version == Version5 {
		propLen = propsSize(&p.Properties, allowedProps[PUBLISH])
		rem += varintSize(propLen) + propLen
	}
	return rem, propLen
}

func checkPublish(p *Publish, version byte) error {
	if p.QoS > 2 {
		return malformed("PUBLISH with QoS %d", p.QoS)
	}
	if len(p.Topic) > 65535 {
		return tooLong("topic name")
	}
	if version == Version5 {
		if err := checkProps(&p.Properties, allowedProps[PUBLISH]); err != nil {
			return err
		}
	}
	if rem, _ := publishRemaining(p, version); rem > MaxVarint {
		return Errorf(PacketTooLarge, "PUBLISH remaining length %d is over %d", rem, MaxVarint)
	}
	return nil
}

// AppendAck appends a PUBACK, PUBREC, PUBREL or PUBCOMP (a.Kind) encoded for
// protocol level version to dst, allocating nothing when dst has room. Under
// v5 it uses the short forms: Remaining Length 2 for Success without
// properties, 3 for another reason code without properties. Like
// AppendPublish it does not validate: Encode checks a.Kind and the property
// lengths.
func AppendAck(dst []byte, a *Ack, version byte) []byte {
	header := byte(a.Kind) << 4
	if a.Kind == PUBREL {
		header |= fixedFlags[PUBREL]
	}
	if version != Version5 {
		return append(dst, header, 2, byte(a.PacketID>>8), byte(a.PacketID))
	}
	pl := propsSize(&a.Properties, allowedProps[a.Kind&15])
	switch {
	case pl == 0 && a.ReasonCode == Success:
		return append(dst, header, 2, byte(a.PacketID>>8), byte(a.PacketID))
	case pl == 0:
		return append(dst, header, 3, byte(a.PacketID>>8), byte(a.PacketID), byte(a.ReasonCode))
	}
	rem := 3 + varintSize(pl) + pl
	dst = slices.Grow(dst, 1+varintSize(rem)+rem)
	dst = AppendVarint(append(dst, header), rem)
	dst = append(dst, byte(a.PacketID>>8), byte(a.PacketID), byte(a.ReasonCode))
	return appendProps(dst, &a.Properties, allowedProps[a.Kind&15], pl)
}

func appendString(dst []byte, s string) []byte {
	return append(append(dst, byte(len(s)>>8), byte(len(s))), s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	return append(append(dst, byte(len(b)>>8), byte(len(b))), b...)
}
