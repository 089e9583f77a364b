package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// memStates is a SessionStates in memory: Take gives take, Save counts
// (and may be slow), Round records.
type memStates struct {
	mu     sync.Mutex
	delay  time.Duration
	take   []byte
	saves  int
	rounds int
	fail   bool
	last   []byte // the state saved last
}

func (m *memStates) Save(_ Claim, state []byte) error {
	time.Sleep(m.delay) // a database write
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saves++
	m.last = state
	if m.fail {
		return context.DeadlineExceeded
	}
	return nil
}

func (m *memStates) Take(Claim) ([]byte, time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.take, time.Time{}, m.take != nil, nil
}

func (m *memStates) Round(string, time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rounds++
	return nil
}

func (m *memStates) counts() (saves, rounds int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves, m.rounds
}

// elsewhere is a SessionOwners whose every claim replaced node "a"'s.
type elsewhere struct {
	mu    sync.Mutex
	epoch uint64
}

func (o *elsewhere) Claim(key, node string, fresh bool) (Claim, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch++
	return Claim{Key: key, Node: node, Epoch: o.epoch, From: "a"}, nil
}
func (o *elsewhere) Release(Claim) (bool, error)             { return true, nil }
func (o *elsewhere) Owner(string) (Claim, bool, error)       { return Claim{}, false, nil }
func (o *elsewhere) Watch(string, func(Claim)) (stop func()) { return func() {} }

// resumable returns states that hold a saved session "dev" with a QoS 1
// subscription to t/#, for a CONNECT from another node's client to take.
func resumable() *memStates {
	sv := savedSession{Saved: time.Now(), ClientID: "dev", Limits: Limits{MaxQueued: 100, MaxInflight: 10}, Expiry: 3600,
		DisconnectedAt: time.Now(), Subs: []savedSub{{Wire: "t/#", Filter: "t/#", QoS: 1}}}
	st := &memStates{}
	st.take, _ = json.Marshal(&sv)
	return st
}

// connectRaw sends an MQTT 5 CONNECT of a persistent session for id with
// keepAlive and returns the connection.
func connectRaw(t *testing.T, addr, id string, keepAlive uint16) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ClientID, c.ProtocolName, c.ProtocolVersion, c.KeepAlive = id, "MQTT", 5, keepAlive
	expiry := uint32(3600)
	c.Properties = &packets.Properties{SessionExpiryInterval: &expiry}
	if _, err := cp.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

// connack reads the first packet from nc and fails unless it is a CONNACK
// [MQTT-3.2.0-1]; it returns its reason code.
func connack(t *testing.T, nc net.Conn) byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	first, err := packets.ReadPacket(nc)
	if err != nil {
		t.Fatal(err)
	}
	if first.Type != packets.CONNACK {
		t.Fatalf("the first packet is type %d, not CONNACK [MQTT-3.2.0-1]", first.Type)
	}
	return first.Content.(*packets.Connack).ReasonCode
}

// attempt is the outcome of a CONNECT made in the background: the client
// when the server accepted it, and the error when it did not.
type attempt struct {
	c   *mqtttest.V5
	err error
}

// connectLater makes the CONNECT cp to addr in the background; its
// outcome arrives on the channel.
func connectLater(t *testing.T, addr string, cp *paho.Connect) <-chan attempt {
	out := make(chan attempt, 1)
	go func() {
		c, _, err := mqtttest.TryV5(t, addr, cp)
		out <- attempt{c, err}
	}()
	return out
}

// resumedAndServed fails unless a, who's CONNECT, resumed the session
// and then gets what is published.
func resumedAndServed(t *testing.T, addr, who string, a attempt) {
	t.Helper()
	if a.c == nil || !a.c.Connack.SessionPresent {
		t.Fatalf("%s did not resume the session (%v)", who, a.err)
	}
	pub := mqtttest.DialV5(t, addr, mqtttest.Clean("pub"))
	pub.Pub(t, "t/1", 1, "acknowledged")
	a.c.Expect(t, "acknowledged")
}

func startStates(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	return srv, ln.Addr().String()
}

func persistent(id string) *paho.Connect {
	x := uint32(3600)
	return &paho.Connect{ClientID: id, KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: &x}}
}

// withWill gives cp a will on will/dev ("gone") with a delay of delay
// seconds.
func withWill(cp *paho.Connect, delay uint32) *paho.Connect {
	cp.WillMessage = &paho.WillMessage{Topic: "will/dev", QoS: 1, Payload: []byte("gone")}
	cp.WillProperties = &paho.WillProperties{WillDelayInterval: &delay}
	return cp
}

func sessionOf(s *Server, key string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[key]
}

// TestHandOffLeavesANewerClaim: a takeover notice of a claim the session
// no longer holds (its client came back here since, with a newer claim)
// ends nothing: the client keeps its subscription.
func TestHandOffLeavesANewerClaim(t *testing.T) {
	srv, addr := startStates(t, Options{States: &memStates{}})
	c1 := mqtttest.DialV5(t, addr, persistent("dev"))
	c1.Sub(t, "t/#", 1)
	old := sessionOf(srv, "dev").currentClaim()
	c1.Disconnect(&paho.Disconnect{})
	c2 := mqtttest.DialV5(t, addr, persistent("dev")) // a newer claim, same node
	if !c2.Connack.SessionPresent {
		t.Fatal("resuming here: session present 0")
	}
	srv.takenElsewhere(old) // late: the notice of the older claim
	pub := mqtttest.DialV5(t, addr, mqtttest.Clean("pub"))
	pub.Pub(t, "t/1", 1, "hello")
	c2.Expect(t, "hello")
}

// TestNoticeDuringResume: a takeover notice that arrives while a CONNECT
// resumes the session from another node's state (before it is attached)
// is not lost: the CONNECT is refused with a CONNACK (Server unavailable:
// the client tries again and reaches the session where it is now), the
// first and only packet, and the session is not served here. Nothing is
// saved over what the store holds for the new owner.
func TestNoticeDuringResume(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	st := resumable()
	var once sync.Once
	replay := func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		once.Do(func() { // the first replay waits for the notice
			close(entered)
			<-release
		})
		return nil
	}
	srv, addr := startStates(t, Options{States: st, Owners: &elsewhere{}, Replay: replay})
	nc := connectRaw(t, addr, "dev", 30)
	<-entered
	srv.takenElsewhere(Claim{Key: "dev", Node: srv.opts.Node, Epoch: 1}) // another node took claim 1
	close(release)
	if code := connack(t, nc); code != 0x88 {
		t.Fatalf("CONNACK 0x%02X, want 0x88 Server unavailable", code)
	}
	testkit.Eventually(t, 5*time.Second, "the session to leave this node", func() bool { return sessionOf(srv, "dev") == nil })
	if saves, _ := st.counts(); saves != 0 {
		t.Fatalf("%d states saved for a session this node lost before it served it", saves)
	}
}

// TestWillAtHandOff: a session resumed on another node within its will
// delay has no will published here; one that starts clean there ends,
// and its will is published at once.
func TestWillAtHandOff(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		srv, addr := startStates(t, Options{States: &memStates{}})
		watcher := mqtttest.DialV5(t, addr, mqtttest.Clean("watcher"))
		watcher.Sub(t, "will/dev", 1)
		mqtttest.DialV5(t, addr, withWill(persistent("dev"), 2))
		old := sessionOf(srv, "dev").currentClaim()
		old.Fresh = fresh
		srv.takenElsewhere(old) // connected here; the client came through another node
		select {
		case m := <-watcher.Msgs:
			if !fresh {
				t.Fatalf("the will %q was published when the session moved on (resumed elsewhere within its delay)", m.Payload)
			}
		case <-time.After(3 * time.Second): // past the will delay
			if fresh {
				t.Fatal("the will was not published when the session ended (a clean start elsewhere)")
			}
		}
	}
}

// TestStaleCopyWithoutState: a session this node kept, which another node
// held since and left no state of (its client started clean there), is
// not resumed here.
func TestStaleCopyWithoutState(t *testing.T) {
	_, addr := startStates(t, Options{States: &memStates{}, Owners: &elsewhere{}})
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	c.Sub(t, "t/#", 1)
	c.Disconnect(&paho.Disconnect{})
	c2 := mqtttest.DialV5(t, addr, persistent("dev"))
	if c2.Connack.SessionPresent {
		t.Fatal("session present 1: the local copy of a session another node held since (and left no state of) was resumed")
	}
}

// TestHandOffNotBehindOtherSaves: a hand-over waits for at most its own
// session's save, not for a whole round of saves of other sessions.
func TestHandOffNotBehindOtherSaves(t *testing.T) {
	st := &memStates{delay: 20 * time.Millisecond}
	srv, addr := startStates(t, Options{States: st, StatePath: t.TempDir() + "/state.json", SaveInterval: time.Hour})
	for i := range 60 {
		mqtttest.DialV5(t, addr, persistent(fmt.Sprintf("dev%02d", i)))
	}
	old := sessionOf(srv, "dev59").currentClaim() // the last: its save comes at the end of the round
	saved := make(chan error, 1)
	go func() { saved <- srv.Save() }() // 60 saves of 20 ms: 1.2 s
	testkit.Eventually(t, 5*time.Second, "the round to be under way", func() bool { n, _ := st.counts(); return n > 0 })
	start := time.Now()
	srv.takenElsewhere(old)
	if d := time.Since(start); d > 600*time.Millisecond {
		t.Fatalf("the hand-over took %v behind the other sessions' saves", d)
	}
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
}

// TestRounds: a round of saves is recorded once every session's state is
// saved or unchanged, and not when a save failed; an unchanged session is
// not saved again.
func TestRounds(t *testing.T) {
	st := &memStates{}
	srv, addr := startStates(t, Options{States: st, StatePath: t.TempDir() + "/state.json", SaveInterval: time.Hour})
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	c.Sub(t, "t/#", 1)
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}
	if saves, rounds := st.counts(); saves != 1 || rounds != 1 {
		t.Fatalf("after the first save: %d saves, %d rounds; want 1 and 1", saves, rounds)
	}
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}
	if saves, rounds := st.counts(); saves != 1 || rounds != 2 {
		t.Fatalf("unchanged: %d saves, %d rounds; want 1 (not saved again) and 2", saves, rounds)
	}
	c.Sub(t, "u/#", 1)
	st.mu.Lock()
	st.fail = true
	st.mu.Unlock()
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}
	if saves, rounds := st.counts(); saves != 2 || rounds != 2 {
		t.Fatalf("a failed save: %d saves, %d rounds; want 2 and no new round", saves, rounds)
	}
	st.mu.Lock()
	st.fail = false
	st.mu.Unlock()
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}
	if saves, rounds := st.counts(); saves != 3 || rounds != 3 {
		t.Fatalf("after the failure: %d saves, %d rounds; want the change saved again (3) and a round (3)", saves, rounds)
	}
}

// firstReplayHeld returns an Options.Replay whose first call closes
// entered and returns what hold returns; later calls find nothing.
func firstReplayHeld(hold func(ctx context.Context) error) (entered chan struct{}, replay func(context.Context, *Identity, []ReplayFilter, int, func(*Message)) error) {
	entered = make(chan struct{})
	var first sync.Once
	return entered, func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		held := false
		first.Do(func() { held = true })
		if !held {
			return nil
		}
		close(entered)
		return hold(ctx)
	}
}

// servesTheRetry checks that the retry's claim (2) holds session dev and
// that a message published now reaches the retry's client.
func servesTheRetry(t *testing.T, srv *Server, addr string, retry *mqtttest.V5) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "the retry's claim to hold the session", func() bool {
		return sessionOf(srv, "dev").currentClaim().Epoch == 2
	})
	pub := mqtttest.DialV5(t, addr, mqtttest.Clean("pub"))
	pub.Pub(t, "t/1", 1, "still here")
	retry.Expect(t, "still here")
}

// TestRetryGivesUpTheFirstReplay: a client that gave up on a CONNECT
// waiting in its replay (the account's line is long after a node died)
// and connects again frees the place the first replay held: its context
// ends at once, not after replayTimeout, and the retry is served.
func TestRetryGivesUpTheFirstReplay(t *testing.T) {
	gaveUp := make(chan error, 1)
	st := resumable()
	entered, replay := firstReplayHeld(func(ctx context.Context) error {
		<-ctx.Done() // a place in a line that does not move
		gaveUp <- context.Cause(ctx)
		return ctx.Err()
	})
	srv, addr := startStates(t, Options{States: st, Owners: &elsewhere{}, Replay: replay})
	go mqtttest.TryV5(t, addr, persistent("dev"))
	<-entered
	retry := mqtttest.DialV5(t, addr, persistent("dev"))
	if !retry.Connack.SessionPresent {
		t.Fatal("the retry did not resume the session")
	}
	select {
	case cause := <-gaveUp:
		if !errors.Is(cause, errResumedAgain) {
			t.Fatalf("the first replay ended with %v, want %v", cause, errResumedAgain)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first replay still holds its place after the retry was served")
	}
	servesTheRetry(t, srv, addr, retry)
}

// TestResumeAfterARetry: a client that gave up on a CONNECT stuck in its
// resume connects again and is served; the first resume, finishing late,
// does not take the session from under it (that CONNECT is refused).
func TestResumeAfterARetry(t *testing.T) {
	release := make(chan struct{})
	st := resumable()
	entered, replay := firstReplayHeld(func(context.Context) error {
		<-release
		return nil
	})
	srv, addr := startStates(t, Options{States: st, Owners: &elsewhere{}, Replay: replay})
	stuck := connectLater(t, addr, persistent("dev"))
	<-entered
	retry := mqtttest.DialV5(t, addr, persistent("dev"))
	if !retry.Connack.SessionPresent {
		t.Fatal("the retry did not resume the session")
	}
	close(release)
	if a := <-stuck; a.err == nil {
		t.Fatal("the CONNECT that finished its resume after the retry was served too")
	}
	servesTheRetry(t, srv, addr, retry)
}

// TestCleanStartDuringAResumeEndsIt: while a CONNECT resumes the
// session here (in its replay, or waiting for the store's Take), the
// client starts clean with no session expiry and leaves, ending the
// session. The resume, finishing after, does not bring back the session
// the clean start discarded: its CONNECT is refused (or starts afresh),
// and the server holds nothing of the old session.
func TestCleanStartDuringAResumeEndsIt(t *testing.T) {
	t.Run("replay", func(t *testing.T) {
		release := make(chan struct{})
		entered, replay := firstReplayHeld(func(context.Context) error {
			<-release
			return nil
		})
		cleanStartDuringAResume(t, Options{States: resumable(), Replay: replay}, entered, release)
	})
	t.Run("take", func(t *testing.T) {
		st := &blockingTake{memStates: resumable(), blockOn: 1, entered: make(chan struct{}), release: make(chan struct{})}
		cleanStartDuringAResume(t, Options{States: st}, st.entered, st.release)
	})
}

// cleanStartDuringAResume runs TestCleanStartDuringAResumeEndsIt on a
// server of opts whose resume is held from entered until release.
func cleanStartDuringAResume(t *testing.T, opts Options, entered, release chan struct{}) {
	t.Helper()
	opts.Owners = &elsewhere{}
	srv, addr := startStates(t, opts)
	resuming := connectLater(t, addr, persistent("dev"))
	<-entered
	startCleanAndLeave(t, srv, addr)
	close(release)
	discardedStaysDiscarded(t, srv, resuming)
}

// startCleanAndLeave connects dev to addr with a clean start and no
// session expiry, which finds no session, and disconnects; it returns once
// the server has no session of dev.
func startCleanAndLeave(t *testing.T, srv *Server, addr string) {
	t.Helper()
	clean := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "dev", KeepAlive: 30, CleanStart: true})
	if clean.Connack.SessionPresent {
		t.Fatal("the clean start found a session")
	}
	clean.Disconnect(&paho.Disconnect{})
	testkit.Eventually(t, 5*time.Second, "the clean start's session ended", func() bool { return sessionOf(srv, "dev") == nil })
}

// discardedStaysDiscarded waits for the answer to a held resume's CONNECT
// of "dev" and fails if it brought back, session present, the session a
// clean start discarded, or if the server holds that session's
// subscription to t/#.
func discardedStaysDiscarded(t *testing.T, srv *Server, resuming <-chan attempt) {
	t.Helper()
	var a attempt
	select {
	case a = <-resuming:
	case <-time.After(10 * time.Second):
		t.Fatal("the resuming CONNECT got no answer")
	}
	if a.err == nil && a.c.Connack.SessionPresent {
		t.Error("the resume brought back, session present, the session the clean start discarded")
	}
	if ss := sessionOf(srv, "dev"); ss != nil {
		ss.mu.Lock()
		_, old := ss.subs["t/#"]
		ss.mu.Unlock()
		if old {
			t.Error("the server holds the discarded session's subscription to t/#")
		}
	}
}

// TestCleanStartEndsAResumeGivenUpByARetry: a CONNECT's resume is held in
// its replay (a history read slow to see its context end); its client
// gives up and connects again, and that retry resumes the session and is
// served; then the client starts clean with no session expiry and
// leaves. The first resume, no longer under way in Server.resuming (the
// retry's replaced it) when the clean start came, finishes after: it
// does not bring back the session the clean start discarded (its CONNECT
// is refused, or starts afresh), and the server holds nothing of it.
func TestCleanStartEndsAResumeGivenUpByARetry(t *testing.T) {
	release := make(chan struct{})
	entered, replay := firstReplayHeld(func(context.Context) error {
		<-release // a read slow to see its context end
		return nil
	})
	srv, addr := startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: replay})
	first := connectLater(t, addr, persistent("dev")) // claim 1, held in its replay
	<-entered
	retry := mqtttest.DialV5(t, addr, persistent("dev")) // claim 2: gives the first up
	if !retry.Connack.SessionPresent {
		t.Fatal("session present 0: the retry did not resume")
	}
	startCleanAndLeave(t, srv, addr) // claim 3
	close(release)
	discardedStaysDiscarded(t, srv, first)
}

// TestResumedSessionRemembersNoQoS0: until its second replay, a session
// resumed from another node remembers the QoS 1 and 2 messages queued to
// it, so that the replay bringing one again does not send it twice; it
// does not remember QoS 0 messages, which no replay brings, and has room
// for a few times its queue bound (a busy subscriber's memory for those
// seconds is bounded; TestRememberedAreTheOldest).
func TestResumedSessionRemembersNoQoS0(t *testing.T) {
	t0 := time.Now().Truncate(time.Millisecond)
	live := func(i int, qos byte) *Message {
		return &Message{Topic: fmt.Sprintf("t/live/%d", i), QoS: qos, PublishedQoS: qos, Payload: fmt.Appendf(nil, "%d-%d", qos, i),
			Created: t0.Add(time.Duration(2*i+int(qos)) * time.Microsecond)}
	}
	var calls atomic.Int32
	replay := func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		if calls.Add(1) == 2 {
			fn(live(0, 1)) // the second pass brings the first live message again
		}
		return nil
	}
	srv, addr := startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: replay})
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	ss := sessionOf(srv, "dev")
	ss.mu.Lock()
	before, room := len(ss.recent.seen), ss.recent.room
	ss.mu.Unlock()
	if room != recentRoom*100 {
		t.Fatalf("room to remember %d messages; want %d times the queue bound, 100 (the first pass found none)", room, recentRoom)
	}
	const n, batch = 160, 20 // batches within the session's queue bound and window
	for i := 0; i < n; i += batch {
		var want []string
		for j := i; j < i+batch; j++ {
			for _, qos := range []byte{1, 0} {
				m := live(j, qos)
				srv.Publish(m)
				want = append(want, string(m.Payload))
			}
		}
		c.Expect(t, want...)
	}
	ss.mu.Lock()
	remembered, pending := len(ss.recent.seen)-before, ss.replayTimer != nil
	ss.mu.Unlock()
	if !pending {
		t.Fatal("the second replay ran already: the test published too slowly")
	}
	if remembered != n {
		t.Fatalf("%d messages remembered after %d QoS 1 and as many QoS 0 ones queued live; want the QoS 1 ones", remembered, n)
	}
	testkit.Eventually(t, 10*time.Second, "the second replay", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return calls.Load() == 2 && ss.replayTimer == nil
	})
	srv.Publish(&Message{Topic: "t/end", QoS: 1, Payload: []byte("end")})
	c.Expect(t, "end") // not the first live message a second time
}

// TestHandOffDuringSecondPassKeepsItsStart: a session resumed here from
// another node's state, handed over to a third node before its second
// replay is in, is saved as pending from where its replay started: the
// third node replays from there and delivers a message published during
// the first move, which only the second pass here would have added.
// Once the second pass is in, the session's state is current again.
func TestHandOffDuringSecondPassKeepsItsStart(t *testing.T) {
	t0 := time.Now().Add(-10 * time.Second) // the state the first node saved
	sv := savedSession{Saved: t0, ClientID: "dev", Limits: Limits{MaxQueued: 100, MaxInflight: 10}, Expiry: 3600,
		DisconnectedAt: t0, Subs: []savedSub{{Wire: "t/#", Filter: "t/#", QoS: 1}}}
	st := &memStates{}
	st.take, _ = json.Marshal(&sv)
	// In history: published during the move, stored after the first
	// pass here read it (only the second pass would find it here).
	missed := &Message{Topic: "t/missed", QoS: 1, PublishedQoS: 1, Payload: []byte("missed"), Created: t0.Add(2 * time.Second)}
	history := func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		if ReplayAllows(filters, missed.Topic, missed.Created) {
			fn(missed)
		}
		return nil
	}
	srv, addr := startStates(t, Options{States: st, Owners: &elsewhere{},
		Replay: func(context.Context, *Identity, []ReplayFilter, int, func(*Message)) error { return nil }})
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	if !c.Connack.SessionPresent {
		t.Fatal("session present 0: the state was not resumed")
	}
	ss := sessionOf(srv, "dev")
	ss.mu.Lock()
	armed := ss.replayTimer != nil
	ss.mu.Unlock()
	if !armed {
		t.Fatal("no second replay pending after the resume")
	}
	state, handed := handOver(t, srv, st) // a third node resumes it
	if !handed.Pending || !handed.Saved.Equal(t0) {
		t.Fatalf("handed over as saved at %v, pending %v; want pending from %v (the second replay was not in)", handed.Saved, handed.Pending, t0)
	}

	third, addr3 := startStates(t, Options{States: &memStates{take: state}, Owners: &elsewhere{}, Replay: history})
	// The third node's second pass: once in, the state is current.
	_, ss3 := resumedWithMissed(t, third, addr3)
	ss3.mu.Lock()
	now := third.now()
	after := ss3.snapshotLocked(now)
	ss3.mu.Unlock()
	if after.Pending || !after.Saved.Equal(now) {
		t.Fatalf("after its second replay the session is saved as of %v, pending %v; want current (%v)", after.Saved, after.Pending, now)
	}
}

// historyOf is an Options.Replay over msgs as history reads them: the
// QoS 1 and 2 messages a filter matches that were received since its
// From, oldest first, at most limit (what only a filter that started
// later matches is not counted).
func historyOf(msgs ...*Message) func(context.Context, *Identity, []ReplayFilter, int, func(*Message)) error {
	sorted := slices.SortedStableFunc(slices.Values(msgs), func(a, b *Message) int { return a.Created.Compare(b.Created) })
	return func(_ context.Context, _ *Identity, filters []ReplayFilter, limit int, fn func(*Message)) error {
		n := 0
		for _, m := range sorted {
			if m.QoS == 0 || !ReplayAllows(filters, m.Topic, m.Created) {
				continue
			}
			if n == limit {
				break
			}
			fn(m)
			n++
		}
		return nil
	}
}

// newFilterDuringSecondPass resumes session dev (t/#, its state saved
// at t0) on a server whose second replay pass waits, and has its client
// subscribe to n/# meanwhile (and to t/# again, as many clients do on
// every CONNECT: that one keeps its whole replay); history holds olds
// messages on n/...
// received after t0 and before that SUBSCRIBE, then t/missed, received
// during the move. It returns the server and the messages of history.
func newFilterDuringSecondPass(t *testing.T, t0 time.Time, olds int, opts Options) (*Server, []*Message) {
	t.Helper()
	sv := savedSession{Saved: t0, ClientID: "dev", Limits: Limits{MaxQueued: opts.MaxQueued, MaxInflight: 10}, Expiry: 3600,
		DisconnectedAt: t0, Subs: []savedSub{{Wire: "t/#", Filter: "t/#", QoS: 1}}}
	st := &memStates{}
	st.take, _ = json.Marshal(&sv)
	var msgs []*Message
	for i := range olds {
		msgs = append(msgs, &Message{Topic: fmt.Sprint("n/old", i), QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "old%d", i),
			Created: t0.Add(time.Second + time.Duration(i)*time.Millisecond)})
	}
	msgs = append(msgs, &Message{Topic: "t/missed", QoS: 1, PublishedQoS: 1, Payload: []byte("missed"), Created: t0.Add(5 * time.Second)})
	var calls atomic.Int32
	opts.States, opts.Owners = st, &elsewhere{}
	opts.Replay = func(ctx context.Context, _ *Identity, _ []ReplayFilter, _ int, _ func(*Message)) error {
		if calls.Add(1) == 1 {
			return nil // nothing stored yet
		}
		<-ctx.Done() // the second pass waits in its account's line
		return ctx.Err()
	}
	srv, addr := startStates(t, opts)
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	if !c.Connack.SessionPresent {
		t.Fatal("session present 0: the state was not resumed")
	}
	c.Sub(t, "n/#", 1)
	c.Sub(t, "t/#", 1)
	ss := sessionOf(srv, "dev")
	ss.mu.Lock()
	pending := !ss.replayFrom.IsZero()
	ss.mu.Unlock()
	if !pending {
		t.Fatal("the second replay was in before the SUBSCRIBE")
	}
	return srv, msgs
}

// handOver has another node take dev's session from srv (its claim
// superseded) and returns the state srv saved into st for it, raw and
// read.
func handOver(t *testing.T, srv *Server, st *memStates) ([]byte, savedSession) {
	t.Helper()
	srv.takenElsewhere(sessionOf(srv, "dev").currentClaim())
	st.mu.Lock()
	state := st.last
	st.mu.Unlock()
	var handed savedSession
	if err := json.Unmarshal(state, &handed); err != nil {
		t.Fatalf("the hand-over saved no readable state: %v (%q)", err, state)
	}
	return state, handed
}

// resumedWithMissed connects dev to addr, which resumes its session
// (session present) and sends t/missed first, and waits until the
// server's second replay of the session is in.
func resumedWithMissed(t *testing.T, srv *Server, addr string) (*mqtttest.V5, *session) {
	t.Helper()
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	if !c.Connack.SessionPresent {
		t.Fatal("session present 0 after the move")
	}
	c.Expect(t, "missed")
	ss := sessionOf(srv, "dev")
	testkit.Eventually(t, 10*time.Second, "the second replay", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.replayTimer == nil && ss.replayFrom.IsZero()
	})
	return c, ss
}

// expectMissedNotOld connects dev to addr and expects t/missed; once the
// server's second replay of the session is in, a message published live
// comes next: none on n/ received before the client subscribed to n/#.
func expectMissedNotOld(t *testing.T, srv *Server, addr string) {
	t.Helper()
	c, _ := resumedWithMissed(t, srv, addr)
	srv.Publish(&Message{Topic: "t/end", QoS: 1, PublishedQoS: 1, Payload: []byte("end")})
	c.Expect(t, "end")
}

// TestHandOffDuringSecondPassReplaysANewFilterFromItsSubscription: a
// session resumed here subscribes to a new filter before its second
// replay is in, and is handed over to a third node then. Its state is
// pending from where its replay started, but the third node replays the
// new filter only from when it was subscribed: the client gets no message
// published before that SUBSCRIBE (only retained messages may predate a
// subscription), and, with more of those than the session's queue bound,
// still gets the message it missed on its old filter (they do not fill
// the replay's read ahead of it).
func TestHandOffDuringSecondPassReplaysANewFilterFromItsSubscription(t *testing.T) {
	for _, tc := range []struct {
		name      string
		olds      int
		maxQueued int
	}{{"one", 1, 100}, {"more than the queue bound", 20, 10}} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now().Add(-10 * time.Second)
			srv, history := newFilterDuringSecondPass(t, t0, tc.olds, Options{MaxQueued: tc.maxQueued})
			st := srv.states.(*memStates)
			state, handed := handOver(t, srv, st) // a third node resumes it
			if !handed.Pending || !handed.Saved.Equal(t0) || len(handed.Subs) != 2 {
				t.Fatalf("handed over as saved at %v, pending %v, with %d subscriptions; want pending from %v, with both", handed.Saved, handed.Pending, len(handed.Subs), t0)
			}
			third, addr3 := startStates(t, Options{States: &memStates{take: state}, Owners: &elsewhere{}, Replay: historyOf(history...), MaxQueued: tc.maxQueued})
			expectMissedNotOld(t, third, addr3)
		})
	}
}

// TestRestartDuringSecondPassReplaysANewFilterFromItsSubscription: the
// same session, saved in the state file before its second replay is in
// (the process then stops), is restored at start and replays the new
// filter only from when it was subscribed.
func TestRestartDuringSecondPassReplaysANewFilterFromItsSubscription(t *testing.T) {
	t0 := time.Now().Add(-10 * time.Second)
	path := filepath.Join(t.TempDir(), "state.json")
	srv, history := newFilterDuringSecondPass(t, t0, 20, Options{MaxQueued: 10, StatePath: path, SaveInterval: time.Hour})
	if err := srv.Save(); err != nil {
		t.Fatal(err)
	}
	f, err := readStateFile(path)
	if err != nil || len(f.Sessions) != 1 || !f.Sessions[0].Pending {
		t.Fatalf("state file: %v; want the session saved pending", err)
	}
	next := filepath.Join(t.TempDir(), "state.json") // the state as the process left it
	writeState(t, next, f.Saved, f.Sessions...)
	restarted, addr := startStates(t, Options{StatePath: next, SaveInterval: time.Hour, Replay: historyOf(history...), MaxQueued: 10})
	expectMissedNotOld(t, restarted, addr)
}

// TestSkewedMessageAfterASubscribeIsReplayed: a message stamped a moment
// before a SUBSCRIBE made while the session's replay is pending (its
// publishing node's clock is 1 ms behind this one's) reaches the session
// after the SUBACK and is queued to it live; the session was saved
// pending before, and the process stops before the next save. Restored
// from that save, the replay reads the new filter from its subscription
// less replayWindow, and gives the message to it: it was the session's
// before the restart and must not be lost by it.
func TestSkewedMessageAfterASubscribeIsReplayed(t *testing.T) {
	t0 := time.Now().Add(-10 * time.Second)
	path := filepath.Join(t.TempDir(), "state.json")
	sv := savedSession{Saved: t0, ClientID: "dev", Limits: Limits{MaxQueued: 10, MaxInflight: 10}, Expiry: 3600,
		DisconnectedAt: t0, Subs: []savedSub{{Wire: "t/#", Filter: "t/#", QoS: 1}}}
	st := &memStates{}
	st.take, _ = json.Marshal(&sv)
	var calls atomic.Int32
	opts := Options{MaxQueued: 10, StatePath: path, SaveInterval: time.Hour, States: st, Owners: &elsewhere{}}
	opts.Replay = func(ctx context.Context, _ *Identity, _ []ReplayFilter, _ int, _ func(*Message)) error {
		if calls.Add(1) == 1 {
			return nil // nothing stored yet
		}
		<-ctx.Done() // the second pass waits: the replay stays pending
		return ctx.Err()
	}
	srv, addr := startStates(t, opts)
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	if !c.Connack.SessionPresent {
		t.Fatal("session present 0: the state was not resumed")
	}
	subAt := time.Now()
	c.Sub(t, "n/#", 1)
	ss := sessionOf(srv, "dev")
	ss.mu.Lock()
	since := ss.subs["n/#"].since
	ss.mu.Unlock()
	if since.IsZero() {
		t.Fatal("n/# has no since: the replay was in before the SUBSCRIBE")
	}
	c.Disconnect(&paho.Disconnect{})
	testkit.Eventually(t, 5*time.Second, "the client gone", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.c == nil
	})
	if err := srv.Save(); err != nil { // the last save before the process stops
		t.Fatal(err)
	}
	m := &Message{Topic: "n/x", QoS: 1, PublishedQoS: 1, Payload: []byte("skewed"), Created: subAt.Add(-time.Millisecond)}
	srv.Publish(m) // after the SUBACK: queued to the offline session
	ss.mu.Lock()
	queued := ss.qlen()
	ss.mu.Unlock()
	if queued != 1 {
		t.Fatalf("queued %d, want the message queued live", queued)
	}
	f, err := readStateFile(path)
	if err != nil || len(f.Sessions) != 1 || !f.Sessions[0].Pending {
		t.Fatalf("state file: %v; want the session saved pending", err)
	}
	next := filepath.Join(t.TempDir(), "state.json") // the state as the process left it
	writeState(t, next, f.Saved, f.Sessions...)
	_, addr2 := startStates(t, Options{StatePath: next, SaveInterval: time.Hour, Replay: historyOf(m), MaxQueued: 10})
	c2 := mqtttest.DialV5(t, addr2, persistent("dev"))
	if !c2.Connack.SessionPresent {
		t.Fatal("session present 0 after the restart")
	}
	c2.Expect(t, "skewed")
}

// TestReplayedNotGrantedBeforeTheSubscription: a replayed message that
// two subscriptions match takes the QoS and subscription identifier only
// of those made by the time it was received.
func TestReplayedNotGrantedBeforeTheSubscription(t *testing.T) {
	srv, _ := startStates(t, Options{})
	s0 := time.Now()
	ss := &session{srv: srv, key: "g", subs: map[string]*subscription{
		"t/#": {wire: "t/#", filter: "t/#", qos: 1},
		"t/x": {wire: "t/x", filter: "t/x", qos: 2, id: 7, since: s0},
	}}
	for _, tc := range []struct {
		at      time.Time
		qos     byte
		ids     []uint32
		matched bool
	}{{s0.Add(-time.Microsecond), 1, nil, true}, {s0, 2, []uint32{7}, true}} {
		ss.mu.Lock()
		qos, ids, ok := ss.grantLocked(&Message{Topic: "t/x", QoS: 2, Created: tc.at})
		ss.mu.Unlock()
		if qos != tc.qos || !slices.Equal(ids, tc.ids) || ok != tc.matched {
			t.Errorf("received %v after t/x's subscription: QoS %d, ids %v, %v; want %d, %v", tc.at.Sub(s0), qos, ids, ok, tc.qos, tc.ids)
		}
	}
}

// TestReplayFiltersStartAtTheirSubscriptions: a session subscribed to
// new filters at many moments while its replay was pending replays each
// from the later of the replay's start and its subscription (a filter
// two subscriptions map to, from the earlier); shared subscriptions are
// not replayed.
func TestReplayFiltersStartAtTheirSubscriptions(t *testing.T) {
	srv, _ := startStates(t, Options{})
	since := time.Now()
	ss := &session{srv: srv, key: "r", subs: map[string]*subscription{
		"a/#":           {wire: "a/#", filter: "a/#"},
		"b/#":           {wire: "b/#", filter: "b/#", since: since.Add(-time.Second)}, // before the replay's start
		"$share/g/c/#":  {wire: "$share/g/c/#", filter: "c/#", since: since.Add(time.Second)},
		"d/#":           {wire: "d/#", filter: "d/#", since: since.Add(2 * time.Second)},
		"e/#":           {wire: "e/#", filter: "e/#", since: since.Add(2 * time.Second)},
		"f/#":           {wire: "f/#", filter: "f/#", since: since.Add(3 * time.Second)},
		"g/#":           {wire: "g/#", filter: "g/#", since: since.Add(4 * time.Second)},
		"h/#":           {wire: "h/#", filter: "h/#", since: since.Add(5 * time.Second)},
		"policy/mapped": {wire: "policy/mapped", filter: "a/#", since: since.Add(6 * time.Second)}, // a/# is there from the start
	}}
	got := ss.replayFilters(since)
	want := []ReplayFilter{
		{"a/#", since}, {"b/#", since}, {"d/#", since.Add(2 * time.Second)}, {"e/#", since.Add(2 * time.Second)},
		{"f/#", since.Add(3 * time.Second)}, {"g/#", since.Add(4 * time.Second)}, {"h/#", since.Add(5 * time.Second)},
	}
	if !slices.EqualFunc(got, want, func(a, b ReplayFilter) bool { return a.Filter == b.Filter && a.From.Equal(b.From) }) {
		t.Fatalf("filters %v, want %v", got, want)
	}
	if start := ReplayStart(got); !start.Equal(since) {
		t.Fatalf("the replay reads from %v, want its start %v", start, since)
	}
}

// TestReplayNotFilledBeforeItsSubscriptions: a session whose client
// subscribed to new filters in several SUBSCRIBEs while its replay was
// pending replays in one read (one place in its account's line of
// replays, as a replay had before those filters). What a later filter
// matches from before its own subscription, though after an earlier
// one's, does not count toward the read's limit: the message an earlier
// filter missed after its subscription is read and given to it.
func TestReplayNotFilledBeforeItsSubscriptions(t *testing.T) {
	srv, _ := startStates(t, Options{})
	since := time.Now().Add(-time.Minute)
	at := func(d time.Duration) time.Time { return since.Add(d) }
	ss := &session{srv: srv, key: "r", id: &Identity{ClientID: "r"}, limits: Limits{MaxQueued: 10}, subs: map[string]*subscription{
		"a/#": {wire: "a/#", filter: "a/#", qos: 1},
		"b/#": {wire: "b/#", filter: "b/#", qos: 1, since: at(10 * time.Second)},
		"c/#": {wire: "c/#", filter: "c/#", qos: 1, since: at(20 * time.Second)},
		"d/#": {wire: "d/#", filter: "d/#", qos: 1, since: at(30 * time.Second)},
		"e/#": {wire: "e/#", filter: "e/#", qos: 1, since: at(40 * time.Second)},
	}}
	var hist []*Message
	for i := range 10 { // on e/, before e/# was subscribed: not e/#'s
		hist = append(hist, &Message{Topic: "e/old", QoS: 1, Created: at(32*time.Second + time.Duration(i)*time.Millisecond)})
	}
	missed := &Message{Topic: "d/missed", QoS: 1, Created: at(35 * time.Second)} // d/#'s: after its subscription
	hist = append(hist, missed)
	read := historyOf(hist...)
	var calls atomic.Int32
	srv.opts.Replay = func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		calls.Add(1)
		return read(ctx, id, filters, max, fn)
	}
	filters := ss.replayFilters(since)
	got := srv.replayed(context.Background(), ss, filters, ss.replayLimit(0))
	if n := calls.Load(); n != 1 {
		t.Errorf("%d reads of history for one pass, want 1", n)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	granted, found := 0, false
	for _, m := range got {
		if _, _, ok := ss.grantLocked(m); ok {
			granted++
			found = found || m == missed
		}
	}
	if !found {
		t.Fatalf("filters %v: d/missed not replayed (%d granted of %d read, queue bound 10)", filters, granted, len(got))
	}
	if granted != len(got) {
		t.Errorf("%d read, %d granted: the read brought what no filter's start allows", len(got), granted)
	}
}

// fakeHistory is an Options.Replay over the messages added to it: the
// first pass finds none (they were not stored yet), later ones read, as
// history does, the oldest that a filter matches since its From (by the
// time they were received), at most the limit.
type fakeHistory struct {
	mu    sync.Mutex
	msgs  []*Message
	calls atomic.Int32
}

func (h *fakeHistory) add(m *Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, m)
}

func (h *fakeHistory) replay(ctx context.Context, id *Identity, filters []ReplayFilter, limit int, fn func(*Message)) error {
	if h.calls.Add(1) == 1 {
		return nil
	}
	h.mu.Lock()
	ms := slices.Clone(h.msgs)
	h.mu.Unlock()
	return historyOf(ms...)(ctx, id, filters, limit, fn)
}

// publishLive publishes the messages to srv, adds them to h, and expects c
// to get them, in batches within the session's inflight window.
func publishLive(t *testing.T, srv *Server, h *fakeHistory, c *mqtttest.V5, msgs []*Message) {
	t.Helper()
	for i := 0; i < len(msgs); i += 20 {
		var want []string
		for _, m := range msgs[i:min(i+20, len(msgs))] {
			h.add(m)
			srv.Publish(m)
			want = append(want, string(m.Payload))
		}
		c.Expect(t, want...)
	}
}

// secondPassThenEnd waits for the session's second replay, publishes
// "end" and expects it next: no message comes twice.
func secondPassThenEnd(t *testing.T, srv *Server, h *fakeHistory, c *mqtttest.V5) {
	t.Helper()
	ss := sessionOf(srv, "dev")
	testkit.Eventually(t, 10*time.Second, "the second replay", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return h.calls.Load() == 2 && ss.replayTimer == nil
	})
	srv.Publish(&Message{Topic: "t/end", QoS: 1, Payload: []byte("end")})
	c.Expect(t, "end")
}

// TestRememberedAreTheOldest: with more queued than it remembers, a
// resumed session remembers the oldest by the time they were received,
// not the first to arrive: a message received on another node before the
// last remembered one, and arriving after it, is not sent twice by the
// second replay; the newest, no longer remembered, is (at least once).
func TestRememberedAreTheOldest(t *testing.T) {
	h := &fakeHistory{}
	srv, addr := startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: h.replay, MaxQueued: 100})
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	ss := sessionOf(srv, "dev")
	ss.mu.Lock()
	room := ss.recent.room
	ss.mu.Unlock()
	base := time.Now()
	var local []*Message
	for j := range room { // as many as the session remembers
		local = append(local, &Message{Topic: fmt.Sprint("t/local/", j), QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "local%d", j),
			Created: base.Add(time.Duration(10*(j+1)) * time.Microsecond)})
	}
	publishLive(t, srv, h, c, local)
	remote := &Message{Topic: "t/remote", QoS: 1, PublishedQoS: 1, Payload: []byte("remote"),
		Created: base.Add(time.Duration(10*room-5) * time.Microsecond)}
	publishLive(t, srv, h, c, []*Message{remote}) // received before the last local one
	testkit.Eventually(t, 10*time.Second, "the second replay", func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return h.calls.Load() == 2 && ss.replayTimer == nil
	})
	srv.Publish(&Message{Topic: "t/end", QoS: 1, Payload: []byte("end")})
	c.Expect(t, fmt.Sprint("local", room-1), "end")
}

// TestSecondPassReachesPastWhatWasDelivered: a subscriber that kept up,
// sent as many messages as its queue bound while its second replay was
// due, still gets from that replay a message received elsewhere after
// them that never reached it live: the replay reads past what was queued.
func TestSecondPassReachesPastWhatWasDelivered(t *testing.T) {
	h := &fakeHistory{}
	srv, addr := startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: h.replay, MaxQueued: 100})
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	base := time.Now()
	var local []*Message
	for j := range 100 {
		local = append(local, &Message{Topic: fmt.Sprint("t/local/", j), QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, "local%d", j),
			Created: base.Add(time.Duration(10*(j+1)) * time.Microsecond)})
	}
	publishLive(t, srv, h, c, local)
	// In history only: published on a node that had not heard of the
	// session's subscriptions yet.
	h.add(&Message{Topic: "t/remote", QoS: 1, PublishedQoS: 1, Payload: []byte("remote"), Created: base.Add(2 * time.Millisecond)})
	c.Expect(t, "remote")
}

// TestSecondPassReadsWhatIsRemembered: the second replay reads as many
// messages as the session remembered room for, whatever the limits of the
// connection that attached meanwhile (here the server's default queue
// bound, 1,000, against the saved state's 100).
func TestSecondPassReadsWhatIsRemembered(t *testing.T) {
	h := &fakeHistory{}
	srv, addr := startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: h.replay})
	c := mqtttest.DialV5(t, addr, persistent("dev"))
	base := time.Now()
	var msgs []*Message
	for j := range 160 {
		msgs = append(msgs, &Message{Topic: fmt.Sprint("t/", j), QoS: 1, PublishedQoS: 1, Payload: fmt.Append(nil, j),
			Created: base.Add(time.Duration(j+1) * time.Microsecond)})
	}
	publishLive(t, srv, h, c, msgs)
	secondPassThenEnd(t, srv, h, c)
}

// TestCloseDuringSecondPassKeepsItPending: a server closed while a
// resumed session's second replay waits (in its account's line) saves
// the session as pending from where its replay started, in its state file
// and for the other nodes: the next start or node replays what the
// second pass would have added.
func TestCloseDuringSecondPassKeepsItPending(t *testing.T) {
	entered := make(chan struct{})
	var calls atomic.Int32
	replay := func(ctx context.Context, _ *Identity, _ []ReplayFilter, _ int, _ func(*Message)) error {
		if calls.Add(1) == 1 {
			return nil
		}
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}
	st := resumable()
	var sv0 savedSession
	if err := json.Unmarshal(st.take, &sv0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.json")
	srv, addr := startStates(t, Options{States: st, Owners: &elsewhere{}, Replay: replay, StatePath: path, SaveInterval: time.Hour})
	mqtttest.DialV5(t, addr, persistent("dev"))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no second replay")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Close(ctx)
	f, err := readStateFile(path)
	if err != nil || len(f.Sessions) != 1 {
		t.Fatalf("state file: %v", err)
	}
	st.mu.Lock()
	var inStore savedSession
	err = json.Unmarshal(st.last, &inStore)
	st.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]savedSession{"state file": f.Sessions[0], "SessionStates": inStore} {
		if !got.Pending || !got.Saved.Equal(sv0.Saved) {
			t.Errorf("%s: saved at %v, pending %v; want pending from %v (the second replay was cut short)", what, got.Saved, got.Pending, sv0.Saved)
		}
	}
}

// givenUpFirst returns an Options.Replay whose first call holds its place
// until its context ends (a later CONNECT's resume gives it up), whose
// second runs second first, and whose calls but the first bring bring;
// calls counts them.
func givenUpFirst(second func(), bring ...*Message) (calls *atomic.Int32, replay func(context.Context, *Identity, []ReplayFilter, int, func(*Message)) error) {
	calls = new(atomic.Int32)
	return calls, func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		switch calls.Add(1) {
		case 1:
			<-ctx.Done()
			return ctx.Err()
		case 2:
			second()
		}
		for _, m := range bring {
			fn(m)
		}
		return nil
	}
}

// TestRetryInstalledAfterTheGivenUpResume: the first CONNECT's replay is
// given up and its session installed while the retry's replay still runs
// (here longer than replayAgain); that session runs no second pass, and
// the retry's session replaces it and keeps its subscriptions (both put
// them in the index under the session's key).
func TestRetryInstalledAfterTheGivenUpResume(t *testing.T) {
	var srv *Server
	var calls *atomic.Int32
	calls, replay := givenUpFirst(func() { // the retry's: until the first one's session is in, and a while
		testkit.Within(5*time.Second, func() bool { return sessionOf(srv, "dev") != nil })
		if testkit.Within(replayAgain+time.Second, func() bool { return calls.Load() > 2 }) {
			t.Error("the session whose replay was given up ran a second pass")
		}
	})
	var addr string
	srv, addr = startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: replay})
	go mqtttest.TryV5(t, addr, persistent("dev"))
	testkit.Eventually(t, 5*time.Second, "the first replay", func() bool { return calls.Load() == 1 })
	retry := mqtttest.DialV5(t, addr, persistent("dev"))
	if !retry.Connack.SessionPresent {
		t.Fatal("the retry did not resume the session")
	}
	servesTheRetry(t, srv, addr, retry)
}

// laterHere is SessionOwners as a cluster's are to a client that connects
// to this node again and again: its first claim replaced node a's, each
// later one the claim before it, here.
type laterHere struct {
	mu    sync.Mutex
	epoch uint64
	last  string
}

func (o *laterHere) Claim(key, node string, fresh bool) (Claim, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch++
	from := "a"
	if o.last != "" {
		from = o.last
	}
	o.last = node
	return Claim{Key: key, Node: node, Epoch: o.epoch, From: from}, nil
}
func (o *laterHere) Release(Claim) (bool, error)             { return true, nil }
func (o *laterHere) Owner(string) (Claim, bool, error)       { return Claim{}, false, nil }
func (o *laterHere) Watch(string, func(Claim)) (stop func()) { return func() {} }

// TestThirdAttemptResumesToo: a client gives up on its first CONNECT (its
// replay is given up and its session installed, incomplete) and on its
// second (whose replay is slow), and connects a third time: that CONNECT
// resumes the session too, and gets what history had and what was
// published meanwhile, not the first attempt's incomplete session.
func TestThirdAttemptResumesToo(t *testing.T) {
	missed := &Message{Topic: "t/missed", QoS: 1, PublishedQoS: 1, Payload: []byte("missed"), Created: time.Now()}
	releaseSecond := make(chan struct{})
	calls, replay := givenUpFirst(func() { <-releaseSecond }, missed) // the second attempt's history is slow
	srv, addr := startStates(t, Options{States: resumable(), Owners: &laterHere{}, Replay: replay})
	go mqtttest.TryV5(t, addr, persistent("dev"))
	testkit.Eventually(t, 15*time.Second, "the first replay", func() bool { return calls.Load() == 1 })
	second := connectLater(t, addr, persistent("dev"))
	testkit.Eventually(t, 15*time.Second, "the first session installed, the second replaying", func() bool {
		return calls.Load() == 2 && sessionOf(srv, "dev") != nil
	})
	third := mqtttest.DialV5(t, addr, persistent("dev"))
	if !third.Connack.SessionPresent {
		t.Fatal("the third attempt did not resume the session")
	}
	third.Expect(t, "missed")
	pub := mqtttest.DialV5(t, addr, mqtttest.Clean("pub"))
	pub.Pub(t, "t/1", 1, "while the second replays")
	close(releaseSecond)
	select {
	case a := <-second:
		if a.err == nil {
			t.Fatal("the second attempt, finishing after the third, was served")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second attempt's CONNECT got no answer")
	}
	pub.Pub(t, "t/1", 1, "after")
	third.Expect(t, "while the second replays", "after")
}

// TestReplacedSessionsWillWaits: the connection of a session a later
// resume replaces (its client's first attempt, served once that attempt's
// replay was given up) closes as on a takeover: its will, with a delay, is
// not published, since its client is connected again.
func TestReplacedSessionsWillWaits(t *testing.T) {
	var srv *Server
	calls, replay := givenUpFirst(func() { // the retry's: until the first attempt is served
		testkit.Within(5*time.Second, func() bool {
			ss := sessionOf(srv, "dev")
			if ss == nil {
				return false
			}
			ss.mu.Lock()
			defer ss.mu.Unlock()
			return ss.c != nil
		})
	})
	var addr string
	srv, addr = startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: replay})
	watch := mqtttest.DialV5(t, addr, mqtttest.Clean("watch"))
	watch.Sub(t, "will/#", 1)
	const delay = 1
	go mqtttest.TryV5(t, addr, withWill(persistent("dev"), delay))
	testkit.Eventually(t, 5*time.Second, "the first replay", func() bool { return calls.Load() == 1 })
	retry := mqtttest.DialV5(t, addr, persistent("dev"))
	if !retry.Connack.SessionPresent {
		t.Fatal("the retry did not resume the session")
	}
	select {
	case m := <-watch.Msgs:
		t.Fatalf("the will %q was published while its client is connected again", m.Payload)
	case <-time.After(delay*time.Second + 2*time.Second):
	}
}

// failingTake is memStates whose failOn-th Take fails (the store out of
// reach for a moment).
type failingTake struct {
	*memStates
	calls  atomic.Int32
	failOn int32
}

func (f *failingTake) Take(c Claim) ([]byte, time.Time, bool, error) {
	if f.calls.Add(1) == f.failOn {
		return nil, time.Time{}, false, errors.New("store out of reach")
	}
	return f.memStates.Take(c)
}

// TestRefusedThirdAttemptKeepsTheSecondsIndex: a third attempt ends the
// first attempt's incomplete session and is refused (its Take fails); the
// second attempt's session, installed after, still gets what is published
// (the first session's end took the entries both had out of the index).
func TestRefusedThirdAttemptKeepsTheSecondsIndex(t *testing.T) {
	releaseSecond := make(chan struct{})
	calls, replay := givenUpFirst(func() { <-releaseSecond })
	srv, addr := startStates(t, Options{States: &failingTake{memStates: resumable(), failOn: 3}, Owners: &laterHere{}, Replay: replay})
	go mqtttest.TryV5(t, addr, persistent("dev"))
	testkit.Eventually(t, 5*time.Second, "the first replay", func() bool { return calls.Load() == 1 })
	second := connectLater(t, addr, persistent("dev"))
	testkit.Eventually(t, 5*time.Second, "the first session installed, the second replaying", func() bool {
		return calls.Load() == 2 && sessionOf(srv, "dev") != nil
	})
	if _, _, err := mqtttest.TryV5(t, addr, persistent("dev")); err == nil {
		t.Fatal("the third attempt was served though its Take failed")
	}
	close(releaseSecond)
	resumedAndServed(t, addr, "the second attempt", <-second)
}

// TestGivenUpSessionEndingKeepsTheRetrysIndex: the first attempt's
// session (its replay given up, expiry 0) is served and ends with its
// client before the retry's is installed; the retry's session still gets
// what is published.
func TestGivenUpSessionEndingKeepsTheRetrysIndex(t *testing.T) {
	firstGone := make(chan struct{})
	calls, replay := givenUpFirst(func() { <-firstGone })
	srv, addr := startStates(t, Options{States: resumable(), Owners: &laterHere{}, Replay: replay})
	zero := uint32(0)
	first := persistent("dev")
	first.Properties.SessionExpiryInterval = &zero
	served := connectLater(t, addr, first)
	testkit.Eventually(t, 5*time.Second, "the first replay", func() bool { return calls.Load() == 1 })
	retry := connectLater(t, addr, persistent("dev"))
	c1 := (<-served).c
	if c1 == nil {
		t.Fatal("the first attempt was not served")
	}
	c1.Disconnect(&paho.Disconnect{})
	testkit.Eventually(t, 5*time.Second, "the first session ended", func() bool { return sessionOf(srv, "dev") == nil })
	close(firstGone)
	resumedAndServed(t, addr, "the retry", <-retry)
}

// TestSupersededBesideAnEndedSessionKeepsTheCurrentsIndex: install
// reads the session of the key (cur) and, without s.mu, supersedes the
// resumed session beside it; cur may end meanwhile and another session of
// the key attach and subscribe. That interleaving is set up here without
// a hook: supersede gets the resumed session, which indexed t/# under the
// key (taking the entry of the current session's t/#), and an ended cur.
// The resumed session's end takes the key's t/# out of the index, and the
// session current then indexes it again: it still gets what is published.
func TestSupersededBesideAnEndedSessionKeepsTheCurrentsIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(srv *Server, resumed, stale *session)
	}{
		{"supersede", func(srv *Server, resumed, stale *session) { srv.supersede(resumed, stale) }},
		{"retireBeside", func(srv *Server, resumed, stale *session) { srv.retireBeside(resumed, stale, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, addr := startStates(t, Options{})
			c := mqtttest.DialV5(t, addr, persistent("dev"))
			c.Sub(t, "t/#", 1)
			sv := savedSession{ClientID: "dev", Limits: Limits{MaxQueued: 10, MaxInflight: 10}, Expiry: 3600,
				Subs: []savedSub{{Wire: "t/#", Filter: "t/#", QoS: 1}}}
			stale := srv.savedSession(&sv) // install's cur, ended since
			stale.mu.Lock()
			stale.retireLocked(DropSessionExpired, true, nil)
			stale.mu.Unlock()
			resumed := srv.savedSession(&sv)
			resumed.mu.Lock()
			resumed.restoreLocked(&sv) // its t/# is the key's entry now
			resumed.mu.Unlock()
			if cur := sessionOf(srv, "dev"); cur == nil || cur.key != resumed.key {
				t.Fatalf("no current session of the resumed one's key %q", resumed.key)
			}
			tc.end(srv, resumed, stale)
			srv.Publish(&Message{Topic: "t/1", QoS: 1, PublishedQoS: 1, Payload: []byte("still here")})
			c.Expect(t, "still here")
		})
	}
}

// TestResumeUnderWayLeavesALaterSession: while an older claim's resume
// reads history slowly, the client starts clean, subscribes and leaves; a
// message is queued for it; when it comes back (no clean start) it gets
// that session, and the message, not a resume that ends it.
func TestResumeUnderWayLeavesALaterSession(t *testing.T) {
	var calls atomic.Int32
	replay := func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		if calls.Add(1) == 1 {
			<-ctx.Done() // slow history (given up when the server closes)
		}
		return nil
	}
	st := resumable()
	srv, addr := startStates(t, Options{States: st, Owners: &laterHere{}, Replay: replay})
	go mqtttest.TryV5(t, addr, persistent("dev"))
	testkit.Eventually(t, 5*time.Second, "the first replay", func() bool { return calls.Load() == 1 })
	clean := persistent("dev")
	clean.CleanStart = true
	c2 := mqtttest.DialV5(t, addr, clean)
	c2.Sub(t, "u/#", 1)
	c2.Disconnect(&paho.Disconnect{})
	testkit.Eventually(t, 5*time.Second, "the clean session offline", func() bool {
		ss := sessionOf(srv, "dev")
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.c == nil
	})
	st.mu.Lock()
	st.take = nil // the clean start's claim discarded the state
	st.mu.Unlock()
	pub := mqtttest.DialV5(t, addr, mqtttest.Clean("pub"))
	pub.Pub(t, "u/1", 1, "queued")
	c3 := mqtttest.DialV5(t, addr, persistent("dev"))
	if !c3.Connack.SessionPresent {
		t.Fatal("the clean start's session was ended by the CONNECT that came back to it")
	}
	c3.Expect(t, "queued")
}

// TestStaleCopysWillGoesWhenNothingResumes: a CONNECT from another node's
// claim ends the copy of the session kept here, and nothing is stored to
// resume: the session ended, and its connection's will (with a delay) is
// published at once.
func TestStaleCopysWillGoesWhenNothingResumes(t *testing.T) {
	st := resumable()
	_, addr := startStates(t, Options{States: st, Owners: &elsewhere{}})
	watch := mqtttest.DialV5(t, addr, mqtttest.Clean("watch"))
	watch.Sub(t, "will/#", 1)
	mqtttest.DialV5(t, addr, withWill(persistent("dev"), 30))
	st.mu.Lock()
	st.take = nil
	st.mu.Unlock()
	if c := mqtttest.DialV5(t, addr, persistent("dev")); c.Connack.SessionPresent {
		t.Fatal("a session was present")
	}
	watch.Expect(t, "gone")
}

// blockingTake is memStates whose blockOn-th Take waits for release.
type blockingTake struct {
	*memStates
	calls   atomic.Int32
	blockOn int32
	entered chan struct{}
	release chan struct{}
}

func (b *blockingTake) Take(c Claim) ([]byte, time.Time, bool, error) {
	if b.calls.Add(1) == b.blockOn {
		close(b.entered)
		<-b.release
	}
	return b.memStates.Take(c)
}

// TestWillOfResumedOverGoesAtACleanStart: a CONNECT resuming the session
// closes the connection that had it (will delay 30 s) and waits on the
// store; the client starts clean meanwhile: the session ended, and the
// will is published at once.
func TestWillOfResumedOverGoesAtACleanStart(t *testing.T) {
	st := &blockingTake{memStates: resumable(), blockOn: 2, entered: make(chan struct{}), release: make(chan struct{})}
	_, addr := startStates(t, Options{States: st, Owners: &elsewhere{}})
	watch := mqtttest.DialV5(t, addr, mqtttest.Clean("watch"))
	watch.Sub(t, "will/#", 1)
	mqtttest.DialV5(t, addr, withWill(persistent("dev"), 30))
	superseded := connectLater(t, addr, persistent("dev")) // its Take waits
	<-st.entered
	clean := persistent("dev")
	clean.CleanStart = true
	mqtttest.DialV5(t, addr, clean)
	watch.Expect(t, "gone")
	close(st.release)
	if a := <-superseded; a.err == nil {
		t.Fatal("the resume the clean start superseded was served")
	}
}

// TestWillOfARefusedResumeStopsElsewhere: a CONNECT resuming the session
// closes the connection that had it (will delay 1 s) and is refused (its
// Take fails); the client resumes the session on another node within the
// delay: the will is not published.
func TestWillOfARefusedResumeStopsElsewhere(t *testing.T) {
	srv, addr := startStates(t, Options{States: &failingTake{memStates: resumable(), failOn: 2}, Owners: &elsewhere{}})
	watch := mqtttest.DialV5(t, addr, mqtttest.Clean("watch"))
	watch.Sub(t, "will/#", 1)
	mqtttest.DialV5(t, addr, withWill(persistent("dev"), 1))
	if _, _, err := mqtttest.TryV5(t, addr, persistent("dev")); err == nil {
		t.Fatal("served though its Take failed")
	}
	srv.takenElsewhere(Claim{Key: "dev", Node: srv.opts.Node, Epoch: 2}) // resumed on another node
	select {
	case m := <-watch.Msgs:
		t.Fatalf("the will %q was published while its client is connected on another node", m.Payload)
	case <-time.After(3 * time.Second):
	}
}

// TestWillSettledByANoticeThatCameFirst: the notice that another node
// resumed the session lands after a resume here took the session out and
// before it closed the connection that had it (its will, with a delay,
// not yet in the server's wills); the resume here is refused; the will is
// not published, the client being connected on the other node.
func TestWillSettledByANoticeThatCameFirst(t *testing.T) {
	srv, addr := startStates(t, Options{States: resumable(), Owners: &elsewhere{}})
	watch := mqtttest.DialV5(t, addr, mqtttest.Clean("watch"))
	watch.Sub(t, "will/#", 1)
	mqtttest.DialV5(t, addr, withWill(persistent("dev"), 1))
	testkit.Eventually(t, 5*time.Second, "the client served", func() bool {
		ss := sessionOf(srv, "dev")
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.c != nil && ss.c.served.Load()
	})
	// resume's first steps for claim 2, the notice between them.
	srv.mu.Lock()
	prev := srv.sessions["dev"]
	delete(srv.sessions, "dev")
	srv.mu.Unlock()
	claim := Claim{Key: "dev", Node: srv.opts.Node, Epoch: 2}
	srv.takenElsewhere(claim) // resumed on another node
	srv.endStale(prev, claim.Epoch)
	if !srv.lostWhileResuming(claim, true) {
		t.Fatal("the notice was not seen")
	}
	select {
	case m := <-watch.Msgs:
		t.Fatalf("the will %q was published while its client is connected on another node", m.Payload)
	case <-time.After(3 * time.Second):
	}
}

// TestGivenUpSessionIsSavedPending: the first attempt's session, whose
// replay a retry gave up, is installed while the retry's replay runs;
// saved meanwhile (the state file a restart replays from), it is saved
// as pending from where its replay started, not as current: a crash
// before the retry's session is in must still replay what that first
// replay had not reached.
func TestGivenUpSessionIsSavedPending(t *testing.T) {
	releaseSecond := make(chan struct{})
	calls, replay := givenUpFirst(func() { <-releaseSecond })
	st := resumable()
	var sv0 savedSession
	if err := json.Unmarshal(st.take, &sv0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.json")
	srv, addr := startStates(t, Options{States: st, Owners: &laterHere{}, Replay: replay, StatePath: path, SaveInterval: 20 * time.Millisecond})
	go mqtttest.TryV5(t, addr, persistent("dev"))
	testkit.Eventually(t, 5*time.Second, "the first replay", func() bool { return calls.Load() == 1 })
	second := connectLater(t, addr, persistent("dev"))
	testkit.Eventually(t, 5*time.Second, "the first session installed, the second replaying", func() bool {
		return calls.Load() == 2 && sessionOf(srv, "dev") != nil
	})
	var saved savedSession
	testkit.Eventually(t, 5*time.Second, "the first session in the state file", func() bool {
		f, err := readStateFile(path)
		if err != nil || len(f.Sessions) != 1 {
			return false
		}
		saved = f.Sessions[0]
		return true
	})
	if !saved.Pending || !saved.Saved.Equal(sv0.Saved) {
		t.Errorf("the given-up session was saved at %v, pending %v; want pending from %v (its replay was cut short)", saved.Saved, saved.Pending, sv0.Saved)
	}
	close(releaseSecond)
	resumedAndServed(t, addr, "the second attempt", <-second)
}

// holdAcks defers every acknowledgement, as a history writer does until
// its commit, and hands the messages to the test.
type holdAcks struct {
	OpenPolicy
	held chan *Message
}

func (p holdAcks) Accepted(_ *Identity, m *Message) bool {
	p.held <- m
	return true
}

// TestHandOffWaitsForQoS2Answers: a QoS 2 message the policy is still
// storing when another node takes the session over is answered before the
// state is handed over (within handOverWait2), so the state carries its
// packet id as answered: the client's copy on the new node gets PUBREC
// and is not stored a second time.
func TestHandOffWaitsForQoS2Answers(t *testing.T) {
	st := &memStates{}
	pol := holdAcks{held: make(chan *Message, 1)}
	srv, addr := startStates(t, Options{States: st, Policy: pol})
	cp := &packet.Connect{ClientID: "dev", KeepAlive: 30}
	cp.Properties.SetSessionExpiry(3600)
	rc, _ := mqtttest.ConnectRaw(t, addr, cp)
	rc.Must(t, &packet.Publish{Topic: "t/q2", QoS: 2, PacketID: 7, Payload: []byte("once")})
	m := <-pol.held

	ss := sessionOf(srv, "dev")
	done := make(chan struct{})
	go func() { srv.takenElsewhere(ss.currentClaim()); close(done) }()
	testkit.Eventually(t, 5*time.Second, "the hand-over to wait for the policy's answer", func() bool {
		if ss.saveMu.TryLock() {
			ss.saveMu.Unlock()
			return false // not begun
		}
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return !ss.ended
	})
	m.Ack()
	<-done
	st.mu.Lock()
	state := st.last
	st.mu.Unlock()
	var handed savedSession
	if err := json.Unmarshal(state, &handed); err != nil {
		t.Fatalf("the hand-over saved no readable state: %v", err)
	}
	if !slices.Contains(handed.Inbound2, 7) {
		t.Fatalf("the state handed over holds the inbound QoS 2 ids %v, want 7 (answered during the hand-over)", handed.Inbound2)
	}
}
