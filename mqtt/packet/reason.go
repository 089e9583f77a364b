package packet

// ReasonCode is an MQTT 5 reason code. The same values are used internally
// under 3.1.1 and mapped to the 3.1.1 wire codes where needed.
type ReasonCode byte

// Reason codes (MQTT 5, section 2.4).
const (
	Success                     ReasonCode = 0x00 // also Normal disconnection, Granted QoS 0
	GrantedQoS1                 ReasonCode = 0x01
	GrantedQoS2                 ReasonCode = 0x02
	DisconnectWithWill          ReasonCode = 0x04
	NoMatchingSubscribers       ReasonCode = 0x10
	NoSubscriptionExisted       ReasonCode = 0x11
	ContinueAuthentication      ReasonCode = 0x18
	ReAuthenticate              ReasonCode = 0x19
	UnspecifiedError            ReasonCode = 0x80
	MalformedPacket             ReasonCode = 0x81
	ProtocolError               ReasonCode = 0x82
	ImplementationSpecificError ReasonCode = 0x83
	UnsupportedProtocolVersion  ReasonCode = 0x84
	ClientIdentifierNotValid    ReasonCode = 0x85
	BadUserNameOrPassword       ReasonCode = 0x86
	NotAuthorized               ReasonCode = 0x87
	ServerUnavailable           ReasonCode = 0x88
	ServerBusy                  ReasonCode = 0x89
	Banned                      ReasonCode = 0x8A
	ServerShuttingDown          ReasonCode = 0x8B
	BadAuthenticationMethod     ReasonCode = 0x8C
	KeepAliveTimeout            ReasonCode = 0x8D
	SessionTakenOver            ReasonCode = 0x8E
	TopicFilterInvalid          ReasonCode = 0x8F
	TopicNameInvalid            ReasonCode = 0x90
	PacketIdentifierInUse       ReasonCode = 0x91
	PacketIdentifierNotFound    ReasonCode = 0x92
	ReceiveMaximumExceeded      ReasonCode = 0x93
	TopicAliasInvalid           ReasonCode = 0x94
	PacketTooLarge              ReasonCode = 0x95
	MessageRateTooHigh          ReasonCode = 0x96
	QuotaExceeded               ReasonCode = 0x97
	AdministrativeAction        ReasonCode = 0x98
	PayloadFormatInvalid        ReasonCode = 0x99
	RetainNotSupported          ReasonCode = 0x9A
	QoSNotSupported             ReasonCode = 0x9B
	UseAnotherServer            ReasonCode = 0x9C
	ServerMoved                 ReasonCode = 0x9D
	SharedSubsNotSupported      ReasonCode = 0x9E
	ConnectionRateExceeded      ReasonCode = 0x9F
	MaximumConnectTime          ReasonCode = 0xA0
	SubIDsNotSupported          ReasonCode = 0xA1
	WildcardSubsNotSupported    ReasonCode = 0xA2
)

// MQTT 3.1.1 CONNACK return codes.
const (
	V3Accepted              byte = 0x00
	V3UnacceptableProtocol  byte = 0x01
	V3IdentifierRejected    byte = 0x02
	V3ServerUnavailable     byte = 0x03
	V3BadUsernameOrPassword byte = 0x04
	V3NotAuthorized         byte = 0x05
)
