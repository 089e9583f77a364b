package contract

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// Retained runs the contract of broker.Retained against the stores
// newStore returns (a new, empty one per case): set, replace and clear;
// matching with wildcards ('$' topics apart); expiry at match time and by
// the sweep; the per-first-level accounting; reservations against a
// bound; concurrent use.
func Retained(t *testing.T, newStore func(t *testing.T) broker.Retained) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	msg := func(topic, payload string) *broker.Message {
		return &broker.Message{Topic: topic, Payload: []byte(payload), QoS: 1, Retain: true, Created: t0}
	}

	t.Run("set, replace, clear", func(t *testing.T) {
		rs := newStore(t)
		rs.Set(msg("a/b", "one"))
		rs.Set(msg("a/c", "two"))
		rs.Set(msg("a/b", "three")) // the later of two Sets stays
		wantMatch(t, rs, "a/b", t0, "a/b=three")
		wantMatch(t, rs, "a/+", t0, "a/b=three", "a/c=two")
		if n := rs.Len(); n != 2 {
			t.Fatalf("Len = %d, want 2", n)
		}
		rs.Set(msg("a/b", "")) // an empty payload clears
		wantMatch(t, rs, "a/#", t0, "a/c=two")
		rs.Set(msg("a/nothing", "")) // clearing a topic with none is no error
		if n := rs.Len(); n != 1 {
			t.Fatalf("Len after clearing = %d, want 1", n)
		}
	})

	t.Run("wildcards", func(t *testing.T) {
		rs := newStore(t)
		for _, tp := range []string{"a", "a/b", "a/b/c", "x/b", "$SYS/load", "/lead"} {
			rs.Set(msg(tp, tp))
		}
		wantMatch(t, rs, "#", t0, "/lead=/lead", "a/b/c=a/b/c", "a/b=a/b", "a=a", "x/b=x/b")
		wantMatch(t, rs, "a/#", t0, "a/b/c=a/b/c", "a/b=a/b", "a=a")
		wantMatch(t, rs, "+/b", t0, "a/b=a/b", "x/b=x/b")
		wantMatch(t, rs, "+/+", t0, "/lead=/lead", "a/b=a/b", "x/b=x/b")
		wantMatch(t, rs, "$SYS/#", t0, "$SYS/load=$SYS/load")
		wantMatch(t, rs, "a/b/c/d", t0)
	})

	t.Run("expiry", func(t *testing.T) {
		rs := newStore(t)
		short := msg("e/short", "short")
		short.Expiry = t0.Add(time.Minute)
		long := msg("e/long", "long")
		long.Expiry = t0.Add(time.Hour)
		rs.Set(short)
		rs.Set(long)
		rs.Set(msg("e/never", "never"))
		got := rs.Match("e/long", t0)
		if len(got) != 1 || !got[0].Created.Equal(t0) || !got[0].Expiry.Equal(long.Expiry) || got[0].QoS != 1 {
			t.Fatalf("Match kept %+v; want Created, Expiry and QoS as set", got)
		}
		// Expired at its Expiry: never matched again, even before a sweep.
		wantMatch(t, rs, "e/#", t0.Add(time.Minute), "e/long=long", "e/never=never")
		if n := rs.Sweep(t0.Add(time.Minute), 0); n != 1 {
			t.Fatalf("Sweep removed %d, want 1 (the expired one)", n)
		}
		if n := rs.Len(); n != 2 {
			t.Fatalf("Len after the sweep = %d, want 2", n)
		}
		// maxAge removes what was created that long ago, expiry or not.
		young := msg("e/young", "young")
		young.Created = t0.Add(30 * time.Minute)
		rs.Set(young)
		if n := rs.Sweep(t0.Add(45*time.Minute), 45*time.Minute); n != 2 {
			t.Fatalf("Sweep with maxAge removed %d, want 2", n)
		}
		wantMatch(t, rs, "e/#", t0.Add(45*time.Minute), "e/young=young")
	})

	t.Run("under a first level", func(t *testing.T) {
		rs := newStore(t)
		rs.Set(msg("acct1/c/state/a", "12345"))
		rs.Set(msg("acct1/c/state/b", "123"))
		rs.Set(msg("acct2/c/state/a", "1"))
		if n, b, cur := rs.Under("acct1/c/state/a"); n != 2 || b != 8 || cur != 5 {
			t.Fatalf("Under(acct1/…/a) = %d, %d, %d; want 2, 8, 5", n, b, cur)
		}
		if n, b, cur := rs.Under("acct1/c/state/new"); n != 2 || b != 8 || cur != -1 {
			t.Fatalf("Under(acct1/…/new) = %d, %d, %d; want 2, 8, -1", n, b, cur)
		}
		rs.Set(msg("acct1/c/state/a", "1"))
		rs.Set(msg("acct1/c/state/b", ""))
		if n, b, cur := rs.Under("acct1/c/state/a"); n != 1 || b != 1 || cur != 1 {
			t.Fatalf("Under after a replace and a clear = %d, %d, %d; want 1, 1, 1", n, b, cur)
		}
		if n, b, cur := rs.Under("acct3/x"); n != 0 || b != 0 || cur != -1 {
			t.Fatalf("Under(an empty first level) = %d, %d, %d; want 0, 0, -1", n, b, cur)
		}
	})

	t.Run("reserve", func(t *testing.T) {
		rs := newStore(t)
		rs.Set(msg("r1/a", "12345"))
		a, b := msg("r1/b", "12"), msg("r1/b", "123") // two for one new topic
		if n, by, ok := rs.Reserve(a, 3, 100); !ok || n != 1 || by != 5 {
			t.Fatalf("Reserve(r1/b) = %d, %d, %v; want 1, 5, true", n, by, ok)
		}
		if _, _, ok := rs.Reserve(b, 3, 100); !ok {
			t.Fatal("a second reservation of one topic took another message of room")
		}
		if n, by, ok := rs.Reserve(msg("r1/c", "1"), 3, 100); !ok || n != 2 || by != 10 {
			t.Fatalf("Reserve(r1/c) = %d, %d, %v; want 2 (one stored, one topic held), 10, true", n, by, ok)
		}
		if _, _, ok := rs.Reserve(msg("r1/d", "1"), 3, 100); ok {
			t.Fatal("a reservation past the bound of 3 messages (one stored, two held) got room")
		}
		if _, _, ok := rs.Reserve(msg("r1/a", "123456789012345"), 3, 20); ok {
			t.Fatal("a replacement past the bytes bound (5 stored, 2+3+1 held, 15 for the 5) got room")
		}
		repl := msg("r1/a", "12345678901234")
		if _, _, ok := rs.Reserve(repl, 3, 20); !ok {
			t.Fatal("a replacement within the bytes bound got no room")
		}
		if _, _, ok := rs.Reserve(msg("r2/a", "1"), 3, 100); !ok {
			t.Fatal("another first level's room is taken by r1's")
		}
		if n, _, _ := rs.Under("r1/x"); n != 1 {
			t.Fatalf("Under counts %d stored, want 1: reservations are not messages", n)
		}
		rs.Set(a)
		rs.Release(b)
		rs.Release(b) // twice: nothing more
		wantMatch(t, rs, "r1/b", t0, "r1/b=12")
		if n, b, _ := rs.Under("r1/b"); n != 2 || b != 7 {
			t.Fatalf("Under after a Set and a Release = %d, %d; want 2, 7", n, b)
		}
		rs.Set(msg("r1/a", "")) // cleared, but repl still holds its room
		if _, _, ok := rs.Reserve(msg("r1/d", "1"), 3, 100); ok {
			t.Fatal("a clear gave away the room a reservation of its topic holds")
		}
		rs.Release(repl)
		if _, _, ok := rs.Reserve(msg("r1/d", "1"), 3, 100); !ok {
			t.Fatal("no room after a clear and the release of its topic's reservation")
		}
	})

	t.Run("concurrent reservations", func(t *testing.T) {
		rs := newStore(t)
		const writers, each, bound = 8, 50, 37
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					m := msg(fmt.Sprintf("q/%d/%d", w, i), "x")
					if _, _, ok := rs.Reserve(m, bound, 1<<20); !ok {
						continue
					}
					if i%3 == 0 {
						rs.Release(m)
					} else {
						rs.Set(m)
					}
				}
			})
		}
		wg.Wait()
		if n, _, _ := rs.Under("q/x"); n != bound {
			t.Fatalf("%d writers reserving at once stored %d, want exactly the bound %d", writers, n, bound)
		}
	})

	t.Run("concurrent use", func(t *testing.T) {
		rs := newStore(t)
		const writers, each = 8, 200
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					rs.Set(msg(fmt.Sprintf("c%d/t%d", w, i), "x"))
					rs.Match("#", t0)
					rs.Under(fmt.Sprintf("c%d/t0", w))
				}
			})
		}
		wg.Wait()
		if n := rs.Len(); n != writers*each {
			t.Fatalf("Len = %d, want %d", n, writers*each)
		}
		if got := rs.Match("+/+", t0); len(got) != writers*each {
			t.Fatalf("Match found %d, want %d", len(got), writers*each)
		}
	})
}

// wantMatch checks the topics and payloads Match returns (in any order).
func wantMatch(t *testing.T, rs broker.Retained, filter string, now time.Time, want ...string) {
	t.Helper()
	var got []string
	for _, m := range rs.Match(filter, now) {
		got = append(got, m.Topic+"="+string(m.Payload))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Match(%q) = %q, want %q", filter, got, want)
	}
}
