package packet

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name      string
		in        []byte
		header    byte
		remaining int
		n         int
		err       error      // ErrIncomplete, or nil
		code      ReasonCode // when an *Error is expected
	}{
		{name: "empty", in: nil, err: ErrIncomplete},
		{name: "first byte only", in: raw(0x30), err: ErrIncomplete},
		{name: "continued length", in: raw(0x30, 0x80), err: ErrIncomplete},
		{name: "three continued bytes", in: raw(0x30, 0x80, 0x80, 0x80), err: ErrIncomplete},
		{name: "zero", in: raw(0xC0, 0x00), header: 0xC0, remaining: 0, n: 2},
		{name: "body follows", in: raw(0x30, 0x7F, 1, 2, 3), header: 0x30, remaining: 127, n: 2},
		{name: "two bytes", in: raw(0x30, 0x80, 0x01), header: 0x30, remaining: 128, n: 3},
		{name: "three bytes", in: raw(0x30, 0xFF, 0xFF, 0x7F), header: 0x30, remaining: 2097151, n: 4},
		{name: "maximum", in: raw(0x30, 0xFF, 0xFF, 0xFF, 0x7F, 0), header: 0x30, remaining: MaxVarint, n: 5},
		{name: "five bytes", in: raw(0x30, 0x80, 0x80, 0x80, 0x80, 0x01), code: MalformedPacket},
		{name: "four continued bytes", in: raw(0x30, 0xFF, 0xFF, 0xFF, 0xFF), code: MalformedPacket},
		{name: "not minimal", in: raw(0x30, 0x80, 0x00), code: MalformedPacket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header, remaining, n, err := ParseHeader(tt.in)
			if tt.code != 0 {
				var perr *Error
				if !errors.As(err, &perr) || perr.Code != tt.code {
					t.Fatalf("err = %v, want code %s", err, tt.code)
				}
				return
			}
			if err != tt.err {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if header != tt.header || remaining != tt.remaining || n != tt.n {
				t.Fatalf("got (0x%02X, %d, %d), want (0x%02X, %d, %d)",
					header, remaining, n, tt.header, tt.remaining, tt.n)
			}
		})
	}
}

func TestVarint(t *testing.T) {
	tests := []struct {
		v   int
		enc []byte
	}{
		{0, raw(0x00)},
		{1, raw(0x01)},
		{127, raw(0x7F)},
		{128, raw(0x80, 0x01)},
		{16383, raw(0xFF, 0x7F)},
		{16384, raw(0x80, 0x80, 0x01)},
		{2097151, raw(0xFF, 0xFF, 0x7F)},
		{2097152, raw(0x80, 0x80, 0x80, 0x01)},
		{MaxVarint, raw(0xFF, 0xFF, 0xFF, 0x7F)},
	}
	for _, tt := range tests {
		if got := AppendVarint(nil, tt.v); !bytes.Equal(got, tt.enc) {
			t.Errorf("AppendVarint(%d) = % X, want % X", tt.v, got, tt.enc)
		}
		if n := varintSize(tt.v); n != len(tt.enc) {
			t.Errorf("varintSize(%d) = %d, want %d", tt.v, n, len(tt.enc))
		}
		v, n, err := Varint(append(tt.enc, 0xAA))
		if err != nil || v != tt.v || n != len(tt.enc) {
			t.Errorf("Varint(% X) = %d, %d, %v", tt.enc, v, n, err)
		}
	}
	// Out-of-range values do not panic and stay within 4 bytes.
	for _, v := range []int{-1, MaxVarint + 1, 1 << 40} {
		if got := AppendVarint(nil, v); len(got) > 4 {
			t.Errorf("AppendVarint(%d) = % X", v, got)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	long := strings.Repeat("a", 65536)
	tests := []struct {
		name    string
		p       Packet
		version byte
		code    ReasonCode
	}{
		{"nil", nil, v5, MalformedPacket},
		{"nil Publish", (*Publish)(nil), v5, MalformedPacket},
		{"nil Ack", (*Ack)(nil), v5, MalformedPacket},
		{"nil Connect", (*Connect)(nil), v5, MalformedPacket},
		{"PUBLISH QoS 3", &Publish{Topic: "a", QoS: 3}, v3, MalformedPacket},
		{"PUBLISH long topic", &Publish{Topic: long}, v3, MalformedPacket},
		{"PUBLISH long Content Type", &Publish{Topic: "a", Properties: props(func(p *Properties) {
			p.SetString(PropContentType, long)
		})}, v5, MalformedPacket},
		{"PUBLISH long user property", &Publish{Topic: "a", Properties: props(func(p *Properties) {
			p.User = []UserProperty{{"k", long}}
		})}, v5, MalformedPacket},
		{"PUBLISH Subscription Identifier too big", &Publish{Topic: "a", Properties: props(func(p *Properties) {
			p.SubscriptionIDs = []uint32{MaxVarint + 1}
		})}, v5, MalformedPacket},
		{"PUBLISH too large", &Publish{Topic: "a", Payload: make([]byte, MaxVarint)}, v3, PacketTooLarge},
		{"Ack of kind CONNECT", &Ack{Kind: CONNECT, PacketID: 1}, v5, MalformedPacket},
		{"Ack long Reason String", &Ack{Kind: PUBACK, PacketID: 1, Properties: props(func(p *Properties) {
			p.SetReasonString(long)
		})}, v5, MalformedPacket},
		{"CONNECT long client id", &Connect{ProtocolLevel: 4, ClientID: long}, v3, MalformedPacket},
		{"CONNECT will QoS 3", &Connect{ProtocolLevel: 5, Will: &Will{Topic: "t", QoS: 3}}, v5, MalformedPacket},
		{"CONNECT long password", &Connect{ProtocolLevel: 4, HasPassword: true, Password: []byte(long)}, v3, MalformedPacket},
		{"CONNECT long will Correlation Data", &Connect{ProtocolLevel: 5, Will: &Will{Topic: "t",
			Properties: props(func(p *Properties) { p.CorrelationData = []byte(long); p.Mark(PropCorrelationData) })}},
			v5, MalformedPacket},
		{"SUBSCRIBE QoS 3", &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: "a", QoS: 3}}}, v3, MalformedPacket},
		{"SUBSCRIBE Retain Handling 3", &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: "a", RetainHandling: 3}}}, v5, MalformedPacket},
		{"UNSUBSCRIBE long filter", &Unsubscribe{PacketID: 1, Filters: []string{long}}, v3, MalformedPacket},
		{"AUTH under 3.1.1", &Auth{}, v3, ProtocolError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte{1, 2, 3}
			got, err := Encode(dst, tt.p, tt.version)
			var perr *Error
			if !errors.As(err, &perr) || perr.Code != tt.code {
				t.Fatalf("err = %v, want code %s", err, tt.code)
			}
			if !bytes.Equal(got, []byte{1, 2, 3}) {
				t.Errorf("dst changed on error: % X", got[:min(len(got), 16)])
			}
		})
	}
}

// Encoding leaves out properties the packet type does not allow and
// properties whose presence bit was never set.
func TestEncodeAllowedPropertiesOnly(t *testing.T) {
	p := props(func(p *Properties) {
		p.SetUint32(PropWillDelay, 5)     // will only
		p.SetSessionExpiry(9)             // CONNECT, CONNACK, DISCONNECT
		p.Mark(PropUser)                  // no User slice: nothing to write
		p.ReasonString = "not marked"     // value without presence
		p.SetString(PropContentType, "c") // PUBLISH and will
	})
	got, err := Encode(nil, &Publish{Topic: "t", Properties: p}, v5)
	want := raw(0x30, 8, 0, 1, "t", 4, 0x03, 0, 1, "c")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Encode = % X, %v; want % X", got, err, want)
	}
	got, err = Encode(nil, &Disconnect{Properties: p}, v5)
	want = raw(0xE0, 7, 0, 5, 0x11, 0, 0, 0, 9)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Encode = % X, %v; want % X", got, err, want)
	}
}

func TestEncodeConnectDefaults(t *testing.T) {
	// An empty ProtocolName is written as "MQTT"; odd levels are encoded as
	// given so tests can provoke the broker's refusal.
	got, err := Encode(nil, &Connect{ProtocolLevel: 7, ClientID: "c"}, v5)
	want := raw(0x10, 13, 0, 4, "MQTT", 7, 0, 0, 0, 0, 1, "c")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Encode = % X, %v; want % X", got, err, want)
	}
}

func TestPublishSizeLarge(t *testing.T) {
	// Four-byte Remaining Length, and the boundary where it grows.
	for _, n := range []int{122, 123, 16378, 16379, 2097146, 2097147} {
		p := &Publish{Topic: "a/b", Payload: make([]byte, n)}
		b := AppendPublish(nil, p, v3)
		if PublishSize(p, v3) != len(b) {
			t.Errorf("payload %d: PublishSize %d, encoded %d", n, PublishSize(p, v3), len(b))
		}
		header, rem, hn, err := ParseHeader(b)
		if err != nil || header != 0x30 || hn+rem != len(b) {
			t.Errorf("payload %d: ParseHeader = 0x%02X, %d, %d, %v", n, header, rem, hn, err)
		}
	}
}

func TestDecodeAliasing(t *testing.T) {
	// PUBLISH aliases its body; the payload cannot be appended over the body.
	body := raw(0, 3, "a/b", "payload")
	p, err := Decode(0x30, body[:len(body)-2], v3)
	if err != nil {
		t.Fatal(err)
	}
	pub := p.(*Publish)
	if cap(pub.Payload) != len(pub.Payload) {
		t.Errorf("payload capacity %d exceeds its length %d", cap(pub.Payload), len(pub.Payload))
	}
	body[2] = 'x'
	if pub.Topic != "x/b" {
		t.Errorf("PUBLISH topic %q does not alias the body", pub.Topic)
	}
	// CONNECT copies its strings.
	body = connectBody(4, 0x82, 0, 2, "id", 0, 4, "user")
	p, err = Decode(0x10, body, v3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'z'
	}
	if c := p.(*Connect); c.ClientID != "id" || c.Username != "user" || c.ProtocolName != "MQTT" {
		t.Errorf("CONNECT strings changed with the body: %+v", c)
	}
}

func TestReasonCodeString(t *testing.T) {
	for rc, name := range reasonNames {
		if rc.String() != name || name == "" {
			t.Errorf("%#x: %q", byte(rc), rc.String())
		}
	}
	tests := map[ReasonCode]string{
		Success:                     "Success",
		MalformedPacket:             "Malformed Packet",
		QuotaExceeded:               "Quota exceeded",
		ImplementationSpecificError: "Implementation specific error",
		WildcardSubsNotSupported:    "Wildcard Subscriptions not supported",
		ReasonCode(0x03):            "Reason code 0x03",
		ReasonCode(0xFF):            "Reason code 0xFF",
	}
	for rc, want := range tests {
		if got := rc.String(); got != want {
			t.Errorf("ReasonCode(%#x).String() = %q, want %q", byte(rc), got, want)
		}
	}
	// Every code some packet may carry has a name.
	for c := 0; c < 256; c++ {
		rc := ReasonCode(c)
		for _, set := range []*codeSet{&connackCodes, &pubackCodes, &pubrelCodes, &subackCodes,
			&unsubackCodes, &disconnectCodes, &authCodes} {
			if set.has(rc) && strings.HasPrefix(rc.String(), "Reason code") {
				t.Errorf("code %#x is allowed in a packet but has no name", c)
			}
		}
	}
}

func TestTypeString(t *testing.T) {
	tests := map[Type]string{CONNECT: "CONNECT", PUBREL: "PUBREL", AUTH: "AUTH", 0: "RESERVED", 16: "Type(16)"}
	for typ, want := range tests {
		if got := typ.String(); got != want {
			t.Errorf("Type(%d).String() = %q, want %q", byte(typ), got, want)
		}
	}
}

func TestErrorString(t *testing.T) {
	err := Errorf(MalformedPacket, "invalid UTF-8 in %s", "topic name")
	if got, want := err.Error(), "mqtt: malformed packet: invalid UTF-8 in topic name"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&Error{Code: QuotaExceeded}).Error(), "mqtt: quota exceeded"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestV3ReturnCode(t *testing.T) {
	tests := map[ReasonCode]byte{
		Success:                    0,
		UnsupportedProtocolVersion: 1,
		ClientIdentifierNotValid:   2,
		ServerUnavailable:          3,
		ServerBusy:                 3,
		UnspecifiedError:           3,
		MalformedPacket:            3,
		UseAnotherServer:           3,
		ConnectionRateExceeded:     3,
		BadUserNameOrPassword:      4,
		NotAuthorized:              5,
		Banned:                     5,
		BadAuthenticationMethod:    5,
	}
	for rc, want := range tests {
		if got := V3ReturnCode(rc); got != want {
			t.Errorf("V3ReturnCode(%s) = %d, want %d", rc, got, want)
		}
	}
	// Decoding a 3.1.1 return code and mapping it back is the identity.
	for code := byte(0); code <= 5; code++ {
		rc, ok := reasonFromV3(code)
		if !ok || V3ReturnCode(rc) != code {
			t.Errorf("return code %d -> %s -> %d", code, rc, V3ReturnCode(rc))
		}
	}
}

// TestUserPropertiesBounded: a packet may carry MaxUserProperties User
// Properties; one more is refused as too large, and a flood of them is
// refused as cheaply (decoding stops at the bound).
func TestUserPropertiesBounded(t *testing.T) {
	decode := func(n int) (Packet, error) {
		p := &Publish{Topic: "t", QoS: 1, PacketID: 1}
		for i := range n {
			p.Properties.User = append(p.Properties.User, UserProperty{Key: "k", Value: string(rune('a' + i%26))})
		}
		b, err := Encode(nil, p, v5)
		if err != nil {
			t.Fatal(err)
		}
		header, _, hl, err := ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		return Decode(header, b[hl:], v5)
	}
	if p, err := decode(MaxUserProperties); err != nil || len(p.(*Publish).Properties.User) != MaxUserProperties {
		t.Fatalf("%d user properties: %v", MaxUserProperties, err)
	}
	for _, n := range []int{MaxUserProperties + 1, 100_000} {
		var e *Error
		if _, err := decode(n); !errors.As(err, &e) || e.Code != PacketTooLarge {
			t.Fatalf("%d user properties: %v, want Packet too large", n, err)
		}
	}
}
