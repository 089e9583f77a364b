package packet

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// golden is one packet both on the wire and as a value. The decoder test
// decodes raw and compares with packet; the encoder test encodes packet and
// compares with raw. Every raw form here was written by hand from the spec,
// lengths counted by hand, not produced by the encoder.
type golden struct {
	name    string
	version byte
	raw     []byte
	packet  Packet
	// decodeOnly marks a valid but non-canonical form: it decodes to packet,
	// but packet encodes to another (shorter) form, listed separately.
	decodeOnly bool
	// encodeOnly marks a value that does not survive the wire as is (3.1.1
	// drops properties and maps codes), so only encoding is checked.
	encodeOnly bool
}

// raw concatenates bytes, ints (as one byte each), strings and byte slices,
// which keeps the tables readable. It computes nothing: every length prefix
// and Remaining Length is spelled out in the tables.
func raw(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case int:
			if p < 0 || p > 255 {
				panic(fmt.Sprintf("raw: %d is not a byte", p))
			}
			b = append(b, byte(p))
		case byte:
			b = append(b, p)
		case string:
			b = append(b, p...)
		case []byte:
			b = append(b, p...)
		default:
			panic(fmt.Sprintf("raw: unexpected %T", p))
		}
	}
	return b
}

// props builds a Properties value with the exported setters, so presence
// bits are set the way a user of the package sets them.
func props(set func(p *Properties)) Properties {
	var p Properties
	set(&p)
	return p
}

var payload200 = bytes.Repeat([]byte("x"), 200)

var goldenV3 = []golden{
	{
		name: "CONNECT minimal",
		raw:  raw(0x10, 14, 0, 4, "MQTT", 4, 0x02, 0, 60, 0, 2, "c1"),
		packet: &Connect{ProtocolName: "MQTT", ProtocolLevel: Version311, CleanStart: true,
			KeepAlive: 60, ClientID: "c1"},
	},
	{
		name: "CONNECT empty client id",
		raw:  raw(0x10, 12, 0, 4, "MQTT", 4, 0x02, 0, 0, 0, 0),
		packet: &Connect{ProtocolName: "MQTT", ProtocolLevel: Version311, CleanStart: true,
			ClientID: ""},
	},
	{
		name: "CONNECT will username password",
		// flags: user 0x80 | password 0x40 | will retain 0x20 | will QoS 1 0x08 | will 0x04
		raw: raw(0x10, 32, 0, 4, "MQTT", 4, 0xEC, 0, 30,
			0, 3, "dev",
			0, 3, "w/t", 0, 3, "bye",
			0, 1, "u", 0, 2, "pw"),
		packet: &Connect{ProtocolName: "MQTT", ProtocolLevel: Version311, KeepAlive: 30,
			ClientID: "dev", HasUsername: true, Username: "u", HasPassword: true, Password: []byte("pw"),
			Will: &Will{Topic: "w/t", Payload: []byte("bye"), QoS: 1, Retain: true}},
	},
	{
		name:   "CONNACK accepted session present",
		raw:    raw(0x20, 2, 1, 0),
		packet: &Connack{SessionPresent: true},
	},
	{name: "CONNACK unacceptable protocol", raw: raw(0x20, 2, 0, 1), packet: &Connack{ReasonCode: UnsupportedProtocolVersion}},
	{name: "CONNACK identifier rejected", raw: raw(0x20, 2, 0, 2), packet: &Connack{ReasonCode: ClientIdentifierNotValid}},
	{name: "CONNACK server unavailable", raw: raw(0x20, 2, 0, 3), packet: &Connack{ReasonCode: ServerUnavailable}},
	{name: "CONNACK bad user name or password", raw: raw(0x20, 2, 0, 4), packet: &Connack{ReasonCode: BadUserNameOrPassword}},
	{name: "CONNACK not authorized", raw: raw(0x20, 2, 0, 5), packet: &Connack{ReasonCode: NotAuthorized}},
	{
		name:       "CONNACK v5-only code mapped",
		raw:        raw(0x20, 2, 0, 5),
		packet:     &Connack{ReasonCode: Banned, Properties: props(func(p *Properties) { p.SetReasonString("gone") })},
		encodeOnly: true,
	},
	{name: "CONNACK server busy mapped", raw: raw(0x20, 2, 0, 3), packet: &Connack{ReasonCode: ServerBusy}, encodeOnly: true},
	{
		name:   "PUBLISH QoS 0",
		raw:    raw(0x30, 7, 0, 3, "a/b", "hi"),
		packet: &Publish{Topic: "a/b", Payload: []byte("hi")},
	},
	{
		name:   "PUBLISH QoS 1 retain",
		raw:    raw(0x33, 12, 0, 3, "a/b", 0, 10, "hello"),
		packet: &Publish{QoS: 1, Retain: true, Topic: "a/b", PacketID: 10, Payload: []byte("hello")},
	},
	{
		name:   "PUBLISH QoS 2 dup empty payload",
		raw:    raw(0x3C, 7, 0, 3, "a/b", 0xBE, 0xEF),
		packet: &Publish{Dup: true, QoS: 2, Topic: "a/b", PacketID: 0xBEEF},
	},
	{
		name:   "PUBLISH two-byte remaining length",
		raw:    raw(0x30, 0xCD, 0x01, 0, 3, "a/b", payload200), // 205 = 0x4D + 1*128
		packet: &Publish{Topic: "a/b", Payload: payload200},
	},
	{
		name:   "PUBLISH UTF-8 topic",
		raw:    raw(0x30, 8, 0, 6, "ü/€", ""),
		packet: &Publish{Topic: "ü/€"},
	},
	{
		name: "PUBLISH properties dropped",
		raw:  raw(0x30, 5, 0, 3, "a/b"),
		packet: &Publish{Topic: "a/b", Properties: props(func(p *Properties) {
			p.SetMessageExpiry(5)
			p.User = []UserProperty{{"k", "v"}}
		})},
		encodeOnly: true,
	},
	{name: "PUBACK", raw: raw(0x40, 2, 0, 1), packet: &Ack{Kind: PUBACK, PacketID: 1}},
	{name: "PUBREC", raw: raw(0x50, 2, 0, 2), packet: &Ack{Kind: PUBREC, PacketID: 2}},
	{name: "PUBREL", raw: raw(0x62, 2, 0, 3), packet: &Ack{Kind: PUBREL, PacketID: 3}},
	{name: "PUBCOMP", raw: raw(0x70, 2, 0xFF, 0xFF), packet: &Ack{Kind: PUBCOMP, PacketID: 0xFFFF}},
	{
		name:       "PUBACK reason dropped",
		raw:        raw(0x40, 2, 0, 1),
		packet:     &Ack{Kind: PUBACK, PacketID: 1, ReasonCode: NoMatchingSubscribers},
		encodeOnly: true,
	},
	{
		name: "SUBSCRIBE",
		raw:  raw(0x82, 12, 0, 1, 0, 3, "a/+", 1, 0, 1, "#", 2),
		packet: &Subscribe{PacketID: 1, Subscriptions: []Subscription{
			{Filter: "a/+", QoS: 1}, {Filter: "#", QoS: 2}}},
	},
	{
		name:   "SUBACK",
		raw:    raw(0x90, 6, 0, 1, 0, 1, 2, 0x80),
		packet: &Suback{PacketID: 1, ReasonCodes: []ReasonCode{Success, GrantedQoS1, GrantedQoS2, UnspecifiedError}},
	},
	{
		name:       "SUBACK v5 failure codes become 0x80",
		raw:        raw(0x90, 4, 0, 1, 0x80, 0x80),
		packet:     &Suback{PacketID: 1, ReasonCodes: []ReasonCode{NotAuthorized, WildcardSubsNotSupported}},
		encodeOnly: true,
	},
	{
		name:   "UNSUBSCRIBE",
		raw:    raw(0xA2, 10, 0, 2, 0, 3, "a/+", 0, 1, "#"),
		packet: &Unsubscribe{PacketID: 2, Filters: []string{"a/+", "#"}},
	},
	{name: "UNSUBACK", raw: raw(0xB0, 2, 0, 2), packet: &Unsuback{PacketID: 2}},
	{
		name:       "UNSUBACK codes dropped",
		raw:        raw(0xB0, 2, 0, 2),
		packet:     &Unsuback{PacketID: 2, ReasonCodes: []ReasonCode{Success}},
		encodeOnly: true,
	},
	{name: "PINGREQ", raw: raw(0xC0, 0), packet: &Pingreq{}},
	{name: "PINGRESP", raw: raw(0xD0, 0), packet: &Pingresp{}},
	{name: "DISCONNECT", raw: raw(0xE0, 0), packet: &Disconnect{}},
	{
		name:       "DISCONNECT reason dropped",
		raw:        raw(0xE0, 0),
		packet:     &Disconnect{ReasonCode: DisconnectWithWill},
		encodeOnly: true,
	},
}

var goldenV5 = []golden{
	{
		name: "CONNECT minimal",
		raw:  raw(0x10, 15, 0, 4, "MQTT", 5, 0x02, 0, 60, 0, 0, 2, "c1"),
		packet: &Connect{ProtocolName: "MQTT", ProtocolLevel: Version5, CleanStart: true,
			KeepAlive: 60, ClientID: "c1"},
	},
	{
		name: "CONNECT all properties, will with properties",
		// flags: user 0x80 | password 0x40 | will QoS 2 0x10 | will 0x04 | clean 0x02
		// Remaining Length 134 = 0x06 + 1*128.
		raw: raw(0x10, 0x86, 0x01, 0, 4, "MQTT", 5, 0xD6, 0x01, 0x2C,
			49,                     // property length
			0x11, 0, 0, 0x0E, 0x10, // Session Expiry Interval 3600
			0x15, 0, 5, "SCRAM", // Authentication Method
			0x16, 0, 3, 1, 2, 3, // Authentication Data
			0x17, 0, // Request Problem Information 0
			0x19, 1, // Request Response Information 1
			0x21, 0, 20, // Receive Maximum
			0x22, 0, 10, // Topic Alias Maximum
			0x26, 0, 1, "k", 0, 1, "v", // User Property
			0x26, 0, 1, "k", 0, 2, "v2", // User Property, same name again
			0x27, 0, 0x10, 0, 0, // Maximum Packet Size 1048576
			0, 3, "dev", // client identifier
			44,      // will property length
			0x01, 1, // Payload Format Indicator
			0x02, 0, 0, 0, 60, // Message Expiry Interval
			0x03, 0, 10, "text/plain", // Content Type
			0x08, 0, 4, "resp", // Response Topic
			0x09, 0, 2, 0xAB, 0xCD, // Correlation Data
			0x18, 0, 0, 0, 5, // Will Delay Interval
			0x26, 0, 1, "a", 0, 1, "b", // User Property
			0, 3, "w/t", 0, 3, "bye", // will topic, payload
			0, 4, "user", 0, 6, "secret"),
		packet: &Connect{ProtocolName: "MQTT", ProtocolLevel: Version5, CleanStart: true, KeepAlive: 300,
			ClientID: "dev", HasUsername: true, Username: "user", HasPassword: true, Password: []byte("secret"),
			Properties: props(func(p *Properties) {
				p.SetSessionExpiry(3600)
				p.SetString(PropAuthMethod, "SCRAM")
				p.SetBytes(PropAuthData, []byte{1, 2, 3})
				p.SetByte(PropRequestProblemInfo, 0)
				p.SetByte(PropRequestResponseInfo, 1)
				p.SetUint16(PropReceiveMaximum, 20)
				p.SetUint16(PropTopicAliasMaximum, 10)
				p.User = []UserProperty{{"k", "v"}, {"k", "v2"}}
				p.SetUint32(PropMaximumPacketSize, 1048576)
			}),
			Will: &Will{Topic: "w/t", Payload: []byte("bye"), QoS: 2, Properties: props(func(p *Properties) {
				p.SetByte(PropPayloadFormat, 1)
				p.SetMessageExpiry(60)
				p.SetString(PropContentType, "text/plain")
				p.SetString(PropResponseTopic, "resp")
				p.SetBytes(PropCorrelationData, []byte{0xAB, 0xCD})
				p.SetUint32(PropWillDelay, 5)
				p.User = []UserProperty{{"a", "b"}}
			})}},
	},
	{
		name: "CONNECT password without user name",
		raw:  raw(0x10, 19, 0, 4, "MQTT", 5, 0x40, 0, 0, 0, 0, 1, "c", 0, 3, "tok"),
		packet: &Connect{ProtocolName: "MQTT", ProtocolLevel: Version5, ClientID: "c",
			HasPassword: true, Password: []byte("tok")},
	},
	{
		name: "CONNACK all properties",
		raw: raw(0x20, 83, 1, 0, 80,
			0x11, 0, 0, 0, 120, // Session Expiry Interval
			0x12, 0, 6, "auto-1", // Assigned Client Identifier
			0x13, 0, 30, // Server Keep Alive
			0x15, 0, 5, "SCRAM", // Authentication Method
			0x16, 0, 1, 1, // Authentication Data
			0x1A, 0, 2, "ri", // Response Information
			0x1C, 0, 10, "other:1883", // Server Reference
			0x1F, 0, 2, "ok", // Reason String
			0x21, 0, 100, // Receive Maximum
			0x22, 0, 8, // Topic Alias Maximum
			0x24, 1, // Maximum QoS
			0x25, 0, // Retain Available
			0x26, 0, 1, "x", 0, 1, "y", // User Property
			0x27, 0, 1, 0, 0, // Maximum Packet Size 65536
			0x28, 0, // Wildcard Subscription Available
			0x29, 1, // Subscription Identifier Available
			0x2A, 1), // Shared Subscription Available
		packet: &Connack{SessionPresent: true, Properties: props(func(p *Properties) {
			p.SetSessionExpiry(120)
			p.SetString(PropAssignedClientID, "auto-1")
			p.SetUint16(PropServerKeepAlive, 30)
			p.SetString(PropAuthMethod, "SCRAM")
			p.AuthData = []byte{1}
			p.Mark(PropAuthData)
			p.SetString(PropResponseInfo, "ri")
			p.SetString(PropServerReference, "other:1883")
			p.SetReasonString("ok")
			p.SetUint16(PropReceiveMaximum, 100)
			p.SetUint16(PropTopicAliasMaximum, 8)
			p.SetByte(PropMaximumQoS, 1)
			p.SetByte(PropRetainAvailable, 0)
			p.User = []UserProperty{{"x", "y"}}
			p.SetUint32(PropMaximumPacketSize, 65536)
			p.SetByte(PropWildcardSubAvailable, 0)
			p.SetByte(PropSubIDAvailable, 1)
			p.SetByte(PropSharedSubAvailable, 1)
		})},
	},
	{
		name:   "CONNACK not authorized",
		raw:    raw(0x20, 3, 0, 0x87, 0),
		packet: &Connack{ReasonCode: NotAuthorized},
	},
	{
		name: "CONNACK with reason string",
		raw:  raw(0x20, 10, 0, 0x85, 7, 0x1F, 0, 4, "bad!"),
		packet: &Connack{ReasonCode: ClientIdentifierNotValid,
			Properties: props(func(p *Properties) { p.SetReasonString("bad!") })},
	},
	{
		name:   "PUBLISH QoS 0 no properties",
		raw:    raw(0x30, 8, 0, 3, "a/b", 0, "hi"),
		packet: &Publish{Topic: "a/b", Payload: []byte("hi")},
	},
	{
		name: "PUBLISH all properties",
		raw: raw(0x32, 60, 0, 3, "s/1", 0, 7,
			50,      // property length
			0x01, 1, // Payload Format Indicator
			0x02, 0, 0, 0, 30, // Message Expiry Interval
			0x03, 0, 4, "json", // Content Type
			0x08, 0, 3, "r/1", // Response Topic
			0x09, 0, 3, 1, 2, 3, // Correlation Data
			0x0B, 1, // Subscription Identifier 1
			0x0B, 0xFF, 0xFF, 0xFF, 0x7F, // Subscription Identifier 268435455
			0x23, 0, 3, // Topic Alias
			0x26, 0, 1, "a", 0, 1, "1", // User Property
			0x26, 0, 1, "b", 0, 1, "2", // User Property
			"{}"),
		packet: &Publish{QoS: 1, Topic: "s/1", PacketID: 7, Payload: []byte("{}"),
			Properties: props(func(p *Properties) {
				p.SetByte(PropPayloadFormat, 1)
				p.SetMessageExpiry(30)
				p.SetString(PropContentType, "json")
				p.SetString(PropResponseTopic, "r/1")
				p.CorrelationData = []byte{1, 2, 3}
				p.Mark(PropCorrelationData)
				p.SubscriptionIDs = []uint32{1, MaxVarint}
				p.SetTopicAlias(3)
				p.User = []UserProperty{{"a", "1"}, {"b", "2"}}
			})},
	},
	{
		name: "PUBLISH topic alias, empty topic",
		raw:  raw(0x31, 7, 0, 0, 3, 0x23, 0, 5, "x"),
		packet: &Publish{Retain: true, Payload: []byte("x"),
			Properties: props(func(p *Properties) { p.SetTopicAlias(5) })},
	},
	{
		name: "PUBLISH will properties reused",
		raw:  raw(0x30, 8, 0, 3, "a/b", 2, 0x01, 1),
		packet: &Publish{Topic: "a/b", Properties: props(func(p *Properties) {
			p.SetByte(PropPayloadFormat, 1)
			p.SetUint32(PropWillDelay, 10) // not a PUBLISH property: left out
		})},
		encodeOnly: true,
	},
	{name: "PUBACK short form", raw: raw(0x40, 2, 0, 1), packet: &Ack{Kind: PUBACK, PacketID: 1}},
	{
		name:   "PUBACK reason code only",
		raw:    raw(0x40, 3, 0, 1, 0x10),
		packet: &Ack{Kind: PUBACK, PacketID: 1, ReasonCode: NoMatchingSubscribers},
	},
	{
		name:       "PUBACK success, empty properties",
		raw:        raw(0x40, 4, 0, 1, 0, 0),
		packet:     &Ack{Kind: PUBACK, PacketID: 1},
		decodeOnly: true,
	},
	{
		name:       "PUBACK reason, empty properties",
		raw:        raw(0x40, 4, 0, 1, 0x10, 0),
		packet:     &Ack{Kind: PUBACK, PacketID: 1, ReasonCode: NoMatchingSubscribers},
		decodeOnly: true,
	},
	{
		name: "PUBREC with properties",
		raw: raw(0x50, 18, 0, 2, 0x97, 14,
			0x1F, 0, 4, "full",
			0x26, 0, 1, "k", 0, 1, "v"),
		packet: &Ack{Kind: PUBREC, PacketID: 2, ReasonCode: QuotaExceeded, Properties: props(func(p *Properties) {
			p.SetReasonString("full")
			p.User = []UserProperty{{"k", "v"}}
		})},
	},
	{name: "PUBREL short form", raw: raw(0x62, 2, 0, 3), packet: &Ack{Kind: PUBREL, PacketID: 3}},
	{
		name:   "PUBCOMP packet identifier not found",
		raw:    raw(0x70, 3, 0, 4, 0x92),
		packet: &Ack{Kind: PUBCOMP, PacketID: 4, ReasonCode: PacketIdentifierNotFound},
	},
	{
		name: "SUBSCRIBE options and subscription identifier",
		raw: raw(0x82, 37, 0x12, 0x34, 9,
			0x0B, 42, // Subscription Identifier
			0x26, 0, 1, "k", 0, 1, "v", // User Property
			0, 3, "a/b", 0x00,
			0, 3, "c/#", 0x1D, // QoS 1, No Local, Retain As Published, Retain Handling 1
			0, 10, "$share/g/d", 0x22), // QoS 2, Retain Handling 2
		packet: &Subscribe{PacketID: 0x1234,
			Properties: props(func(p *Properties) {
				p.SubscriptionIDs = []uint32{42}
				p.User = []UserProperty{{"k", "v"}}
			}),
			Subscriptions: []Subscription{
				{Filter: "a/b"},
				{Filter: "c/#", QoS: 1, NoLocal: true, RetainAsPublished: true, RetainHandling: 1},
				{Filter: "$share/g/d", QoS: 2, RetainHandling: 2},
			}},
	},
	{
		name: "SUBACK",
		raw:  raw(0x90, 12, 0x12, 0x34, 4, 0x1F, 0, 1, "r", 0x00, 0x01, 0x02, 0x87, 0xA2),
		packet: &Suback{PacketID: 0x1234,
			Properties:  props(func(p *Properties) { p.SetReasonString("r") }),
			ReasonCodes: []ReasonCode{Success, GrantedQoS1, GrantedQoS2, NotAuthorized, WildcardSubsNotSupported}},
	},
	{
		name: "UNSUBSCRIBE",
		raw:  raw(0xA2, 20, 0, 5, 7, 0x26, 0, 1, "k", 0, 1, "v", 0, 3, "a/b", 0, 3, "c/#"),
		packet: &Unsubscribe{PacketID: 5,
			Properties: props(func(p *Properties) { p.User = []UserProperty{{"k", "v"}} }),
			Filters:    []string{"a/b", "c/#"}},
	},
	{
		name:   "UNSUBACK",
		raw:    raw(0xB0, 5, 0, 5, 0, 0x00, 0x11),
		packet: &Unsuback{PacketID: 5, ReasonCodes: []ReasonCode{Success, NoSubscriptionExisted}},
	},
	{name: "PINGREQ", raw: raw(0xC0, 0), packet: &Pingreq{}},
	{name: "PINGRESP", raw: raw(0xD0, 0), packet: &Pingresp{}},
	{name: "DISCONNECT short form", raw: raw(0xE0, 0), packet: &Disconnect{}},
	{
		name:       "DISCONNECT success, empty properties",
		raw:        raw(0xE0, 2, 0, 0),
		packet:     &Disconnect{},
		decodeOnly: true,
	},
	{
		name:   "DISCONNECT reason code only",
		raw:    raw(0xE0, 1, 0x04),
		packet: &Disconnect{ReasonCode: DisconnectWithWill},
	},
	{
		name: "DISCONNECT with properties",
		raw: raw(0xE0, 28, 0x9C, 26,
			0x11, 0, 0, 0, 0, // Session Expiry Interval 0
			0x1C, 0, 5, "host2", // Server Reference
			0x1F, 0, 3, "bye", // Reason String
			0x26, 0, 1, "k", 0, 1, "v"), // User Property
		packet: &Disconnect{ReasonCode: UseAnotherServer, Properties: props(func(p *Properties) {
			p.SetSessionExpiry(0)
			p.SetString(PropServerReference, "host2")
			p.SetReasonString("bye")
			p.User = []UserProperty{{"k", "v"}}
		})},
	},
	{name: "AUTH short form", raw: raw(0xF0, 0), packet: &Auth{}},
	{
		name: "AUTH continue",
		raw: raw(0xF0, 27, 0x18, 25,
			0x15, 0, 5, "SCRAM",
			0x16, 0, 2, 0xAA, 0xBB,
			0x1F, 0, 2, "go",
			0x26, 0, 1, "k", 0, 1, "v"),
		packet: &Auth{ReasonCode: ContinueAuthentication, Properties: props(func(p *Properties) {
			p.SetString(PropAuthMethod, "SCRAM")
			p.AuthData = []byte{0xAA, 0xBB}
			p.Mark(PropAuthData)
			p.SetReasonString("go")
			p.User = []UserProperty{{"k", "v"}}
		})},
	},
	{
		name:   "AUTH reason code, empty properties",
		raw:    raw(0xF0, 2, 0x19, 0),
		packet: &Auth{ReasonCode: ReAuthenticate},
	},
	{
		name:       "AUTH reason code only",
		raw:        raw(0xF0, 1, 0x19),
		packet:     &Auth{ReasonCode: ReAuthenticate},
		decodeOnly: true,
	},
}

// goldenV31 is MQTT 3.1 ("MQIsdp", level 3): 3.1.1's forms, and the
// leniencies 3.1 needs (see Version31).
var goldenV31 = []golden{
	{
		name: "CONNECT minimal",
		raw:  raw(0x10, 16, 0, 6, "MQIsdp", 3, 0x02, 0, 60, 0, 2, "c1"),
		packet: &Connect{ProtocolName: "MQIsdp", ProtocolLevel: Version31, CleanStart: true,
			KeepAlive: 60, ClientID: "c1"},
	},
	{
		name: "CONNECT will username password",
		raw: raw(0x10, 34, 0, 6, "MQIsdp", 3, 0xEC, 0, 30,
			0, 3, "dev",
			0, 3, "w/t", 0, 3, "bye",
			0, 1, "u", 0, 2, "pw"),
		packet: &Connect{ProtocolName: "MQIsdp", ProtocolLevel: Version31, KeepAlive: 30,
			ClientID: "dev", HasUsername: true, Username: "u", HasPassword: true, Password: []byte("pw"),
			Will: &Will{Topic: "w/t", Payload: []byte("bye"), QoS: 1, Retain: true}},
	},
	{
		name: "CONNECT password without user name",
		raw:  raw(0x10, 20, 0, 6, "MQIsdp", 3, 0x42, 0, 60, 0, 2, "c1", 0, 2, "pw"),
		packet: &Connect{ProtocolName: "MQIsdp", ProtocolLevel: Version31, CleanStart: true,
			KeepAlive: 60, ClientID: "c1", HasPassword: true, Password: []byte("pw")},
	},
	{
		// Reserved flag, Will QoS 3 and Will Retain without the Will Flag:
		// 3.1 says nothing of them, so they are ignored.
		name: "CONNECT stray flags",
		raw:  raw(0x10, 16, 0, 6, "MQIsdp", 3, 0x3B, 0, 60, 0, 2, "c1"),
		packet: &Connect{ProtocolName: "MQIsdp", ProtocolLevel: Version31, CleanStart: true,
			KeepAlive: 60, ClientID: "c1"},
		decodeOnly: true,
	},
	{name: "CONNACK accepted", raw: raw(0x20, 2, 0, 0), packet: &Connack{}},
	{name: "CONNACK identifier rejected", raw: raw(0x20, 2, 0, 2), packet: &Connack{ReasonCode: ClientIdentifierNotValid}},
	{
		name:   "SUBSCRIBE",
		raw:    raw(0x82, 6, 0, 1, 0, 1, "a", 1),
		packet: &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: "a", QoS: 1}}},
	},
	{
		name:       "SUBSCRIBE sent again (DUP)",
		raw:        raw(0x8A, 6, 0, 1, 0, 1, "a", 1),
		packet:     &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: "a", QoS: 1}}},
		decodeOnly: true,
	},
	{
		name:       "UNSUBSCRIBE sent again (DUP)",
		raw:        raw(0xAA, 5, 0, 1, 0, 1, "a"),
		packet:     &Unsubscribe{PacketID: 1, Filters: []string{"a"}},
		decodeOnly: true,
	},
	{name: "PUBREL sent again (DUP)", raw: raw(0x6A, 2, 0, 1), packet: &Ack{Kind: PUBREL, PacketID: 1}, decodeOnly: true},
	{name: "PUBREL", raw: raw(0x62, 2, 0, 1), packet: &Ack{Kind: PUBREL, PacketID: 1}},
}

// goldenAll returns the tables with the version filled in.
func goldenAll() []golden {
	var all []golden
	for _, g := range goldenV3 {
		g.version, g.name = Version311, "v3/"+g.name
		all = append(all, g)
	}
	for _, g := range goldenV31 {
		g.version, g.name = Version31, "v31/"+g.name
		all = append(all, g)
	}
	for _, g := range goldenV5 {
		g.version, g.name = Version5, "v5/"+g.name
		all = append(all, g)
	}
	return all
}

// splitPacket parses the fixed header of a whole raw packet.
func splitPacket(t *testing.T, b []byte) (header byte, body []byte) {
	t.Helper()
	header, rem, n, err := ParseHeader(b)
	if err != nil {
		t.Fatalf("ParseHeader(% X): %v", b, err)
	}
	if n+rem != len(b) {
		t.Fatalf("fixed header says %d+%d bytes, packet has %d", n, rem, len(b))
	}
	return header, b[n:]
}

func TestGoldenDecode(t *testing.T) {
	for _, g := range goldenAll() {
		if g.encodeOnly {
			continue
		}
		t.Run(g.name, func(t *testing.T) {
			header, body := splitPacket(t, g.raw)
			got, err := Decode(header, body, g.version)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, g.packet) {
				t.Fatalf("Decode mismatch\n got: %#v\nwant: %#v", got, g.packet)
			}
			if got.Type() != Type(g.raw[0]>>4) {
				t.Errorf("Type() = %s, header says %s", got.Type(), Type(g.raw[0]>>4))
			}
		})
	}
}

func TestGoldenEncode(t *testing.T) {
	for _, g := range goldenAll() {
		if g.decodeOnly {
			continue
		}
		t.Run(g.name, func(t *testing.T) {
			got, err := Encode(nil, g.packet, g.version)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if !bytes.Equal(got, g.raw) {
				t.Fatalf("Encode mismatch\n got: % X\nwant: % X", got, g.raw)
			}
			// Encode appends and leaves what dst held alone.
			prefix := []byte{0xAA, 0xBB}
			got, err = Encode(prefix, g.packet, g.version)
			if err != nil || !bytes.Equal(got, append([]byte{0xAA, 0xBB}, g.raw...)) {
				t.Fatalf("Encode after a prefix = % X, %v", got, err)
			}
			switch p := g.packet.(type) {
			case *Publish:
				if n := PublishSize(p, g.version); n != len(g.raw) {
					t.Errorf("PublishSize = %d, encoded %d bytes", n, len(g.raw))
				}
				if b := AppendPublish(nil, p, g.version); !bytes.Equal(b, g.raw) {
					t.Errorf("AppendPublish = % X", b)
				}
			case *Ack:
				if b := AppendAck(nil, p, g.version); !bytes.Equal(b, g.raw) {
					t.Errorf("AppendAck = % X", b)
				}
			}
		})
	}
}

// The tables cover every packet type of each version and every property.
func TestGoldenCoverage(t *testing.T) {
	types := map[byte]map[Type]bool{Version31: {}, Version311: {}, Version5: {}}
	var propsSeen uint64
	seeProps := func(p *Properties) { propsSeen |= propBits(p, ^uint64(0)) }
	for _, g := range goldenAll() {
		if g.encodeOnly {
			continue
		}
		types[g.version][g.packet.Type()] = true
		switch p := g.packet.(type) {
		case *Connect:
			seeProps(&p.Properties)
			if p.Will != nil {
				seeProps(&p.Will.Properties)
			}
		case *Connack:
			seeProps(&p.Properties)
		case *Publish:
			seeProps(&p.Properties)
		case *Ack:
			seeProps(&p.Properties)
		case *Subscribe:
			seeProps(&p.Properties)
		case *Suback:
			seeProps(&p.Properties)
		case *Unsubscribe:
			seeProps(&p.Properties)
		case *Unsuback:
			seeProps(&p.Properties)
		case *Disconnect:
			seeProps(&p.Properties)
		case *Auth:
			seeProps(&p.Properties)
		}
	}
	for typ := CONNECT; typ <= AUTH; typ++ {
		if typ != AUTH && !types[Version311][typ] {
			t.Errorf("no 3.1.1 golden %s", typ)
		}
		if !types[Version5][typ] {
			t.Errorf("no v5 golden %s", typ)
		}
	}
	for id, info := range propTable {
		if info.kind != kindNone && propsSeen&(1<<id) == 0 {
			t.Errorf("no golden packet carries %s", info.name)
		}
	}
}
