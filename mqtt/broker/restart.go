package broker

import (
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
// the server serves at once. A client that resumes its session meanwhile
// waits for the session's replay (at most replayTimeout), so that what
// it missed comes before what is published after. Until its replay is
// in, a session's saves keep the restored state's time (replayFrom), so
// that a replay from a state saved meanwhile, on another node or after
// another restart, still covers what this one has not added yet.

// restart is a session restored at start, with the state it came from.
type restart struct {
	ss *session
	sv savedSession
}

// restartReplays bounds the replays of restored sessions that run at once
// (Options.Replay also bounds those of one account).
const restartReplays = 4

// replayRestarts starts the replays of the sessions loadSessions restored.
func (s *Server) replayRestarts() {
	todo := s.restarts
	s.restarts = nil
	if len(todo) == 0 {
		return
	}
	next := make(chan restart)
	for range min(restartReplays, len(todo)) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for r := range next {
				s.replayRestored(r)
			}
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(next)
		for _, r := range todo {
			next <- r
		}
	}()
}

// replayRestored runs one restored session's replay (or, once the server
// is closing, lets the session go without it: its saved time stays, so
// the next start replays it) and lets the CONNECTs waiting for it go on.
func (s *Server) replayRestored(r restart) {
	ss := r.ss
	defer close(ss.restored)
	select {
	case <-s.done:
		return
	default:
	}
	s.replay(ss, &r.sv, time.Time{})
	ss.mu.Lock()
	defer ss.mu.Unlock()
	select {
	case <-s.done:
		return // the replay may have been cut short: the next start runs it again
	default:
	}
	ss.replayFrom = time.Time{}
	if !ss.ended {
		ss.pumpLocked(nil) // a client that stopped waiting is connected
	}
}

// awaitRestored waits, for a CONNECT that resumes the session key, until
// the replay of the session restored at start is in, at most
// replayTimeout and a little.
func (s *Server) awaitRestored(key string) {
	s.mu.Lock()
	ss := s.sessions[key]
	s.mu.Unlock()
	if ss == nil || ss.restored == nil {
		return
	}
	t := time.NewTimer(replayTimeout + time.Second)
	defer t.Stop()
	select {
	case <-ss.restored:
	case <-t.C:
		s.log.Warn("resume a restored session: its replay from history is not in yet; it goes on behind", "session", key)
	case <-s.done:
	}
}
