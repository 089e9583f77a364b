package broker

import (
	"context"
	"testing"
	"time"
)

// TestKeepAliveFromConnack: a CONNECT whose resume waits (its replay in
// its account's line) longer than 1.5 x its keep alive is not ended for
// silence meanwhile (the client cannot send before the CONNACK): its
// first packet is the CONNACK [MQTT-3.2.0-1], and the keep alive counts
// from there.
func TestKeepAliveFromConnack(t *testing.T) {
	replay := func(ctx context.Context, id *Identity, filters []ReplayFilter, max int, fn func(*Message)) error {
		select { // waits in the account's line of replays
		case <-time.After(4 * time.Second): // past 1.5 x the keep alive of 2 s
		case <-ctx.Done():
		}
		return nil
	}
	_, addr := startStates(t, Options{States: resumable(), Owners: &elsewhere{}, Replay: replay})
	if code := connack(t, connectRaw(t, addr, "dev", 2)); code != 0 {
		t.Fatalf("CONNACK 0x%02X, want success", code)
	}
}
