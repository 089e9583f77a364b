// Package packet is fleetmq's codec for MQTT 3.1.1 (protocol level 4) and MQTT 5
// (protocol level 5): every control packet, every v5 property and reason code,
// variable byte integers and UTF-8 validation. MQTT 3.1 (protocol name
// "MQIsdp", level 3) is decoded and encoded as 3.1.1, with the few rules 3.1
// does not have left out (see Version31).
//
// Decoding never panics on hostile input: a malformed packet yields an *Error
// whose Code is the reason code the broker should answer with (v5 DISCONNECT)
// before closing the connection. Encoding appends to a caller-owned buffer so
// the broker can reuse write buffers without allocating.
//
// A decoded packet owns the body slice it was decoded from: strings and byte
// slices in the packet may alias it, so callers must hand Decode a buffer they
// will not reuse.
package packet

// Type is the MQTT control packet type (the high nibble of the fixed header).
type Type byte

// Control packet types.
const (
	CONNECT     Type = 1
	CONNACK     Type = 2
	PUBLISH     Type = 3
	PUBACK      Type = 4
	PUBREC      Type = 5
	PUBREL      Type = 6
	PUBCOMP     Type = 7
	SUBSCRIBE   Type = 8
	SUBACK      Type = 9
	UNSUBSCRIBE Type = 10
	UNSUBACK    Type = 11
	PINGREQ     Type = 12
	PINGRESP    Type = 13
	DISCONNECT  Type = 14
	AUTH        Type = 15
)

// Protocol levels carried in CONNECT.
//
// Version31 is MQTT 3.1 (protocol name "MQIsdp"), which is 3.1.1 with fewer
// rules: passed as the version, Decode and DecodeAck accept the DUP flag on
// PUBREL, SUBSCRIBE and UNSUBSCRIBE (3.1 sets it on their retransmission),
// and a 3.1 CONNECT may have its reserved flag set, Will QoS or Will Retain
// without the Will Flag (both ignored) and a password without a user name.
// Anything else, Encode included, is 3.1.1; a 3.1 CONNACK has no Session
// Present flag, so a server leaves it false.
const (
	Version31  byte = 3
	Version311 byte = 4
	Version5   byte = 5
)

// Packet is any decoded or to-be-encoded control packet.
type Packet interface {
	Type() Type
}

// UserProperty is one v5 User Property (a name/value string pair).
type UserProperty struct {
	Key, Value string
}

// PropID is a v5 property identifier.
type PropID byte

// Property identifiers (MQTT 5, section 2.2.2.2).
const (
	PropPayloadFormat        PropID = 0x01
	PropMessageExpiry        PropID = 0x02
	PropContentType          PropID = 0x03
	PropResponseTopic        PropID = 0x08
	PropCorrelationData      PropID = 0x09
	PropSubscriptionID       PropID = 0x0B
	PropSessionExpiry        PropID = 0x11
	PropAssignedClientID     PropID = 0x12
	PropServerKeepAlive      PropID = 0x13
	PropAuthMethod           PropID = 0x15
	PropAuthData             PropID = 0x16
	PropRequestProblemInfo   PropID = 0x17
	PropWillDelay            PropID = 0x18
	PropRequestResponseInfo  PropID = 0x19
	PropResponseInfo         PropID = 0x1A
	PropServerReference      PropID = 0x1C
	PropReasonString         PropID = 0x1F
	PropReceiveMaximum       PropID = 0x21
	PropTopicAliasMaximum    PropID = 0x22
	PropTopicAlias           PropID = 0x23
	PropMaximumQoS           PropID = 0x24
	PropRetainAvailable      PropID = 0x25
	PropUser                 PropID = 0x26
	PropMaximumPacketSize    PropID = 0x27
	PropWildcardSubAvailable PropID = 0x28
	PropSubIDAvailable       PropID = 0x29
	PropSharedSubAvailable   PropID = 0x2A
)

// Properties holds the v5 properties of a packet. Presence of every property
// except User and SubscriptionIDs is tracked in a bit set indexed by PropID,
// so a zero value (for example an empty Content Type) can still be present.
// Use Has to test presence and the Set* methods to set a value and mark it
// present. Under MQTT 3.1.1 properties are neither encoded nor decoded.
type Properties struct {
	present uint64

	// Fields are grouped by size so the struct has no padding: it is part
	// of every message the broker routes.
	ContentType      string
	ResponseTopic    string
	AssignedClientID string
	AuthMethod       string
	ResponseInfo     string
	ServerReference  string
	ReasonString     string
	CorrelationData  []byte
	SubscriptionIDs  []uint32 // PUBLISH may carry several; SUBSCRIBE at most one
	AuthData         []byte
	User             []UserProperty

	MessageExpiry     uint32
	SessionExpiry     uint32
	WillDelay         uint32
	MaximumPacketSize uint32

	ServerKeepAlive   uint16
	ReceiveMaximum    uint16
	TopicAliasMaximum uint16
	TopicAlias        uint16

	PayloadFormat        byte
	RequestProblemInfo   byte
	RequestResponseInfo  byte
	MaximumQoS           byte
	RetainAvailable      byte
	WildcardSubAvailable byte
	SubIDAvailable       byte
	SharedSubAvailable   byte
}

// Has reports whether property id is present. For PropUser and
// PropSubscriptionID it reports whether the slice is non-empty.
func (p *Properties) Has(id PropID) bool {
	switch id {
	case PropUser:
		return len(p.User) > 0
	case PropSubscriptionID:
		return len(p.SubscriptionIDs) > 0
	}
	return p.present&(1<<uint64(id)) != 0
}

// Mark marks property id present (its field must already hold the value).
func (p *Properties) Mark(id PropID) { p.present |= 1 << uint64(id) }

// Clear marks property id absent and zeroes nothing else.
func (p *Properties) Clear(id PropID) { p.present &^= 1 << uint64(id) }

// Empty reports whether no property at all is present.
func (p *Properties) Empty() bool {
	return p.present == 0 && len(p.User) == 0 && len(p.SubscriptionIDs) == 0
}

// SetMessageExpiry sets Message Expiry Interval (seconds).
func (p *Properties) SetMessageExpiry(v uint32) { p.MessageExpiry = v; p.Mark(PropMessageExpiry) }

// SetTopicAlias sets Topic Alias.
func (p *Properties) SetTopicAlias(v uint16) { p.TopicAlias = v; p.Mark(PropTopicAlias) }

// SetReasonString sets Reason String.
func (p *Properties) SetReasonString(v string) { p.ReasonString = v; p.Mark(PropReasonString) }

// SetSessionExpiry sets Session Expiry Interval (seconds).
func (p *Properties) SetSessionExpiry(v uint32) { p.SessionExpiry = v; p.Mark(PropSessionExpiry) }

// SetUint16 sets one of the two-byte integer properties (ServerKeepAlive,
// ReceiveMaximum, TopicAliasMaximum, TopicAlias) and marks it present.
// SetByte and SetUint32 do the same for byte and four-byte properties;
// SetString for the string ones.
func (p *Properties) SetUint16(id PropID, v uint16) {
	switch id {
	case PropServerKeepAlive:
		p.ServerKeepAlive = v
	case PropReceiveMaximum:
		p.ReceiveMaximum = v
	case PropTopicAliasMaximum:
		p.TopicAliasMaximum = v
	case PropTopicAlias:
		p.TopicAlias = v
	default:
		return
	}
	p.Mark(id)
}

// SetByte sets a one-byte property (PayloadFormat, RequestProblemInfo,
// RequestResponseInfo, MaximumQoS, RetainAvailable, WildcardSubAvailable,
// SubIDAvailable, SharedSubAvailable) and marks it present.
func (p *Properties) SetByte(id PropID, v byte) {
	switch id {
	case PropPayloadFormat:
		p.PayloadFormat = v
	case PropRequestProblemInfo:
		p.RequestProblemInfo = v
	case PropRequestResponseInfo:
		p.RequestResponseInfo = v
	case PropMaximumQoS:
		p.MaximumQoS = v
	case PropRetainAvailable:
		p.RetainAvailable = v
	case PropWildcardSubAvailable:
		p.WildcardSubAvailable = v
	case PropSubIDAvailable:
		p.SubIDAvailable = v
	case PropSharedSubAvailable:
		p.SharedSubAvailable = v
	default:
		return
	}
	p.Mark(id)
}

// SetUint32 sets a four-byte property (MessageExpiry, SessionExpiry,
// WillDelay, MaximumPacketSize) and marks it present.
func (p *Properties) SetUint32(id PropID, v uint32) {
	switch id {
	case PropMessageExpiry:
		p.MessageExpiry = v
	case PropSessionExpiry:
		p.SessionExpiry = v
	case PropWillDelay:
		p.WillDelay = v
	case PropMaximumPacketSize:
		p.MaximumPacketSize = v
	default:
		return
	}
	p.Mark(id)
}

// SetString sets a string property (ContentType, ResponseTopic,
// AssignedClientID, AuthMethod, ResponseInfo, ServerReference, ReasonString)
// and marks it present.
func (p *Properties) SetString(id PropID, v string) {
	switch id {
	case PropContentType:
		p.ContentType = v
	case PropResponseTopic:
		p.ResponseTopic = v
	case PropAssignedClientID:
		p.AssignedClientID = v
	case PropAuthMethod:
		p.AuthMethod = v
	case PropResponseInfo:
		p.ResponseInfo = v
	case PropServerReference:
		p.ServerReference = v
	case PropReasonString:
		p.ReasonString = v
	default:
		return
	}
	p.Mark(id)
}

// Will is the will message carried in CONNECT.
type Will struct {
	Topic      string
	Payload    []byte
	QoS        byte
	Retain     bool
	Properties Properties // v5 will properties (WillDelay, MessageExpiry, ...)
}

// Connect is the CONNECT packet.
type Connect struct {
	ProtocolName  string // "MQTT" ("MQIsdp" for 3.1)
	ProtocolLevel byte   // Version311 or Version5 (Version31 with "MQIsdp")
	CleanStart    bool   // Clean Session in 3.1.1
	KeepAlive     uint16 // seconds
	ClientID      string
	HasUsername   bool
	Username      string
	HasPassword   bool
	Password      []byte
	Will          *Will // nil when the Will Flag is 0
	Properties    Properties
}

// Connack is the CONNACK packet. Under 3.1.1 ReasonCode is encoded as the
// return code (use V3ReturnCode to map a v5 reason code).
type Connack struct {
	SessionPresent bool
	ReasonCode     ReasonCode
	Properties     Properties
}

// Publish is the PUBLISH packet.
type Publish struct {
	Dup        bool
	QoS        byte
	Retain     bool
	Topic      string // may be empty in v5 when a Topic Alias is set
	PacketID   uint16 // only for QoS 1 and 2
	Properties Properties
	Payload    []byte
}

// Ack is PUBACK, PUBREC, PUBREL or PUBCOMP, told apart by Kind. Under 3.1.1
// only PacketID is on the wire. Under v5 a Success reason code with no
// properties is encoded in the short form.
type Ack struct {
	Kind       Type // PUBACK, PUBREC, PUBREL or PUBCOMP
	PacketID   uint16
	ReasonCode ReasonCode
	Properties Properties
}

// Subscription is one topic filter of a SUBSCRIBE with its options.
type Subscription struct {
	Filter            string
	QoS               byte // maximum QoS requested
	NoLocal           bool // v5
	RetainAsPublished bool // v5
	RetainHandling    byte // v5: 0, 1 or 2
}

// Subscribe is the SUBSCRIBE packet.
type Subscribe struct {
	PacketID      uint16
	Properties    Properties // SubscriptionIDs holds at most one identifier
	Subscriptions []Subscription
}

// Suback is the SUBACK packet; one reason code per requested filter. Under
// 3.1.1 codes at or above 0x80 are encoded as 0x80.
type Suback struct {
	PacketID    uint16
	Properties  Properties
	ReasonCodes []ReasonCode
}

// Unsubscribe is the UNSUBSCRIBE packet.
type Unsubscribe struct {
	PacketID   uint16
	Properties Properties
	Filters    []string
}

// Unsuback is the UNSUBACK packet. Under 3.1.1 it carries no reason codes.
type Unsuback struct {
	PacketID    uint16
	Properties  Properties
	ReasonCodes []ReasonCode
}

// Pingreq is the PINGREQ packet.
type Pingreq struct{}

// Pingresp is the PINGRESP packet.
type Pingresp struct{}

// Disconnect is the DISCONNECT packet (reason code and properties are v5 only).
type Disconnect struct {
	ReasonCode ReasonCode
	Properties Properties
}

// Auth is the v5 AUTH packet.
type Auth struct {
	ReasonCode ReasonCode
	Properties Properties
}

func (*Connect) Type() Type     { return CONNECT }
func (*Connack) Type() Type     { return CONNACK }
func (*Publish) Type() Type     { return PUBLISH }
func (a *Ack) Type() Type       { return a.Kind }
func (*Subscribe) Type() Type   { return SUBSCRIBE }
func (*Suback) Type() Type      { return SUBACK }
func (*Unsubscribe) Type() Type { return UNSUBSCRIBE }
func (*Unsuback) Type() Type    { return UNSUBACK }
func (*Pingreq) Type() Type     { return PINGREQ }
func (*Pingresp) Type() Type    { return PINGRESP }
func (*Disconnect) Type() Type  { return DISCONNECT }
func (*Auth) Type() Type        { return AUTH }
