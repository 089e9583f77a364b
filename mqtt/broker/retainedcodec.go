package broker

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The binary encoding of one record of the retained log (see
// retainedlog.go): a kind byte, then for a set the message, for a clear
// the topic. Strings and byte slices are a uvarint length and the bytes;
// times are varint Unix nanoseconds.
//
//	set:   0x01 topic payload qos published_qos flags created
//	       [expiry] [content_type] [response_topic] [correlation]
//	       [payload_format] [user_count (key value)...]
//	clear: 0x02 topic
//
// The flags byte says which optional fields follow, in that order.

const (
	recordSet   byte = 1
	recordClear byte = 2
)

const (
	flagRetain byte = 1 << iota
	flagExpiry
	flagContentType
	flagResponseTopic
	flagCorrelation
	flagPayloadFormat
	flagUser
)

var errRecord = errors.New("malformed record")

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendSetRecord appends the set record of m to b.
func appendSetRecord(b []byte, m *Message) []byte {
	p := &m.Properties
	var flags byte
	if m.Retain {
		flags |= flagRetain
	}
	if !m.Expiry.IsZero() {
		flags |= flagExpiry
	}
	if p.Has(packet.PropContentType) {
		flags |= flagContentType
	}
	if p.Has(packet.PropResponseTopic) {
		flags |= flagResponseTopic
	}
	if p.Has(packet.PropCorrelationData) {
		flags |= flagCorrelation
	}
	if p.Has(packet.PropPayloadFormat) {
		flags |= flagPayloadFormat
	}
	if len(p.User) > 0 {
		flags |= flagUser
	}
	b = append(b, recordSet)
	b = appendString(b, m.Topic)
	b = appendBytes(b, m.Payload)
	b = append(b, m.QoS, m.PublishedQoS, flags)
	b = binary.AppendVarint(b, m.Created.UnixNano())
	if flags&flagExpiry != 0 {
		b = binary.AppendVarint(b, m.Expiry.UnixNano())
	}
	if flags&flagContentType != 0 {
		b = appendString(b, p.ContentType)
	}
	if flags&flagResponseTopic != 0 {
		b = appendString(b, p.ResponseTopic)
	}
	if flags&flagCorrelation != 0 {
		b = appendBytes(b, p.CorrelationData)
	}
	if flags&flagPayloadFormat != 0 {
		b = append(b, p.PayloadFormat)
	}
	if flags&flagUser != 0 {
		b = binary.AppendUvarint(b, uint64(len(p.User)))
		for _, u := range p.User {
			b = appendString(b, u.Key)
			b = appendString(b, u.Value)
		}
	}
	return b
}

// appendClearRecord appends the clear record of topic to b.
func appendClearRecord(b []byte, topic string) []byte {
	return appendString(append(b, recordClear), topic)
}

// recordReader reads the fields of one record. Every length is checked
// against what is left before anything is allocated, so decoding never
// allocates more than the record's size justifies.
type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errRecord
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *recordReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

// raw returns the next length-prefixed field, aliasing the record.
func (r *recordReader) raw() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errRecord
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *recordReader) bytes() []byte {
	v := r.raw()
	if r.err != nil {
		return nil
	}
	return append([]byte{}, v...) // a copy, never nil
}

func (r *recordReader) string() string { return string(r.raw()) }

// decodeRecord decodes one record: a set returns its message, a clear its
// topic and a nil message. The message owns its memory (nothing aliases
// b).
func decodeRecord(b []byte) (topic string, m *Message, err error) {
	r := &recordReader{b: b}
	switch r.byte() {
	case recordClear:
		topic = r.string()
		if r.err == nil && len(r.b) != 0 {
			r.err = errRecord
		}
		return topic, nil, r.err
	case recordSet:
	default:
		return "", nil, errRecord
	}
	m = &Message{Topic: r.string(), Payload: r.bytes(), QoS: r.byte(), PublishedQoS: r.byte()}
	flags := r.byte()
	m.Retain = flags&flagRetain != 0
	m.Created = time.Unix(0, r.varint()).UTC()
	if flags&flagExpiry != 0 {
		m.Expiry = time.Unix(0, r.varint()).UTC()
	}
	p := &m.Properties
	if flags&flagContentType != 0 {
		p.SetString(packet.PropContentType, r.string())
	}
	if flags&flagResponseTopic != 0 {
		p.SetString(packet.PropResponseTopic, r.string())
	}
	if flags&flagCorrelation != 0 {
		p.SetBytes(packet.PropCorrelationData, r.bytes())
	}
	if flags&flagPayloadFormat != 0 {
		p.SetByte(packet.PropPayloadFormat, r.byte())
	}
	if flags&flagUser != 0 {
		n := r.uvarint()
		// Each property takes at least two bytes (two empty strings).
		if r.err == nil && n > uint64(len(r.b))/2 {
			r.err = errRecord
		}
		if r.err == nil && n > 0 {
			p.User = make([]packet.UserProperty, 0, n)
		}
		for range n {
			if r.err != nil {
				break
			}
			p.User = append(p.User, packet.UserProperty{Key: r.string(), Value: r.string()})
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errRecord
	}
	if r.err != nil {
		return "", nil, r.err
	}
	return m.Topic, m, nil
}

// recordShape reports whether b has the shape of a record this encoder
// writes, without decoding it (nothing is allocated, a payload is skipped,
// not read): the kind, every length within the record, QoS values and
// flags that are written, and nothing left over. Every record
// appendSetRecord and appendClearRecord write has it; a piece of a log
// taken at a wrong offset seldom does, so a search for where records
// start again after damage checks the shape before the checksum.
func recordShape(b []byte) bool {
	r := &recordReader{b: b}
	switch r.byte() {
	case recordClear:
		r.raw()
		return r.err == nil && len(r.b) == 0
	case recordSet:
	default:
		return false
	}
	r.raw() // topic
	r.raw() // payload
	qos, published, flags := r.byte(), r.byte(), r.byte()
	if r.err != nil || qos > 2 || published > 2 || flags >= flagUser<<1 {
		return false
	}
	r.varint()
	if flags&flagExpiry != 0 {
		r.varint()
	}
	if flags&flagContentType != 0 {
		r.raw()
	}
	if flags&flagResponseTopic != 0 {
		r.raw()
	}
	if flags&flagCorrelation != 0 {
		r.raw()
	}
	if flags&flagPayloadFormat != 0 {
		r.byte()
	}
	if flags&flagUser != 0 {
		n := r.uvarint()
		if r.err == nil && n > uint64(len(r.b))/2 {
			return false
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			r.raw()
			r.raw()
		}
	}
	return r.err == nil && len(r.b) == 0
}
