package packet

import (
	"bytes"
	"testing"
)

// benchPublish is a typical telemetry message: QoS 1, 200-byte payload and,
// under v5, the properties a device commonly sets.
func benchPublish(version byte) *Publish {
	p := &Publish{QoS: 1, Topic: "fleet/acme/device-0042/telemetry", PacketID: 42,
		Payload: bytes.Repeat([]byte("x"), 200)}
	if version == Version5 {
		p.Properties.SetByte(PropPayloadFormat, 1)
		p.Properties.SetMessageExpiry(3600)
		p.Properties.SetString(PropContentType, "application/json")
	}
	return p
}

func benchVersions() []struct {
	name    string
	version byte
} {
	return []struct {
		name    string
		version byte
	}{{"v3", Version311}, {"v5", Version5}}
}

func BenchmarkDecodePublish(b *testing.B) {
	for _, v := range benchVersions() {
		b.Run(v.name, func(b *testing.B) {
			benchDecode(b, benchPublish(v.version), v.version)
		})
	}
	b.Run("v5-user-properties", func(b *testing.B) {
		p := benchPublish(Version5)
		p.Properties.User = []UserProperty{{"site", "berlin"}, {"fw", "1.4.2"}}
		benchDecode(b, p, Version5)
	})
}

func BenchmarkEncodePublish(b *testing.B) {
	for _, v := range benchVersions() {
		b.Run(v.name, func(b *testing.B) {
			p := benchPublish(v.version)
			buf := make([]byte, 0, 512)
			b.SetBytes(int64(PublishSize(p, v.version)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendPublish(buf[:0], p, v.version)
			}
		})
	}
}

func BenchmarkDecodePuback(b *testing.B) {
	for _, v := range benchVersions() {
		b.Run(v.name, func(b *testing.B) {
			benchDecode(b, &Ack{Kind: PUBACK, PacketID: 42}, v.version)
		})
	}
}

func BenchmarkEncodePuback(b *testing.B) {
	for _, v := range benchVersions() {
		b.Run(v.name, func(b *testing.B) {
			benchEncodeAck(b, &Ack{Kind: PUBACK, PacketID: 42}, v.version)
		})
	}
	b.Run("v5-reason-string", func(b *testing.B) {
		a := &Ack{Kind: PUBACK, PacketID: 42, ReasonCode: NotAuthorized}
		a.Properties.SetReasonString("publish to fleet/acme denied")
		benchEncodeAck(b, a, Version5)
	})
}

func benchDecode(b *testing.B, p Packet, version byte) {
	b.Helper()
	enc, err := Encode(nil, p, version)
	if err != nil {
		b.Fatal(err)
	}
	header, rem, n, err := ParseHeader(enc)
	if err != nil || n+rem != len(enc) {
		b.Fatal(err)
	}
	body := enc[n:]
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(header, body, version); err != nil {
			b.Fatal(err)
		}
	}
}

func benchEncodeAck(b *testing.B, a *Ack, version byte) {
	b.Helper()
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendAck(buf[:0], a, version)
	}
}
