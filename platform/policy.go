package platform

import (
	"hash/maphash"
	"unicode"

	"github.com/fleetmq/fleetmq"

	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/mqtt/topic"
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
	// Logger, when set, receives a line for every control-plane change a
	// new snapshot brings (credentials, clients, accounts, layouts).
	Logger *slog.Logger
	// Applied, when set, is called by Run after every check of the
	// source's version, with the version in force: by then every change up
	// to it is enforced (sessions it no longer allows were disconnected).
	// serve reports it to the operator commands waiting for their change.
	Applied func(ctx context.Context, version int64)
	// QoS2Pools, when set, holds the daily QoS 2 pools the Policy takes
	// from, shared by several nodes; the Policy's own pools (Pool) then
	// record what this node took and was refused. Nil: the Policy's own
	// pools (LocalPools).
	QoS2Pools QoS2Pools
	// Changes, when set, tells Run of control-plane changes sooner than
	// its poll of the version (several nodes: a notice from the node
	// that wrote). Nil: the poll alone.
	Changes Changes
	// ClientUsageEvery is how often Run writes the per-client usage
	// (messages per client and day) to the sink; the accounts' daily usage
	// goes at every interval of Run. Per-client rows are one write per
	// client that published, which for a fleet of devices is as many
	// writes as a second's messages: written every minute, a device
	// publishing every few seconds costs one. The live view counts in
	// memory and does not wait for it. 0: every interval of Run.
	ClientUsageEvery time.Duration
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
// QoS 1, PUBREC for QoS 2), or refuses it when it could not be stored after
// all; *broker.Message is one. It is an alias of an interface literal, as
// ingest.Acker is, so that the two are one type and a sink declares the
// Accept it implements without importing this package.
type Acker = interface {
	Ack()
	Refuse(code packet.ReasonCode, reason string)
}

// Policy implements broker.Policy with the platform's rules.
type Policy struct {
	opts  Options
	snap  atomic.Pointer[Snapshot]
	meter *Meter

	pools *LocalPools // the daily QoS 2 pools

	mu sync.Mutex
	// rates are the accounts' shared publish limiters (the account's
	// connections' Identity.GroupLimiter), kept at the rates of the
	// snapshot in force.
	rates map[string]*broker.RateLimiter
	// shares are the parts of accounts' plan publish rates (messages,
	// bytes) this node allows (SetAccountShare); an account not here has
	// all of them.
	shares map[string][2]float64

	// srv is the broker whose retained messages the live view reads.
	srv atomic.Pointer[broker.Server]

	// Totals for metrics (bounded cardinality: no per-account labels).
	effective [3]atomic.Int64
	demotions atomic.Int64
	refused   atomic.Int64
	problems  problemLog
	pool2     atomic.Int64
	// unsure is a usage write whose outcome was not reported (flush only).
	unsure *usageWrite
}

// NewPolicy returns a policy over an initial snapshot.
func NewPolicy(opts Options, snap *Snapshot) *Policy {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.TopicPrefix = strings.Trim(opts.TopicPrefix, "/")
	p := &Policy{opts: opts, meter: NewMeter(), pools: NewLocalPools(), rates: make(map[string]*broker.RateLimiter),
		shares: make(map[string][2]float64)}
	p.problems.seed = maphash.MakeSeed()
	p.snap.Store(snap)
	return p
}

// SetSnapshot swaps in a new control-plane snapshot.
func (p *Policy) SetSnapshot(s *Snapshot) {
	p.snap.Store(s)
	p.applyRates(s)
}

// Snapshot returns the snapshot in force.
func (p *Policy) Snapshot() *Snapshot { return p.snap.Load() }

// Meter returns the usage meter (for flushing to the store).
func (p *Policy) Meter() *Meter { return p.meter }

// Pool returns the account's daily QoS 2 pool.
func (p *Policy) Pool(accountID string) *Pool { return p.pools.Pool(accountID) }

// AccountLimiter returns the account's publish limiter, shared by all its
// publisher connections, at the rates of its plan in the snapshot in
// force (applyRates keeps them there).
func (p *Policy) AccountLimiter(accountID string) *broker.RateLimiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.rates[accountID]
	if l == nil {
		// Read under mu: a snapshot stored meanwhile is applied to l by
		// the applyRates that follows its store.
		var msgs, bytes float64
		if acc := p.snap.Load().Accounts[accountID]; acc != nil {
			msgs, bytes = p.sharedRatesLocked(acc)
		}
		l = broker.NewRateLimiter(msgs, bytes)
		p.rates[accountID] = l
	}
	return l
}

// applyRates brings the accounts' publish limiters to the rates of snap's
// plans: connected clients are held to a changed plan from their next
// PUBLISH. Limiters of accounts no longer in snap are forgotten.
func (p *Policy) applyRates(snap *Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, l := range p.rates {
		acc := snap.Accounts[id]
		if acc == nil {
			delete(p.rates, id)
			delete(p.shares, id)
			continue
		}
		msgs, bytes := p.sharedRatesLocked(acc)
		if m, b := l.Rates(); m != msgs || b != bytes {
			l.SetRates(msgs, bytes)
		}
	}
}

// sharedRatesLocked returns the account's publish rates on this node: its
// plan's, times this node's share. The caller holds p.mu.
func (p *Policy) sharedRatesLocked(acc *Account) (msgs, bytes float64) {
	msgs, bytes = float64(acc.AccountPublishRate), float64(acc.AccountPublishBytesRate)
	if share, ok := p.shares[acc.ID]; ok {
		msgs, bytes = msgs*share[0], bytes*share[1]
	}
	return msgs, bytes
}

// AccountUsage calls fn for each account whose devices published through
// this node since it started: the plan's messages and bytes per second for
// the account (0: unlimited), and the PUBLISH packets that passed the
// account's limiter here, their bytes, and how many had to wait for it
// (counts that only grow).
func (p *Policy) AccountUsage(fn func(accountID string, planMsgs, planBytes float64, taken, bytes, waited uint64)) {
	snap := p.snap.Load()
	p.mu.Lock()
	type use struct {
		id          string
		msgs, bytes float64
		l           *broker.RateLimiter
	}
	var all []use
	for id, l := range p.rates {
		if acc := snap.Accounts[id]; acc != nil {
			all = append(all, use{id, float64(acc.AccountPublishRate), float64(acc.AccountPublishBytesRate), l})
		}
	}
	p.mu.Unlock()
	for _, u := range all {
		taken, bytes, waited := u.l.Usage()
		fn(u.id, u.msgs, u.bytes, taken, bytes, waited)
	}
}

// SetAccountShare sets the parts (0 to 1) of the account's plan publish
// rates, messages and bytes, this node allows: a cluster's nodes split an
// account's rates between them by what its devices publish through each
// (cluster.Rates).
func (p *Policy) SetAccountShare(accountID string, msgs, bytes float64) {
	share := [2]float64{min(max(msgs, 0.001), 1), min(max(bytes, 0.001), 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.shares[accountID]; ok && old == share {
		return
	}
	p.shares[accountID] = share
	if l := p.rates[accountID]; l != nil {
		if acc := p.snap.Load().Accounts[accountID]; acc != nil {
			l.SetRates(p.sharedRatesLocked(acc))
		}
	}
}

// Session is the policy's data on a broker session (Identity.Data).
type Session struct {
	AccountID string
	Kind      string // fleetmq.KindPublisher or fleetmq.KindSubscriber
	ClientID  string
	CredID    string
	Username  string
	Filters   []string // subscriber: granted internal filters

	acct   *accountMeter
	client *clientMeter
	pool   *Pool
	conn   *broker.Connection // set by Connected (publishers)
	own    string             // "{account}/{client}/", its topics' prefix
}

// MessageInfo is the policy's data on an accepted message (Message.Data).
type MessageInfo struct {
	AccountID string
	ClientID  string
	Class     string
	Layout    string // vendor layout that normalized it, if any
	WireTopic string // the topic as published
	Demoted   bool   // a QoS 2 lowered because the pool was used up
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
// registered in its account, or a subscriber password (read-only). A
// refusal says why, for the operator's log (the client only gets the
// reason code).
func (p *Policy) Authenticate(_ context.Context, req *broker.ConnectRequest) (*broker.Identity, error) {
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
	if !c.HasUsername || !c.HasPassword {
		return nil, packet.Errorf(packet.BadUserNameOrPassword, "no username or password")
	}
	if cred == nil {
		return nil, packet.Errorf(packet.BadUserNameOrPassword, "unknown username")
	}
	// From here the account is known: it goes into the refusal's log line.
	known := &broker.Identity{Namespace: cred.AccountID, ClientID: c.ClientID, LogAttrs: []slog.Attr{slog.String("account", cred.AccountID), slog.String("kind", cred.Kind)}}
	switch {
	case !ok:
		return known, packet.Errorf(packet.BadUserNameOrPassword, "wrong password for credential %s", cred.ID)
	case cred.Expired(now):
		return known, packet.Errorf(packet.BadUserNameOrPassword, "credential %s expired at %s", cred.ID, cred.ExpiresAt.UTC().Format(time.RFC3339))
	}
	acc := snap.Accounts[cred.AccountID]
	if acc == nil {
		return known, packet.Errorf(packet.NotAuthorized, "account %s does not exist", cred.AccountID)
	}
	if acc.Suspended {
		return known, packet.Errorf(packet.NotAuthorized, "account %s is suspended", acc.ID)
	}
	s := &Session{AccountID: acc.ID, Kind: cred.Kind, ClientID: c.ClientID, CredID: cred.ID, Username: cred.Username,
		acct: p.meter.account(acc.ID), pool: p.Pool(acc.ID), own: acc.ID + "/" + c.ClientID + "/"}
	id := &broker.Identity{
		Namespace: acc.ID,
		ClientID:  c.ClientID,
		Username:  c.Username,
		Limits: broker.Limits{
			MaxInflight:      Inflight,
			MaxQueued:        acc.MaxQueued(),
			MaxRetainedBurst: acc.MaxQueued(),
			// A subscriber's PUBLISHes are refused, but still paced.
			PublishRate:      float64(acc.PublishRate),
			PublishBytesRate: float64(acc.PublishBytesRate),
		},
		LogAttrs: known.LogAttrs,
		Data:     s,
	}
	if p.opts.TopicPrefix != "" {
		id.DeliverPrefix = p.opts.TopicPrefix + "/"
	}
	switch cred.Kind {
	case fleetmq.KindPublisher:
		cl := acc.Clients[c.ClientID]
		if cl == nil {
			return known, packet.Errorf(packet.ClientIdentifierNotValid, "client id %q is not registered in account %s", c.ClientID, acc.ID)
		}
		id.Limits.CapQoS = true
		id.Limits.MaxQoS = cl.MaxPublishQoS
		id.GroupLimiter = p.AccountLimiter(acc.ID)
		s.client = p.meter.client(acc.ID, c.ClientID)
	case fleetmq.KindSubscriber:
		s.Filters = cred.Filters
		if len(s.Filters) == 0 {
			s.Filters = []string{acc.ID + "/#"}
		}
		// A subscriber's sessions belong to its credential: with a
		// device's client id it cannot take over the device's session,
		// and it never resumes a session another credential created
		// (whose subscriptions its own filters may not allow).
		id.Namespace = subscriberNamespace(acc.ID, cred.ID)
	default:
		return known, packet.Errorf(packet.NotAuthorized, "credential %s has unknown kind %q", cred.ID, cred.Kind)
	}
	return id, nil
}

// Subscribe confines filters to the account: a publisher to its own
// prefix, a subscriber to its granted filters. Nothing escapes the account:
// not "#", "+/#", "$share/g/#", "$SYS/#" or another client's prefix.
func (p *Policy) Subscribe(id *broker.Identity, _ string, sub *packet.Subscription) (string, byte, error) {
	s := SessionOf(id)
	if s == nil {
		return "", 0, packet.Errorf(packet.NotAuthorized, "not a platform session")
	}
	f, ok := StripPrefix(p.opts.TopicPrefix, sub.Filter)
	if !ok {
		return "", 0, packet.Errorf(packet.NotAuthorized, "filter %s does not start with the topic prefix %s/", sub.Filter, p.opts.TopicPrefix)
	}
	if strings.HasPrefix(f, "$") {
		return "", 0, packet.Errorf(packet.NotAuthorized, "filter %s: $ topics are not available", sub.Filter)
	}
	switch s.Kind {
	case fleetmq.KindPublisher:
		own := s.own + "#"
		if !topic.Covers(own, f) {
			return "", 0, packet.Errorf(packet.NotAuthorized, "filter %s is outside this client's own topics %s", f, own)
		}
	case fleetmq.KindSubscriber:
		allowed := false
		for _, g := range s.Filters {
			if topic.Covers(g, f) {
				allowed = true
				break
			}
		}
		if !allowed {
			return "", 0, packet.Errorf(packet.NotAuthorized, "filter %s is outside this credential's filters %s", f, strings.Join(s.Filters, ", "))
		}
	}
	return f, min(sub.QoS, 2), nil
}

// Publish applies confinement, the taxonomy, vendor layouts, the client's
// maximum QoS and the effective QoS rules. A refusal says why, in words a
// tenant understands.
func (p *Policy) Publish(id *broker.Identity, pk *packet.Publish, m *broker.Message) error {
	s := SessionOf(id)
	if s == nil {
		return packet.Errorf(packet.NotAuthorized, "not a platform session")
	}
	if s.Kind != fleetmq.KindPublisher {
		return p.refuse(s, pk.Topic, packet.NotAuthorized, "subscriber credentials are read-only")
	}
	snap := p.snap.Load()
	acc := snap.Accounts[s.AccountID]
	if acc == nil || acc.Suspended {
		return p.refuse(s, pk.Topic, packet.NotAuthorized, "the account is suspended")
	}
	cl := acc.Clients[s.ClientID]
	if cl == nil {
		return p.refuse(s, pk.Topic, packet.NotAuthorized, "the client is no longer registered")
	}
	if pk.QoS > cl.MaxPublishQoS {
		// The broker disconnects (v5 0x9B); Disconnected counts the refusal.
		return packet.Errorf(packet.QoSNotSupported, "QoS %d above this client's Max QoS %d", pk.QoS, cl.MaxPublishQoS)
	}
	info := &MessageInfo{AccountID: s.AccountID, ClientID: s.ClientID, WireTopic: pk.Topic}
	own := s.own
	internal, prefixed := StripPrefix(p.opts.TopicPrefix, pk.Topic)
	switch {
	case prefixed && strings.HasPrefix(internal, own):
		pt, ok := fleetmq.ParsePlatformTopic(internal)
		if !ok {
			return p.refuse(s, pk.Topic, packet.TopicNameInvalid, classProblem(strings.TrimPrefix(internal, own)))
		}
		info.Class = pt.Class
		m.Topic = internal
	default:
		l, clientID, subpath, known := snap.Layouts.Match(pk.Topic)
		if l == nil {
			return p.refuse(s, pk.Topic, packet.NotAuthorized, p.outsideProblem(internal, prefixed, own, known))
		}
		if clientID != s.ClientID {
			return p.refuse(s, pk.Topic, packet.NotAuthorized,
				fmt.Sprintf("layout %s maps this topic to client %q, not to this client %q", l.Name, clientID, s.ClientID))
		}
		if _, ok := fleetmq.ParsePlatformTopic(own + subpath); !ok {
			return p.refuse(s, pk.Topic, packet.TopicNameInvalid, "layout "+l.Name+": "+classProblem(subpath))
		}
		pt, _ := fleetmq.ParsePlatformTopic(own + subpath)
		info.Class = pt.Class
		info.Layout = l.Name
		m.Topic = own + subpath
		m.NoDeliver = !l.Fanout
	}
	if err := p.retainedRoom(s, acc, pk.Topic, m); err != nil {
		return err
	}
	now := p.opts.Now()
	slot := s.acct.slot(now)
	eff, demoted := EffectiveQoS(pk.QoS, info.Class, acc.QoS2AddOn, func() bool {
		return p.takeQoS2(s.pool, slot, acc.ID, now, acc.QoS2DailyPool)
	})
	m.QoS = eff
	info.Demoted = demoted
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
	return nil
}

// retainedRoom refuses a retained message that would take the account
// past its plan's retained state (Account.MaxRetained); replacing or
// clearing one never does, nor does a message that is not delivered (a
// vendor layout without fanout): the broker does not retain it. Room is
// reserved in the retained store in the same step as the check
// (Server.ReserveRetained), so devices of one account retaining at the
// same moment never pass the bound together; the broker gives the room
// back when the message is not retained after all. Nothing may refuse the
// message after this.
func (p *Policy) retainedRoom(s *Session, acc *Account, wire string, m *broker.Message) error {
	srv := p.srv.Load()
	if !m.Retain || m.NoDeliver || len(m.Payload) == 0 || srv == nil {
		return nil
	}
	maxCount, maxBytes := acc.MaxRetained()
	if count, bytes, ok := srv.ReserveRetained(m, maxCount, maxBytes); !ok {
		return p.refuse(s, wire, packet.QuotaExceeded, fmt.Sprintf(
			"the account keeps %d retained messages (%d bytes); its plan allows %d (%d bytes): clear some (publish an empty retained message) or choose a larger plan",
			count, bytes, maxCount, maxBytes))
	}
	return nil
}

// refuse counts a refused publish against the account and returns the
// refusal the broker answers with.
func (p *Policy) refuse(s *Session, topic string, code packet.ReasonCode, reason string) error {
	p.refused.Add(1)
	if s.acct != nil {
		s.acct.slot(p.opts.Now()).refused.Add(1)
	}
	return packet.Errorf(code, "%s", reason)
}

// classProblem says what is wrong with a subpath under a client's prefix.
func classProblem(subpath string) string {
	class, rest, _ := strings.Cut(subpath, "/")
	switch {
	case !fleetmq.ValidClass(class):
		return fmt.Sprintf("topic class %q is not one of state, event, telemetry, sample", class+"/")
	case rest == "":
		return fmt.Sprintf("topic class %s/ needs at least one level after it", class)
	}
	return "not a platform topic"
}

// outsideProblem says why a topic outside the client's own prefix matched
// no vendor layout.
func (p *Policy) outsideProblem(internal string, prefixed bool, own string, rootKnown bool) string {
	switch {
	case rootKnown:
		return "the topic matches no rule of the vendor layouts registered for its wire root"
	case !prefixed:
		return "the topic does not start with the topic prefix " + p.opts.TopicPrefix + "/"
	}
	acc, rest, _ := strings.Cut(internal, "/")
	if fleetmq.ValidAccountID(acc) {
		if !strings.HasPrefix(own, acc+"/") {
			return "devices publish only under their own account " + own
		}
		if client, _, _ := strings.Cut(rest, "/"); acc+"/"+client+"/" != own {
			return fmt.Sprintf("topic is under client %q: devices publish only under their own prefix %s", client, own)
		}
		return "a topic needs a class level: " + own + "state/..., event/..., telemetry/... or sample/..."
	}
	root, _, _ := strings.Cut(internal, "/")
	return fmt.Sprintf("wire root %q is neither this client's prefix %s nor a registered vendor layout", root, own)
}

// stationControllerID reads the station_controller_device_id field of a
// JSON object payload: "" when absent, not JSON, longer than
// maxStationControllerID bytes or holding a control character (NUL cannot
// be stored in PostgreSQL text, and none of them belongs in an id).
func stationControllerID(payload []byte) string {
	id := rawStationControllerID(payload)
	if len(id) > maxStationControllerID || strings.ContainsFunc(id, unicode.IsControl) {
		return ""
	}
	return id
}

// maxStationControllerID bounds a stored station controller id.
const maxStationControllerID = 256

func rawStationControllerID(payload []byte) string {
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

// NewRecord is the history record of an accepted message, with the
// station_controller_device_id its payload names, if any (read here: only
// history wants it).
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
		StationControllerDeviceID: stationControllerID(m.Payload),
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

// Dropped counts a drop against the receiving session's account and
// records it as the client's problem. A session restored from the state
// file has no platform session until its client is back: its account is
// the one its key names.
func (p *Policy) Dropped(id *broker.Identity, m *broker.Message, r broker.DropReason) {
	var acct *accountMeter
	if s := SessionOf(id); s != nil {
		acct = s.acct
	} else if account := accountOf(id); account != "" {
		acct = p.meter.account(account)
	}
	if acct != nil && int(r) < len(dayCounters{}.drops) {
		acct.slot(p.opts.Now()).drops[r].Add(1)
	}
	p.recordDrop(id, m, r)
}

// Disconnected ends a publisher's connection in the live view, and counts
// a PUBLISH above the client's max_publish_qos as refused: the broker ends
// such a connection with QoSNotSupported, usually before Publish is called
// (the limit from CONNECT), sometimes in Publish (a max lowered since).
func (p *Policy) Disconnected(id *broker.Identity, d broker.Disconnection) {
	s := SessionOf(id)
	if s == nil {
		return
	}
	p.recordClose(id, d)
	if s.client != nil && s.conn != nil {
		s.client.live.detach(s.conn, p.opts.Now())
	}
	if d.Reason == broker.CloseQoSNotAllowed {
		p.refused.Add(1)
		if s.acct != nil {
			s.acct.slot(p.opts.Now()).refused.Add(1)
		}
	}
}

// Invalid says why a connected identity is no longer allowed under the
// snapshot in force at now ("" while it is): its credential was revoked or
// has expired, its account was suspended or (for a publisher) its client
// was removed. Sessions that are not allowed are disconnected.
func (p *Policy) Invalid(id *broker.Identity, now time.Time) string {
	s := SessionOf(id)
	if s == nil {
		return "" // not ours
	}
	snap := p.snap.Load()
	cred := snap.Creds[s.Username]
	switch {
	case cred == nil || cred.ID != s.CredID:
		return "credential " + s.CredID + " was revoked"
	case cred.Expired(now):
		return "credential " + s.CredID + " expired"
	}
	acc := snap.Accounts[s.AccountID]
	switch {
	case acc == nil:
		return "the account was deleted"
	case acc.Suspended:
		return "the account was suspended"
	case s.Kind == fleetmq.KindPublisher && acc.Clients[s.ClientID] == nil:
		return "client " + s.ClientID + " was removed from the account"
	}
	return ""
}

// Gone says why a session, connected or not, can never be resumed under
// the snapshot in force ("" while it can): a subscriber password's
// session (namespace "{account_id}/{credential_id}") is gone with its
// credential, a publisher's (the device's, namespace "{account_id}") with
// its client, and every session with its account. A session restored from
// the state file carries no Session: it is judged by its namespace and
// client id. Sessions that are gone end (Run), their messages dropped.
// A suspended account or an expired credential ends connections only
// (Invalid): both can be undone.
func (p *Policy) Gone(id *broker.Identity) string {
	if id.Namespace == "" {
		return "" // not ours
	}
	snap := p.snap.Load()
	account, credID, subscriber := strings.Cut(id.Namespace, "/")
	acc := snap.Accounts[account]
	switch {
	case acc == nil:
		return "the account was deleted"
	case subscriber:
		if cred := snap.Creds[id.Username]; cred == nil || cred.ID != credID || cred.AccountID != account {
			return "credential " + credID + " was revoked"
		}
	case acc.Clients[id.ClientID] == nil:
		return "client " + id.ClientID + " was removed from the account"
	}
	return ""
}

// Totals are the policy's process-wide counters for metrics.
type Totals struct {
	Effective [3]int64 // accepted messages by effective QoS
	QoS2Pool  int64    // units of QoS 2 pools used
	Demotions int64    // QoS 2 messages demoted to 1 (pool used up)
	Refused   int64    // publishes refused by the platform rules
	// ProblemsOverflown counts client problems not recorded for their
	// owners because a flush interval's bounds were reached.
	ProblemsOverflown int64
}

// Totals returns the counters.
func (p *Policy) Totals() Totals {
	t := Totals{QoS2Pool: p.pool2.Load(), Demotions: p.demotions.Load(), Refused: p.refused.Load(), ProblemsOverflown: p.problems.overflown.Load()}
	for i := range t.Effective {
		t.Effective[i] = p.effective[i].Load()
	}
	return t
}

var (
	_ broker.Policy          = (*Policy)(nil)
	_ broker.RefusalObserver = (*Policy)(nil)
)

// Sessions are owned by who may resume them. A publisher's session is the
// registered device's: its namespace is the account, so the device keeps
// its session across credential rotations, and a second connection with
// its client id takes it over. A subscriber's session is its credential's:
// the namespace is "{account_id}/{credential_id}".
func subscriberNamespace(accountID, credID string) string { return accountID + "/" + credID }

// SessionAccount is the account of a session key (broker
// Identity.SessionKey: the namespace, NUL, the client id): the tenant a
// cluster node lines its session claims up by.
func SessionAccount(key string) string {
	ns, _, _ := strings.Cut(key, "\x00")
	return namespaceAccount(ns)
}

// namespaceAccount is the account of a session namespace.
func namespaceAccount(ns string) string {
	acc, _, _ := strings.Cut(ns, "/")
	return acc
}
