package broker

import (
	"bytes"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// fullRetained is a retained message with every field the log keeps.
func fullRetained() *Message {
	m := &Message{Topic: "acc/dev/cfg", Payload: []byte("payload"), QoS: 1, PublishedQoS: 2, Retain: true,
		Created: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC), Expiry: time.Date(2030, 1, 3, 3, 4, 5, 6, time.UTC)}
	p := &m.Properties
	p.SetString(packet.PropContentType, "application/json")
	p.SetString(packet.PropResponseTopic, "acc/dev/reply")
	p.SetBytes(packet.PropCorrelationData, []byte{0, 1, 2})
	p.SetByte(packet.PropPayloadFormat, 1)
	p.User = []packet.UserProperty{{Key: "k", Value: "v"}, {Key: "", Value: ""}}
	return m
}

// sameRetained reports whether two messages agree on what the log keeps.
func sameRetained(a, b *Message) bool {
	sa, sb := saveMessage(a), saveMessage(b)
	sa.Created, sa.Expiry, sb.Created, sb.Expiry = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return a.Topic == b.Topic && bytes.Equal(a.Payload, b.Payload) && a.Created.Equal(b.Created) && a.Expiry.Equal(b.Expiry) &&
		reflect.DeepEqual(sa, sb)
}

func TestRetainedRecordRoundTrip(t *testing.T) {
	bare := &Message{Topic: "a", Payload: []byte{0}, Created: time.Unix(0, 1)}
	for name, m := range map[string]*Message{"full": fullRetained(), "bare": bare} {
		t.Run(name, func(t *testing.T) {
			b := appendSetRecord(nil, m)
			topic, got, err := decodeRecord(b)
			if err != nil || topic != m.Topic || got == nil || !sameRetained(got, m) {
				t.Fatalf("decode: %q %+v %v, want %+v", topic, got, err, m)
			}
			// A cut record never decodes.
			for i := range b {
				if _, _, err := decodeRecord(b[:i]); err == nil {
					t.Fatalf("a record cut at %d of %d bytes decoded", i, len(b))
				}
			}
		})
	}
	topic, m, err := decodeRecord(appendClearRecord(nil, "x/y"))
	if err != nil || topic != "x/y" || m != nil {
		t.Fatalf("clear: %q %v %v", topic, m, err)
	}
}

// FuzzDecodeRecord: decoding arbitrary bytes never panics, allocates no
// more than a small multiple of the input, and what decodes encodes back
// to a record that decodes to the same message.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendSetRecord(nil, fullRetained()))
	f.Add(appendClearRecord(nil, "a/b"))
	f.Add([]byte{recordSet, 1, 'a', 1, 'x', 0, 0, flagUser, 2, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{recordSet, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		// A Message, plus at most 16 bytes per input byte: an empty user
		// property takes two bytes of input and 32 of memory. The fuzzing
		// engine allocates too, at any time: the least of a few tries
		// counts.
		limit := 2048 + 16*uint64(len(b))
		var topic string
		var m *Message
		var err error
		least := uint64(1<<64 - 1)
		for try := 0; try < 3 && least > limit; try++ {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			topic, m, err = decodeRecord(b)
			runtime.ReadMemStats(&after)
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		if least > limit {
			t.Fatalf("decoding %d bytes allocated %d", len(b), least)
		}
		if shaped := recordShape(b); shaped && err != nil {
			t.Fatalf("recordShape accepts a record that does not decode: %v", err)
		} else if !shaped && err == nil && (m == nil || m.QoS <= 2 && m.PublishedQoS <= 2) && validFlags(b) {
			t.Fatal("recordShape refuses a record that decodes")
		}
		if err != nil || m == nil {
			return
		}
		if topic != m.Topic {
			t.Fatalf("topic %q, message topic %q", topic, m.Topic)
		}
		_, again, err := decodeRecord(appendSetRecord(nil, m))
		if err != nil || !sameRetained(again, m) {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", m, again, err)
		}
	})
}

// validFlags reports whether a set record's flags byte (b a set record
// that decodes) names only the fields the encoder writes.
func validFlags(b []byte) bool {
	if b[0] != recordSet {
		return true
	}
	r := &recordReader{b: b[1:]}
	r.raw()
	r.raw()
	r.byte()
	r.byte()
	return r.byte() < flagUser<<1
}
