package broker

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// SessionStates keeps the state of persistent sessions where every node
// of a cluster reads it, so that a session follows its client from node
// to node: its subscriptions, the messages in flight and queued for it,
// and its inbound QoS 2 ids. A server saves the state of each persistent
// session it holds every Options.SaveInterval (when it changed) and once
// more when another node takes the session over (SessionOwners tells it);
// a server whose client resumes a session another node held takes the
// state from here before its CONNACK.
//
// The contract (the suite in internal/contract, SessionStates, checks
// it):
//   - Save(c, state) stores state for c.Key unless a claim later than c
//     took the state (Take) or discarded it (a fresh claim): a node that
//     lost the session cannot overwrite what the new owner resumed. A nil
//     state says the session has nothing to resume.
//   - Take(c) returns the newest state saved for c.Key by c or an
//     earlier claim (ok false when none) and makes it c's: claims before
//     c can no longer save.
//   - Release of the key's claim (SessionOwners) removes its state.
type SessionStates interface {
	Save(c Claim, state []byte) error
	Take(c Claim) (state []byte, ok bool, err error)
}

// handOff ends a session another node took over, after saving its state
// for that node (nil when the session is not persistent: the new owner
// resumes nothing). Its queued and inflight messages go with the state;
// without SessionStates they are dropped, as when the session expires.
func (s *Server) handOff(ss *session, old Claim) {
	// After any save under way (its older state must not land last).
	s.saving.Lock()
	defer s.saving.Unlock()
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		return
	}
	var state []byte
	if s.states != nil && ss.expiry > 0 && ss.id != nil {
		sv := ss.snapshotLocked(s.now())
		var err error
		if state, err = json.Marshal(&sv); err != nil {
			s.log.Error("hand a session over: encode its state", "session", ss.key, "error", err)
			state = nil
		}
	}
	ss.ended = true
	for wire, sub := range ss.subs {
		s.unindex(sub, ss.key)
		delete(ss.subs, wire)
	}
	if state != nil {
		ss.discardLocked()
	} else {
		ss.clearLocked(DropSessionExpired)
	}
	ss.end2Locked()
	ss.mu.Unlock()
	s.mu.Lock()
	if s.sessions[ss.key] == ss {
		delete(s.sessions, ss.key)
	}
	s.mu.Unlock()
	if s.states == nil {
		return
	}
	if err := s.states.Save(old, state); err != nil {
		s.log.Warn("hand a session over: its state was not saved; the new node resumes the last saved", "session", ss.key, "error", err)
	}
}

// discardLocked empties the queue and the inflight window of a session
// whose messages went elsewhere (handed over): nothing is dropped.
func (ss *session) discardLocked() {
	for ss.qlen() > 0 {
		ss.pop()
	}
	for _, d := range ss.inflight {
		if d != nil {
			ss.srv.stats.inflight.Add(-1)
		}
	}
	ss.inflight = nil
	ss.ninfl = 0
}

// resume takes the state another node left for the session claim now
// holds and makes it this server's session, before attach finds it. It
// runs at a CONNECT that resumes a session (no clean start) claimed from
// another node; an error refuses the CONNECT (the client tries again).
func (s *Server) resume(claim Claim) error {
	data, ok, err := s.states.Take(claim)
	if err != nil || !ok || len(data) == 0 {
		return err
	}
	var sv savedSession
	if err := json.Unmarshal(data, &sv); err != nil {
		s.log.Error("resume a session from another node: its state cannot be read; it starts afresh", "session", claim.Key, "error", err)
		return nil
	}
	ss := s.savedSession(&sv)
	if sv.Connected {
		// Its node died while the client was connected (a handed-over
		// state is saved as disconnected), at a moment after the save:
		// the session is not older than its client's connection now.
		ss.disconnectedAt = s.now()
	}
	if ss.key != claim.Key || ss.expiredAt(s.now()) {
		return nil
	}
	ss.claim = claim
	// A copy of the session this server kept (a takeover notice it never
	// heard) ends first: its subscriptions share the key's index entries.
	s.mu.Lock()
	prev := s.sessions[ss.key]
	delete(s.sessions, ss.key)
	s.mu.Unlock()
	if prev != nil {
		prev.mu.Lock()
		pc := prev.c
		prev.mu.Unlock()
		if pc != nil {
			pc.taken.Store(true)
			pc.closeWith(Disconnection{Reason: CloseTakenOver, Code: packet.SessionTakenOver,
				Detail: "another node took over the session"})
		}
		s.endSession(prev, false, DropSessionExpired)
	}
	ss.mu.Lock()
	ss.restoreLocked(&sv)
	ss.mu.Unlock()
	if s.opts.Replay != nil {
		s.replay(ss, &sv)
	}
	s.mu.Lock()
	s.sessions[ss.key] = ss
	s.mu.Unlock()
	return nil
}

// replayWindow is how far before its state was saved a resumed session's
// replay starts: a message published on a third node a moment before the
// save may have reached the old node after it.
const replayWindow = time.Second

// replayAgain is when a resumed session's replay runs a second time: a
// message published elsewhere before the session's subscriptions were
// heard there (they spread through the cluster as the replay ran) is
// stored in history by then, and only it is added.
const replayAgain = 3 * time.Second

// replayTimeout bounds each replay of one resumed session.
const replayTimeout = 5 * time.Second

// replayKey tells one message from another in a replay: its topic and
// the microsecond it was received (history's precision).
type replayKey struct {
	topic string
	at    int64
}

func keyOf(m *Message) replayKey { return replayKey{m.Topic, m.Created.UnixMicro()} }

// maxSent bounds the messages a session remembers having sent (sent).
const maxSent = 1024

// noteSentLocked remembers that m was sent. The caller holds ss.mu.
func (ss *session) noteSentLocked(m *Message) {
	if len(ss.sent) >= maxSent {
		n := copy(ss.sent, ss.sent[maxSent/2:])
		clear(ss.sent[n:])
		ss.sent = ss.sent[:n]
	}
	ss.sent = append(ss.sent, keyOf(m))
}

// sentSinceLocked returns the messages sent lately that a replay from
// since would find again, for the saved state. The caller holds ss.mu.
func (ss *session) sentSinceLocked(since time.Time) []savedSent {
	from := since.UnixMicro()
	var out []savedSent
	kept := ss.sent[:0]
	for _, k := range ss.sent {
		if k.at >= from {
			out = append(out, savedSent{Topic: k.topic, At: k.at})
			kept = append(kept, k)
		}
	}
	clear(ss.sent[len(kept):])
	ss.sent = kept
	if len(ss.sent) == 0 {
		ss.sent = nil
	}
	return out
}

// savedSent is a message a saved session had sent: its topic and the
// microsecond it was received.
type savedSent struct {
	Topic string `json:"t"`
	At    int64  `json:"at"`
}

// replay adds to a session resumed from another node's saved state the
// QoS 1 and 2 messages its subscriptions match that were published since
// shortly before the save (Options.Replay reads them from history): the
// messages the old node got after it saved (it died) and those that
// crossed the cluster while the session moved. They go after the restored
// queue and before what arrived live since the subscriptions were
// indexed; a message already queued or in flight is not added twice. The
// replay runs again replayAgain later for what was published during the
// move and had not reached history yet.
func (s *Server) replay(ss *session, sv *savedSession) {
	if sv.Saved.IsZero() {
		return
	}
	since := sv.Saved.Add(-replayWindow)
	got := s.replayed(ss, since)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	seen := make(map[replayKey]struct{}, ss.qlen()+len(ss.inflight)+len(sv.Sent)+len(got))
	for _, k := range sv.Sent {
		seen[replayKey{k.Topic, k.At}] = struct{}{}
	}
	for _, d := range ss.inflight {
		if d != nil {
			seen[keyOf(d.msg)] = struct{}{}
		}
	}
	queue := ss.queue[ss.qhead:]
	for _, d := range queue {
		seen[keyOf(d.msg)] = struct{}{}
	}
	n := min(len(sv.Queue), len(queue))
	restored, live := append([]*delivery(nil), queue[:n]...), append([]*delivery(nil), queue[n:]...)
	for ss.qlen() > 0 {
		ss.pop()
	}
	for _, d := range restored {
		ss.push(d)
	}
	ss.addReplayedLocked(got, seen)
	for _, d := range live {
		ss.pushBoundedLocked(d)
	}
	// Until the second replay, what is queued is remembered (enqueue).
	ss.recent = seen
	time.AfterFunc(replayAgain, func() {
		again := s.replayed(ss, since)
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if !ss.ended {
			ss.addReplayedLocked(again, ss.recent)
			ss.pumpLocked(nil)
		}
		ss.recent = nil
	})
}

// replayed reads the messages since that the session's non-shared
// subscriptions match (at most its queue bound).
func (s *Server) replayed(ss *session, since time.Time) []*Message {
	var filters []string
	ss.mu.Lock()
	for _, sub := range ss.subs {
		if _, _, shared, _ := topic.ParseShare(sub.wire); !shared {
			filters = append(filters, sub.filter)
		}
	}
	id, limit := ss.id, ss.limits.MaxQueued
	ss.mu.Unlock()
	if len(filters) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), replayTimeout)
	defer cancel()
	var got []*Message
	if err := s.opts.Replay(ctx, id, filters, since, limit, func(m *Message) { got = append(got, m) }); err != nil {
		s.log.Warn("resume a session: history could not be replayed in full", "session", ss.key, "replayed", len(got), "error", err)
	}
	return got
}

// addReplayedLocked queues the replayed messages seen does not hold yet
// and adds them to it. The caller holds ss.mu.
func (ss *session) addReplayedLocked(got []*Message, seen map[replayKey]struct{}) {
	for _, m := range got {
		k := keyOf(m)
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		if qos, ids, ok := ss.grantLocked(m); ok {
			ss.pushBoundedLocked(newDelivery(m, qos, false, ids))
		}
	}
}

// pushBoundedLocked queues d, or drops it when the queue is at its bound.
func (ss *session) pushBoundedLocked(d *delivery) {
	if ss.qlen() >= ss.limits.MaxQueued {
		ss.dropLocked(d.msg, DropQueueFull)
		return
	}
	ss.push(d)
}

// grantLocked returns the QoS and subscription identifiers a message
// replayed to the session is delivered with: the highest of its matching
// non-shared subscriptions', as one delivery [MQTT-3.3.4-2]. ok is false
// when none matches. The caller holds ss.mu.
func (ss *session) grantLocked(m *Message) (qos byte, ids []uint32, ok bool) {
	for _, sub := range ss.subs {
		if _, _, shared, _ := topic.ParseShare(sub.wire); shared || !topic.Match(sub.filter, m.Topic) {
			continue
		}
		ok = true
		qos = max(qos, min(m.QoS, sub.qos))
		if sub.id != 0 {
			ids = append(ids, sub.id)
		}
	}
	return qos, ids, ok
}

// saveStates saves the persistent sessions' states that changed since
// the last save to SessionStates. claims[i] is the claim sessions[i] was
// held under. It runs with s.saving held.
func (s *Server) saveStates(sessions []savedSession, claims []Claim) {
	seen := make(map[string]uint64, len(sessions))
	for i := range sessions {
		sv := &sessions[i]
		// What a save changes by itself is not a change: the time, and
		// the disconnection time of a connected session (now).
		saved, disc := sv.Saved, sv.DisconnectedAt
		sv.Saved = time.Time{}
		if sv.Connected {
			sv.DisconnectedAt = time.Time{}
		}
		data, err := json.Marshal(sv)
		sv.Saved, sv.DisconnectedAt = saved, disc
		if err != nil {
			s.log.Error("save a session's state", "error", err)
			continue
		}
		h := fnv.New64a()
		h.Write(data)
		sum := h.Sum64()
		key := claims[i].Key
		seen[key] = sum
		if last, ok := s.stateSums[key]; ok && last == sum {
			continue
		}
		if data, err = json.Marshal(sv); err == nil {
			err = s.states.Save(claims[i], data)
		}
		if err != nil {
			delete(seen, key) // tried again at the next save
			s.log.Warn("save a session's state", "session", key, "error", err)
		}
	}
	s.stateSums = seen
}
