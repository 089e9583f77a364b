package packet

import (
	"strconv"
	"strings"
)

var typeNames = [16]string{
	"RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
	"SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH",
}

// String returns the packet type name as the spec spells it, e.g. "PUBLISH".
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// reasonNames are the names of the MQTT 5 reason code table (section 2.4).
// Success doubles as "Normal disconnection" and "Granted QoS 0".
var reasonNames = map[ReasonCode]string{
	Success:                     "Success",
	GrantedQoS1:                 "Granted QoS 1",
	GrantedQoS2:                 "Granted QoS 2",
	DisconnectWithWill:          "Disconnect with Will Message",
	NoMatchingSubscribers:       "No matching subscribers",
	NoSubscriptionExisted:       "No subscription existed",
	ContinueAuthentication:      "Continue authentication",
	ReAuthenticate:              "Re-authenticate",
	UnspecifiedError:            "Unspecified error",
	MalformedPacket:             "Malformed Packet",
	ProtocolError:               "Protocol Error",
	ImplementationSpecificError: "Implementation specific error",
	UnsupportedProtocolVersion:  "Unsupported Protocol Version",
	ClientIdentifierNotValid:    "Client Identifier not valid",
	BadUserNameOrPassword:       "Bad User Name or Password",
	NotAuthorized:               "Not authorized",
	ServerUnavailable:           "Server unavailable",
	ServerBusy:                  "Server busy",
	Banned:                      "Banned",
	ServerShuttingDown:          "Server shutting down",
	BadAuthenticationMethod:     "Bad authentication method",
	KeepAliveTimeout:            "Keep Alive timeout",
	SessionTakenOver:            "Session taken over",
	TopicFilterInvalid:          "Topic Filter invalid",
	TopicNameInvalid:            "Topic Name invalid",
	PacketIdentifierInUse:       "Packet Identifier in use",
	PacketIdentifierNotFound:    "Packet Identifier not found",
	ReceiveMaximumExceeded:      "Receive Maximum exceeded",
	TopicAliasInvalid:           "Topic Alias invalid",
	PacketTooLarge:              "Packet too large",
	MessageRateTooHigh:          "Message rate too high",
	QuotaExceeded:               "Quota exceeded",
	AdministrativeAction:        "Administrative action",
	PayloadFormatInvalid:        "Payload format invalid",
	RetainNotSupported:          "Retain not supported",
	QoSNotSupported:             "QoS not supported",
	UseAnotherServer:            "Use another server",
	ServerMoved:                 "Server moved",
	SharedSubsNotSupported:      "Shared Subscriptions not supported",
	ConnectionRateExceeded:      "Connection rate exceeded",
	MaximumConnectTime:          "Maximum connect time",
	SubIDsNotSupported:          "Subscription Identifiers not supported",
	WildcardSubsNotSupported:    "Wildcard Subscriptions not supported",
}

// String returns the human name of the reason code from the MQTT 5 table,
// e.g. "Malformed Packet" or "Quota exceeded", and "Reason code 0xNN" for a
// value the spec does not define.
func (r ReasonCode) String() string {
	if s, ok := reasonNames[r]; ok {
		return s
	}
	const hex = "0123456789ABCDEF"
	return "Reason code 0x" + string([]byte{hex[r>>4], hex[r&0x0F]})
}

// Name is the code's name in snake case, as metrics labels and stored
// problems carry it: "Bad User Name or Password" is
// "bad_user_name_or_password".
func (r ReasonCode) Name() string {
	return strings.ReplaceAll(strings.ToLower(r.String()), " ", "_")
}

// V3ReturnCode maps a v5 CONNACK reason code to the MQTT 3.1.1 CONNACK return
// code that says the same thing best:
//
//	0x00 Success                                      -> 0 accepted
//	0x84 Unsupported Protocol Version                 -> 1 unacceptable protocol version
//	0x85 Client Identifier not valid                  -> 2 identifier rejected
//	0x86 Bad User Name or Password                    -> 4 bad user name or password
//	0x87 Not authorized, 0x8A Banned,
//	0x8C Bad authentication method                    -> 5 not authorized
//	anything else (0x88 Server unavailable, 0x89 Server busy, 0x80, 0x83,
//	0x97, 0x9C, 0x9D, 0x9F, ...)                      -> 3 server unavailable
//
// 3.1.1 has no codes for packet problems (0x81, 0x82, 0x95, 0x99-0x9B); the
// spec expects the connection to be closed without a CONNACK in those cases,
// and if one is sent anyway "server unavailable" is the least misleading.
func V3ReturnCode(rc ReasonCode) byte {
	switch rc {
	case Success:
		return V3Accepted
	case UnsupportedProtocolVersion:
		return V3UnacceptableProtocol
	case ClientIdentifierNotValid:
		return V3IdentifierRejected
	case BadUserNameOrPassword:
		return V3BadUsernameOrPassword
	case NotAuthorized, Banned, BadAuthenticationMethod:
		return V3NotAuthorized
	}
	return V3ServerUnavailable
}

// reasonFromV3 maps a 3.1.1 CONNACK return code to its v5 reason code, the
// inverse of V3ReturnCode; ok is false for the reserved codes 6-255.
func reasonFromV3(code byte) (rc ReasonCode, ok bool) {
	switch code {
	case V3Accepted:
		return Success, true
	case V3UnacceptableProtocol:
		return UnsupportedProtocolVersion, true
	case V3IdentifierRejected:
		return ClientIdentifierNotValid, true
	case V3ServerUnavailable:
		return ServerUnavailable, true
	case V3BadUsernameOrPassword:
		return BadUserNameOrPassword, true
	case V3NotAuthorized:
		return NotAuthorized, true
	}
	return 0, false
}

// codeSet is a set of reason codes, one bit per code.
type codeSet [4]uint64

func newCodeSet(codes ...ReasonCode) codeSet {
	var s codeSet
	for _, c := range codes {
		s[c>>6] |= 1 << (c & 63)
	}
	return s
}

func (s *codeSet) has(c ReasonCode) bool { return s[c>>6]&(1<<(c&63)) != 0 }

// The reason codes each v5 packet may carry (the tables in sections 3.2.2.2,
// 3.4.2.1, 3.5.2.1, 3.6.2.1, 3.7.2.1, 3.9.3, 3.11.3, 3.14.2.1 and 3.15.2.1).
// Receiving any other code is treated as a Protocol Error.
var (
	connackCodes = newCodeSet(Success, UnspecifiedError, MalformedPacket, ProtocolError,
		ImplementationSpecificError, UnsupportedProtocolVersion, ClientIdentifierNotValid,
		BadUserNameOrPassword, NotAuthorized, ServerUnavailable, ServerBusy, Banned,
		BadAuthenticationMethod, TopicNameInvalid, PacketTooLarge, QuotaExceeded,
		PayloadFormatInvalid, RetainNotSupported, QoSNotSupported, UseAnotherServer,
		ServerMoved, ConnectionRateExceeded)
	pubackCodes = newCodeSet(Success, NoMatchingSubscribers, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicNameInvalid, PacketIdentifierInUse,
		QuotaExceeded, PayloadFormatInvalid) // PUBACK and PUBREC
	pubrelCodes = newCodeSet(Success, PacketIdentifierNotFound) // PUBREL and PUBCOMP
	subackCodes = newCodeSet(Success, GrantedQoS1, GrantedQoS2, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIdentifierInUse,
		QuotaExceeded, SharedSubsNotSupported, SubIDsNotSupported, WildcardSubsNotSupported)
	subackV3Codes = newCodeSet(Success, GrantedQoS1, GrantedQoS2, UnspecifiedError)
	unsubackCodes = newCodeSet(Success, NoSubscriptionExisted, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIdentifierInUse)
	disconnectCodes = newCodeSet(Success, DisconnectWithWill, UnspecifiedError, MalformedPacket,
		ProtocolError, ImplementationSpecificError, NotAuthorized, ServerBusy,
		ServerShuttingDown, KeepAliveTimeout, SessionTakenOver, TopicFilterInvalid,
		TopicNameInvalid, ReceiveMaximumExceeded, TopicAliasInvalid, PacketTooLarge,
		MessageRateTooHigh, QuotaExceeded, AdministrativeAction, PayloadFormatInvalid,
		RetainNotSupported, QoSNotSupported, UseAnotherServer, ServerMoved,
		SharedSubsNotSupported, ConnectionRateExceeded, MaximumConnectTime,
		SubIDsNotSupported, WildcardSubsNotSupported)
	authCodes = newCodeSet(Success, ContinueAuthentication, ReAuthenticate)
)

// ackCodes returns the reason codes allowed in a v5 acknowledgement of kind t.
func ackCodes(t Type) *codeSet {
	if t == PUBREL || t == PUBCOMP {
		return &pubrelCodes
	}
	return &pubackCodes
}
