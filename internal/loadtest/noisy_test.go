package loadtest

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/pgtest"
)

// TestNoisyNeighbourShort is the abuse suite: every attack of "fleetmq
// bench noisy-neighbour" in its short form (2 s phases, a few hundred
// attacking sockets) against fleetmq serve, on SQLite and, when a server
// is configured, PostgreSQL. It asserts what must hold on any machine,
// however loaded: the victim's acknowledgements keep coming in every
// phase and none waits 2 s, its REST pages answer 200, /readyz answers
// 200 within 1 s, a new device connects, an unauthenticated socket costs
// at most 8 KiB, the retained flood is refused past the account's bound
// with the reason shown to the owner, an oversized User Properties
// PUBLISH ends its connection, and a sign-in burst is throttled. The
// latency ratios against the baseline are logged, not asserted: the
// machine is shared.
func TestNoisyNeighbourShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the platform under attack for half a minute per database")
	}
	bin := filepath.Join(t.TempDir(), "fleetmq")
	build := exec.Command("go", "build", "-o", bin, "github.com/fleetmq/fleetmq/cmd/fleetmq")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	t.Run("sqlite", func(t *testing.T) { noisyShort(t, bin, "") })
	t.Run("postgres", func(t *testing.T) { noisyShort(t, bin, pgtest.DSN(t)) })
}

// The abuse suite's bounds on the longest waits (see noisyShort).
const (
	noisyMaxAckWaitMs = 2000
	noisyMaxReadyMs   = 1000
)

func noisyShort(t *testing.T, bin, database string) {
	var progress bytes.Buffer
	// Five attacker clients: a retained bound of 500, which the retained
	// flood passes within its 2 s at the attacker plan's publish rate.
	cfg := NoisyConfig{Bin: bin, Database: database, Duration: 2 * time.Second, AttackerRecords: 10_000, AttackerClients: 5,
		BigConnects: 300, HTTPIdle: 300, HTTPSlow: 30, RetainedTopics: 2_500, UserPropsRepeats: 5, progress: &progress}
	r, err := RunNoisy(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, &progress)
	}
	var report bytes.Buffer
	printNoisy(&report, r)
	t.Logf("\n%s", &report)
	if len(r.Phases) != len(noisyPhases)+2 {
		t.Fatalf("%d phases ran, want %d", len(r.Phases), len(noisyPhases)+2)
	}
	// The longest waits allowed: 2 s for an acknowledgement and 1 s for
	// /readyz, or 20 times the baseline's p99 on a machine so loaded
	// that its baseline is already slow: "whatever the machine's speed".
	base := r.Phases[0]
	maxAck := max(noisyMaxAckWaitMs, 20*base.Ack.P99ms)
	maxReady := max(noisyMaxReadyMs, 20*base.Ready.P99ms)
	t.Logf("longest waits allowed: ack %.0f ms, /readyz %.0f ms", maxAck, maxReady)
	for _, ph := range r.Phases {
		if ph.Ack.OK == 0 || ph.Ack.PerSec <= 0 {
			t.Errorf("%s: no victim acknowledgement in the phase", ph.Phase)
		}
		if ph.Ack.Errors+ph.Ack.Stuck > 0 || ph.Ack.MaxMs >= maxAck {
			t.Errorf("%s: victim publishes: %d failed, %d unanswered, the longest wait %.0f ms (first error %q)",
				ph.Phase, ph.Ack.Errors, ph.Ack.Stuck, ph.Ack.MaxMs, ph.Ack.FirstError)
		}
		if ph.REST.OK == 0 || ph.REST.Errors+ph.REST.Stuck > 0 {
			t.Errorf("%s: victim REST pages: %d answered 200, %d failed or unanswered (first error %q)", ph.Phase, ph.REST.OK, ph.REST.Errors+ph.REST.Stuck, ph.REST.FirstError)
		}
		if ph.Ready.OK == 0 || ph.Ready.Errors+ph.Ready.Stuck > 0 || ph.Ready.MaxMs >= maxReady {
			t.Errorf("%s: /readyz: %d answered 200, %d failed or unanswered (first error %q), the longest %.0f ms",
				ph.Phase, ph.Ready.OK, ph.Ready.Errors+ph.Ready.Stuck, ph.Ready.FirstError, ph.Ready.MaxMs)
		}
		if ph.ConnectMs < 0 {
			t.Errorf("%s: a new victim device could not connect: %s", ph.Phase, ph.ConnectError)
		}
		if ph.Judged && len(ph.Verdict) > 0 {
			t.Logf("%s: targets missed (not asserted here): %v", ph.Phase, ph.Verdict)
		}
		a := ph.Attack
		switch ph.Phase {
		case "big-connect":
			// At most 8 KiB a held socket, with 4 MiB for the noise of
			// everything else the process does meanwhile (the figure is
			// the RSS's, or the Go runtime's when the RSS fell).
			held := a["held_at_most"]
			if held == 0 {
				t.Errorf("big-connect: no socket was held: %s", ph.Figure)
			}
			if allowed := targetPreAuthKiB + 4096/max(held, 1); a["kib_per_socket"] > allowed {
				t.Errorf("big-connect: %.2f KiB per held socket (allowed %.2f with the noise margin): %s", a["kib_per_socket"], allowed, ph.Figure)
			}
		case "http-idle":
			if a["idle_answered"] == 0 {
				t.Errorf("http-idle: the idle connections were never answered: %s", ph.Figure)
			}
		case "retained-flood":
			// The attacker's publish rate decides how far past the bound
			// it gets in the phase; every answer past it is a refusal.
			if a["published"] <= a["bound"] || a["accepted"] > a["bound"] || a["quota_exceeded"] != a["refused"] || a["refused"] == 0 {
				t.Errorf("retained-flood: not refused past the bound: %s", ph.Figure)
			}
			if a["refusal_in_problems"] != 1 {
				t.Errorf("retained-flood: the refusal is not among the device's problems: %s %v", ph.Figure, ph.Notes)
			}
		case "user-properties":
			if a["packets"] != float64(cfg.UserPropsRepeats) || a["disconnected_0x95"] != a["packets"] {
				t.Errorf("user-properties: not every connection ended with 0x95: %s", ph.Figure)
			}
		case "signin-burst":
			if a["evaluated"] > targetSigninEvaluated || a["evaluated"]+a["throttled"] != a["attempts"] {
				t.Errorf("signin-burst: not throttled: %s", ph.Figure)
			}
		}
	}
}
