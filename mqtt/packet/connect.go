package packet

// CONNECT flag bits (section 3.1.2.3).
const (
	connReserved   = 0x01
	connCleanStart = 0x02
	connWill       = 0x04
	connWillQoS    = 0x18
	connWillRetain = 0x20
	connPassword   = 0x40
	connUsername   = 0x80
)

// decodeConnect decodes a CONNECT body. Once the protocol name and level are
// known it returns the Connect decoded so far along with any error; see
// Decode.
func decodeConnect(body []byte) (*Connect, error) {
	r := reader{b: body}
	name, err := r.bytes("protocol name")
	if err != nil {
		return nil, err
	}
	level, err := r.byte("protocol level")
	if err != nil {
		return nil, err
	}
	c := &Connect{ProtocolLevel: level}
	switch string(name) {
	case "MQTT":
		c.ProtocolName = "MQTT" // no allocation for the usual name
	case "MQIsdp":
		c.ProtocolName = "MQIsdp"
	default:
		// MQTT-3.1.2-1: the Server MAY disconnect; there is no CONNACK
		// code for a foreign protocol.
		if err := checkUTF8(name, "protocol name"); err != nil {
			return c, err
		}
		c.ProtocolName = string(name)
		return c, protocolErr("unknown protocol name %q", c.ProtocolName)
	}
	switch {
	case c.ProtocolName == "MQTT" && (level == Version311 || level == Version5):
	case c.ProtocolName == "MQIsdp" && level == Version31:
	default:
		return c, Errorf(UnsupportedProtocolVersion, "protocol %s level %d", c.ProtocolName, level)
	}
	v5, v31 := level == Version5, level == Version31
	flags, err := r.byte("connect flags")
	if err != nil {
		return c, err
	}
	if flags&connReserved != 0 && !v31 { // 3.1: "not used"
		return c, malformed("CONNECT reserved flag set") // MQTT-3.1.2-3
	}
	c.CleanStart = flags&connCleanStart != 0
	c.HasUsername = flags&connUsername != 0
	c.HasPassword = flags&connPassword != 0
	willQoS := flags & connWillQoS >> 3
	willRetain := flags&connWillRetain != 0
	if flags&connWill == 0 {
		if v31 { // 3.1 has no rule for them: ignored
			willQoS, willRetain = 0, false
		} else if willQoS != 0 || willRetain { // MQTT-3.1.2-11, -13
			return c, malformed("will QoS or retain set without the will flag")
		}
	} else if willQoS == 3 { // MQTT-3.1.2-12; "a Malformed Packet" in v5
		return c, malformed("will QoS 3")
	}
	if !v5 && !v31 && c.HasPassword && !c.HasUsername {
		return c, malformed("password flag without user name flag") // 3.1.1: MQTT-3.1.2-22
	}
	if c.KeepAlive, err = r.uint16("keep alive"); err != nil {
		return c, err
	}
	if v5 {
		if err := r.props(&c.Properties, CONNECT); err != nil {
			return c, err
		}
		if c.Properties.Has(PropAuthData) && !c.Properties.Has(PropAuthMethod) {
			return c, protocolErr("Authentication Data without Authentication Method")
		}
	}
	if c.ClientID, err = r.string("client identifier"); err != nil {
		return c, err
	}
	if flags&connWill != 0 {
		w := &Will{QoS: willQoS, Retain: willRetain}
		if v5 {
			if err := r.props(&w.Properties, willContext); err != nil {
				return c, err
			}
			if err := checkResponseTopic(&w.Properties); err != nil {
				return c, err
			}
		}
		topic, err := r.bytes("will topic")
		if err != nil {
			return c, err
		}
		if len(topic) == 0 {
			return c, Errorf(TopicNameInvalid, "empty will topic")
		}
		if err := checkTopicName(topic, "will topic"); err != nil {
			return c, err
		}
		w.Topic = r.str(topic)
		if w.Payload, err = r.bytes("will payload"); err != nil {
			return c, err
		}
		c.Will = w
	}
	if c.HasUsername {
		if c.Username, err = r.string("user name"); err != nil {
			return c, err
		}
	}
	if c.HasPassword {
		if c.Password, err = r.bytes("password"); err != nil {
			return c, err
		}
	}
	return c, r.end(CONNECT)
}

// connect appends the body of c, in the format of c.ProtocolLevel.
func (w *writer) connect(c *Connect) {
	name := c.ProtocolName
	if name == "" {
		name = "MQTT"
	}
	v5 := c.ProtocolLevel == Version5
	w.string(name, "protocol name")
	flags := byte(0)
	if c.CleanStart {
		flags |= connCleanStart
	}
	if c.Will != nil {
		if c.Will.QoS > 2 {
			w.fail(malformed("will QoS %d", c.Will.QoS))
			return
		}
		flags |= connWill | c.Will.QoS<<3
		if c.Will.Retain {
			flags |= connWillRetain
		}
	}
	if c.HasPassword {
		flags |= connPassword
	}
	if c.HasUsername {
		flags |= connUsername
	}
	w.b = append(w.b, c.ProtocolLevel, flags, byte(c.KeepAlive>>8), byte(c.KeepAlive))
	if v5 {
		w.props(&c.Properties, CONNECT)
	}
	w.string(c.ClientID, "client identifier")
	if c.Will != nil {
		if v5 {
			w.props(&c.Will.Properties, willContext)
		}
		w.string(c.Will.Topic, "will topic")
		w.bytes(c.Will.Payload, "will payload")
	}
	if c.HasUsername {
		w.string(c.Username, "user name")
	}
	if c.HasPassword {
		w.bytes(c.Password, "password")
	}
}
