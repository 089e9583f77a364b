package broker

import (
	"container/heap"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"maps"
	"slices"
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
//     took the state (Take) or discarded it (a fresh claim, or the first
//     claim of a key): a node that lost the session cannot overwrite what
//     the new owner resumed. A nil state says the session has nothing to
//     resume.
//   - Round(node, at) records that every session state node holds was
//     saved, or had not changed since it was, as of at.
//   - Take(c) returns the newest state saved for c.Key by c or an
//     earlier claim (ok false when none) and makes it c's: claims before
//     c can no longer save. through is when that state was last known to
//     be current: the later of its save and its node's last Round after
//     it.
//   - Release of the key's claim (SessionOwners) removes its state.
type SessionStates interface {
	Save(c Claim, state []byte) error
	Round(node string, at time.Time) error
	Take(c Claim) (state []byte, through time.Time, ok bool, err error)
}

// handOff ends a session another node took over with the claim that
// replaced old. A session resumed there (not fresh) has its state saved
// for that node first: its subscriptions and its queued and inflight
// messages go with it (without SessionStates they are dropped, as when
// the session expires). The connection closes with Session taken over,
// and its will follows the rules for a session that continues elsewhere
// (published now only without a will delay) or ends (published now). A
// session that holds a claim later than old (reclaimed here since) is
// left alone.
func (s *Server) handOff(ss *session, old Claim) {
	mode := handSave
	if s.states == nil || old.Fresh {
		mode = handEnd
	}
	s.endHere(ss, old, mode)
}

// handOverWait2 bounds how long a hand-over waits for the policy's
// answers to the session's QoS 2 messages (within the new node's wait for
// the hand-over, about a second).
const handOverWait2 = 300 * time.Millisecond

// handMode is how a session ends here when another node has it.
type handMode int

const (
	handSave   handMode = iota // resumed elsewhere: its state is saved for that node
	handEnd                    // started clean elsewhere (or no SessionStates): it ends
	handForget                 // this node resumed it, and lost it before serving it: the store keeps its state
)

// endHere ends the session ss held under a claim up to old (see handOff).
func (s *Server) endHere(ss *session, old Claim, mode handMode) {
	// After any save of this session under way: its older state must not
	// land after this one.
	ss.saveMu.Lock()
	defer ss.saveMu.Unlock()
	if mode == handSave {
		// The QoS 2 messages the policy is still storing get their answer
		// first (bounded), so that the state handed over holds their ids:
		// the client's copy on the new node is answered, not stored again.
		awaitNone(context.Background(), handOverWait2, ss.unanswered2)
	}
	ss.mu.Lock()
	if ss.ended || ss.claim.Epoch > old.Epoch {
		ss.mu.Unlock()
		return
	}
	c := ss.c
	served := c != nil && c.served.Load() // set under ss.mu
	var state []byte
	if mode == handSave && ss.expiry > 0 && ss.id != nil {
		sv := ss.snapshotLocked(s.now())
		var err error
		if state, err = json.Marshal(&sv); err != nil {
			s.log.Error("hand a session over: encode its state", "session", ss.key, "error", err)
			state = nil
		}
	}
	ss.retireLocked(DropSessionExpired, state != nil || mode == handForget, nil)
	ss.mu.Unlock()
	if c != nil {
		will := c.takeWill()
		// The will of a connection never accepted (no CONNACK yet) is
		// not published.
		if will != nil && served && (mode == handEnd || will.Properties.WillDelay == 0) {
			s.publishWill(c.id, will)
		}
		c.taken.Store(true)
		d := Disconnection{Reason: CloseTakenOver, Detail: "another node took over the session"}
		if served {
			d.Code = packet.SessionTakenOver // no DISCONNECT before the CONNACK [MQTT-3.2.0-1]
		}
		c.closeWith(d)
	}
	s.mu.Lock()
	// The session was offline, its will delay running: it ends (a fresh
	// claim), so the will goes now, or it continues elsewhere.
	s.settleWillLocked(ss.key, mode == handEnd || old.Fresh)
	if s.sessions[ss.key] == ss {
		delete(s.sessions, ss.key)
	}
	s.mu.Unlock()
	if mode != handSave {
		return
	}
	if err := s.states.Save(old, state); err != nil {
		s.log.Warn("hand a session over: its state was not saved; the new node resumes the last saved", "session", ss.key, "error", err)
	}
}

// lostWhileResuming reports whether another node took over the claim a
// CONNECT here made before the CONNECT served it, and then ends the
// session this server holds for the key under that claim. A session the
// CONNECT resumed from the store (resumed) ends without saving anything:
// the store keeps the state it resumed (the notice's hand-off saved it,
// or it was never changed), for the node that has the session now. A
// session this server held before (no resume) is handed over as any
// other, its state saved.
func (s *Server) lostWhileResuming(claim Claim, resumed bool) bool {
	if s.states == nil {
		return false
	}
	lost, ok := s.lostAfter(claim.Key, claim.Epoch)
	if !ok {
		return false
	}
	s.mu.Lock()
	ss := s.sessions[claim.Key]
	s.mu.Unlock()
	if ss == nil {
		return true
	}
	if resumed && ss.currentClaim().Epoch == claim.Epoch {
		s.endHere(ss, lost, handForget)
	} else {
		s.handOff(ss, lost)
	}
	return true
}

// currentClaim reads the session's claim (taking its lock).
func (ss *session) currentClaim() Claim {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.claim
}

// retireLocked ends the session's part in the server: its replay stops,
// its subscriptions leave the index (except the wires in others', whose
// entries another session of the same key holds), its queued and
// inflight messages go (counted as dropped for why, or handed on with
// its state: kept) and its inbound QoS 2 ids with them. The caller holds
// ss.mu.
func (ss *session) retireLocked(why DropReason, kept bool, others map[string]bool) {
	ss.ended = true
	ss.stopReplayLocked()
	for wire, sub := range ss.subs {
		if !others[wire] {
			ss.srv.unindex(sub, ss.key)
		}
		delete(ss.subs, wire)
	}
	if kept {
		ss.discardLocked()
	} else {
		ss.clearLocked(why)
	}
	ss.end2Locked()
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
	ss.ninfl, ss.nresend = 0, 0
}

// lostNotice is a takeover notice: the latest claim of a key this server
// was told it lost, and when.
type lostNotice struct {
	claim Claim
	at    time.Time
}

// lostKept is how long takeover notices are remembered (lost).
const lostKept = time.Minute

// noteLost remembers that the claim old was replaced, for a CONNECT that
// claimed it and has not attached its session yet (lostAfter).
func (s *Server) noteLost(old Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.lost[old.Key]; !ok || n.claim.Epoch < old.Epoch {
		s.lost[old.Key] = lostNotice{claim: old, at: time.Now()}
	}
}

// lostAfter reports the notice of a replaced claim of key at or after
// epoch, if this server was told of one.
func (s *Server) lostAfter(key string, epoch uint64) (Claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.lost[key]
	return n.claim, ok && n.claim.Epoch >= epoch
}

// sweepLost forgets old takeover notices.
func (s *Server) sweepLost(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range s.lost {
		if now.Sub(n.at) > lostKept {
			delete(s.lost, k)
		}
	}
}

// resumes reports whether a CONNECT that resumes a session (no clean
// start) with claim takes the session's state from SessionStates: when
// the claim replaced another node's, or this server has no session for
// the key (an earlier attempt here failed before its session was made),
// or its session here is older than a resume of the key under way here
// (one whose replay that resume gave up: incomplete; a later session, of
// a clean start meanwhile, is the client's and is kept).
func (s *Server) resumes(claim Claim) bool {
	if s.states == nil || claim.From == "" {
		return false
	}
	if claim.From != s.opts.Node {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[claim.Key]
	if ss == nil {
		return true
	}
	r := s.resuming[claim.Key]
	return r != nil && ss.currentClaim().Epoch < r.epoch
}

// resume takes the state another node left for the session claim now
// holds and makes it this server's session, before attach finds it. A
// copy of the session this server kept (it never heard of the takeover)
// ends first, whatever is in the store: the claim says the session was
// elsewhere since. An error refuses the CONNECT (the client tries again).
func (s *Server) resume(claim Claim) error {
	// Under way (Server.resuming) from before its Take until ss is
	// installed: a later CONNECT of the session here meanwhile gives it
	// up (resumeRun), and a clean start discards it (startedCleanLocked).
	run, end := s.resumeRun(claim)
	defer end()
	s.mu.Lock()
	prev := s.sessions[claim.Key]
	delete(s.sessions, claim.Key)
	s.mu.Unlock()
	if prev != nil {
		// The copy here may be newer than what the store holds (its
		// takeover notice not handled yet, a save pending): it is saved
		// under its own claim first, which the store refuses if a later
		// claim's state is there already.
		s.saveStale(prev)
		s.endStale(prev, claim.Epoch)
	}
	data, through, ok, err := s.states.Take(claim)
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
	ss.mu.Lock()
	ss.restoreLocked(&sv)
	ss.mu.Unlock()
	if s.opts.Replay != nil {
		// Bounded, its wait for the account's other replays included, and
		// given up with the resume (run): the one a client left must not
		// hold a place in the account's line (a node died and all its
		// sessions resume here at once).
		//
		// A CONNECT of the session while the resume is under way finds
		// the session of a resume this one gave up, if that one is
		// installed, older than this one and resumes again instead of
		// attaching to it.
		ctx, stop := context.WithTimeout(run.ctx, replayTimeout)
		defer stop()
		s.replay(ctx, ss, &sv, through)
	}
	return s.install(ss, claim, run)
}

// resumeRun is a resume under way (Server.resuming).
type resumeRun struct {
	epoch  uint64
	ctx    context.Context // its replay's, ended when it is given up
	cancel context.CancelCauseFunc
	// startedClean says that a clean start of the session attached here
	// after the resume's claim: the session the resume brings back was
	// discarded (guarded by Server.mu).
	startedClean bool
	// next is the resume of a later claim of the session that gave this
	// one up (or that was under way when this one came late), so that
	// a run no longer in Server.resuming still learns of what happened
	// to those after it (supersededLocked); installed says the run's
	// session was installed (both guarded by Server.mu). A run holds
	// only the runs after it, and only while its resume is under way.
	next      *resumeRun
	installed bool
}

// supersededLocked reports whether the session r brings back must not be
// installed: a clean start discarded it (startedCleanLocked marks only
// the run in Server.resuming, the latest, and the runs before it learn
// of it through next), or the resume of a later claim installed its own
// session (which may have ended since: a session the client ended, or
// started afresh after, must not come back from an older copy). The
// caller holds Server.mu.
func (r *resumeRun) supersededLocked() bool {
	for x := r; x != nil; x = x.next {
		if x.startedClean || x != r && x.installed {
			return true
		}
	}
	return false
}

// errSessionEnded ends the second replay of a session that ended.
var errSessionEnded = errors.New("the session ended")

// errResumedAgain ends the replay of a resume that a later CONNECT of the
// same session resuming on this server made pointless.
var errResumedAgain = errors.New("a later connection of this client resumes the session")

// errStartedClean ends the replay of a resume that a later clean start of
// the same session on this server made pointless.
var errStartedClean = errors.New("a later connection of this client started the session afresh")

// resumeRun records the resume of the session claim resumes as under way
// (Server.resuming) and gives up the resume of an earlier claim of the
// same session resuming here (errResumedAgain): that CONNECT's client gave
// up on it and tried again, and its session, if it is installed at all,
// is replaced by this one's (install keeps the latest claim). end
// releases the run.
func (s *Server) resumeRun(claim Claim) (run *resumeRun, end func()) {
	ctx, cancel := context.WithCancelCause(s.life)
	run = &resumeRun{epoch: claim.Epoch, ctx: ctx, cancel: cancel}
	s.mu.Lock()
	if prev := s.resuming[claim.Key]; prev != nil && prev.epoch > claim.Epoch {
		cancel(errResumedAgain) // a later claim resumes already: this one is late
		run.next = prev
	} else {
		if prev != nil {
			prev.cancel(errResumedAgain)
			prev.next = run
		}
		s.resuming[claim.Key] = run
	}
	s.mu.Unlock()
	return run, func() {
		cancel(nil)
		s.mu.Lock()
		if s.resuming[claim.Key] == run {
			delete(s.resuming, claim.Key)
		}
		s.mu.Unlock()
	}
}

// startedCleanLocked tells the resume of the session key under way here,
// if its claim is older than claim, a clean start's, that the client
// discarded the session it brings back: its replay ends, and install
// refuses it, as it refuses the resumes that one gave up
// (supersededLocked). Without that, once the clean start's session ended
// (no session expiry) the resume would install the discarded session in
// the empty place and answer session present. The caller holds s.mu.
func (s *Server) startedCleanLocked(key string, claim Claim) {
	if r := s.resuming[key]; r != nil && r.epoch < claim.Epoch {
		r.startedClean = true
		r.cancel(errStartedClean)
	}
}

// errSuperseded refuses a CONNECT whose resume finished after a later
// CONNECT of the same session on this server (a client that gave up
// waiting and tried again, or started afresh).
var errSuperseded = errors.New("a later connection of this client took the session meanwhile")

// install makes ss, resumed for claim by run, the server's session for
// its key, unless a session with a later claim is there already, a clean
// start discarded the session meanwhile or a later resume installed its
// own (run.supersededLocked; then ss ends and errSuperseded says why). A
// session with an earlier claim there ends.
func (s *Server) install(ss *session, claim Claim, run *resumeRun) error {
	for {
		s.mu.Lock()
		cur := s.sessions[ss.key]
		clean := run.supersededLocked()
		s.mu.Unlock()
		if clean || cur != nil && cur.currentClaim().Epoch > claim.Epoch {
			s.supersede(ss, cur)
			return errSuperseded
		}
		s.mu.Lock()
		if s.sessions[ss.key] != cur || run.supersededLocked() {
			s.mu.Unlock()
			continue // changed meanwhile: look again
		}
		s.sessions[ss.key] = ss
		run.installed = true
		s.mu.Unlock()
		if cur != nil {
			// An earlier resume's (its replay given up for this one's,
			// or its CONNECT's client gone): it ends beside ss, and
			// its client is back.
			s.closeTaken(cur, claim.Epoch)
			s.retireBeside(cur, ss, false)
		} else {
			// An earlier session of the key that ended meanwhile took
			// the entries ss shares with it out of the index.
			s.reindex(ss)
		}
		return nil
	}
}

// supersede ends ss, a resumed session never installed, that cur (nil
// when none) or a clean start meanwhile superseded. Its messages are not
// counted as dropped: the store keeps them for cur, or the client
// discarded them. The session of the key current after ss's end (cur, or
// one attached since) indexes again the entries both had, which ss's end
// took out.
func (s *Server) supersede(ss, cur *session) {
	if cur != nil {
		s.retireBeside(ss, cur, true)
		return
	}
	ss.mu.Lock()
	if !ss.ended {
		ss.retireLocked(DropSessionExpired, true, nil)
	}
	ss.mu.Unlock()
	s.reindexCurrent(ss.key)
}

// retireBeside ends old, a session of the same key as keep that keep
// replaces (install) or supersedes before old was installed. Both indexed
// their subscriptions under the key: old takes out only the filters keep
// does not hold, and the session of the key current after old's end
// (keep, unless it ended and another attached meanwhile) indexes its
// subscriptions again (an entry both made is the one indexed last). kept:
// old's messages are not counted as dropped (the store keeps them for
// keep).
func (s *Server) retireBeside(old, keep *session, kept bool) {
	keep.mu.Lock()
	held := make(map[string]bool, len(keep.subs))
	for wire := range keep.subs {
		held[wire] = true
	}
	keep.mu.Unlock()
	old.mu.Lock()
	if !old.ended {
		old.retireLocked(DropSessionExpired, kept, held)
	}
	old.mu.Unlock()
	s.reindexCurrent(old.key)
}

// reindexCurrent indexes again the subscriptions of the session of key
// current now (none if it ended), after the end of another session of
// key took out the entries both had. It reads that session under s.mu
// after the end, not before: the session a caller read earlier (install's
// cur) may have ended since and another attached, whose entries the end
// took out and only it can put back.
func (s *Server) reindexCurrent(key string) {
	s.mu.Lock()
	cur := s.sessions[key]
	s.mu.Unlock()
	if cur != nil {
		s.reindex(cur)
	}
}

// reindex puts ss's subscriptions in the index again, unless it ended: a
// session of the same key that ended took the entries both had out.
func (s *Server) reindex(ss *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.ended {
		for _, sub := range ss.subs {
			s.index(sub)
		}
	}
}

// saveStale saves the state of prev, a copy of a session a later claim
// replaced, under prev's claim (see resume).
func (s *Server) saveStale(prev *session) {
	prev.saveMu.Lock()
	defer prev.saveMu.Unlock()
	sv, claim, ok := prev.toSave(s.now())
	if !ok {
		return
	}
	data, err := json.Marshal(&sv)
	if err == nil {
		err = s.states.Save(claim, data)
	}
	if err != nil {
		s.log.Warn("resume a session: the copy this node had could not be saved first; the store's last state is resumed", "session", prev.key, "error", err)
	}
}

// endStale ends a copy of a session this server kept that claim epoch
// replaced, no longer the server's session for its key: its connection,
// if any, closes with Session taken over, and a session of the key that
// a concurrent resume installed meanwhile indexes its subscriptions
// again (prev's end took out the entries both had).
func (s *Server) endStale(prev *session, epoch uint64) {
	s.closeTaken(prev, epoch)
	s.endSession(prev, false, DropSessionExpired)
	s.reindexCurrent(prev.key)
}

// closeTaken closes the connection of ss, if any, with Session taken
// over: another CONNECT of its client resumes the session. Its will goes
// as at the end of a connection, in the server's wills by the session's
// key: now without a delay, else when the delay ends unless a CONNECT
// resumes the session first (attach stops it; one that starts afresh
// publishes it at once), here or on another node (takenElsewhere, or the
// notice of a later claim than epoch, the resuming one, if it came
// first). The will of a CONNECT never answered is not due.
func (s *Server) closeTaken(ss *session, epoch uint64) {
	ss.mu.Lock()
	pc, expiry := ss.c, ss.expiry
	served := pc != nil && pc.served.Load()
	ss.mu.Unlock()
	if pc == nil {
		return
	}
	will := pc.takeWill()
	pc.taken.Store(true)
	pc.closeWith(Disconnection{Reason: CloseTakenOver, Code: packet.SessionTakenOver,
		Detail: "another node took over the session"})
	if will == nil || !served {
		return
	}
	s.willAtEnd(pc.id, ss.key, will, expiry)
	s.mu.Lock()
	if n, ok := s.lost[ss.key]; ok && n.claim.Epoch >= epoch {
		// Taken by another node meanwhile, when no will was there to
		// settle: settled now as the notice says.
		s.settleWillLocked(ss.key, n.claim.Fresh)
	}
	s.mu.Unlock()
}

// replayWindow is how far before its state was saved a resumed session's
// replay starts: a message published on a third node a moment before the
// save may have reached the old node after it.
const replayWindow = time.Second

// replayTimeout bounds a replay of a session resumed from another node's
// state, its wait for its account's other replays included, and every
// second pass (replayAgain). A restored session's replay at start waits
// in line however long it takes (restart.go).
const replayTimeout = 20 * time.Second

// replayAgain is when a resumed session's replay runs a second time: a
// message published elsewhere before the session's subscriptions were
// heard there (they spread through the cluster as the replay ran) is
// stored in history by then, and only it is added.
const replayAgain = 3 * time.Second

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
// shortly before the state was last known current (through: the old
// node saved it, or found it unchanged, then), which Options.Replay reads
// from history: the messages the old node got after that (it died) and
// those that crossed the cluster while the session moved (a subscription
// made while an earlier replay was pending matches only what was
// received since it was made: replayFilters). They go after
// the restored queue and before what arrived live since the
// subscriptions were indexed; a message the state holds, says it sent,
// or that already arrived is not added twice. The replay runs again
// replayAgain later for what was published during the move and had not
// reached history yet. The first reading runs within ctx, the second
// within replayTimeout; what a reading that failed got is added all the
// same.
func (s *Server) replay(ctx context.Context, ss *session, sv *savedSession, through time.Time) {
	if sv.Saved.IsZero() {
		return
	}
	since := sv.Saved
	if through.After(since) && !sv.Pending {
		// The saver's later round found the state current then. A
		// pending state was not (restart.go): it misses what its own
		// replay had not added.
		since = through
	}
	start := since
	since = since.Add(-replayWindow)
	filters := ss.replayFilters(since)
	// What the state holds or says it sent comes back too (and is
	// skipped): room for it beside the session's queue bound.
	seenBefore := len(sv.Sent) + len(sv.Queue) + len(sv.Inflight)
	got := s.replayed(ctx, ss, filters, ss.replayLimit(seenBefore))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended {
		return // handed over or expired meanwhile (a restart's replay)
	}
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
	n := min(len(sv.Queue), len(queue))
	restored, live := append([]*delivery(nil), queue[:n]...), append([]*delivery(nil), queue[n:]...)
	for _, d := range restored {
		seen[keyOf(d.msg)] = struct{}{}
	}
	for ss.qlen() > 0 {
		ss.pop()
	}
	for _, d := range restored {
		ss.push(d)
	}
	ss.addReplayedLocked(got, seen)
	for _, d := range live {
		k := keyOf(d.msg)
		if _, dup := seen[k]; dup {
			continue // the old node had it: in the state, or sent
		}
		seen[k] = struct{}{}
		ss.pushBoundedLocked(d)
	}
	if errors.Is(context.Cause(ctx), errResumedAgain) {
		// A later CONNECT of the session resumes it here: its session
		// replaces this one and runs both passes itself. Until then this
		// one, whose replay was cut short, is saved as pending from start
		// (a restart meanwhile replays what it had not reached).
		ss.replayFrom = start
		return
	}
	// Until the second replay is in, what is queued that it could bring
	// again is remembered (enqueue), and the session's state is saved as
	// pending from start (snapshotLocked): a replay from a state saved
	// meanwhile (a hand-over to another node, a save before a crash)
	// covers what the second pass would have added. The second pass reads
	// limit, whatever the limits of the connection that attaches
	// meanwhile, and as many more as were queued since that it could
	// bring again (recentSet).
	limit := ss.limits.MaxQueued + seenBefore + len(got)
	ss.recent = &recentSet{seen: seen, filters: filters, room: recentRoom * limit}
	ss.replayFrom = start
	ss.replayTimer = time.AfterFunc(replayAgain, func() {
		select {
		case <-s.done:
			return // closing
		default:
		}
		// Bounded, and given up when the session ends (stopReplayLocked):
		// until it is in, what is queued is remembered.
		ctx, end := context.WithCancelCause(s.life)
		defer end(nil)
		ctx, cancel := context.WithTimeout(ctx, replayTimeout)
		defer cancel()
		ss.mu.Lock()
		if ss.ended {
			ss.mu.Unlock()
			return
		}
		ss.replayStop = func() { end(errSessionEnded) }
		read := limit
		if ss.recent != nil {
			read += ss.recent.counted
		}
		ss.mu.Unlock()
		again := s.replayed(ctx, ss, filters, read)
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if !ss.ended && ss.recent != nil {
			ss.addReplayedLocked(again, ss.recent.seen)
			ss.pumpLocked(nil)
		}
		if s.life.Err() != nil {
			// Cut short by the server's close: its state is saved as
			// pending, and the next start or node replays it all.
			return
		}
		// In, or failed (logged): a session kept pending would have its
		// later replays start ever further back while it is served.
		ss.replayFrom = time.Time{}
		ss.recent, ss.replayTimer, ss.replayStop = nil, nil, nil
	})
}

// recentRoom is how many times its second replay's limit a session
// remembers of what it queued until that replay.
const recentRoom = 4

// recentSet is what a session remembers having queued until its second
// replay, so that the replay bringing it again does not queue it twice.
// That replay reads the oldest messages (by the time they were received)
// that filters match, each from its From: as many as the queue bound and
// what the first pass knew, and as many more as were queued since (counted),
// so that it reaches past those to what it is for, whatever the session
// was sent meanwhile. Of those queued, the oldest room are remembered (a
// busy subscriber's memory for those seconds is bounded by its queue's).
// A message the replay brings that is not remembered comes twice, never
// not at all: one queued after room others, or received in the same
// microsecond as the newest remembered.
type recentSet struct {
	seen    map[replayKey]struct{}
	filters []ReplayFilter
	room    int
	noted   newestFirst // the keys note added to seen
	counted int         // the messages note was given that the replay could bring
}

// note remembers m, queued to the session, if the second replay could
// bring it: a QoS 1 or 2 message (a replay brings none of QoS 0) on a
// topic a replayed filter matches, received since that filter's From (not
// a shared subscription's only, nor one subscribed after the first pass),
// and among the oldest room of those.
func (r *recentSet) note(m *Message) {
	if m.QoS == 0 || !ReplayAllows(r.filters, m.Topic, m.Created) {
		return
	}
	k := keyOf(m)
	if _, ok := r.seen[k]; ok {
		return
	}
	r.counted++
	if len(r.noted) == r.room {
		if k.at >= r.noted[0].at {
			return // newer than all it remembers
		}
		delete(r.seen, heap.Pop(&r.noted).(replayKey))
	}
	r.seen[k] = struct{}{}
	heap.Push(&r.noted, k)
}

// newestFirst is a heap of replay keys, the latest received at its top.
type newestFirst []replayKey

func (h newestFirst) Len() int           { return len(h) }
func (h newestFirst) Less(i, j int) bool { return h[i].at > h[j].at }
func (h newestFirst) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *newestFirst) Push(x any)        { *h = append(*h, x.(replayKey)) }
func (h *newestFirst) Pop() any {
	old := *h
	k := old[len(old)-1]
	*h = old[:len(old)-1]
	return k
}

// stopReplayLocked ends a replay under way (the session ends). The
// caller holds ss.mu.
func (ss *session) stopReplayLocked() {
	if ss.replayTimer != nil {
		ss.replayTimer.Stop()
		ss.replayTimer = nil
	}
	if ss.replayStop != nil {
		ss.replayStop() // the second pass under way
		ss.replayStop = nil
	}
	ss.recent = nil
}

// replayFilters returns the filters a replay from since reads of the
// session's non-shared subscriptions (a shared subscription's messages
// went to another member of its group), each from the later of since and
// its subscription's since (the earliest of those of the subscriptions
// that map to it): a filter subscribed after the replay's start while a
// replay was pending must not get what was published before (only
// retained messages predate a subscription), nor let that fill the
// read's limit ahead of what the session missed (Options.Replay counts
// only what a filter's From allows). They are sorted by filter.
func (ss *session) replayFilters(since time.Time) []ReplayFilter {
	from := make(map[string]time.Time) // each filter's earliest start
	ss.mu.Lock()
	for _, sub := range ss.subs {
		if _, _, shared, _ := topic.ParseShare(sub.wire); shared {
			continue
		}
		at := since
		if sub.since.After(since) {
			at = sub.since
		}
		if f, ok := from[sub.filter]; !ok || at.Before(f) {
			from[sub.filter] = at
		}
	}
	ss.mu.Unlock()
	filters := make([]ReplayFilter, 0, len(from))
	for _, f := range slices.Sorted(maps.Keys(from)) {
		filters = append(filters, ReplayFilter{Filter: f, From: from[f]})
	}
	return filters
}

// replayLimit is how many messages a replay reads: the session's queue
// bound, and seen more, the messages the caller knows the session has
// (they are skipped).
func (ss *session) replayLimit(seen int) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.limits.MaxQueued + seen
}

// replayed reads the messages of filters (replayFilters), at most limit
// (replayLimit), in one call of Options.Replay: one read, and one place in
// the account's line of replays, per pass, whatever the filters' starts.
// On an error it returns what it read before it, the error logged (the
// session goes on without the rest).
func (s *Server) replayed(ctx context.Context, ss *session, filters []ReplayFilter, limit int) []*Message {
	if len(filters) == 0 {
		return nil
	}
	ss.mu.Lock()
	id := ss.id
	ss.mu.Unlock()
	var got []*Message
	err := s.opts.Replay(ctx, id, filters, limit, func(m *Message) { got = append(got, m) })
	switch {
	case err == nil || s.life.Err() != nil:
	case errors.Is(context.Cause(ctx), errSessionEnded):
		// Not a failure to read: the session ended here.
	case errors.Is(context.Cause(ctx), errResumedAgain):
		s.log.Info("a session's replay was given up: a later connection of its client resumes it", "session", ss.key)
	case errors.Is(context.Cause(ctx), errStartedClean):
		s.log.Info("a session's replay was given up: a later connection of its client started afresh", "session", ss.key)
	default:
		s.log.Error("a session's replay could not read all it missed from history; it goes on without the rest",
			"session", ss.key, "since", ReplayStart(filters), "replayed", len(got), "error", err)
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
		if sub.noLocal && m.Origin != "" && m.Origin == ss.key {
			continue // its own message [MQTT-3.8.3-3]
		}
		if sub.since.After(m.Created) {
			continue // received before the client subscribed (subscription.since)
		}
		ok = true
		qos = max(qos, min(m.QoS, sub.qos))
		if sub.id != 0 {
			ids = append(ids, sub.id)
		}
	}
	return qos, ids, ok
}

// saveStates saves to SessionStates the state of each persistent session
// in sessions that changed since its last save, then records the round.
// A session's save holds its saveMu, so a hand-over of the same session
// (handOff) lands after it. A failed save ends the round: the rest wait
// for the next one (a database out of reach costs one timeout a round).
// It runs with s.saving held.
func (s *Server) saveStates(sessions []*session) {
	now := s.now()
	seen := make(map[string]uint64, len(sessions))
	complete := true
	for _, ss := range sessions {
		key, sum, err := s.saveState1(ss, now)
		if err != nil {
			s.log.Warn("save a session's state; the others wait for the next save", "session", ss.key, "error", err)
			complete = false
			break
		}
		if key != "" {
			seen[key] = sum
		}
	}
	if !complete {
		for k, sum := range s.stateSums {
			if _, ok := seen[k]; !ok {
				seen[k] = sum // not looked at this round
			}
		}
		s.stateSums = seen
		return
	}
	s.stateSums = seen
	if err := s.states.Round(s.opts.Node, now); err != nil {
		s.log.Warn("record the sessions' save", "error", err)
	}
}

// toSave is the state of ss to save at now under its claim; ok is false
// when it has nothing to save (not persistent, ended, or never claimed).
// The caller holds ss.saveMu.
func (ss *session) toSave(now time.Time) (sv savedSession, claim Claim, ok bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended || ss.expiry == 0 || ss.id == nil || ss.claim.Epoch == 0 {
		return savedSession{}, Claim{}, false
	}
	return ss.snapshotLocked(now), ss.claim, true
}

// saveState1 saves one session's state if it changed, and returns its
// key and the hash of what is saved ("" when the session has nothing to
// save: not persistent, ended, or never claimed).
func (s *Server) saveState1(ss *session, now time.Time) (string, uint64, error) {
	ss.saveMu.Lock()
	defer ss.saveMu.Unlock()
	sv, claim, ok := ss.toSave(now)
	if !ok {
		return "", 0, nil
	}
	// What a save changes by itself is not a change: the time, and the
	// disconnection time of a connected session (now).
	saved, disc := sv.Saved, sv.DisconnectedAt
	sv.Saved = time.Time{}
	if sv.Connected {
		sv.DisconnectedAt = time.Time{}
	}
	data, err := json.Marshal(&sv)
	if err != nil {
		return "", 0, err
	}
	h := fnv.New64a()
	h.Write(data)
	h.Write(binary.LittleEndian.AppendUint64(nil, claim.Epoch)) // saved again under a new claim
	sum := h.Sum64()
	if last, ok := s.stateSums[claim.Key]; ok && last == sum {
		return claim.Key, sum, nil
	}
	sv.Saved, sv.DisconnectedAt = saved, disc
	if data, err = json.Marshal(&sv); err != nil {
		return "", 0, err
	}
	return claim.Key, sum, s.states.Save(claim, data)
}
