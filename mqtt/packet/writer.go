package packet

// writer builds the body of a packet that is not on the hot path (everything
// but PUBLISH and the acknowledgements) after a 5-byte gap, then moves it
// next to the fixed header once its length is known. The first error sticks.
type writer struct {
	b   []byte
	v5  bool
	err error
}

func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// begin leaves room for the largest fixed header and returns where it starts.
func (w *writer) begin() int {
	start := len(w.b)
	w.b = append(w.b, 0, 0, 0, 0, 0)
	return start
}

// finish writes the fixed header before the body begun at start.
func (w *writer) finish(start int, header byte) ([]byte, error) {
	rem := len(w.b) - start - 5
	if rem > MaxVarint {
		return w.b[:start], Errorf(PacketTooLarge, "remaining length %d is over %d", rem, MaxVarint)
	}
	hl := 1 + varintSize(rem)
	copy(w.b[start+hl:], w.b[start+5:])
	w.b = w.b[:len(w.b)-(5-hl)]
	AppendVarint(append(w.b[:start], header), rem)
	return w.b, nil
}

func (w *writer) string(s, what string) {
	if len(s) > 65535 {
		w.fail(tooLong(what))
		return
	}
	w.b = appendString(w.b, s)
}

func (w *writer) bytes(b []byte, what string) {
	if len(b) > 65535 {
		w.fail(tooLong(what))
		return
	}
	w.b = appendBytes(w.b, b)
}

func (w *writer) packetID(id uint16) { w.b = append(w.b, byte(id>>8), byte(id)) }

// props writes the property block for ctx; callers check w.v5.
func (w *writer) props(p *Properties, ctx Type) {
	mask := allowedProps[ctx]
	if err := checkProps(p, mask); err != nil {
		w.fail(err)
		return
	}
	w.b = appendProps(w.b, p, mask, propsSize(p, mask))
}

func (w *writer) connack(c *Connack) {
	flags := byte(0)
	if c.SessionPresent {
		flags = 1
	}
	if !w.v5 {
		w.b = append(w.b, flags, V3ReturnCode(c.ReasonCode))
		return
	}
	w.b = append(w.b, flags, byte(c.ReasonCode))
	w.props(&c.Properties, CONNACK)
}

func (w *writer) subscribe(s *Subscribe) {
	w.packetID(s.PacketID)
	if w.v5 {
		w.props(&s.Properties, SUBSCRIBE)
	}
	for i := range s.Subscriptions {
		sub := &s.Subscriptions[i]
		if sub.QoS > 2 {
			w.fail(malformed("subscription with QoS %d", sub.QoS))
			return
		}
		opts := sub.QoS
		if w.v5 {
			if sub.RetainHandling > 2 {
				w.fail(malformed("subscription with Retain Handling %d", sub.RetainHandling))
				return
			}
			opts |= sub.RetainHandling << 4
			if sub.NoLocal {
				opts |= 0x04
			}
			if sub.RetainAsPublished {
				opts |= 0x08
			}
		}
		w.string(sub.Filter, "topic filter")
		w.b = append(w.b, opts)
	}
}

func (w *writer) suback(s *Suback) {
	w.packetID(s.PacketID)
	if w.v5 {
		w.props(&s.Properties, SUBACK)
	}
	for _, c := range s.ReasonCodes {
		if !w.v5 && c >= 0x80 {
			c = UnspecifiedError // the one 3.1.1 failure code, 0x80
		}
		w.b = append(w.b, byte(c))
	}
}

func (w *writer) unsubscribe(u *Unsubscribe) {
	w.packetID(u.PacketID)
	if w.v5 {
		w.props(&u.Properties, UNSUBSCRIBE)
	}
	for _, f := range u.Filters {
		w.string(f, "topic filter")
	}
}

func (w *writer) unsuback(u *Unsuback) {
	w.packetID(u.PacketID)
	if !w.v5 {
		return
	}
	w.props(&u.Properties, UNSUBACK)
	for _, c := range u.ReasonCodes {
		w.b = append(w.b, byte(c))
	}
}

// reason writes the body of a v5 DISCONNECT or AUTH: nothing for Success
// without properties; the reason code alone without properties when
// reasonOnly (DISCONNECT allows that form, AUTH does not say so); else the
// reason code and properties.
func (w *writer) reason(rc ReasonCode, p *Properties, t Type, reasonOnly bool) {
	mask := allowedProps[t]
	if propBits(p, mask) == 0 {
		if rc == Success {
			return
		}
		if reasonOnly {
			w.b = append(w.b, byte(rc))
			return
		}
	}
	w.b = append(w.b, byte(rc))
	w.props(p, t)
}
