package platform

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The live view of an account's publishers (REST "publishers/live", the
// portal): which registered clients are connected, since when, over what,
// when they were last heard from, and their QoS mix and retained state of
// the day. Everything is kept in memory since the process started. The
// message path only touches atomics of the client's meter (count in
// meter.go); connection state changes under a per-client mutex on connect
// and disconnect.

// MaxRetainedPerClient bounds PublisherLive.Retained.
const MaxRetainedPerClient = 100

// Transports a client can connect over (PublisherLive.Transport).
const (
	TransportTCP       = "tcp"
	TransportTLS       = "tls"
	TransportWebSocket = "websocket" // plain or over TLS
)

// PublisherLive is the live state of one registered MQTT client.
type PublisherLive struct {
	ClientID       string
	Label          string
	MaxPublishQoS  int
	Connected      bool
	ConnectedSince time.Time // zero when not connected
	// LastSeen is when the broker last read from the client's current
	// connection (its last packet, PINGREQs included, or the last batch of
	// packets that arrived together), or when its last connection ended;
	// zero if it has not connected since the process started.
	LastSeen time.Time
	// Protocol is "MQTT 3.1", "MQTT 3.1.1" or "MQTT 5.0" of the current or
	// last connection, "" if never seen.
	Protocol string
	// Transport is TransportTCP, TransportTLS or TransportWebSocket of the
	// current or last connection, "" if never seen.
	Transport string
	// RemoteAddr is the peer address of the current connection ("" when
	// not connected).
	RemoteAddr string
	// LastPublish is when the last PUBLISH of the client was accepted (a
	// will published on its behalf counts).
	LastPublish time.Time
	// Today counts the client's accepted messages of the current UTC day
	// by effective QoS (the QoS mix). It counts since the process started
	// unless the stored usage was restored with RestoreToday.
	Today [3]int64
	// Retained are the client's live retained messages under
	// {account_id}/{client_id}/state/#, sorted by topic, at most
	// MaxRetainedPerClient of them (the first by topic).
	Retained []RetainedState
}

// RetainedState is a live retained message of a client.
type RetainedState struct {
	Topic    string // internal topic: {account_id}/{client_id}/state/...
	Payload  []byte
	QoS      int       // effective QoS
	Received time.Time // when the broker received it
	Expires  time.Time // when it stops being retained (zero: never)
}

// clientLive is a client's connection state. The latest connection to
// attach (the highest broker.Connection.Seq) is the one shown; a
// connection that was taken over reports its end after the newer one
// attached, and is ignored then.
type clientLive struct {
	mu        sync.Mutex
	conn      *broker.Connection // the latest connection, nil if none yet
	connected bool
	since     time.Time // when conn attached
	ended     time.Time // when conn ended (zero while connected)
}

// attach records a connection attaching at now, unless a later one
// already did.
func (l *clientLive) attach(c *broker.Connection, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil && l.conn.Seq > c.Seq {
		return
	}
	l.conn, l.connected, l.since, l.ended = c, true, now, time.Time{}
}

// detach records the end of connection c at now, if it is the latest.
func (l *clientLive) detach(c *broker.Connection, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != c {
		return
	}
	l.connected, l.ended = false, now
}

// fill copies the connection state into pl.
func (l *clientLive) fill(pl *PublisherLive) {
	l.mu.Lock()
	c, connected, since, ended := l.conn, l.connected, l.since, l.ended
	l.mu.Unlock()
	if c == nil {
		return
	}
	pl.Protocol = protocolName(c.ProtocolLevel)
	pl.Transport = transportName(c)
	pl.LastSeen = c.LastReceived()
	if pl.LastSeen.Before(since) {
		pl.LastSeen = since
	}
	if connected {
		pl.Connected = true
		pl.ConnectedSince = since
		if c.RemoteAddr != nil {
			pl.RemoteAddr = c.RemoteAddr.String()
		}
	} else if pl.LastSeen.Before(ended) {
		pl.LastSeen = ended
	}
}

func protocolName(level byte) string {
	switch level {
	case packet.Version5:
		return "MQTT 5.0"
	case packet.Version311:
		return "MQTT 3.1.1"
	case packet.Version31:
		return "MQTT 3.1"
	}
	return ""
}

func transportName(c *broker.Connection) string {
	switch {
	case c.WebSocket:
		return TransportWebSocket
	case c.TLS:
		return TransportTLS
	}
	return TransportTCP
}

// Connected implements broker.ConnectObserver: a publisher's connection
// becomes the one its live view shows.
func (p *Policy) Connected(id *broker.Identity, c *broker.Connection) {
	s := SessionOf(id)
	if s == nil || s.client == nil {
		return // subscribers are not in the live view
	}
	s.conn = c
	s.client.live.attach(c, p.opts.Now())
}

// SetBroker sets the broker whose retained messages the live view shows
// (Run sets it too).
func (p *Policy) SetBroker(srv *broker.Server) { p.srv.Store(srv) }

// LivePublishers returns the live state of every MQTT client registered in
// the account (connected or not, including clients never connected),
// sorted by client id; nil for an unknown account. now is the clock of the
// view: it picks the UTC day of Today and hides retained messages expired
// by then.
func (p *Policy) LivePublishers(accountID string, now time.Time) []PublisherLive {
	acc := p.snap.Load().Accounts[accountID]
	if acc == nil {
		return nil
	}
	ids := make([]string, 0, len(acc.Clients))
	for id := range acc.Clients {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	meters := p.meter.lookup(accountID, ids)
	out := make([]PublisherLive, len(ids))
	for i, id := range ids {
		out[i] = p.live(accountID, acc.Clients[id], meters[i], now)
	}
	return out
}

// LivePublisher returns the live state of one registered client of the
// account; false when the account or the client is not registered.
func (p *Policy) LivePublisher(accountID, clientID string, now time.Time) (PublisherLive, bool) {
	acc := p.snap.Load().Accounts[accountID]
	if acc == nil {
		return PublisherLive{}, false
	}
	cl := acc.Clients[clientID]
	if cl == nil {
		return PublisherLive{}, false
	}
	return p.live(accountID, cl, p.meter.lookup(accountID, []string{clientID})[0], now), true
}

// live builds one client's view; m is nil for a client not seen since the
// process started.
func (p *Policy) live(accountID string, cl *Client, m *clientMeter, now time.Time) PublisherLive {
	pl := PublisherLive{ClientID: cl.ClientID, Label: cl.Label, MaxPublishQoS: int(cl.MaxPublishQoS)}
	if m != nil {
		m.live.fill(&pl)
		if n := m.lastPublish.Load(); n != 0 {
			pl.LastPublish = time.Unix(0, n)
		}
		d := dayNumber(now)
		if s := m.today.peek(d); s != nil {
			for q := range pl.Today {
				pl.Today[q] = s.messages[q].Load()
			}
		}
	}
	pl.Retained = p.retainedState(accountID, cl.ClientID, now)
	return pl
}

// retainedState reads the client's retained state/ messages from the
// broker.
func (p *Policy) retainedState(accountID, clientID string, now time.Time) []RetainedState {
	srv := p.srv.Load()
	if srv == nil || clientID == "" || strings.ContainsAny(clientID, "/+#") || strings.ContainsAny(accountID, "/+#") {
		return nil
	}
	ms, err := srv.Retained(accountID+"/"+clientID+"/"+fleetmq.ClassState+"/#", MaxRetainedPerClient)
	if err != nil || len(ms) == 0 {
		return nil
	}
	out := make([]RetainedState, 0, len(ms))
	for _, m := range ms {
		if !m.Expiry.IsZero() && !now.Before(m.Expiry) {
			continue // expired by the view's clock, not yet by the broker's
		}
		out = append(out, RetainedState{Topic: m.Topic, Payload: m.Payload, QoS: int(m.QoS), Received: m.Created, Expires: m.Expiry})
	}
	return out
}

// RestoreToday carries the stored per-client usage of now's UTC day over a
// restart, so PublisherLive.Today counts the whole day. rows are the
// accounts' per-client usage summed over that day (as
// fleetmq.UsageStore.ClientUsage(ctx, account, day, day) returns them);
// call it once at start, before clients connect.
func (p *Policy) RestoreToday(now time.Time, rows []fleetmq.ClientUsage) {
	d := dayNumber(now)
	for _, r := range rows {
		s := p.meter.client(r.AccountID, r.ClientID).today.at(d)
		for q := range r.Messages {
			s.messages[q].Add(r.Messages[q])
		}
	}
}

// lookup returns the meters of the account's clients ids (nil where a
// client has none yet) under one lock.
func (m *Meter) lookup(account string, ids []string) []*clientMeter {
	out := make([]*clientMeter, len(ids))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range ids {
		out[i] = m.clients[clientKey{account, id}]
	}
	return out
}

var _ broker.ConnectObserver = (*Policy)(nil)
