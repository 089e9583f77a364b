package packet

import (
	"errors"
	"testing"
)

type badPacket struct {
	name    string
	version byte
	header  byte
	body    []byte
	code    ReasonCode
}

// connectBody is the body of a CONNECT with the given level and flags,
// keep alive 60, followed by rest.
func connectBody(level, flags byte, rest ...any) []byte {
	return raw(append([]any{0, 4, "MQTT", level, flags, 0, 60}, rest...)...)
}

const (
	v31 = Version31
	v3  = Version311
	v5  = Version5
)

var badPackets = []badPacket{
	// Fixed header.
	{"reserved type 0", v5, 0x00, nil, MalformedPacket},
	{"CONNACK flags", v5, 0x21, raw(0, 0, 0), MalformedPacket},
	{"PUBREL flags 0", v5, 0x60, raw(0, 1), MalformedPacket},
	{"PUBACK flags 2", v3, 0x42, raw(0, 1), MalformedPacket},
	{"SUBSCRIBE flags 0", v3, 0x80, raw(0, 1, 0, 1, "a", 0), MalformedPacket},
	{"UNSUBSCRIBE flags 0", v3, 0xA0, raw(0, 1, 0, 1, "a"), MalformedPacket},
	{"PINGREQ flags", v3, 0xC1, nil, MalformedPacket},
	{"DISCONNECT flags", v5, 0xE8, nil, MalformedPacket},
	{"AUTH under 3.1.1", v3, 0xF0, nil, MalformedPacket},
	{"PUBLISH QoS 3", v3, 0x36, raw(0, 1, "a", 0, 1), MalformedPacket},
	{"PUBLISH DUP at QoS 0", v5, 0x38, raw(0, 1, "a", 0), MalformedPacket},

	// PUBLISH.
	{"PUBLISH empty body", v3, 0x30, nil, MalformedPacket},
	{"PUBLISH topic past end", v3, 0x30, raw(0, 5, "a"), MalformedPacket},
	{"PUBLISH one length byte", v3, 0x30, raw(0), MalformedPacket},
	{"PUBLISH invalid UTF-8", v3, 0x30, raw(0, 2, 0xC3, 0x28), MalformedPacket},
	{"PUBLISH overlong UTF-8", v3, 0x30, raw(0, 2, 0xC0, 0xAF), MalformedPacket},
	{"PUBLISH UTF-16 surrogate", v5, 0x30, raw(0, 3, 0xED, 0xA0, 0x80, 0), MalformedPacket},
	{"PUBLISH U+0000 in topic", v3, 0x30, raw(0, 3, "a", 0, "b"), MalformedPacket},
	{"PUBLISH wildcard +", v3, 0x30, raw(0, 3, "a/+"), TopicNameInvalid},
	{"PUBLISH wildcard #", v5, 0x30, raw(0, 3, "a/#", 0), TopicNameInvalid},
	{"PUBLISH empty topic 3.1.1", v3, 0x30, raw(0, 0, "x"), ProtocolError},
	{"PUBLISH empty topic without alias", v5, 0x30, raw(0, 0, 0, "x"), ProtocolError},
	{"PUBLISH QoS 1 packet id 0", v3, 0x32, raw(0, 1, "a", 0, 0), ProtocolError},
	{"PUBLISH QoS 2 packet id missing", v3, 0x34, raw(0, 1, "a", 0), MalformedPacket},
	{"PUBLISH no property length", v5, 0x30, raw(0, 1, "a"), MalformedPacket},
	{"PUBLISH property length past end", v5, 0x30, raw(0, 1, "a", 5, 1, 1), MalformedPacket},
	{"PUBLISH property length 5 bytes", v5, 0x30, raw(0, 1, "a", 0x80, 0x80, 0x80, 0x80, 0x01), MalformedPacket},
	{"PUBLISH property length not minimal", v5, 0x30, raw(0, 1, "a", 0x80, 0x00), MalformedPacket},
	{"PUBLISH Topic Alias 0", v5, 0x30, raw(0, 1, "a", 3, 0x23, 0, 0), TopicAliasInvalid},
	{"PUBLISH Payload Format 2", v5, 0x30, raw(0, 1, "a", 2, 0x01, 2), ProtocolError},
	{"PUBLISH duplicate Message Expiry", v5, 0x30, raw(0, 1, "a", 10, 0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 2), ProtocolError},
	{"PUBLISH duplicate Topic Alias", v5, 0x30, raw(0, 1, "a", 6, 0x23, 0, 1, 0x23, 0, 1), ProtocolError},
	{"PUBLISH duplicate Content Type", v5, 0x30, raw(0, 1, "a", 6, 0x03, 0, 0, 0x03, 0, 0), ProtocolError},
	{"PUBLISH Session Expiry not allowed", v5, 0x30, raw(0, 1, "a", 5, 0x11, 0, 0, 0, 1), MalformedPacket},
	{"PUBLISH Will Delay not allowed", v5, 0x30, raw(0, 1, "a", 5, 0x18, 0, 0, 0, 1), MalformedPacket},
	{"PUBLISH unknown property 0x05", v5, 0x30, raw(0, 1, "a", 2, 0x05, 0), MalformedPacket},
	{"PUBLISH property id 0x80", v5, 0x30, raw(0, 1, "a", 2, 0x80, 0x01), MalformedPacket},
	{"PUBLISH Subscription Identifier 0", v5, 0x30, raw(0, 1, "a", 2, 0x0B, 0), ProtocolError},
	{"PUBLISH Subscription Identifier not minimal", v5, 0x30, raw(0, 1, "a", 3, 0x0B, 0x81, 0x00), MalformedPacket},
	{"PUBLISH Subscription Identifier 5 bytes", v5, 0x30, raw(0, 1, "a", 6, 0x0B, 0xFF, 0xFF, 0xFF, 0xFF, 0x01), MalformedPacket},
	{"PUBLISH Subscription Identifier cut", v5, 0x30, raw(0, 1, "a", 2, 0x0B, 0x81), MalformedPacket},
	{"PUBLISH Content Type invalid UTF-8", v5, 0x30, raw(0, 1, "a", 4, 0x03, 0, 1, 0xFF), MalformedPacket},
	{"PUBLISH Response Topic with U+0000", v5, 0x30, raw(0, 1, "a", 4, 0x08, 0, 1, 0), MalformedPacket},
	{"PUBLISH Response Topic with +", v5, 0x30, raw(0, 1, "a", 6, 0x08, 0, 3, "r/+"), ProtocolError},
	{"PUBLISH Response Topic with #", v5, 0x32, raw(0, 1, "a", 0, 1, 4, 0x08, 0, 1, "#"), ProtocolError},
	{"PUBLISH Response Topic empty", v5, 0x30, raw(0, 1, "a", 3, 0x08, 0, 0), ProtocolError},
	{"PUBLISH User Property value cut", v5, 0x30, raw(0, 1, "a", 6, 0x26, 0, 1, "k", 0, 1), MalformedPacket},
	{"PUBLISH User Property name invalid", v5, 0x30, raw(0, 1, "a", 6, 0x26, 0, 1, 0xFE, 0, 0), MalformedPacket},
	{"PUBLISH Message Expiry cut by property length", v5, 0x30, raw(0, 1, "a", 3, 0x02, 0, 0, 0, 1), MalformedPacket},
	{"PUBLISH Correlation Data past property length", v5, 0x30, raw(0, 1, "a", 3, 0x09, 0, 4, "abcd"), MalformedPacket},

	// Acknowledgements.
	{"PUBACK empty", v3, 0x40, nil, MalformedPacket},
	{"PUBACK one byte", v5, 0x40, raw(0), MalformedPacket},
	{"PUBACK packet id 0", v5, 0x40, raw(0, 0), ProtocolError},
	{"PUBREC packet id 0", v3, 0x50, raw(0, 0), ProtocolError},
	{"PUBACK 3.1.1 with reason", v3, 0x40, raw(0, 1, 0), MalformedPacket},
	{"PUBCOMP 3.1.1 too long", v3, 0x70, raw(0, 1, 0, 0), MalformedPacket},
	{"PUBACK invalid reason 0x92", v5, 0x40, raw(0, 1, 0x92), ProtocolError},
	{"PUBREC invalid reason 0x04", v5, 0x50, raw(0, 1, 0x04), ProtocolError},
	{"PUBREL invalid reason 0x10", v5, 0x62, raw(0, 1, 0x10), ProtocolError},
	{"PUBCOMP invalid reason 0x80", v5, 0x70, raw(0, 1, 0x80), ProtocolError},
	{"PUBACK trailing byte", v5, 0x40, raw(0, 1, 0, 0, 9), MalformedPacket},
	{"PUBACK Topic Alias not allowed", v5, 0x40, raw(0, 1, 0, 3, 0x23, 0, 1), MalformedPacket},
	{"PUBACK duplicate Reason String", v5, 0x40, raw(0, 1, 0x10, 6, 0x1F, 0, 0, 0x1F, 0, 0), ProtocolError},
	{"PUBREL property length past end", v5, 0x62, raw(0, 1, 0x92, 9), MalformedPacket},

	// CONNECT.
	{"CONNECT empty", v3, 0x10, nil, MalformedPacket},
	{"CONNECT name only", v3, 0x10, raw(0, 4, "MQTT"), MalformedPacket},
	{"CONNECT name invalid UTF-8", v3, 0x10, raw(0, 2, 0xFF, 0xFE, 4), MalformedPacket},
	{"CONNECT unknown protocol", v5, 0x10, raw(0, 4, "HTTP", 4, 2, 0, 60, 0, 0), ProtocolError},
	{"CONNECT MQIsdp level 5", v3, 0x10, raw(0, 6, "MQIsdp", 5, 2, 0, 60, 0, 0, 0, 1, "c"), UnsupportedProtocolVersion},
	{"CONNECT MQTT 3.1 will QoS 3", v3, 0x10, raw(0, 6, "MQIsdp", 3, 0x1E, 0, 60, 0, 1, "c", 0, 1, "t", 0, 0), MalformedPacket},
	{"CONNECT MQTT 3.1 cut", v3, 0x10, raw(0, 6, "MQIsdp", 3, 0x82, 0, 60, 0, 1, "c"), MalformedPacket},
	{"SUBSCRIBE MQTT 3.1 flags 0x3", v31, 0x83, raw(0, 1, 0, 1, "a", 0), MalformedPacket},
	{"SUBSCRIBE 3.1.1 DUP", v3, 0x8A, raw(0, 1, 0, 1, "a", 0), MalformedPacket},
	{"PINGREQ MQTT 3.1 DUP", v31, 0xC8, nil, MalformedPacket},
	{"CONNECT level 6", v3, 0x10, raw(0, 4, "MQTT", 6, 2, 0, 60, 0, 0), UnsupportedProtocolVersion},
	{"CONNECT MQTT level 3", v3, 0x10, raw(0, 4, "MQTT", 3, 2, 0, 60, 0, 0), UnsupportedProtocolVersion},
	{"CONNECT MQIsdp level 4", v3, 0x10, raw(0, 6, "MQIsdp", 4, 2, 0, 60, 0, 0), UnsupportedProtocolVersion},
	{"CONNECT no flags", v3, 0x10, raw(0, 4, "MQTT", 4), MalformedPacket},
	{"CONNECT reserved flag", v3, 0x10, connectBody(4, 0x03, 0, 1, "c"), MalformedPacket},
	{"CONNECT reserved flag v5", v5, 0x10, connectBody(5, 0x01, 0, 0, 1, "c"), MalformedPacket},
	{"CONNECT will QoS without will", v3, 0x10, connectBody(4, 0x08, 0, 1, "c"), MalformedPacket},
	{"CONNECT will retain without will", v5, 0x10, connectBody(5, 0x20, 0, 0, 1, "c"), MalformedPacket},
	{"CONNECT will QoS 3", v3, 0x10, connectBody(4, 0x1C, 0, 1, "c", 0, 1, "t", 0, 0), MalformedPacket},
	{"CONNECT password without user name", v3, 0x10, connectBody(4, 0x40, 0, 1, "c", 0, 1, "p"), MalformedPacket},
	{"CONNECT keep alive cut", v3, 0x10, raw(0, 4, "MQTT", 4, 2, 0), MalformedPacket},
	{"CONNECT no client id", v3, 0x10, connectBody(4, 0x02), MalformedPacket},
	{"CONNECT client id invalid UTF-8", v3, 0x10, connectBody(4, 0x02, 0, 1, 0x80), MalformedPacket},
	{"CONNECT trailing byte", v3, 0x10, connectBody(4, 0x02, 0, 1, "c", 0), MalformedPacket},
	{"CONNECT user name missing", v3, 0x10, connectBody(4, 0x80, 0, 1, "c"), MalformedPacket},
	{"CONNECT password missing", v5, 0x10, connectBody(5, 0x40, 0, 0, 1, "c"), MalformedPacket},
	{"CONNECT will topic missing", v3, 0x10, connectBody(4, 0x04, 0, 1, "c"), MalformedPacket},
	{"CONNECT will payload missing", v3, 0x10, connectBody(4, 0x04, 0, 1, "c", 0, 1, "t"), MalformedPacket},
	{"CONNECT will topic empty", v3, 0x10, connectBody(4, 0x04, 0, 1, "c", 0, 0, 0, 0), TopicNameInvalid},
	{"CONNECT will topic wildcard", v5, 0x10, connectBody(5, 0x04, 0, 0, 1, "c", 0, 0, 3, "t/#", 0, 0), TopicNameInvalid},
	{"CONNECT no property length", v5, 0x10, connectBody(5, 0x02), MalformedPacket},
	{"CONNECT Authentication Data without Method", v5, 0x10, connectBody(5, 0x02, 4, 0x16, 0, 1, 1, 0, 0), ProtocolError},
	{"CONNECT Receive Maximum 0", v5, 0x10, connectBody(5, 0x02, 3, 0x21, 0, 0, 0, 0), ProtocolError},
	{"CONNECT Maximum Packet Size 0", v5, 0x10, connectBody(5, 0x02, 5, 0x27, 0, 0, 0, 0, 0, 0), ProtocolError},
	{"CONNECT Request Problem Information 2", v5, 0x10, connectBody(5, 0x02, 2, 0x17, 2, 0, 0), ProtocolError},
	{"CONNECT Request Response Information 2", v5, 0x10, connectBody(5, 0x02, 2, 0x19, 2, 0, 0), ProtocolError},
	{"CONNECT duplicate Session Expiry", v5, 0x10, connectBody(5, 0x02, 10, 0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 1, 0, 0), ProtocolError},
	{"CONNECT Topic Alias not allowed", v5, 0x10, connectBody(5, 0x02, 3, 0x23, 0, 1, 0, 0), MalformedPacket},
	{"CONNECT Will Delay not allowed", v5, 0x10, connectBody(5, 0x02, 5, 0x18, 0, 0, 0, 1, 0, 0), MalformedPacket},
	{"CONNECT Session Expiry in will", v5, 0x10, connectBody(5, 0x06, 0, 0, 1, "c", 5, 0x11, 0, 0, 0, 1, 0, 1, "t", 0, 0), MalformedPacket},
	{"CONNECT will Payload Format 3", v5, 0x10, connectBody(5, 0x06, 0, 0, 1, "c", 2, 0x01, 3, 0, 1, "t", 0, 0), ProtocolError},
	{"CONNECT will Response Topic with #", v5, 0x10, connectBody(5, 0x06, 0, 0, 1, "c", 6, 0x08, 0, 3, "r/#", 0, 1, "t", 0, 0), ProtocolError},

	// CONNACK.
	{"CONNACK one byte", v3, 0x20, raw(0), MalformedPacket},
	{"CONNACK reserved flags", v3, 0x20, raw(0x02, 0), MalformedPacket},
	{"CONNACK 3.1.1 return code 6", v3, 0x20, raw(0, 6), ProtocolError},
	{"CONNACK 3.1.1 too long", v3, 0x20, raw(0, 0, 0), MalformedPacket},
	{"CONNACK session present refused", v3, 0x20, raw(1, 5), ProtocolError},
	{"CONNACK v5 session present refused", v5, 0x20, raw(1, 0x87, 0), ProtocolError},
	{"CONNACK v5 no property length", v5, 0x20, raw(0, 0), MalformedPacket},
	{"CONNACK v5 invalid reason 0x10", v5, 0x20, raw(0, 0x10, 0), ProtocolError},
	{"CONNACK v5 Maximum QoS 2", v5, 0x20, raw(0, 0, 2, 0x24, 2), ProtocolError},
	{"CONNACK v5 Retain Available 2", v5, 0x20, raw(0, 0, 2, 0x25, 2), ProtocolError},
	{"CONNACK v5 Shared Subscription Available 7", v5, 0x20, raw(0, 0, 2, 0x2A, 7), ProtocolError},
	{"CONNACK v5 Receive Maximum 0", v5, 0x20, raw(0, 0, 3, 0x21, 0, 0), ProtocolError},
	{"CONNACK v5 Will Delay not allowed", v5, 0x20, raw(0, 0, 5, 0x18, 0, 0, 0, 0), MalformedPacket},
	{"CONNACK v5 trailing byte", v5, 0x20, raw(0, 0, 0, 0), MalformedPacket},

	// SUBSCRIBE.
	{"SUBSCRIBE no filters", v3, 0x82, raw(0, 1), ProtocolError},
	{"SUBSCRIBE v5 no filters", v5, 0x82, raw(0, 1, 0), ProtocolError},
	{"SUBSCRIBE packet id 0", v3, 0x82, raw(0, 0, 0, 1, "a", 0), ProtocolError},
	{"SUBSCRIBE no options byte", v3, 0x82, raw(0, 1, 0, 1, "a"), MalformedPacket},
	{"SUBSCRIBE filter invalid UTF-8", v5, 0x82, raw(0, 1, 0, 0, 1, 0xFF, 0), MalformedPacket},
	{"SUBSCRIBE 3.1.1 option bits", v3, 0x82, raw(0, 1, 0, 1, "a", 0x04), MalformedPacket},
	{"SUBSCRIBE 3.1.1 QoS 3", v3, 0x82, raw(0, 1, 0, 1, "a", 3), MalformedPacket},
	{"SUBSCRIBE v5 QoS 3", v5, 0x82, raw(0, 1, 0, 0, 1, "a", 3), ProtocolError},
	{"SUBSCRIBE v5 Retain Handling 3", v5, 0x82, raw(0, 1, 0, 0, 1, "a", 0x30), ProtocolError},
	{"SUBSCRIBE v5 reserved bits", v5, 0x82, raw(0, 1, 0, 0, 1, "a", 0x40), MalformedPacket},
	{"SUBSCRIBE v5 No Local shared", v5, 0x82, raw(0, 1, 0, 0, 9, "$share/g/", 0x04), ProtocolError},
	{"SUBSCRIBE v5 two Subscription Identifiers", v5, 0x82, raw(0, 1, 4, 0x0B, 1, 0x0B, 2, 0, 1, "a", 0), ProtocolError},
	{"SUBSCRIBE v5 Subscription Identifier 0", v5, 0x82, raw(0, 1, 2, 0x0B, 0, 0, 1, "a", 0), ProtocolError},
	{"SUBSCRIBE v5 Topic Alias not allowed", v5, 0x82, raw(0, 1, 3, 0x23, 0, 1, 0, 1, "a", 0), MalformedPacket},

	// SUBACK.
	{"SUBACK no codes", v3, 0x90, raw(0, 1), ProtocolError},
	{"SUBACK v5 no codes", v5, 0x90, raw(0, 1, 0), ProtocolError},
	{"SUBACK 3.1.1 code 3", v3, 0x90, raw(0, 1, 0, 3), ProtocolError},
	{"SUBACK 3.1.1 v5 code", v3, 0x90, raw(0, 1, 0x87), ProtocolError},
	{"SUBACK v5 code 0x11", v5, 0x90, raw(0, 1, 0, 0x11), ProtocolError},
	{"SUBACK packet id 0", v3, 0x90, raw(0, 0, 0), ProtocolError},

	// UNSUBSCRIBE and UNSUBACK.
	{"UNSUBSCRIBE no filters", v3, 0xA2, raw(0, 1), ProtocolError},
	{"UNSUBSCRIBE packet id 0", v5, 0xA2, raw(0, 0, 0, 0, 1, "a"), ProtocolError},
	{"UNSUBSCRIBE filter cut", v3, 0xA2, raw(0, 1, 0, 2, "a"), MalformedPacket},
	{"UNSUBSCRIBE v5 Reason String not allowed", v5, 0xA2, raw(0, 1, 3, 0x1F, 0, 0, 0, 1, "a"), MalformedPacket},
	{"UNSUBACK 3.1.1 with codes", v3, 0xB0, raw(0, 1, 0), MalformedPacket},
	{"UNSUBACK v5 no codes", v5, 0xB0, raw(0, 1, 0), ProtocolError},
	{"UNSUBACK v5 code 0x10", v5, 0xB0, raw(0, 1, 0, 0x10), ProtocolError},

	// PINGREQ, PINGRESP, DISCONNECT, AUTH.
	{"PINGREQ with body", v3, 0xC0, raw(0), MalformedPacket},
	{"PINGRESP with body", v5, 0xD0, raw(0), MalformedPacket},
	{"DISCONNECT 3.1.1 with body", v3, 0xE0, raw(0), MalformedPacket},
	{"DISCONNECT v5 invalid reason", v5, 0xE0, raw(0x05), ProtocolError},
	{"DISCONNECT v5 property length past end", v5, 0xE0, raw(0, 4, 0x11), MalformedPacket},
	{"DISCONNECT v5 duplicate Session Expiry", v5, 0xE0, raw(0, 10, 0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 1), ProtocolError},
	{"DISCONNECT v5 Topic Alias not allowed", v5, 0xE0, raw(0, 3, 0x23, 0, 1), MalformedPacket},
	{"DISCONNECT v5 trailing byte", v5, 0xE0, raw(0, 0, 0), MalformedPacket},
	{"AUTH invalid reason", v5, 0xF0, raw(0x01, 0), ProtocolError},
	{"AUTH Session Expiry not allowed", v5, 0xF0, raw(0x18, 5, 0x11, 0, 0, 0, 1), MalformedPacket},
	{"AUTH trailing byte", v5, 0xF0, raw(0x18, 0, 0), MalformedPacket},
}

func TestDecodeMalformed(t *testing.T) {
	for _, c := range badPackets {
		t.Run(c.name, func(t *testing.T) {
			p, err := Decode(c.header, c.body, c.version)
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Decode = %#v, %v; want an *Error with code %s", p, err, c.code)
			}
			if perr.Code != c.code {
				t.Fatalf("Decode error %q has code %s, want %s", err, perr.Code, c.code)
			}
			if perr.Reason == "" {
				t.Errorf("error without a reason")
			}
			// Only CONNECT returns a (partial) packet with an error.
			if _, ok := p.(*Connect); p != nil && !ok {
				t.Errorf("Decode returned %#v with the error", p)
			}
		})
	}
}

// A failed CONNECT still tells the broker which CONNACK form to answer in.
func TestDecodeConnectPartial(t *testing.T) {
	tests := []struct {
		name  string
		body  []byte
		code  ReasonCode
		pname string
		level byte
	}{
		{"MQIsdp level 4", raw(0, 6, "MQIsdp", 4, 2, 0, 60, 0, 1, "c"), UnsupportedProtocolVersion, "MQIsdp", 4},
		{"MQTT level 3", raw(0, 4, "MQTT", 3, 2, 0, 60, 0, 1, "c"), UnsupportedProtocolVersion, "MQTT", 3},
		{"level 6", raw(0, 4, "MQTT", 6, 2, 0, 60), UnsupportedProtocolVersion, "MQTT", 6},
		{"unknown name", raw(0, 3, "FOO", 9), ProtocolError, "FOO", 9},
		{"v5 bad property", connectBody(5, 0x02, 3, 0x21, 0, 0, 0, 0), ProtocolError, "MQTT", 5},
		{"v3 bad flags", connectBody(4, 0x01, 0, 0), MalformedPacket, "MQTT", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Decode(0x10, tt.body, 0)
			var perr *Error
			if !errors.As(err, &perr) || perr.Code != tt.code {
				t.Fatalf("err = %v, want code %s", err, tt.code)
			}
			c, ok := p.(*Connect)
			if !ok {
				t.Fatalf("packet = %#v, want a partial *Connect", p)
			}
			if c.ProtocolName != tt.pname || c.ProtocolLevel != tt.level {
				t.Errorf("got %q level %d, want %q level %d", c.ProtocolName, c.ProtocolLevel, tt.pname, tt.level)
			}
		})
	}
	// Before the level is known there is nothing to return.
	if p, err := Decode(0x10, raw(0, 4, "MQ"), 0); p != nil || err == nil {
		t.Errorf("truncated name: got %#v, %v", p, err)
	}
}
