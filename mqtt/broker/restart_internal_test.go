package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestRestartReplay: a persistent session restored from the state file
// at start replays what it missed from history (Options.Replay, here a
// stand-in that waits to be let go). Until both passes of that replay are
// in, the state saved keeps the restored state's time, so that a replay
// from a save made meanwhile still covers what it has not added; a CONNECT that resumes the
// session waits for it, and gets the restored queue, then what history
// had, then what was published live meanwhile, each once. The replay ends
// only with the server: Options.Replay bounds its own reads.
func TestRestartReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Now().Add(-time.Minute).Round(time.Millisecond)
	sv := savedSession{Saved: t0, ClientID: "w", Limits: Limits{MaxQueued: 100, MaxInflight: 10}, Expiry: 3600,
		DisconnectedAt: t0, Subs: []savedSub{{Wire: "r/#", Filter: "r/#", QoS: 1}},
		Queue: []savedDelivery{{QoS: 1, Message: savedMessage{Topic: "r/q", Payload: []byte("queued"), QoS: 1, Created: t0.Add(-time.Second)}}},
		Sent:  []savedSent{{Topic: "r/s", At: t0.Add(-500 * time.Millisecond).UnixMicro()}}} // sent and acknowledged before the save
	writeState(t, path, t0, sv)
	called, release := make(chan time.Time, 4), make(chan struct{})
	var calls atomic.Int32
	replay := func(ctx context.Context, _ *Identity, filters []ReplayFilter, _ int, fn func(*Message)) error {
		if d, ok := ctx.Deadline(); calls.Add(1) == 1 && ok {
			// The restored session's replay bounds its reads itself,
			// never its wait for the account's other replays (a
			// restart's reconnect storm); its second pass is bounded.
			t.Errorf("the replay is given a deadline (%v): a session that waited for others' replays would lose what it missed", d)
		}
		called <- ReplayStart(filters)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		// Twice (the replay runs again later): given once.
		fn(&Message{Topic: "r/missed", QoS: 1, Payload: []byte("missed"), Created: t0.Add(time.Second)})
		fn(&Message{Topic: "r/q", QoS: 1, Payload: []byte("queued"), Created: t0.Add(-time.Second)}) // in the file already
		fn(&Message{Topic: "r/s", QoS: 1, Payload: []byte("sent"), Created: t0.Add(-500 * time.Millisecond)})
		return nil
	}
	srv, addr := startStates(t, Options{StatePath: path, SaveInterval: time.Hour, Replay: replay})
	select {
	case since := <-called:
		if want := t0.Add(-replayWindow); !since.Equal(want) {
			t.Fatalf("the replay reads from %v, want %v (the save, less the window)", since, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restored session's replay did not start")
	}
	saved := func() savedSession {
		t.Helper()
		if err := srv.Save(); err != nil {
			t.Fatal(err)
		}
		st, err := readStateFile(path)
		if err != nil || len(st.Sessions) != 1 {
			t.Fatalf("state file: %v, %d sessions", err, len(st.Sessions))
		}
		return st.Sessions[0]
	}
	if got := saved(); !got.Saved.Equal(t0) || !got.Pending || len(got.Sent) != 1 || got.Sent[0].Topic != "r/s" {
		t.Fatalf("saved during the replay: time %v, pending %v, sent %v; want the restored state's %v, pending, and its sent r/s",
			got.Saved, got.Pending, got.Sent, t0)
	}
	srv.Publish(&Message{Topic: "r/live", QoS: 1, Payload: []byte("live")})

	resumed := make(chan *mqtttest.V5, 1)
	go func() { resumed <- mqtttest.DialV5(t, addr, persistent("w")) }()
	testkit.Eventually(t, 10*time.Second, "the CONNECT read (it then waits for the replay)", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for c := range srv.conns {
			if c.idp.Load() != nil {
				return true
			}
		}
		return false
	})
	close(release)
	c := <-resumed
	c.Expect(t, "queued", "missed", "live") // restored queue, then history, then live; each once
	if got := saved(); !got.Saved.Equal(t0) || !got.Pending {
		t.Fatalf("saved after the first pass: time %v, pending %v; want pending from %v until the second pass is in", got.Saved, got.Pending, t0)
	}
	// The second pass gives "missed" again: it is not sent twice.
	ss := sessionOf(srv, (&Identity{ClientID: "w"}).SessionKey())
	testkit.Eventually(t, 10*time.Second, "the replay's second pass", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(called) > 0 && ss.replayTimer == nil
	})
	if got := saved(); !got.Saved.After(t0) || got.Pending {
		t.Fatalf("saved after the second pass: time %v, pending %v; want now, not pending", got.Saved, got.Pending)
	}
	srv.Publish(&Message{Topic: "r/end", QoS: 1, Payload: []byte("end")})
	c.Expect(t, "end") // not a replayed message a second time
}

// writeState writes a state file holding sessions.
func writeState(t *testing.T, path string, saved time.Time, sessions ...savedSession) {
	t.Helper()
	data, err := json.Marshal(&stateFile{Version: stateVersion, Saved: saved, Sessions: sessions})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRestartReplayByTheConnect: a CONNECT resuming a restored session
// whose replay no background worker has started (they are all busy) runs
// it itself instead of waiting behind them.
func TestRestartReplayByTheConnect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Now().Add(-time.Minute)
	var sessions []savedSession
	for i := range restartReplays + 1 {
		sessions = append(sessions, savedSession{Saved: t0, ClientID: fmt.Sprintf("w%d", i), Limits: Limits{MaxQueued: 100, MaxInflight: 10},
			Expiry: 3600, DisconnectedAt: t0, Subs: []savedSub{{Wire: "r/#", Filter: "r/#", QoS: 1}}})
	}
	writeState(t, path, t0, sessions...)
	last := sessions[restartReplays].ClientID
	busy, release := make(chan struct{}, restartReplays), make(chan struct{})
	replay := func(ctx context.Context, id *Identity, _ []ReplayFilter, _ int, fn func(*Message)) error {
		if id.ClientID != last {
			busy <- struct{}{}
			select { // the workers stay busy until the test ends
			case <-release:
			case <-ctx.Done():
			}
			return ctx.Err()
		}
		fn(&Message{Topic: "r/missed", QoS: 1, Payload: []byte("missed"), Created: t0.Add(time.Second)})
		return nil
	}
	t.Cleanup(func() { close(release) })
	_, addr := startStates(t, Options{StatePath: path, SaveInterval: time.Hour, Replay: replay})
	for range restartReplays {
		select {
		case <-busy:
		case <-time.After(10 * time.Second):
			t.Fatal("the workers did not start their replays")
		}
	}
	mqtttest.DialV5(t, addr, persistent(last)).Expect(t, "missed") // its CONNECT ran the replay
}

// TestPendingStateIgnoresRounds: a replay from a state saved while its
// restart replay was pending starts from that state's time, not from its
// node's later round of saves (which found it current only as far as it
// went); it reads room for the messages the state says were sent.
func TestPendingStateIgnoresRounds(t *testing.T) {
	t0 := time.Now().Add(-time.Minute)
	since, maxes := make(chan time.Time, 2), make(chan int, 2)
	replay := func(_ context.Context, _ *Identity, filters []ReplayFilter, max int, _ func(*Message)) error {
		since <- ReplayStart(filters)
		maxes <- max
		return nil
	}
	srv, _ := startStates(t, Options{Replay: replay})
	sv := savedSession{Saved: t0, ClientID: "p", Limits: Limits{MaxQueued: 10, MaxInflight: 10}, Expiry: 3600,
		Subs: []savedSub{{Wire: "r/#", Filter: "r/#", QoS: 1}}, Sent: []savedSent{{Topic: "r/s", At: t0.UnixMicro()}}}
	for _, pending := range []bool{true, false} {
		sv.Pending = pending
		ss := srv.savedSession(&sv)
		ss.mu.Lock()
		ss.restoreLocked(&sv)
		ss.mu.Unlock()
		round := time.Now()
		srv.replay(context.Background(), ss, &sv, round)
		want := round.Add(-replayWindow)
		if pending {
			want = t0.Add(-replayWindow)
		}
		if got := <-since; !got.Equal(want) {
			t.Errorf("pending %v: the replay reads from %v, want %v", pending, got, want)
		}
		// What the state says it sent comes back and is skipped: it does
		// not take the room of what the session missed.
		if got := <-maxes; got != 10+1 {
			t.Errorf("the replay reads at most %d messages, want the queue bound and the one sent, 11", got)
		}
		ss.mu.Lock()
		ss.retireLocked(DropSessionExpired, true, nil)
		ss.mu.Unlock()
	}
}
