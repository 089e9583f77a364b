package broker

import (
	"sync/atomic"
	"time"
)

// A server started on a state file restores its persistent sessions as
// they were at the last save. The QoS 1 and 2 messages they were given
// after that (the server crashed before the next save), or that were
// published while the server was down (a cluster's other nodes took
// them), are in history, not in the file. With Options.Replay, each
// restored session replays them, as a session resumed from another
// node's state does (states.go: replay), from shortly before its save.
//
// The replays run in the background, restartReplays at a time, so that
// the server serves at once. A CONNECT that resumes a session whose
// replay has not started runs it itself; one whose replay is running
// waits for it, however long the replays before it in its account's line
// take (Options.Replay bounds only its reading time). Either way what the
// session missed comes before what is published after, once.
//
// Until its replay is in (both passes), a session's saves keep the restored state's
// time and say that it is pending (savedSession.Pending), so that a
// replay from a state saved meanwhile (on another node taking the
// session, or after another restart) covers what this one has not added
// yet, whatever rounds of saves this node recorded since. A replay that
// fails (history out of reach, slower than the platform's bound on a
// read, or more rows to examine than its budget) is logged with what it read
// added, and the session goes on without the rest: kept pending, its
// later replays would start ever further back while it is served, and
// the messages it was sent meanwhile would crowd out those it missed.

// restart is a session restored at start, with the state it came from.
type restart struct {
	ss    *session
	sv    savedSession
	taken atomic.Bool   // a worker or a CONNECT runs the replay
	done  chan struct{} // closed when the replay is in (or the server closes)
}

// restartReplays bounds the replays of restored sessions that run at once
// in the background (Options.Replay also bounds those of one account).
const restartReplays = 4

// replayRestarts starts the replays of the sessions loadSessions restored.
func (s *Server) replayRestarts() {
	todo := make(chan *restart, len(s.restarts))
	for _, r := range s.restarts {
		todo <- r
	}
	close(todo)
	for range min(restartReplays, len(s.restarts)) {
		s.wg.Go(func() {
			for r := range todo {
				if r.taken.CompareAndSwap(false, true) {
					s.runRestart(r) // returns at once once the server closes
				}
			}
		})
	}
	s.restarts = nil
}

// runRestart runs one restored session's replay (the caller took it),
// unless the server is closing, and lets the CONNECTs waiting for it go
// on. The session stays pending until the replay's second pass is in.
func (s *Server) runRestart(r *restart) {
	ss := r.ss
	defer close(r.done)
	if s.life.Err() != nil {
		return // closing: the next start replays it
	}
	// Until the server closes: Options.Replay bounds its reads itself,
	// not its wait for the account's other replays (a restarted server's
	// clients all come back at once: a replay that gave up waiting would
	// lose what its session missed). One replay per session: a CONNECT
	// that comes back waits for this one.
	s.replay(s.life, ss, &r.sv, time.Time{})
	if s.life.Err() != nil {
		return // the replay may have been cut short: the next start runs it again
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	// The session stays pending (replayFrom) until its second pass is in.
	if !ss.ended {
		ss.pumpLocked(nil)
	}
}

// awaitRestored makes sure, for a CONNECT that resumes the session key,
// that the replay of the session restored at start is in: it runs it now
// if no one has started it, and waits for it otherwise.
func (s *Server) awaitRestored(key string) {
	s.mu.Lock()
	ss := s.sessions[key]
	s.mu.Unlock()
	if ss == nil || ss.restart == nil {
		return
	}
	r := ss.restart
	if r.taken.CompareAndSwap(false, true) {
		s.runRestart(r)
		return
	}
	select {
	case <-r.done:
	case <-s.done:
	}
}
