package packet

import "testing"

// The allocation budget of the hot path, checked as a test so that a
// regression fails CI rather than only showing in benchmark output.
func TestHotPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for _, v := range benchVersions() {
		p := benchPublish(v.version)
		buf := make([]byte, 0, 512)
		if n := testing.AllocsPerRun(100, func() { buf = AppendPublish(buf[:0], p, v.version) }); n != 0 {
			t.Errorf("%s AppendPublish: %v allocations, want 0", v.name, n)
		}
		if n := testing.AllocsPerRun(100, func() { buf, _ = Encode(buf[:0], p, v.version) }); n != 0 {
			t.Errorf("%s Encode(PUBLISH): %v allocations, want 0", v.name, n)
		}
		a := &Ack{Kind: PUBREC, PacketID: 9, ReasonCode: QuotaExceeded}
		a.Properties.SetReasonString("full")
		if n := testing.AllocsPerRun(100, func() { buf = AppendAck(buf[:0], a, v.version) }); n != 0 {
			t.Errorf("%s AppendAck: %v allocations, want 0", v.name, n)
		}

		enc := AppendPublish(nil, p, v.version)
		header, _, hn, _ := ParseHeader(enc)
		body := enc[hn:]
		if n := testing.AllocsPerRun(100, func() { _, _ = Decode(header, body, v.version) }); n > 1 {
			t.Errorf("%s Decode(PUBLISH): %v allocations, want at most 1", v.name, n)
		}
		into := new(Publish)
		if n := testing.AllocsPerRun(100, func() { _ = DecodePublish(header, body, v.version, into) }); n != 0 {
			t.Errorf("%s DecodePublish: %v allocations, want 0", v.name, n)
		}
	}
}
