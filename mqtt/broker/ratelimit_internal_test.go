package broker

import (
	"testing"
	"time"
)

// TestBucket: a bucket starts full with a second's worth (at least one
// token), refills at its rate, lets a take larger than the burst go into
// debt and says how long the debt takes to pay, and keeps what it holds
// (up to the new burst) when its rate changes.
func TestBucket(t *testing.T) {
	const s = int64(time.Second)
	var b bucket
	if d := b.take(1e9, 0); d != 0 {
		t.Fatalf("unlimited bucket: wait %v", d)
	}
	b.setRate(10, 0)
	for i := range 10 {
		if d := b.take(1, 0); d != 0 {
			t.Fatalf("take %d of a full burst of 10: wait %v", i+1, d)
		}
	}
	if d := b.take(1, 0); d != 100*time.Millisecond {
		t.Fatalf("11th take: wait %v, want 100ms", d)
	}
	if d := b.take(1, s/10); d != 100*time.Millisecond {
		t.Fatalf("take after the debt was paid: wait %v, want 100ms", d)
	}
	if d := b.take(1, 10*s); d != 0 {
		t.Fatalf("take after 10s idle: wait %v", d)
	}
	if b.tokens != 9 {
		t.Fatalf("after 10s idle and one take the bucket holds %v, want 9 (the burst is 10)", b.tokens)
	}

	var big bucket
	big.setRate(1000, 0) // bytes per second
	if d := big.take(3000, 0); d != 2*time.Second {
		t.Fatalf("3000 bytes at 1000/s from a full bucket: wait %v, want 2s", d)
	}

	var r bucket
	r.setRate(0.5, 0)
	if r.burst != 1 {
		t.Fatalf("burst %v at 0.5/s, want 1 (at least one message)", r.burst)
	}
	r.setRate(100, 0) // keeps its one token
	r.take(101, 0)
	r.setRate(10, 2*s) // out of debt at the old rate after 1s, then capped at the new burst
	if r.tokens != 10 || r.rate != 10 {
		t.Fatalf("after the rate change: %v tokens at %v/s, want 10 at 10/s", r.tokens, r.rate)
	}
	r.setRate(0, s)
	if d := r.take(1e6, s); d != 0 {
		t.Fatalf("rate changed to unlimited: wait %v", d)
	}
}
