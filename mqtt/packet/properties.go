package packet

import (
	"encoding/binary"
	"math/bits"
)

// propKind is the data type of a property value (MQTT 5, section 2.2.2.2).
type propKind uint8

const (
	kindNone   propKind = iota // not a property identifier
	kindByte                   // Byte
	kindUint16                 // Two Byte Integer
	kindUint32                 // Four Byte Integer
	kindVarint                 // Variable Byte Integer
	kindString                 // UTF-8 Encoded String
	kindBinary                 // Binary Data
	kindPair                   // UTF-8 String Pair
)

type propInfo struct {
	kind propKind
	name string // as the spec spells it, for error messages
}

var propTable = [...]propInfo{
	PropPayloadFormat:        {kindByte, "Payload Format Indicator"},
	PropMessageExpiry:        {kindUint32, "Message Expiry Interval"},
	PropContentType:          {kindString, "Content Type"},
	PropResponseTopic:        {kindString, "Response Topic"},
	PropCorrelationData:      {kindBinary, "Correlation Data"},
	PropSubscriptionID:       {kindVarint, "Subscription Identifier"},
	PropSessionExpiry:        {kindUint32, "Session Expiry Interval"},
	PropAssignedClientID:     {kindString, "Assigned Client Identifier"},
	PropServerKeepAlive:      {kindUint16, "Server Keep Alive"},
	PropAuthMethod:           {kindString, "Authentication Method"},
	PropAuthData:             {kindBinary, "Authentication Data"},
	PropRequestProblemInfo:   {kindByte, "Request Problem Information"},
	PropWillDelay:            {kindUint32, "Will Delay Interval"},
	PropRequestResponseInfo:  {kindByte, "Request Response Information"},
	PropResponseInfo:         {kindString, "Response Information"},
	PropServerReference:      {kindString, "Server Reference"},
	PropReasonString:         {kindString, "Reason String"},
	PropReceiveMaximum:       {kindUint16, "Receive Maximum"},
	PropTopicAliasMaximum:    {kindUint16, "Topic Alias Maximum"},
	PropTopicAlias:           {kindUint16, "Topic Alias"},
	PropMaximumQoS:           {kindByte, "Maximum QoS"},
	PropRetainAvailable:      {kindByte, "Retain Available"},
	PropUser:                 {kindPair, "User Property"},
	PropMaximumPacketSize:    {kindUint32, "Maximum Packet Size"},
	PropWildcardSubAvailable: {kindByte, "Wildcard Subscription Available"},
	PropSubIDAvailable:       {kindByte, "Subscription Identifier Available"},
	PropSharedSubAvailable:   {kindByte, "Shared Subscription Available"},
}

// willContext indexes allowedProps for the Will Properties of a CONNECT
// (packet type 0 is reserved, so the slot is free).
const willContext Type = 0

func idSet(ids ...PropID) uint64 {
	var m uint64
	for _, id := range ids {
		m |= 1 << id
	}
	return m
}

// allowedProps lists, per packet type, the properties it may carry (the
// table in section 2.2.2.2). Any other property is a Malformed Packet.
var allowedProps = func() [16]uint64 {
	ack := idSet(PropReasonString, PropUser)
	return [16]uint64{
		willContext: idSet(PropPayloadFormat, PropMessageExpiry, PropContentType,
			PropResponseTopic, PropCorrelationData, PropWillDelay, PropUser),
		CONNECT: idSet(PropSessionExpiry, PropAuthMethod, PropAuthData, PropRequestProblemInfo,
			PropRequestResponseInfo, PropReceiveMaximum, PropTopicAliasMaximum, PropUser,
			PropMaximumPacketSize),
		CONNACK: idSet(PropSessionExpiry, PropAssignedClientID, PropServerKeepAlive,
			PropAuthMethod, PropAuthData, PropResponseInfo, PropServerReference,
			PropReasonString, PropReceiveMaximum, PropTopicAliasMaximum, PropMaximumQoS,
			PropRetainAvailable, PropUser, PropMaximumPacketSize, PropWildcardSubAvailable,
			PropSubIDAvailable, PropSharedSubAvailable),
		PUBLISH: idSet(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
			PropCorrelationData, PropSubscriptionID, PropTopicAlias, PropUser),
		PUBACK:      ack,
		PUBREC:      ack,
		PUBREL:      ack,
		PUBCOMP:     ack,
		SUBSCRIBE:   idSet(PropSubscriptionID, PropUser),
		SUBACK:      ack,
		UNSUBSCRIBE: idSet(PropUser),
		UNSUBACK:    ack,
		DISCONNECT:  idSet(PropSessionExpiry, PropServerReference, PropReasonString, PropUser),
		AUTH:        idSet(PropAuthMethod, PropAuthData, PropReasonString, PropUser),
	}
}()

func contextName(ctx Type) string {
	if ctx == willContext {
		return "will properties"
	}
	return ctx.String()
}

// MaxUserProperties bounds the User Properties of one packet (or will):
// past it the packet is refused as too large (0x95), before any more of
// them is decoded, so a packet of a hundred thousand tiny ones costs no
// more than one of this many.
const MaxUserProperties = 128

// props decodes a v5 property block (Property Length, then the properties)
// into p. It enforces the rules of section 2.2.2: only properties allowed in
// ctx (a packet type or willContext) may appear, else Malformed Packet; only
// User Property, and Subscription Identifier in PUBLISH, may repeat, else
// Protocol Error; and the value ranges the spec gives, mostly Protocol Error.
func (r *reader) props(p *Properties, ctx Type) error {
	n, err := r.varint("property length")
	if err != nil {
		return err
	}
	if n > r.rest() {
		return malformed("property length %d runs past the end of the packet", n)
	}
	end := r.off + n
	pr := reader{b: r.b[:end], off: r.off, alias: r.alias}
	r.off = end
	for pr.off < end {
		start := pr.off
		id := PropID(pr.b[pr.off])
		pr.off++
		if int(id) >= len(propTable) || propTable[id].kind == kindNone {
			return malformed("unknown property identifier 0x%02X", byte(id))
		}
		info := &propTable[id]
		if allowedProps[ctx]&(1<<id) == 0 {
			return malformed("%s is not allowed in %s", info.name, contextName(ctx))
		}
		switch id {
		case PropUser:
			k, err := pr.string("User Property name")
			if err != nil {
				return err
			}
			v, err := pr.string("User Property value")
			if err != nil {
				return err
			}
			if len(p.User) == MaxUserProperties {
				return Errorf(PacketTooLarge, "more than %d User Properties in %s", MaxUserProperties, contextName(ctx))
			}
			if p.User == nil {
				p.User = make([]UserProperty, 0, min(countProps(pr.b[start:end], PropUser), MaxUserProperties))
			}
			p.User = append(p.User, UserProperty{Key: k, Value: v})
			continue
		case PropSubscriptionID:
			v, err := pr.varint(info.name)
			if err != nil {
				return err
			}
			if v == 0 {
				return protocolErr("Subscription Identifier 0")
			}
			if ctx == SUBSCRIBE && len(p.SubscriptionIDs) > 0 {
				return protocolErr("more than one Subscription Identifier in SUBSCRIBE")
			}
			if p.SubscriptionIDs == nil {
				p.SubscriptionIDs = make([]uint32, 0, countProps(pr.b[start:end], PropSubscriptionID))
			}
			p.SubscriptionIDs = append(p.SubscriptionIDs, uint32(v))
			continue
		}
		if p.present&(1<<id) != 0 {
			return protocolErr("%s included more than once", info.name)
		}
		if err := pr.prop(p, id, info); err != nil {
			return err
		}
	}
	return nil
}

// prop decodes the value of one single-valued property.
func (r *reader) prop(p *Properties, id PropID, info *propInfo) error {
	switch info.kind {
	case kindByte:
		v, err := r.byte(info.name)
		if err != nil {
			return err
		}
		// Every byte property is a boolean or (Maximum QoS) 0 or 1.
		if v > 1 {
			return protocolErr("%s must be 0 or 1, not %d", info.name, v)
		}
		p.SetByte(id, v)
	case kindUint16:
		v, err := r.uint16(info.name)
		if err != nil {
			return err
		}
		if v == 0 {
			switch id {
			case PropReceiveMaximum:
				return protocolErr("Receive Maximum 0")
			case PropTopicAlias:
				// Section 3.3.4: a Topic Alias of 0 is a Protocol Error
				// answered with reason code 0x94.
				return Errorf(TopicAliasInvalid, "Topic Alias 0")
			}
		}
		p.SetUint16(id, v)
	case kindUint32:
		v, err := r.uint32(info.name)
		if err != nil {
			return err
		}
		if v == 0 && id == PropMaximumPacketSize {
			return protocolErr("Maximum Packet Size 0")
		}
		p.SetUint32(id, v)
	case kindString:
		s, err := r.string(info.name)
		if err != nil {
			return err
		}
		p.SetString(id, s)
	case kindBinary:
		b, err := r.bytes(info.name)
		if err != nil {
			return err
		}
		p.SetBytes(id, b)
	}
	return nil
}

// countProps counts the properties with identifier want in the (possibly
// malformed) property list b, so that the repeatable properties are decoded
// into a slice allocated once. It stops quietly at anything it cannot parse:
// the decoder reports that.
func countProps(b []byte, want PropID) int {
	n := 0
	for i := 0; i < len(b); {
		id := PropID(b[i])
		i++
		if int(id) >= len(propTable) {
			break
		}
		if id == want {
			n++
		}
		switch propTable[id].kind {
		case kindByte:
			i++
		case kindUint16:
			i += 2
		case kindUint32:
			i += 4
		case kindVarint:
			for i < len(b) && b[i]&0x80 != 0 {
				i++
			}
			i++
		case kindString, kindBinary:
			i = skipString(b, i)
		case kindPair:
			i = skipString(b, skipString(b, i))
		default:
			return max(n, 1)
		}
	}
	return max(n, 1)
}

// skipString returns the offset after the length-prefixed field at b[i:], or
// len(b) if it does not fit.
func skipString(b []byte, i int) int {
	if i+2 > len(b) {
		return len(b)
	}
	return i + 2 + int(binary.BigEndian.Uint16(b[i:]))
}

// propBits returns the identifiers (as bits) of the properties of p that are
// present and in mask, User and Subscription Identifier included when their
// slices are non-empty. Iterating its bits lowest first gives the order in
// which properties are encoded.
func propBits(p *Properties, mask uint64) uint64 {
	m := p.present &^ (1<<PropUser | 1<<PropSubscriptionID)
	if len(p.User) > 0 {
		m |= 1 << PropUser
	}
	if len(p.SubscriptionIDs) > 0 {
		m |= 1 << PropSubscriptionID
	}
	return m & mask
}

// propsSize is the encoded size of the properties of p allowed by mask, not
// counting the Property Length itself.
func propsSize(p *Properties, mask uint64) int {
	n := 0
	for m := propBits(p, mask); m != 0; m &= m - 1 {
		id := PropID(bits.TrailingZeros64(m))
		switch propTable[id].kind {
		case kindByte:
			n += 2
		case kindUint16:
			n += 3
		case kindUint32:
			n += 5
		case kindString:
			n += 3 + len(p.stringProp(id))
		case kindBinary:
			n += 3 + len(p.binaryProp(id))
		case kindVarint:
			for _, v := range p.SubscriptionIDs {
				n += 1 + varintSize(int(v)&MaxVarint)
			}
		case kindPair:
			for _, u := range p.User {
				n += 5 + len(u.Key) + len(u.Value)
			}
		}
	}
	return n
}

// appendProps appends the Property Length size (from propsSize) and the
// properties of p allowed by mask, in ascending identifier order.
func appendProps(dst []byte, p *Properties, mask uint64, size int) []byte {
	dst = AppendVarint(dst, size)
	if size == 0 {
		return dst
	}
	for m := propBits(p, mask); m != 0; m &= m - 1 {
		id := PropID(bits.TrailingZeros64(m))
		switch propTable[id].kind {
		case kindByte:
			dst = append(dst, byte(id), p.byteProp(id))
		case kindUint16:
			dst = binary.BigEndian.AppendUint16(append(dst, byte(id)), p.uint16Prop(id))
		case kindUint32:
			dst = binary.BigEndian.AppendUint32(append(dst, byte(id)), p.uint32Prop(id))
		case kindString:
			dst = appendString(append(dst, byte(id)), p.stringProp(id))
		case kindBinary:
			dst = appendBytes(append(dst, byte(id)), p.binaryProp(id))
		case kindVarint:
			for _, v := range p.SubscriptionIDs {
				dst = AppendVarint(append(dst, byte(id)), int(v)&MaxVarint)
			}
		case kindPair:
			for _, u := range p.User {
				dst = appendString(append(dst, byte(id)), u.Key)
				dst = appendString(dst, u.Value)
			}
		}
	}
	return dst
}

// checkProps reports the properties of p (allowed by mask) that cannot be
// encoded: strings and binary data over 65535 bytes and Subscription
// Identifiers over MaxVarint.
func checkProps(p *Properties, mask uint64) error {
	for m := propBits(p, mask); m != 0; m &= m - 1 {
		id := PropID(bits.TrailingZeros64(m))
		name := propTable[id].name
		switch propTable[id].kind {
		case kindString:
			if len(p.stringProp(id)) > 65535 {
				return tooLong(name)
			}
		case kindBinary:
			if len(p.binaryProp(id)) > 65535 {
				return tooLong(name)
			}
		case kindVarint:
			for _, v := range p.SubscriptionIDs {
				if v > MaxVarint {
					return malformed("Subscription Identifier %d is over %d", v, MaxVarint)
				}
			}
		case kindPair:
			for _, u := range p.User {
				if len(u.Key) > 65535 || len(u.Value) > 65535 {
					return tooLong(name)
				}
			}
		}
	}
	return nil
}

func tooLong(what string) *Error {
	return malformed("%s is longer than 65535 bytes", what)
}

// SetBytes sets a binary property (CorrelationData, AuthData) and marks it
// present; the slice is kept, not copied.
func (p *Properties) SetBytes(id PropID, v []byte) {
	switch id {
	case PropCorrelationData:
		p.CorrelationData = v
	case PropAuthData:
		p.AuthData = v
	default:
		return
	}
	p.Mark(id)
}

func (p *Properties) byteProp(id PropID) byte {
	switch id {
	case PropPayloadFormat:
		return p.PayloadFormat
	case PropRequestProblemInfo:
		return p.RequestProblemInfo
	case PropRequestResponseInfo:
		return p.RequestResponseInfo
	case PropMaximumQoS:
		return p.MaximumQoS
	case PropRetainAvailable:
		return p.RetainAvailable
	case PropWildcardSubAvailable:
		return p.WildcardSubAvailable
	case PropSubIDAvailable:
		return p.SubIDAvailable
	case PropSharedSubAvailable:
		return p.SharedSubAvailable
	}
	return 0
}

func (p *Properties) uint16Prop(id PropID) uint16 {
	switch id {
	case PropServerKeepAlive:
		return p.ServerKeepAlive
	case PropReceiveMaximum:
		return p.ReceiveMaximum
	case PropTopicAliasMaximum:
		return p.TopicAliasMaximum
	case PropTopicAlias:
		return p.TopicAlias
	}
	return 0
}

func (p *Properties) uint32Prop(id PropID) uint32 {
	switch id {
	case PropMessageExpiry:
		return p.MessageExpiry
	case PropSessionExpiry:
		return p.SessionExpiry
	case PropWillDelay:
		return p.WillDelay
	case PropMaximumPacketSize:
		return p.MaximumPacketSize
	}
	return 0
}

func (p *Properties) stringProp(id PropID) string {
	switch id {
	case PropContentType:
		return p.ContentType
	case PropResponseTopic:
		return p.ResponseTopic
	case PropAssignedClientID:
		return p.AssignedClientID
	case PropAuthMethod:
		return p.AuthMethod
	case PropResponseInfo:
		return p.ResponseInfo
	case PropServerReference:
		return p.ServerReference
	case PropReasonString:
		return p.ReasonString
	}
	return ""
}

func (p *Properties) binaryProp(id PropID) []byte {
	if id == PropCorrelationData {
		return p.CorrelationData
	}
	return p.AuthData
}
