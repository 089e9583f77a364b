package packet

import "strings"

// ParseHeader parses the fixed header at the start of b: the first byte and
// the Remaining Length. n is the number of bytes the fixed header takes, so
// the packet body is b[n:n+remaining]. It returns ErrIncomplete if b does not
// yet hold the whole fixed header, and an *Error with Code MalformedPacket if
// the Remaining Length is longer than 4 bytes or not minimally encoded. The
// packet type and flags are checked by Decode, not here.
func ParseHeader(b []byte) (header byte, remaining int, n int, err error) {
	if len(b) < 2 {
		return 0, 0, 0, ErrIncomplete
	}
	remaining, vn, err := Varint(b[1:])
	if err != nil {
		return 0, 0, 0, err
	}
	return b[0], remaining, 1 + vn, nil
}

// fixedFlags are the required flag bits of every packet type but PUBLISH
// (section 2.1.3); any other value is a Malformed Packet.
var fixedFlags = [16]byte{PUBREL: 0b0010, SUBSCRIBE: 0b0010, UNSUBSCRIBE: 0b0010}

// Decode decodes one packet given the first byte of its fixed header and its
// complete body (exactly Remaining Length bytes). version is the protocol
// level of the connection: Version5 decodes MQTT 5, anything else MQTT 3.1.1
// (Version31 with 3.1's leniencies, see Version31). For CONNECT version is
// ignored: the level comes from the packet.
//
// Decode takes ownership of body: byte slices in the result alias it in
// every packet type (payloads, passwords, Correlation Data, and the
// Authentication Data of CONNECT, CONNACK and AUTH), and so do the topic and
// every string of a PUBLISH, which are made with unsafe.String to keep
// decoding a PUBLISH to one allocation. body must therefore not be modified
// or reused while those fields are in use; copy a PUBLISH topic with
// strings.Clone before keeping it longer than the message (a topic alias
// table, for instance) so it does not pin the whole body. Strings of the
// other packets are copied, so a packet without byte slices (acks, SUBACK,
// DISCONNECT...) may be decoded from a reused buffer. Empty byte slices are
// returned as nil. Decode never writes to body.
//
// Any problem yields an *Error whose Code is the reason code to answer with:
// MalformedPacket or ProtocolError as the spec prescribes for the rule broken,
// and a few more precise codes (TopicNameInvalid for a PUBLISH topic with a
// wildcard, TopicAliasInvalid for Topic Alias 0, UnsupportedProtocolVersion).
// Decode never panics.
//
// CONNECT is special: once the protocol name and level are read, a failing
// Decode still returns the partly filled *Connect (at least ProtocolName and
// ProtocolLevel set) with the error, so that the broker can answer in the
// right CONNACK form. For a protocol level the name does not go with ("MQTT"
// with anything but 4 or 5, "MQIsdp" with anything but 3), the error Code is
// UnsupportedProtocolVersion: answer CONNACK 0x01 (3.1.1 form) or 0x84 (v5
// form) and close.
//
// Decode checks what a single packet can show. Rules that need connection
// state are the broker's: Topic Alias against Topic Alias Maximum, Receive
// Maximum, Subscription Identifiers in a PUBLISH from a client (MQTT-3.3.4-6),
// topic filter syntax (answered per filter in SUBACK), payload format.
func Decode(header byte, body []byte, version byte) (Packet, error) {
	t := Type(header >> 4)
	flags := header & 0x0F
	v5 := version == Version5
	if t == PUBLISH {
		return result(decodePublish(flags, body, v5))
	}
	if t == 0 {
		return nil, malformed("reserved packet type 0")
	}
	if t == AUTH && !v5 {
		return nil, malformed("AUTH is not an MQTT 3.1.1 packet")
	}
	if err := checkFlags(t, flags, version); err != nil {
		return nil, err
	}
	switch t {
	case CONNECT:
		c, err := decodeConnect(body)
		if c == nil {
			return nil, err
		}
		return c, err
	case CONNACK:
		return result(decodeConnack(body, v5))
	case PUBACK, PUBREC, PUBREL, PUBCOMP:
		return result(decodeAck(t, body, v5))
	case SUBSCRIBE:
		return result(decodeSubscribe(body, v5))
	case SUBACK:
		return result(decodeSuback(body, v5))
	case UNSUBSCRIBE:
		return result(decodeUnsubscribe(body, v5))
	case UNSUBACK:
		return result(decodeUnsuback(body, v5))
	case PINGREQ, PINGRESP:
		if len(body) != 0 {
			return nil, malformed("%s with a %d-byte body", t, len(body))
		}
		if t == PINGREQ {
			return &Pingreq{}, nil
		}
		return &Pingresp{}, nil
	case DISCONNECT:
		return result(decodeDisconnect(body, v5))
	default: // AUTH
		return result(decodeAuth(body))
	}
}

// checkFlags checks the fixed header flags of a packet other than PUBLISH.
// MQTT 3.1 sets DUP (bit 3) on a PUBREL, SUBSCRIBE or UNSUBSCRIBE it sends
// again, so Version31 takes it there.
func checkFlags(t Type, flags, version byte) error {
	if flags == fixedFlags[t] || version == Version31 && fixedFlags[t] != 0 && flags == fixedFlags[t]|0b1000 {
		return nil
	}
	return malformed("%s fixed header flags are 0x%X, must be 0x%X", t, flags, fixedFlags[t])
}

// result converts a decoder's typed result, so that an error never comes
// with a non-nil Packet holding a nil pointer.
func result[P Packet](p P, err error) (Packet, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

// end reports bytes left after the last field (MQTT packets have no padding).
func (r *reader) end(t Type) error {
	if r.rest() != 0 {
		return malformed("%s has %d trailing bytes", t, r.rest())
	}
	return nil
}

// packetID reads a Packet Identifier, which must be non-zero (MQTT-2.2.1-3);
// 0 is treated as a Protocol Error.
func (r *reader) packetID(t Type) (uint16, error) {
	id, err := r.uint16("packet identifier")
	if err != nil {
		return 0, err
	}
	if id == 0 {
		return 0, protocolErr("%s with packet identifier 0", t)
	}
	return id, nil
}

func decodePublish(flags byte, body []byte, v5 bool) (*Publish, error) {
	p := &Publish{}
	if err := decodePublishInto(p, flags, body, v5); err != nil {
		return nil, err
	}
	return p, nil
}

// DecodePublish decodes a PUBLISH into p, which the caller owns and may
// reuse once it is done with the packet: the broker's per-message path
// decodes PUBLISHes into pooled packets. p's fields may alias body (like
// Decode's); on error p holds nothing to use.
func DecodePublish(header byte, body []byte, version byte, p *Publish) error {
	if t := Type(header >> 4); t != PUBLISH {
		return malformed("%s is not a PUBLISH", t)
	}
	return decodePublishInto(p, header&0x0F, body, version == Version5)
}

func decodePublishInto(p *Publish, flags byte, body []byte, v5 bool) error {
	qos := flags >> 1 & 3
	if qos == 3 {
		return malformed("PUBLISH with QoS 3") // MQTT-3.3.1-4
	}
	dup := flags&0b1000 != 0
	if dup && qos == 0 {
		// MQTT-3.3.1-2 gives no reason code; a fixed header flag that breaks
		// the rules is a Malformed Packet (section 2.1.3), so use that.
		return malformed("PUBLISH with DUP set at QoS 0")
	}
	r := reader{b: body, alias: true}
	topic, err := r.bytes("topic name")
	if err != nil {
		return err
	}
	if err := checkTopicName(topic, "topic name"); err != nil {
		return err
	}
	*p = Publish{Dup: dup, QoS: qos, Retain: flags&1 != 0, Topic: r.str(topic)}
	if qos > 0 {
		if p.PacketID, err = r.packetID(PUBLISH); err != nil {
			return err
		}
	}
	if v5 {
		if err := r.props(&p.Properties, PUBLISH); err != nil {
			return err
		}
		if err := checkResponseTopic(&p.Properties); err != nil {
			return err
		}
	}
	if len(topic) == 0 && !p.Properties.Has(PropTopicAlias) {
		// MQTT 5, 3.3.2.1: a Protocol Error. 3.1.1 (4.7.3) forbids empty
		// topic names without naming an error; use the same code.
		if !v5 {
			return protocolErr("empty topic name")
		}
		return protocolErr("empty topic name without a Topic Alias")
	}
	if r.rest() > 0 {
		p.Payload = body[r.off:len(body):len(body)]
	}
	return nil
}

// checkTopicName validates a topic name (PUBLISH or will): UTF-8 rules, and
// no wildcard characters (MQTT-3.3.2-2), reported as TopicNameInvalid.
// Emptiness is left to the caller (v5 allows it with a Topic Alias).
func checkTopicName(b []byte, what string) error {
	for _, c := range b {
		if c == '+' || c == '#' {
			return Errorf(TopicNameInvalid, "wildcard %q in %s", c, what)
		}
	}
	return checkUTF8(b, what)
}

// checkResponseTopic enforces MQTT-3.3.2-14: a Response Topic (of a
// PUBLISH or a will) must not contain wildcard characters, and, a topic
// name, must not be empty [MQTT-4.7.3-1]. The packet parses, so it is a
// Protocol Error, not a Malformed Packet.
func checkResponseTopic(p *Properties) error {
	if !p.Has(PropResponseTopic) {
		return nil
	}
	if i := strings.IndexAny(p.ResponseTopic, "+#"); i >= 0 {
		return protocolErr("wildcard %q in Response Topic", p.ResponseTopic[i])
	}
	if p.ResponseTopic == "" { // a topic name has a character at least [MQTT-4.7.3-1]
		return protocolErr("empty Response Topic")
	}
	return nil
}

func decodeAck(t Type, body []byte, v5 bool) (*Ack, error) {
	a := &Ack{}
	if err := decodeAckInto(a, t, body, v5); err != nil {
		return nil, err
	}
	return a, nil
}

// DecodeAck decodes a PUBACK, PUBREC, PUBREL or PUBCOMP into a, which the
// caller owns and may reuse: the broker's per-message path decodes acks
// without allocating. a's fields may alias body (like Decode's).
func DecodeAck(header byte, body []byte, version byte, a *Ack) error {
	t := Type(header >> 4)
	if t < PUBACK || t > PUBCOMP {
		return malformed("%s is not an acknowledgement", t)
	}
	if err := checkFlags(t, header&0x0F, version); err != nil {
		return err
	}
	*a = Ack{}
	return decodeAckInto(a, t, body, version == Version5)
}

func decodeAckInto(a *Ack, t Type, body []byte, v5 bool) error {
	r := reader{b: body}
	id, err := r.packetID(t)
	if err != nil {
		return err
	}
	a.Kind, a.PacketID = t, id
	// v5 short forms: Remaining Length 2 means Success and no properties,
	// 3 means a reason code and no properties (section 3.4.2.1).
	if v5 && r.rest() > 0 {
		rc, _ := r.byte("reason code")
		a.ReasonCode = ReasonCode(rc)
		if !ackCodes(t).has(a.ReasonCode) {
			return protocolErr("reason code 0x%02X is not valid in %s", rc, t)
		}
		if r.rest() > 0 {
			if err := r.props(&a.Properties, t); err != nil {
				return err
			}
		}
	}
	return r.end(t)
}

func decodeConnack(body []byte, v5 bool) (*Connack, error) {
	r := reader{b: body}
	flags, err := r.byte("acknowledge flags")
	if err != nil {
		return nil, err
	}
	if flags&^1 != 0 {
		return nil, malformed("CONNACK reserved flags set (0x%02X)", flags) // MQTT-3.2.2-1
	}
	code, err := r.byte("reason code")
	if err != nil {
		return nil, err
	}
	c := &Connack{SessionPresent: flags == 1, ReasonCode: ReasonCode(code)}
	if v5 {
		if !connackCodes.has(c.ReasonCode) {
			return nil, protocolErr("reason code 0x%02X is not valid in CONNACK", code)
		}
		if err := r.props(&c.Properties, CONNACK); err != nil {
			return nil, err
		}
	} else {
		rc, ok := reasonFromV3(code)
		if !ok {
			return nil, protocolErr("reserved CONNACK return code %d", code)
		}
		c.ReasonCode = rc
	}
	if c.SessionPresent && c.ReasonCode != Success {
		return nil, protocolErr("session present with a refused connection") // MQTT-3.2.2-4, -6
	}
	if err := r.end(CONNACK); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeSubscribe(body []byte, v5 bool) (*Subscribe, error) {
	r := reader{b: body}
	id, err := r.packetID(SUBSCRIBE)
	if err != nil {
		return nil, err
	}
	s := &Subscribe{PacketID: id}
	if v5 {
		if err := r.props(&s.Properties, SUBSCRIBE); err != nil {
			return nil, err
		}
	}
	for r.rest() > 0 {
		filter, err := r.string("topic filter")
		if err != nil {
			return nil, err
		}
		if filter == "" {
			// MQTT-4.7.3-1: at least one character; 3.1.1 (4.8.0-1) and 5
			// (4.13) both end the connection.
			return nil, protocolErr("empty topic filter in SUBSCRIBE")
		}
		opts, err := r.byte("subscription options")
		if err != nil {
			return nil, err
		}
		sub := Subscription{Filter: filter, QoS: opts & 3}
		if !v5 {
			if opts&^3 != 0 || sub.QoS == 3 { // MQTT-3.8.3-4
				return nil, malformed("invalid requested QoS byte 0x%02X", opts)
			}
		} else {
			if opts&0xC0 != 0 { // MQTT-3.8.3-5
				return nil, malformed("reserved subscription option bits set (0x%02X)", opts)
			}
			sub.NoLocal = opts&0x04 != 0
			sub.RetainAsPublished = opts&0x08 != 0
			sub.RetainHandling = opts >> 4 & 3
			if sub.QoS == 3 {
				return nil, protocolErr("subscription with maximum QoS 3")
			}
			if sub.RetainHandling == 3 {
				return nil, protocolErr("subscription with Retain Handling 3")
			}
			if sub.NoLocal && len(filter) >= 7 && filter[:7] == "$share/" {
				return nil, protocolErr("No Local on a shared subscription") // MQTT-3.8.3-4
			}
		}
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	if len(s.Subscriptions) == 0 {
		return nil, protocolErr("SUBSCRIBE without topic filters") // MQTT-3.8.3-2
	}
	return s, nil
}

func decodeSuback(body []byte, v5 bool) (*Suback, error) {
	r := reader{b: body}
	id, err := r.packetID(SUBACK)
	if err != nil {
		return nil, err
	}
	s := &Suback{PacketID: id}
	codes := &subackV3Codes
	if v5 {
		codes = &subackCodes
		if err := r.props(&s.Properties, SUBACK); err != nil {
			return nil, err
		}
	}
	if r.rest() == 0 {
		return nil, protocolErr("SUBACK without reason codes")
	}
	s.ReasonCodes = make([]ReasonCode, r.rest())
	for i, c := range body[r.off:] {
		if !codes.has(ReasonCode(c)) {
			return nil, protocolErr("reason code 0x%02X is not valid in SUBACK", c)
		}
		s.ReasonCodes[i] = ReasonCode(c)
	}
	return s, nil
}

func decodeUnsubscribe(body []byte, v5 bool) (*Unsubscribe, error) {
	r := reader{b: body}
	id, err := r.packetID(UNSUBSCRIBE)
	if err != nil {
		return nil, err
	}
	u := &Unsubscribe{PacketID: id}
	if v5 {
		if err := r.props(&u.Properties, UNSUBSCRIBE); err != nil {
			return nil, err
		}
	}
	for r.rest() > 0 {
		filter, err := r.string("topic filter")
		if err != nil {
			return nil, err
		}
		if filter == "" {
			return nil, protocolErr("empty topic filter in UNSUBSCRIBE") // MQTT-4.7.3-1
		}
		u.Filters = append(u.Filters, filter)
	}
	if len(u.Filters) == 0 {
		return nil, protocolErr("UNSUBSCRIBE without topic filters") // MQTT-3.10.3-2
	}
	return u, nil
}

func decodeUnsuback(body []byte, v5 bool) (*Unsuback, error) {
	r := reader{b: body}
	id, err := r.packetID(UNSUBACK)
	if err != nil {
		return nil, err
	}
	u := &Unsuback{PacketID: id}
	if !v5 {
		if err := r.end(UNSUBACK); err != nil {
			return nil, err
		}
		return u, nil
	}
	if err := r.props(&u.Properties, UNSUBACK); err != nil {
		return nil, err
	}
	if r.rest() == 0 {
		return nil, protocolErr("UNSUBACK without reason codes")
	}
	u.ReasonCodes = make([]ReasonCode, r.rest())
	for i, c := range body[r.off:] {
		if !unsubackCodes.has(ReasonCode(c)) {
			return nil, protocolErr("reason code 0x%02X is not valid in UNSUBACK", c)
		}
		u.ReasonCodes[i] = ReasonCode(c)
	}
	return u, nil
}

func decodeDisconnect(body []byte, v5 bool) (*Disconnect, error) {
	d := &Disconnect{}
	if !v5 {
		if len(body) != 0 {
			return nil, malformed("DISCONNECT with a %d-byte body", len(body))
		}
		return d, nil
	}
	// Remaining Length 0: Normal disconnection; 1: reason code only
	// (section 3.14.2.2.1).
	if err := decodeReason(d, &d.ReasonCode, &d.Properties, body, &disconnectCodes); err != nil {
		return nil, err
	}
	return d, nil
}

func decodeAuth(body []byte) (*Auth, error) {
	a := &Auth{}
	// Remaining Length 0 means Success without properties (3.15.2.1); a
	// reason code without Property Length is accepted as for DISCONNECT.
	if err := decodeReason(a, &a.ReasonCode, &a.Properties, body, &authCodes); err != nil {
		return nil, err
	}
	return a, nil
}

// decodeReason decodes the optional reason code and properties that make up
// the whole body of a v5 DISCONNECT or AUTH.
func decodeReason(p Packet, rc *ReasonCode, props *Properties, body []byte, codes *codeSet) error {
	t := p.Type()
	r := reader{b: body}
	if len(body) == 0 {
		return nil
	}
	c, _ := r.byte("reason code")
	if !codes.has(ReasonCode(c)) {
		return protocolErr("reason code 0x%02X is not valid in %s", c, t)
	}
	*rc = ReasonCode(c)
	if r.rest() > 0 {
		if err := r.props(props, t); err != nil {
			return err
		}
	}
	return r.end(t)
}
