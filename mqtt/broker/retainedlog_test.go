package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// rlOpen creates a server on the state file path without listeners (the
// retained messages are set with Server.Publish) and closes it when the
// test ends.
func rlOpen(tb testing.TB, path string, opts broker.Options) *broker.Server {
	tb.Helper()
	opts.StatePath, opts.SaveInterval = path, -1
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := broker.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// rlClose closes s, which saves its state.
func rlClose(tb testing.TB, s *broker.Server) {
	tb.Helper()
	if err := s.Close(context.Background()); err != nil {
		tb.Fatalf("close: %v", err)
	}
}

func rlSave(tb testing.TB, s *broker.Server) {
	tb.Helper()
	if err := s.Save(); err != nil {
		tb.Fatal(err)
	}
}

// rlSet retains payload on topic (an empty payload clears it).
func rlSet(s *broker.Server, topic string, payload []byte) {
	s.Publish(&broker.Message{Topic: topic, Payload: payload, QoS: 1, PublishedQoS: 1, Retain: true})
}

// rlContents returns the retained payloads by topic.
func rlContents(tb testing.TB, s *broker.Server) map[string]string {
	tb.Helper()
	ms, err := s.Retained("#", 0)
	if err != nil {
		tb.Fatal(err)
	}
	out := make(map[string]string, len(ms))
	for _, m := range ms {
		out[m.Topic] = string(m.Payload)
	}
	return out
}

func rlSameContents(tb testing.TB, what string, got, want map[string]string) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: %d retained messages, want %d", what, len(got), len(want))
	}
	for topic, p := range want {
		if g, ok := got[topic]; !ok || g != p {
			tb.Fatalf("%s: %s retains %q (present %v), want %q", what, topic, g, ok, p)
		}
	}
}

func rlSize(tb testing.TB, path string) int64 {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}

// TestRetainedLogProperties: a retained message keeps every property, its
// QoS, creation time and expiry across a restart; the state file holds
// the sessions only.
func TestRetainedLogProperties(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "state.json")
	opts := broker.Options{StatePath: path, Now: clk.Now, SaveInterval: -1}
	b1 := startBroker(t, opts)
	full := &broker.Message{Topic: "rt/full", Payload: []byte{0, 1, 2, 0xff}, QoS: 1, PublishedQoS: 2, Retain: true,
		Created: clk.Now(), Expiry: clk.Now().Add(100 * time.Second)}
	p := &full.Properties
	p.SetString(packet.PropContentType, "application/octet-stream")
	p.SetString(packet.PropResponseTopic, "rt/reply")
	p.SetBytes(packet.PropCorrelationData, []byte("corr"))
	p.SetByte(packet.PropPayloadFormat, 0)
	p.User = []packet.UserProperty{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}, {Key: "empty", Value: ""}}
	b1.Publish(full)
	b1.Publish(&broker.Message{Topic: "rt/bare", Payload: []byte("B"), Retain: true})
	before, err := b1.Retained("rt/#", 0)
	if err != nil {
		t.Fatal(err)
	}
	hcCloseBroker(t, b1)
	if data, err := os.ReadFile(path); err != nil || strings.Contains(string(data), "rt/full") || strings.Contains(string(data), `"retained"`) {
		t.Fatalf("state file holds retained messages (%v): %s", err, data)
	}

	clk.Add(40 * time.Second)
	b2 := startBroker(t, opts)
	after, err := b2.Retained("rt/#", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 2 {
		t.Fatalf("after restart: %+v", after)
	}
	for i := range after {
		a, b := before[i], after[i]
		if a.Topic != b.Topic || !bytes.Equal(a.Payload, b.Payload) || a.QoS != b.QoS || !a.Created.Equal(b.Created) || !a.Expiry.Equal(b.Expiry) {
			t.Fatalf("after restart %+v, before %+v", b, a)
		}
	}

	viewer, _ := hcConnect(t, b2.Addr, "rt-viewer", true, 0, 0)
	hcSubscribe(t, viewer, "rt/full", 2, 0)
	got := hcExpectPub(t, viewer, string(full.Payload), 1, false)
	gp := &got.Properties
	if !got.Retain || gp.ContentType != "application/octet-stream" || gp.ResponseTopic != "rt/reply" ||
		string(gp.CorrelationData) != "corr" || !gp.Has(packet.PropPayloadFormat) || gp.PayloadFormat != 0 ||
		!slices.Equal(gp.User, p.User) || gp.MessageExpiry != 60 {
		t.Fatalf("rt/full after restart: retain %v %+v", got.Retain, gp)
	}
	hcAck(t, viewer, packet.PUBACK, got.PacketID)
	hcSubscribe(t, viewer, "rt/bare", 2, 0)
	got = hcExpectPub(t, viewer, "B", 0, false)
	if gp := &got.Properties; gp.Has(packet.PropPayloadFormat) || gp.Has(packet.PropContentType) || gp.Has(packet.PropMessageExpiry) ||
		gp.Has(packet.PropCorrelationData) || len(gp.User) > 0 {
		t.Fatalf("rt/bare gained properties: %+v", gp)
	}
}

// TestRetainedLogIncremental: after many saves of sets, replaces, clears
// and expiries, a restart finds exactly the retained messages there were,
// both after a graceful Close and from the last save alone (as after a
// crash).
func TestRetainedLogIncremental(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	s := rlOpen(t, path, broker.Options{Now: clk.Now})
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]string{}
	for round := range 40 {
		for range 50 {
			topic := fmt.Sprintf("inc/%d/t%d", rng.IntN(5), rng.IntN(200))
			switch rng.IntN(4) {
			case 0:
				rlSet(s, topic, nil)
				delete(want, topic)
			default:
				p := fmt.Sprintf("%d-%s", round, strings.Repeat("x", rng.IntN(300)))
				rlSet(s, topic, []byte(p))
				want[topic] = p
			}
		}
		if round%10 == 9 {
			// One that expires and is swept before the next save.
			s.Publish(&broker.Message{Topic: "inc/short", Payload: []byte("s"), Retain: true, Expiry: clk.Now().Add(time.Second)})
			clk.Add(2 * time.Second)
			s.Sweep()
		}
		rlSave(t, s)
	}
	rlSameContents(t, "before restart", rlContents(t, s), want)

	// The files as the last save left them, without Close.
	crash := copyStateFiles(t, path, filepath.Join(dir, "crash.json"))
	rlSameContents(t, "from the last save", rlContents(t, rlOpen(t, crash, broker.Options{Now: clk.Now})), want)

	rlSet(s, "inc/after-save", []byte("A"))
	want["inc/after-save"] = "A"
	rlClose(t, s)
	s = rlOpen(t, path, broker.Options{Now: clk.Now})
	rlSameContents(t, "after Close", rlContents(t, s), want)
	if st := s.Stats(); st.Retained != int64(len(want)) {
		t.Fatalf("Stats().Retained %d, want %d", st.Retained, len(want))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

// TestRetainedLogSaveCost: a save writes what changed, not what exists;
// when the bytes of replaced and cleared messages exceed those still
// retained (and 1 MiB), the save compacts the log to about the live size.
func TestRetainedLogSaveCost(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	log := path + ".retained"
	s := rlOpen(t, path, broker.Options{})
	payload := bytes.Repeat([]byte("p"), 200)
	const n = 10_000
	for i := range n {
		rlSet(s, fmt.Sprintf("cost/%d/dev%d", i%10, i), payload)
	}
	rlSave(t, s)
	full := rlSize(t, log)
	if full < n*200 {
		t.Fatalf("log of %d bytes for %d messages of 200 bytes", full, n)
	}

	rlSet(s, "cost/3/dev3", []byte("changed"))
	rlSave(t, s)
	if grew := rlSize(t, log) - full; grew <= 0 || grew > 4<<10 {
		t.Fatalf("changing 1 of %d retained messages appended %d bytes", n, grew)
	}
	if got := rlSize(t, path); got > 200 {
		t.Fatalf("state file of %d bytes with no session", got)
	}
	grown := rlSize(t, log)
	rlSave(t, s)
	if got := rlSize(t, log); got != grown {
		t.Fatalf("a save with nothing changed: the log went from %d to %d bytes", grown, got)
	}

	// Replacing 40%: fewer dead bytes than live ones, no compaction.
	for i := range 4_000 {
		rlSet(s, fmt.Sprintf("cost/%d/dev%d", i%10, i), payload)
	}
	rlSave(t, s)
	replaced := rlSize(t, log)
	if replaced < grown+4_000*200 {
		t.Fatalf("replacing 4,000 messages: the log went from %d to %d bytes", grown, replaced)
	}

	// Clearing 7,000 of the 10,000: dead bytes now exceed the live ones.
	for i := range 7_000 {
		rlSet(s, fmt.Sprintf("cost/%d/dev%d", i%10, i), nil)
	}
	rlSave(t, s)
	compacted := rlSize(t, log)
	if lo, hi := full*3/10-full/20, full*3/10+full/20; compacted < lo || compacted > hi {
		t.Fatalf("after clearing 70%%: log of %d bytes, want about %d (3,000 of %d live)", compacted, full*3/10, n)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	want := rlContents(t, s)
	if len(want) != 3_000 {
		t.Fatalf("%d retained, want 3,000", len(want))
	}
	rlClose(t, s)
	s = rlOpen(t, path, broker.Options{})
	rlSameContents(t, "after compaction and restart", rlContents(t, s), want)
	// The per-first-level counts a policy bounds tenants with are back.
	if count, size, current := s.RetainedUnder("cost/3/dev9993"); count != 3_000 || size != 3_000*200 || current != 200 {
		t.Fatalf("RetainedUnder after restart: %d messages, %d bytes, current %d", count, size, current)
	}
}

// TestRetainedLogTornTail: a crash during a save's append (the log cut at
// any byte of its last record) loads everything saved before, and the
// next save appends after what was loaded.
func TestRetainedLogTornTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	s := rlOpen(t, path, broker.Options{})
	for i := range 20 {
		rlSet(s, fmt.Sprintf("torn/%d", i), []byte(fmt.Sprint("v", i)))
	}
	rlSave(t, s)
	want := rlContents(t, s)
	saved := rlSize(t, path+".retained")
	rlSet(s, "torn/last", []byte("the last record, torn by a crash"))
	rlClose(t, s)
	data, err := os.ReadFile(path + ".retained")
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) <= saved {
		t.Fatalf("the last save appended nothing (%d bytes, was %d)", len(data), saved)
	}

	for cut := saved; cut < int64(len(data)); cut++ {
		p := filepath.Join(dir, fmt.Sprintf("cut%d.json", cut))
		if err := os.WriteFile(p, state, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p+".retained", data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		var warned bytes.Buffer
		s := rlOpen(t, p, broker.Options{Logger: slog.New(slog.NewTextHandler(&warned, nil))})
		rlSameContents(t, fmt.Sprintf("cut at %d", cut), rlContents(t, s), want)
		if w := warned.String(); cut > saved && !strings.Contains(w, "torn") || strings.Contains(w, "level=ERROR") {
			t.Fatalf("cut at %d: logged %q, want a warning about a torn record", cut, w)
		}
		rlSet(s, "torn/next", []byte("N"))
		rlClose(t, s)
		// The torn bytes were cut off: nothing is left to warn about.
		var logged bytes.Buffer
		s = rlOpen(t, p, broker.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		next := maps.Clone(want)
		next["torn/next"] = "N"
		rlSameContents(t, fmt.Sprintf("cut at %d, saved again", cut), rlContents(t, s), next)
		if logged.Len() > 0 {
			t.Fatalf("cut at %d, saved again: %s", cut, logged.String())
		}
		rlClose(t, s)
	}
}

// TestRetainedLogDamaged: a record whose body is damaged in the middle of
// the log does not stop the server: what precedes it loads, and what
// follows it, the damage is logged, the damaged file is kept aside
// (.damaged-<time>) and the next save writes a whole new log.
func TestRetainedLogDamaged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	s := rlOpen(t, path, broker.Options{})
	rlSet(s, "dmg/a", []byte("A"))
	rlSave(t, s)
	mark := rlSize(t, path+".retained")
	rlSet(s, "dmg/b", []byte("B-to-be-damaged"))
	rlSave(t, s)
	rlSet(s, "dmg/c", []byte("C"))
	rlClose(t, s)
	data, err := os.ReadFile(path + ".retained")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("B-to-be-damaged"))
	if i < int(mark) {
		t.Fatalf("dmg/b not after offset %d in the log", mark)
	}
	data[i] ^= 0xff
	if err := os.WriteFile(path+".retained", data, 0o644); err != nil {
		t.Fatal(err)
	}

	var logged bytes.Buffer
	s = rlOpen(t, path, broker.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	got := rlContents(t, s)
	rlSameContents(t, "damaged log", got, map[string]string{"dmg/a": "A", "dmg/c": "C"})
	if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "damaged") {
		t.Fatalf("the damage was not logged as an error: %s", logged.String())
	}
	rlSet(s, "dmg/d", []byte("D"))
	rlSave(t, s)
	if kept, _ := filepath.Glob(path + ".retained.damaged-*"); len(kept) != 1 {
		t.Fatalf("damaged logs kept aside: %v, want one", kept)
	} else if b, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("damaged log not kept aside (%v)", err)
	}
	rlClose(t, s)
	rlSameContents(t, "after the rewrite", rlContents(t, rlOpen(t, path, broker.Options{})),
		map[string]string{"dmg/a": "A", "dmg/c": "C", "dmg/d": "D"})
}

// TestRetainedLogLengthDamagedMidFile: a record whose length field is
// damaged in the middle of the retained log (pointing past the end of the
// file, or short of its record's end) costs no retained message: the
// records after it are found again by their checksums, the damaged one
// too when its body is intact, the damage is logged as an error with its
// offset, and the damaged file is kept aside, byte for byte, before the
// next save replaces the log.
func TestRetainedLogLengthDamagedMidFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		flip func(length []byte)
	}{
		{"past the end of the file", func(l []byte) { l[3] ^= 0x40 }},
		{"short of its record's end", func(l []byte) { l[0] -= 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			s := rlOpen(t, path, broker.Options{})
			const n, k = 20, 8
			for i := range n {
				rlSet(s, fmt.Sprintf("len/%02d", i), []byte(fmt.Sprint("value-", i)))
				rlSave(t, s) // one record per save, in this order
			}
			want := rlContents(t, s)
			rlClose(t, s)
			data, err := os.ReadFile(path + ".retained")
			if err != nil {
				t.Fatal(err)
			}
			off := 24 // the header: magic and key
			for range k {
				off += 8 + int(binary.LittleEndian.Uint32(data[off:]))
			}
			if !bytes.Contains(data[off:off+40], []byte("len/08")) {
				t.Fatalf("record %d is not at offset %d", k, off)
			}
			tc.flip(data[off : off+4])
			if err := os.WriteFile(path+".retained", data, 0o644); err != nil {
				t.Fatal(err)
			}

			var logged bytes.Buffer
			s = rlOpen(t, path, broker.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			rlSameContents(t, "after the damage", rlContents(t, s), want)
			if l := logged.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, fmt.Sprintf("offset=%d", off)) ||
				!strings.Contains(l, fmt.Sprintf("records_read=%d", k)) {
				t.Fatalf("the damage was not logged as an error with its offset %d and the %d records read before it: %s", off, k, l)
			}
			rlSet(s, "len/new", []byte("N"))
			rlClose(t, s) // saves: the log is written anew
			kept, err := filepath.Glob(path + ".retained.damaged-*")
			if err != nil || len(kept) != 1 {
				t.Fatalf("damaged logs kept aside: %v (%v), want one", kept, err)
			}
			if b, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(b, data) {
				t.Fatalf("%s does not hold the damaged log's bytes (%v)", kept[0], err)
			}
			want["len/new"] = "N"
			logged.Reset()
			s = rlOpen(t, path, broker.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			rlSameContents(t, "after the rewrite", rlContents(t, s), want)
			if logged.Len() > 0 {
				t.Fatalf("the rewritten log: %s", logged.String())
			}
		})
	}
}

// TestRetainedLogBadFile: a file that is not a retained log makes New fail
// with an error naming it, and leaves it as it was; an empty one (nothing
// ever saved in it) is an empty log.
func TestRetainedLogBadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "foreign.json")
	foreign := []byte(`{"retained":[]}`)
	if err := os.WriteFile(path+".retained", foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := broker.New(broker.Options{StatePath: path})
	if err == nil {
		srv.Close(context.Background())
		t.Fatal("New accepted a foreign retained log")
	}
	if msg := err.Error(); !strings.Contains(msg, "load state") || !strings.Contains(msg, path+".retained") {
		t.Fatalf("error %q does not name the retained log", msg)
	}
	if data, _ := os.ReadFile(path + ".retained"); !bytes.Equal(data, foreign) {
		t.Fatalf("foreign file changed to %q", data)
	}

	path = filepath.Join(dir, "empty.json")
	if err := os.WriteFile(path+".retained", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := rlOpen(t, path, broker.Options{})
	if got := rlContents(t, s); len(got) != 0 {
		t.Fatalf("empty log: %v", got)
	}
	rlSet(s, "e/a", []byte("A"))
	rlClose(t, s)
	rlSameContents(t, "after a save", rlContents(t, rlOpen(t, path, broker.Options{})), map[string]string{"e/a": "A"})
}

// TestRetainedLogVersion1: a state file written before the retained log
// (version 1, retained messages inside) loads, and the first save moves
// its retained messages to the log.
func TestRetainedLogVersion1(t *testing.T) {
	clk := testkit.NewClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "state.json")
	// As the version 1 code wrote it (payloads in base64).
	v1 := `{"version":1,"saved":"2030-01-01T11:59:00Z",
"retained":[
 {"topic":"v1/a","payload":"QQ==","qos":1,"published_qos":2,"retain":true,"created":"2030-01-01T11:58:00Z",
  "expiry":"2030-01-01T12:10:00Z","content_type":"text/plain","response_topic":"v1/reply","correlation":"Y29ycg==",
  "payload_format":1,"user":[{"Key":"k","Value":"v"}]},
 {"topic":"v1/b","payload":"Qg==","qos":0,"published_qos":0,"retain":true,"created":"2030-01-01T11:00:00Z"},
 {"topic":"v1/gone","payload":"Rw==","qos":0,"published_qos":0,"retain":true,"created":"2030-01-01T11:00:00Z",
  "expiry":"2030-01-01T11:30:00Z"}],
"sessions":[{"client_id":"v1-dev","limits":{},"expiry":3600,"disconnected_at":"2030-01-01T11:59:00Z","next_pid":1,
  "subs":[{"wire":"v1/#","filter":"v1/#","qos":1}]}]}`
	if err := os.WriteFile(path, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := broker.Options{StatePath: path, Now: clk.Now, SaveInterval: -1}
	b := startBroker(t, opts)
	check := func(b *testBroker, when string) {
		t.Helper()
		rlSameContents(t, when, rlContents(t, b.Server), map[string]string{"v1/a": "A", "v1/b": "B"})
		if st := b.Stats(); st.Sessions != 1 || st.Subscriptions != 1 {
			t.Fatalf("%s: %d sessions, %d subscriptions, want 1 and 1", when, st.Sessions, st.Subscriptions)
		}
		viewer, _ := hcConnect(t, b.Addr, "v1-viewer", true, 0, 0)
		hcSubscribe(t, viewer, "v1/a", 1, 0)
		p := hcExpectPub(t, viewer, "A", 1, false)
		pp := &p.Properties
		if pp.ContentType != "text/plain" || pp.ResponseTopic != "v1/reply" || string(pp.CorrelationData) != "corr" ||
			pp.PayloadFormat != 1 || !slices.Equal(pp.User, []packet.UserProperty{{Key: "k", Value: "v"}}) || pp.MessageExpiry != 600 {
			t.Fatalf("%s: v1/a %+v", when, pp)
		}
		hcAck(t, viewer, packet.PUBACK, p.PacketID)
		viewer.Conn.Close()
	}
	check(b, "version 1 file")
	hcCloseBroker(t, b)

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"version":2`) || strings.Contains(string(data), `"retained"`) || !strings.Contains(string(data), "v1-dev") {
		t.Fatalf("state file after the first save: %s", data)
	}
	if rlSize(t, path+".retained") == 0 {
		t.Fatal("no retained log after the first save")
	}
	check(startBroker(t, opts), "migrated")
}

// BenchmarkSaveRetained: a save after 10 of N retained messages (800-byte
// payloads) changed. It reports the bytes the save appended to the log.
func BenchmarkSaveRetained(b *testing.B) {
	for _, n := range []int{10_000, 50_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "state.json")
			s := rlOpen(b, path, broker.Options{})
			payload := bytes.Repeat([]byte("p"), 800)
			for i := range n {
				rlSet(s, fmt.Sprintf("bench/%d/dev%d/state", i%50, i), payload)
			}
			rlSave(b, s)
			start := rlSize(b, path+".retained")
			var appended int64
			b.ResetTimer()
			for i := range b.N {
				for j := range 10 {
					k := (i*10 + j) % n
					rlSet(s, fmt.Sprintf("bench/%d/dev%d/state", k%50, k), payload)
				}
				rlSave(b, s)
				size := rlSize(b, path+".retained")
				if size > start {
					appended += size - start
				}
				start = size
			}
			b.ReportMetric(float64(appended)/float64(b.N), "appended-B/op")
		})
	}
}

// TestRetainedLogWithoutKeyLoads: a retained log written before records'
// checksums started from the file's key (magic ...\x00\x01, checksums of
// the bodies alone) loads whole after an upgrade, and its next save
// writes it with a key, which the next start loads as well.
func TestRetainedLogWithoutKeyLoads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	s := rlOpen(t, path, broker.Options{})
	for i := range 5 {
		rlSet(s, fmt.Sprintf("old/%d", i), []byte(fmt.Sprint("value-", i)))
	}
	rlSave(t, s)
	want := rlContents(t, s)
	rlClose(t, s)
	data, err := os.ReadFile(path + ".retained")
	if err != nil {
		t.Fatal(err)
	}
	// The same records as an older fleetmq wrote them.
	old := []byte("FMQRET\x00\x01")
	for off := 24; off < len(data); {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		body := data[off+8 : off+8+n]
		old = binary.LittleEndian.AppendUint32(old, uint32(n))
		old = binary.LittleEndian.AppendUint32(old, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
		old = append(old, body...)
		off += 8 + n
	}
	if err := os.WriteFile(path+".retained", old, 0o644); err != nil {
		t.Fatal(err)
	}
	s = rlOpen(t, path, broker.Options{})
	if got := rlContents(t, s); !maps.Equal(got, want) {
		t.Fatalf("a log without a key loaded %v, want %v", got, want)
	}
	rlSave(t, s)
	rlClose(t, s)
	if data, _ := os.ReadFile(path + ".retained"); !bytes.HasPrefix(data, []byte("FMQRET\x00\x02")) {
		t.Fatalf("after a save the log starts with %q, want the keyed header", data[:min(8, len(data))])
	}
	s = rlOpen(t, path, broker.Options{})
	if got := rlContents(t, s); !maps.Equal(got, want) {
		t.Fatalf("after its rewrite with a key the log loaded %v, want %v", got, want)
	}
	rlClose(t, s)
}

// TestRetainedLogKeepsThreeDamagedCopies: every start that finds the
// retained log damaged keeps the damaged file aside, but of those copies
// (each a whole log) only the three newest stay: a disk that fails again
// and again does not fill itself with them.
func TestRetainedLogKeepsThreeDamagedCopies(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	quiet := broker.Options{Logger: slog.New(slog.DiscardHandler)}
	var damaged [][]byte
	for round := range 5 {
		s := rlOpen(t, path, quiet)
		for i := range 3 {
			rlSet(s, fmt.Sprintf("dmg/%d/%d", round, i), []byte("v"))
			rlSave(t, s)
		}
		rlClose(t, s)
		data, err := os.ReadFile(path + ".retained")
		if err != nil {
			t.Fatal(err)
		}
		first := 24 + 8 + int(binary.LittleEndian.Uint32(data[24:])) // the second record's header
		data[first+4] ^= 0xff                                        // its checksum
		if err := os.WriteFile(path+".retained", data, 0o644); err != nil {
			t.Fatal(err)
		}
		damaged = append(damaged, data)
		rlClose(t, rlOpen(t, path, quiet)) // keeps it aside; the save writes the log anew
	}
	kept, err := filepath.Glob(path + ".retained.damaged-*")
	if err != nil || len(kept) != 3 {
		t.Fatalf("damaged logs kept aside: %v (%v), want the three newest", kept, err)
	}
	for _, want := range damaged[2:] {
		found := false
		for _, k := range kept {
			if b, _ := os.ReadFile(k); bytes.Equal(b, want) {
				found = true
			}
		}
		if !found {
			t.Fatalf("one of the three newest damaged logs is not among those kept: %v", kept)
		}
	}
}
