package broker

import "errors"

// AppendMessage appends to b the encoding of m that a cluster router sends
// to the other nodes: the retained log's record of m (topic, payload,
// effective and published QoS, RETAIN, creation time, expiry, and the
// properties carried onward). Origin, Publisher and Data stay on this
// node.
func AppendMessage(b []byte, m *Message) []byte { return appendSetRecord(b, m) }

// DecodeMessage decodes what AppendMessage wrote. The message owns its
// memory.
func DecodeMessage(b []byte) (*Message, error) {
	_, m, err := decodeRecord(b)
	if err == nil && m == nil {
		err = errors.New("broker: not a message record")
	}
	return m, err
}
