package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The state file holds the persistent sessions as JSON. It is written to a
// temporary file, synced and renamed, so a crash during a save leaves the
// previous state intact. Retained messages are in the retained log beside
// it (retainedlog.go); a version 1 state file, written before that log
// existed, holds them itself: they are loaded from it and written to the
// log by the first save.

const stateVersion = 2

type stateFile struct {
	Version  int            `json:"version"`
	Saved    time.Time      `json:"saved"`
	Retained []savedMessage `json:"retained,omitempty"` // version 1 only
	Sessions []savedSession `json:"sessions"`
}

type savedMessage struct {
	Topic         string                `json:"topic"`
	Payload       []byte                `json:"payload"`
	QoS           byte                  `json:"qos"`
	PublishedQoS  byte                  `json:"published_qos"`
	Retain        bool                  `json:"retain,omitempty"`
	Created       time.Time             `json:"created"`
	Expiry        time.Time             `json:"expiry,omitzero"`
	ContentType   string                `json:"content_type,omitempty"`
	ResponseTopic string                `json:"response_topic,omitempty"`
	Correlation   []byte                `json:"correlation,omitempty"`
	PayloadFmt    *byte                 `json:"payload_format,omitempty"`
	User          []packet.UserProperty `json:"user,omitempty"`
}

type savedDelivery struct {
	Message savedMessage `json:"message"`
	QoS     byte         `json:"qos"`
	Retain  bool         `json:"retain,omitempty"`
	SubID   uint32       `json:"sub_id,omitempty"`
	// SubIDs, instead of SubID, when the delivery carries several
	// subscription identifiers (overlapping subscriptions).
	SubIDs []uint32 `json:"sub_ids,omitempty"`
	PID    uint16   `json:"pid,omitempty"`
	State  uint8    `json:"state,omitempty"`
}

type savedSub struct {
	Wire           string `json:"wire"`
	Filter         string `json:"filter"`
	QoS            byte   `json:"qos"`
	NoLocal        bool   `json:"no_local,omitempty"`
	RAP            bool   `json:"rap,omitempty"`
	RetainHandling byte   `json:"retain_handling,omitempty"`
	ID             uint32 `json:"id,omitempty"`
	// Since is the subscription's since (zero in states saved before
	// it was kept: replayed from the state's start, as then).
	Since time.Time `json:"since,omitzero"`
}

type savedSession struct {
	// Saved is when the state was taken: a node resuming it elsewhere
	// replays what was published since (SessionStates).
	Saved          time.Time `json:"saved,omitzero"`
	Namespace      string    `json:"namespace,omitempty"`
	ClientID       string    `json:"client_id"`
	Username       string    `json:"username,omitempty"`
	DeliverPrefix  string    `json:"deliver_prefix,omitempty"`
	Limits         Limits    `json:"limits"`
	Expiry         uint32    `json:"expiry"`
	DisconnectedAt time.Time `json:"disconnected_at"`
	// Connected says the session was connected when it was saved (then
	// DisconnectedAt is the time of the save).
	Connected bool            `json:"connected,omitempty"`
	NextPID   uint16          `json:"next_pid"`
	Subs      []savedSub      `json:"subs"`
	Inflight  []savedDelivery `json:"inflight,omitempty"`
	Queue     []savedDelivery `json:"queue,omitempty"`
	Inbound2  []uint16        `json:"inbound_qos2,omitempty"`
	// Sent are the QoS 1 and 2 messages sent shortly before the save
	// (with Options.Replay): a replay where the session resumes skips
	// them.
	Sent []savedSent `json:"sent,omitempty"`
	// Pending says the replay of what the session missed (restored at
	// start, restart.go, or resumed from another node's state, states.go)
	// was not in, both passes, when it was saved: Saved is where that
	// replay started, and a replay from this state starts there, whatever
	// rounds of saves its node recorded since.
	Pending bool `json:"replay_pending,omitempty"`
}

func saveMessage(m *Message) savedMessage {
	sm := savedMessage{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, PublishedQoS: m.PublishedQoS, Retain: m.Retain,
		Created: m.Created, Expiry: m.Expiry, User: m.Properties.User}
	p := &m.Properties
	if p.Has(packet.PropContentType) {
		sm.ContentType = p.ContentType
	}
	if p.Has(packet.PropResponseTopic) {
		sm.ResponseTopic = p.ResponseTopic
	}
	if p.Has(packet.PropCorrelationData) {
		sm.Correlation = p.CorrelationData
	}
	if p.Has(packet.PropPayloadFormat) {
		f := p.PayloadFormat
		sm.PayloadFmt = &f
	}
	return sm
}

func (sm *savedMessage) message() *Message {
	m := &Message{Topic: sm.Topic, Payload: sm.Payload, QoS: sm.QoS, PublishedQoS: sm.PublishedQoS, Retain: sm.Retain,
		Created: sm.Created, Expiry: sm.Expiry}
	p := &m.Properties
	if sm.ContentType != "" {
		p.SetString(packet.PropContentType, sm.ContentType)
	}
	if sm.ResponseTopic != "" {
		p.SetString(packet.PropResponseTopic, sm.ResponseTopic)
	}
	if sm.Correlation != nil {
		p.CorrelationData = sm.Correlation
		p.Mark(packet.PropCorrelationData)
	}
	if sm.PayloadFmt != nil {
		p.SetByte(packet.PropPayloadFormat, *sm.PayloadFmt)
	}
	p.User = sm.User
	return m
}

func saveDelivery(d *delivery) savedDelivery {
	state := d.state()
	if state == stateResend {
		state = stateSent // awaiting its acknowledgement, sent again at the next connection
	}
	sd := savedDelivery{Message: saveMessage(d.msg), QoS: d.qos, Retain: d.retain(), SubID: d.subID, PID: d.pid, State: state}
	if d.ids != nil {
		sd.SubIDs = idBlockIDs(d.ids)
	}
	return sd
}

// subIDs returns the saved subscription identifiers.
func (sd *savedDelivery) subIDs() []uint32 {
	if len(sd.SubIDs) > 0 {
		return sd.SubIDs
	}
	if sd.SubID != 0 {
		return []uint32{sd.SubID}
	}
	return nil
}

// snapshotLocked returns the session's state as saved: a connected
// session is saved as if it had just disconnected. The caller holds
// ss.mu; the session has an identity.
func (ss *session) snapshotLocked(now time.Time) savedSession {
	saved, pending := now, false
	if !ss.replayFrom.IsZero() && ss.replayFrom.Before(now) {
		// What the session missed since its restored state was saved is
		// not all in it yet: a replay from this state must cover it.
		saved, pending = ss.replayFrom, true
	}
	sv := savedSession{Saved: saved, Pending: pending, Namespace: ss.id.Namespace, ClientID: ss.id.ClientID, Username: ss.id.Username,
		DeliverPrefix: ss.id.DeliverPrefix, Limits: ss.limits, Expiry: ss.expiry, DisconnectedAt: ss.disconnectedAt,
		NextPID: ss.nextPID}
	if ss.c != nil {
		sv.DisconnectedAt = now
		sv.Connected = true
	}
	for _, sub := range ss.subs {
		sv.Subs = append(sv.Subs, savedSub{Wire: sub.wire, Filter: sub.filter, QoS: sub.qos, NoLocal: sub.noLocal,
			RAP: sub.rap, RetainHandling: sub.retainHandling, ID: sub.id, Since: sub.since})
	}
	for _, d := range ss.inflight {
		if d != nil {
			sv.Inflight = append(sv.Inflight, saveDelivery(d))
		}
	}
	for _, d := range ss.queue[ss.qhead:] {
		sv.Queue = append(sv.Queue, saveDelivery(d))
	}
	sv.Inbound2 = ss.saved2Locked()
	if ss.sent != nil {
		sv.Sent = ss.sentSinceLocked(saved.Add(-replayWindow))
	}
	return sv
}

// Save writes the retained messages changed since the last save and the
// persistent sessions to Options.StatePath now, and returns when they are
// synced to disk. It runs every Options.SaveInterval and in Close; tests
// call it to avoid waiting. Without a StatePath it does nothing.
func (s *Server) Save() error {
	if s.opts.StatePath == "" {
		return nil
	}
	if err := s.saveState(s.opts.StatePath); err != nil {
		return fmt.Errorf("broker: save state: %w", err)
	}
	return nil
}

// saveState appends the retained changes to the retained log, then writes
// the persistent sessions to path. Sessions connected at the time are
// saved as if they had just disconnected.
func (s *Server) saveState(path string) error {
	s.saving.Lock()
	defer s.saving.Unlock()
	if s.local != nil { // another Options.Retained keeps its messages itself
		if err := s.rlog.save(s.local, s.now()); err != nil {
			return fmt.Errorf("retained log: %w", err)
		}
	}
	st := stateFile{Version: stateVersion, Saved: s.now()}
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	now := s.now()
	for _, ss := range sessions {
		ss.mu.Lock()
		if ss.ended || ss.expiry == 0 || ss.id == nil {
			ss.mu.Unlock()
			continue
		}
		st.Sessions = append(st.Sessions, ss.snapshotLocked(now))
		ss.mu.Unlock()
	}
	data, err := json.Marshal(&st)
	if err == nil {
		err = writeFileAtomic(path, data)
	}
	if s.states != nil {
		// After the file: a database out of reach delays it.
		s.saveStates(sessions)
	}
	return err
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// loadState restores what saveState wrote: the sessions from path, the
// retained messages from the retained log (or from path when it is a
// version 1 state file). A missing file is an empty state. Retained
// changes are tracked from then on.
func (s *Server) loadState(path string) error {
	st, err := readStateFile(path)
	if err != nil {
		return err
	}
	now := s.now()
	if s.local == nil { // another Options.Retained keeps its messages itself
		s.loadSessions(st.Sessions, now)
		return nil
	}
	var expired []string
	keep := func(m *Message) {
		s.clampRetained(m) // RetainedMaxAge may be lower than when it was saved
		if m.expired(now) {
			expired = append(expired, m.Topic)
			return
		}
		s.local.Set(m)
	}
	if st.Version == 1 {
		// The version 1 file is newer than any retained log beside it:
		// the first save replaces the log with its messages.
		for i := range st.Retained {
			keep(st.Retained[i].message())
		}
		s.rlog.rewrite = true
	} else if err := s.rlog.load(keep); err != nil {
		return err
	}
	// Expired while the server was down: the next save clears them.
	s.local.track = true
	s.local.markDirty(expired)
	s.loadSessions(st.Sessions, now)
	return nil
}

// readStateFile reads a state file of version 1 or 2; a missing one is
// an empty state.
func readStateFile(path string) (*stateFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &stateFile{Version: stateVersion}, nil
	}
	if err != nil {
		return nil, err
	}
	st := &stateFile{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Version != 1 && st.Version != stateVersion {
		return nil, fmt.Errorf("%s: state version %d, want %d (or 1)", path, st.Version, stateVersion)
	}
	return st, nil
}

// loadSessions restores the saved sessions that have not expired by now.
func (s *Server) loadSessions(sessions []savedSession, now time.Time) {
	for _, sv := range sessions {
		ss := s.savedSession(&sv)
		if ss.expiredAt(now) {
			continue
		}
		if c, ok, err := s.owners.Owner(ss.key); err != nil {
			s.log.Warn("restore a session: its owner cannot be read; not restored", "session", ss.key, "error", err)
			continue
		} else if ok && c.Node != s.opts.Node {
			// Another node of the cluster serves the session now (its
			// client connected there while this one was down): it is
			// not taken back.
			continue
		} else if !ok && s.states != nil {
			// In a cluster every session held has its claim: none means
			// the session ended elsewhere while this node was down (its
			// client started clean on another node, or it expired
			// there), and its state here is stale.
			continue
		}
		if c, err := s.owners.Claim(ss.key, s.opts.Node, false); err != nil {
			s.log.Warn("claim a restored session", "session", ss.key, "error", err)
		} else {
			ss.claim = c
		}
		ss.restoreLocked(&sv)
		s.sessions[ss.key] = ss
		if s.opts.Replay != nil && !sv.Saved.IsZero() {
			ss.replayFrom = sv.Saved
			ss.restart = &restart{ss: ss, sv: sv, done: make(chan struct{})}
			s.restarts = append(s.restarts, ss.restart)
		}
	}
}

// savedSession returns an offline session with sv's identity, limits and
// expiry, and nothing in it yet (restoreLocked fills it).
func (s *Server) savedSession(sv *savedSession) *session {
	id := &Identity{Namespace: sv.Namespace, ClientID: sv.ClientID, Username: sv.Username, DeliverPrefix: sv.DeliverPrefix, Limits: sv.Limits}
	return &session{srv: s, key: id.SessionKey(), id: id, subs: make(map[string]*subscription), limits: sv.Limits,
		window: sv.Limits.MaxInflight, expiry: sv.Expiry, disconnectedAt: sv.DisconnectedAt, nextPID: sv.NextPID}
}

// restoreLocked puts sv's subscriptions (in the index), inflight and
// queued messages and inbound QoS 2 ids into ss, a session savedSession
// made. The caller holds ss.mu, or ss is not shared yet.
func (ss *session) restoreLocked(sv *savedSession) {
	s := ss.srv
	ss.ident.Store(ss.id)
	for _, x := range sv.Subs {
		sub := &subscription{sess: ss, wire: x.Wire, filter: x.Filter, qos: x.QoS, noLocal: x.NoLocal, rap: x.RAP,
			retainHandling: x.RetainHandling, id: x.ID, since: x.Since}
		ss.subs[x.Wire] = sub
		s.index(sub)
	}
	for _, x := range sv.Inflight {
		d := newDelivery(x.Message.message(), x.QoS, x.Retain, x.subIDs())
		d.pid = x.PID
		if st := x.State & stateMask; st == stateReleased {
			d.setState(stateReleased)
		} else {
			d.setState(stateSent)
		}
		ss.inflight = append(ss.inflight, d)
		ss.ninfl++
		s.stats.inflight.Add(1)
	}
	for _, x := range sv.Queue {
		ss.push(newDelivery(x.Message.message(), x.QoS, x.Retain, x.subIDs()))
	}
	ss.restore2(sv.Inbound2)
	if s.opts.Replay != nil {
		// Saved again with the state, so that a replay from a save
		// before this session's own replay is in skips them too.
		for _, k := range sv.Sent {
			ss.sent = append(ss.sent, replayKey{topic: k.Topic, at: k.At})
		}
	}
}
