package broker_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// TestRetainedLogTornPayloadInjectsNothing: a crash that tears the
// append of a tenant's retained message whose payload is made of
// well-formed log records (records of another tenant's topic, as a log
// writes them) must not load those records as retained messages, also
// when the log was damaged before it (the salvage then looks for records
// after the damage): the records' checksums start from the file's own
// key, which no tenant knows.
func TestRetainedLogTornPayloadInjectsNothing(t *testing.T) {
	for _, damageBefore := range []bool{false, true} {
		t.Run(fmt.Sprint("damage before: ", damageBefore), func(t *testing.T) { rlTornTenant(t, damageBefore) })
	}
}

func rlTornTenant(t *testing.T, damageBefore bool) {
	dir := t.TempDir()
	// A genuine record for another tenant's topic, as the log writes it.
	fp := filepath.Join(dir, "fake.json")
	fs := rlOpen(t, fp, broker.Options{})
	rlSet(fs, "victim/dev/state", []byte("pwned"))
	rlClose(t, fs)
	raw, err := os.ReadFile(fp + ".retained")
	if err != nil {
		t.Fatal(err)
	}
	fake := raw[len("FMQRET\x00\x02")+16:] // its records, after the magic and the key
	payload := bytes.Repeat(fake, 50)

	path := filepath.Join(dir, "state.json")
	s := rlOpen(t, path, broker.Options{})
	rlSet(s, "victim/dev/state", []byte("genuine"))
	rlSave(t, s)
	rlSet(s, "mid/x", []byte("to-be-damaged"))
	rlSave(t, s)
	rlSet(s, "mid/y", []byte("after"))
	rlSave(t, s)
	saved := rlSize(t, path+".retained")
	rlSet(s, "attacker/dev/x", payload)
	rlClose(t, s)
	data, _ := os.ReadFile(path + ".retained")
	state, _ := os.ReadFile(path)
	if damageBefore {
		data[bytes.Index(data, []byte("to-be-damaged"))] ^= 0xff
	}
	injected := 0
	for cut := saved + 1; cut < int64(len(data)); cut++ {
		p := filepath.Join(dir, fmt.Sprintf("cut%d.json", cut))
		os.WriteFile(p, state, 0o644)
		os.WriteFile(p+".retained", data[:cut], 0o644)
		s := rlOpen(t, p, broker.Options{Logger: slog.New(slog.DiscardHandler)})
		if got := rlContents(t, s)["victim/dev/state"]; got != "genuine" {
			injected++
			if injected == 1 {
				t.Errorf("cut at %d: victim/dev/state = %q, want \"genuine\"", cut, got)
			}
		}
		rlClose(t, s)
	}
	if injected > 0 {
		t.Errorf("%d of %d torn cuts loaded records out of the tenant's payload", injected, int64(len(data))-saved-1)
	}
}
