package platform

import (
	"github.com/fleetmq/fleetmq"

	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// Inflight is the platform's window of unacknowledged QoS 1/2 messages per
// session (spec: max_inflight_messages 20).
const Inflight = 20

// Options configure the Policy.
type Options struct {
	// TopicPrefix is the optional topic_prefix: wire topics and filters are
	// "{TopicPrefix}/{account_id}/..."; stored topics never carry it.
	TopicPrefix string
	// Now is the clock (tests inject one to cross UTC midnight).
	Now func() time.Time
	// Sink, when set, receives every accepted message; the publisher's
	// acknowledgement waits until the sink calls m.Ack (ingest).
	Sink Sink
}

// Sink receives the history record of every accepted message (ingest).
// Accept is called on the publisher's connection goroutine in receive
// order; it may block to apply back-pressure (the connection is not read
// meanwhile). It must call ack.Ack exactly once when the record is durable
// (or, for a QoS 0 record, whenever it likes: the call does nothing).
type Sink interface {
	Accept(rec *fleetmq.Record, ack Acker)
}

// Acker acknowledges an accepted message to its publisher (PUBACK for
// QoS 1, PUBREC for QoS 2); *broker.Message is one.
type Acker interface{ Ack() }

// Policy implements broker.Policy with the platform's rules.
type Policy struct {
	opts  Options
	snap  atomic.Pointer[Snapshot]
	meter *Meter

	mu    sync.Mutex
	pools map[string]*Pool

	// srv is the broker whose retained messages the live view reads.
	srv atomic.Pointer[broker.Server]

	// Totals for metrics (bounded cardinality: no per-account labels).
	effective [3]atomic.Int64
	demotions atomic.Int64
	refused   atomic.Int64
	pool2     atomic.Int64
}

// NewPolicy returns a policy over an initial snapshot.
func NewPolicy(opts Options, snap *Snapshot) *Policy {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.TopicPrefix = strings.Trim(opts.TopicPrefix, "/")
	p := &Policy{opts: opts, meter: NewMeter(), pools: make(map[string]*Pool)}
	p.snap.Store(snap)
	return p
}

// SetSnapshot swaps in a new control-plane snapshot.
func (p *Policy) SetSnapshot(s *Snapshot) { p.snap.Store(s) }

// Snapshot returns the snapshot in force.
func (p *Policy) Snapshot() *Snapshot { return p.snap.Load() }

// Meter returns the usage meter (for flushing to the store).
func (p *Policy) Meter() *Meter { return p.meter }

// Pool returns the account's daily QoS 2 pool.
func (p *Policy) Pool(accountID string) *Pool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.pools[accountID]
	if pl == nil {
		pl = &Pool{}
		p.pools[accountID] = pl
	}
	return pl
}

// Session is the policy's data on a broker session (Identity.Data).
type Session struct {
	AccountID string
	Kind      string // KindPublisher or KindSubscriber
	ClientID  string
	CredID    string
	Username  string
	Filters   []string // subscriber: granted internal filters

	acct   *accountMeter
	client *clientMeter
	pool   *Pool
	conn   *broker.Connection // set by Connected (publishers)
}

// MessageInfo is the policy's data on an accepted message (Message.Data).
type MessageInfo struct {
	AccountID                 string
	ClientID                  string
	Class                     string
	Layout                    string // vendor layout that normalized it, if any
	WireTopic                 string // the topic as published
	Demoted                   bool   // a QoS 2 lowered because the pool was used up
	StationControllerDeviceID string
}

// SessionOf returns the platform session of a broker identity.
func SessionOf(id *broker.Identity) *Session {
	s, _ := id.Data.(*Session)
	return s
}

// hashSecret is the stored form of a generated secret.
func hashSecret(secret []byte) string { return fleetmq.HashSecret(string(secret)) }

// dummyHash is compared against for unknown usernames so that unknown and
// wrong credentials take the same time.
var dummyHash = hashSecret([]byte("fleetmq-no-such-user"))

// Authenticate accepts a fleet publisher credential with a client id
// registered in its account, or a subscriber password (read-only).
func (p *Policy) Authenticate(_ context.Context, req *broker.ConnectRequest) (*broker.Identity, packet.ReasonCode) {
	c := req.Connect
	snap := p.snap.Load()
	now := p.opts.Now()
	cred := snap.Creds[c.Username]
	want := dummyHash
	if cred != nil {
		want = cred.SecretHash
	}
	got := hashSecret(c.Password)
	ok := subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
	if !c.HasUsername || !c.HasPassword || cred == nil || !ok || cred.Expired(now) {
		return nil, packet.BadUserNameOrPassword
	}
	acc := snap.Accounts[cred.AccountID]
	if acc == nil || acc.Suspended {
		return nil, packet.NotAuthorized
	}
	s := &Session{AccountID: acc.ID, Kind: cred.Kind, ClientID: c.ClientID, CredID: cred.ID, Username: cred.Username,
		acct: p.meter.account(acc.ID), pool: p.Pool(acc.ID)}
	id := &broker.Identity{
		Namespace: acc.ID,
		ClientID:  c.ClientID,
		Username:  c.Username,
		Limits: broker.Limits{
			MaxInflight:      Inflight,
			MaxQueued:        acc.MaxQueued(),
			MaxRetainedBurst: acc.MaxQueued(),
		},
		Data: s,
	}
	if p.opts.TopicPrefix != "" {
		id.DeliverPrefix = p.opts.TopicPrefix + "/"
	}
	switch cred.Kind {
	case KindPublisher:
		cl := acc.Clients[c.ClientID]
		if cl == nil {
			return nil, packet.ClientIdentifierNotValid
		}
		id.Limits.CapQoS = true
		id.Limits.MaxQoS = cl.MaxPublishQoS
		s.client = p.meter.client(acc.ID, c.ClientID)
	case KindSubscriber:
		s.Filters = cred.Filters
		if len(s.Filters) == 0 {
			s.Filters = []string{acc.ID + "/#"}
		}
	default:
		return nil, packet.NotAuthorized
	}
	return id, packet.Success
}

// Subscribe confines filters to the account: a publisher to its own
// prefix, a subscriber to its granted filters. Nothing escapes the account:
// not "#", "+/#", "$share/g/#", "$SYS/#" or another client's prefix.
func (p *Policy) Subscribe(id *broker.Identity, _ string, sub *packet.Subscription) (string, packet.ReasonCode) {
	s := SessionOf(id)
	if s == nil {
		return "", packet.NotAuthorized
	}
	f, ok := StripPrefix(p.opts.TopicPrefix, sub.Filter)
	if !ok || strings.HasPrefix(f, "$") {
		return "", packet.NotAuthorized
	}
	allowed := false
	switch s.Kind {
	case KindPublisher:
		allowed = Covers(s.AccountID+"/"+s.ClientID+"/#", f)
	case KindSubscriber:
		for _, g := range s.Filters {
			if Covers(g, f) {
				allowed = true
				break
			}
		}
	}
	if !allowed {
		return "", packet.NotAuthorized
	}
	return f, packet.ReasonCode(min(sub.QoS, 2))
}

// Publish applies confinement, the taxonomy, vendor layouts, the client's
// maximum QoS and the effective QoS rules.
func (p *Policy) Publish(id *broker.Identity, pk *packet.Publish, m *broker.Message) packet.ReasonCode {
	s := SessionOf(id)
	if s == nil || s.Kind != KindPublisher {
		return p.refuse(s, packet.NotAuthorized)
	}
	snap := p.snap.Load()
	acc := snap.Accounts[s.AccountID]
	if acc == nil || acc.Suspended {
		return p.refuse(s, packet.NotAuthorized)
	}
	cl := acc.Clients[s.ClientID]
	if cl == nil {
		return p.refuse(s, packet.NotAuthorized)
	}
	if pk.QoS > cl.MaxPublishQoS {
		// The broker disconnects (v5 0x9B); Disconnected counts the refusal.
		return packet.QoSNotSupported
	}
	info := &MessageInfo{AccountID: s.AccountID, ClientID: s.ClientID, WireTopic: pk.Topic}
	own := s.AccountID + "/" + s.ClientID + "/"
	internal, prefixed := StripPrefix(p.opts.TopicPrefix, pk.Topic)
	switch {
	case prefixed && strings.HasPrefix(internal, own):
		pt, ok := ParsePlatformTopic(internal)
		if !ok {
			return p.refuse(s, packet.TopicNameInvalid)
		}
		info.Class = pt.Class
		m.Topic = internal
	default:
		l, clientID, subpath, known := snap.layoutFor(pk.Topic)
		if l == nil {
			_ = known // an unregistered root and an unmatched topic are both refused
			return p.refuse(s, packet.NotAuthorized)
		}
		if clientID != s.ClientID {
			return p.refuse(s, packet.NotAuthorized)
		}
		pt, ok := ParsePlatformTopic(own + subpath)
		if !ok {
			return p.refuse(s, packet.TopicNameInvalid)
		}
		info.Class = pt.Class
		info.Layout = l.Name
		m.Topic = own + subpath
		m.NoDeliver = !l.Fanout
	}
	now := p.opts.Now()
	slot := s.acct.slot(now)
	eff, demoted := EffectiveQoS(pk.QoS, info.Class, acc.QoS2AddOn, func() bool {
		return s.pool.Take(now, acc.QoS2DailyPool)
	})
	m.QoS = eff
	info.Demoted = demoted
	info.StationControllerDeviceID = stationControllerID(pk.Payload)
	m.Data = info

	slot.messages[eff].Add(1)
	slot.bytes[eff].Add(int64(len(pk.Payload)))
	p.effective[eff].Add(1)
	if eff == 2 {
		slot.poolUsed.Add(1)
		p.pool2.Add(1)
	}
	if demoted {
		slot.demotions.Add(1)
		p.demotions.Add(1)
	}
	s.client.count(now, eff)
	return packet.Success
}

func (p *Policy) refuse(s *Session, code packet.ReasonCode) packet.ReasonCode {
	p.refused.Add(1)
	if s != nil && s.acct != nil {
		s.acct.slot(p.opts.Now()).refused.Add(1)
	}
	return code
}

// stationControllerID reads the station_controller_device_id field of a
// JSON object payload ("" when absent or not JSON).
func stationControllerID(payload []byte) string {
	if !bytes.Contains(payload, []byte(`"station_controller_device_id"`)) {
		return ""
	}
	var v struct {
		ID json.RawMessage `json:"station_controller_device_id"`
	}
	if json.Unmarshal(payload, &v) != nil || len(v.ID) == 0 {
		return ""
	}
	var str string
	if json.Unmarshal(v.ID, &str) == nil {
		return str
	}
	if v.ID[0] >= '0' && v.ID[0] <= '9' || v.ID[0] == '-' {
		return string(v.ID) // a numeric id, kept as written
	}
	return ""
}

// Accepted hands the message's history record to the sink (ingest),
// deferring the acknowledgement until it is stored.
func (p *Policy) Accepted(_ *broker.Identity, m *broker.Message) bool {
	if p.opts.Sink == nil {
		return false
	}
	info, _ := m.Data.(*MessageInfo)
	if info == nil {
		return false
	}
	p.opts.Sink.Accept(NewRecord(m, info), m)
	return true
}

// NewRecord is the history record of an accepted message.
func NewRecord(m *broker.Message, info *MessageInfo) *fleetmq.Record {
	r := &fleetmq.Record{
		AccountID:                 info.AccountID,
		ClientID:                  info.ClientID,
		Topic:                     m.Topic,
		Class:                     info.Class,
		QoS:                       m.QoS,
		PublishedQoS:              m.PublishedQoS,
		Retain:                    m.Retain,
		Payload:                   m.Payload,
		ContentType:               m.Properties.ContentType,
		PayloadFormat:             m.Properties.PayloadFormat,
		StationControllerDeviceID: info.StationControllerDeviceID,
		Received:                  m.Created.UTC().Truncate(time.Microsecond),
	}
	if n := len(m.Properties.User); n > 0 {
		r.UserProperties = make([]fleetmq.UserProperty, n)
		for i, u := range m.Properties.User {
			r.UserProperties[i] = fleetmq.UserProperty{Key: u.Key, Value: u.Value}
		}
	}
	return r
}

// Delivered is not metered separately (ingest meters by effective QoS).
func (p *Policy) Delivered(*broker.Identity, *broker.Message, byte) {}

// Dropped counts a drop against the receiving session's account.
func (p *Policy) Dropped(id *broker.Identity, _ *broker.Message, r broker.DropReason) {
	if s := SessionOf(id); s != nil && s.acct != nil && int(r) < len(s.acct.days[0].drops) {
		s.acct.slot(p.opts.Now()).drops[r].Add(1)
	}
}

// Disconnected ends a publisher's connection in the live view, and counts
// a PUBLISH above the client's max_publish_qos as refused: the broker ends
// such a connection with QoSNotSupported, usually before Publish is called
// (the limit from CONNECT), sometimes in Publish (a max lowered since).
func (p *Policy) Disconnected(id *broker.Identity, err error) {
	if s := SessionOf(id); s != nil && s.client != nil && s.conn != nil {
		s.client.live.detach(s.conn, p.opts.Now())
	}
	var pe *packet.Error
	if errors.As(err, &pe) && pe.Code == packet.QoSNotSupported {
		p.refuse(SessionOf(id), pe.Code)
	}
}

// StillValid reports whether a connected identity is still allowed under
// the snapshot in force at now: its credential exists and has not expired,
// its account is active and (for a publisher) its client is registered.
// Sessions that are not are disconnected.
func (p *Policy) StillValid(id *broker.Identity, now time.Time) bool {
	s := SessionOf(id)
	if s == nil {
		return true // not ours
	}
	snap := p.snap.Load()
	cred := snap.Creds[s.Username]
	if cred == nil || cred.ID != s.CredID || cred.Expired(now) {
		return false
	}
	acc := snap.Accounts[s.AccountID]
	if acc == nil || acc.Suspended {
		return false
	}
	if s.Kind == KindPublisher && acc.Clients[s.ClientID] == nil {
		return false
	}
	return true
}

// Totals are the policy's process-wide counters for metrics.
type Totals struct {
	Effective [3]int64 // accepted messages by effective QoS
	QoS2Pool  int64    // units of QoS 2 pools used
	Demotions int64    // QoS 2 messages demoted to 1 (pool used up)
	Refused   int64    // publishes refused by the platform rules
}

// Totals returns the counters.
func (p *Policy) Totals() Totals {
	t := Totals{QoS2Pool: p.pool2.Load(), Demotions: p.demotions.Load(), Refused: p.refused.Load()}
	for i := range t.Effective {
		t.Effective[i] = p.effective[i].Load()
	}
	return t
}

var _ broker.Policy = (*Policy)(nil)
