package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// A forwarded message carries its layout's version (docs/cluster.md): one
// of a version this node does not read is refused as malformed (the
// receiver drops and counts it), never decoded as if it were its own.
func TestEnvelopeOfAnotherVersionRefused(t *testing.T) {
	m := &broker.Message{Topic: "acct/dev/state/x", QoS: 1, PublishedQoS: 1, Payload: []byte("x"), Origin: "acct\x00dev"}
	b := appendEnvelope(nil, "node-a", 7, m)
	node, seq, got, err := decode(b)
	if err != nil || node != "node-a" || seq != 7 || got.Topic != m.Topic || got.Origin != m.Origin {
		t.Fatalf("decode of its own version = %q %d %+v %v", node, seq, got, err)
	}
	for _, v := range []byte{0, envelopeVersion + 1, 0xff} {
		other := append([]byte{v}, b[1:]...)
		if _, _, _, err := decode(other); !errors.Is(err, errEnvelope) {
			t.Errorf("an envelope of version %d: %v, want errEnvelope", v, err)
		}
	}
}

// A retained message between nodes carries its layout's version too: one of
// a version this node does not read is counted as malformed and not set,
// one of its own is.
func TestRetainedOfAnotherVersionRefused(t *testing.T) {
	m := &broker.Message{Topic: "acct/dev/state/x", QoS: 1, PublishedQoS: 1, Retain: true, Payload: []byte("x"), Created: time.Now()}
	b := appendRetained(nil, "node-a", m)
	node, got, err := decodeRetained(b)
	if err != nil || node != "node-a" || got.Topic != m.Topic || string(got.Payload) != "x" {
		t.Fatalf("decode of its own version = %q %+v %v", node, got, err)
	}
	for _, v := range []byte{0, retainedVersion + 1, 0xff} {
		if _, _, err := decodeRetained(append([]byte{v}, b[1:]...)); !errors.Is(err, errRetained) {
			t.Errorf("a retained message of version %d: %v, want errRetained", v, err)
		}
	}

	n := startNATS(t, "solo")
	r, err := NewRetained(context.Background(), n, "node-b", nil, time.Now(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	nc, err := n.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Publish(retainedSubject, append([]byte{retainedVersion + 1}, b[1:]...)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the other version counted", func() bool { return r.Malformed.Load() == 1 })
	if got := r.Match(m.Topic, time.Now()); len(got) != 0 || r.Received.Load() != 0 {
		t.Fatalf("a retained message of another version was set: %v", got)
	}
	if err := nc.Publish(retainedSubject, b); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "its own version set", func() bool { return len(r.Match(m.Topic, time.Now())) == 1 })
}

// So does the notice that a session was taken over: one of a version this
// node does not read is counted and not acted on (the session it would
// name stays; the claim that waits goes on after handOffWait, as when the
// node cannot be reached), one of its own hands the session over.
func TestNoticeOfAnotherVersionRefused(t *testing.T) {
	b := appendNotice(nil, "acct\x00dev", 41, true)
	key, epoch, fresh, ok := decodeNotice(b)
	if !ok || key != "acct\x00dev" || epoch != 41 || !fresh {
		t.Fatalf("decode of its own version = %q %d %v %v", key, epoch, fresh, ok)
	}
	for _, v := range []byte{0, noticeVersion + 1, 0xff} {
		if _, _, _, ok := decodeNotice(append([]byte{v}, b[1:]...)); ok {
			t.Errorf("a notice of version %d decoded", v)
		}
	}

	n := startNATS(t, "solo")
	o, err := NewOwners(n, "node-a", nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	lost := make(chan broker.Claim, 2)
	stop := o.Watch("node-a", func(old broker.Claim) { lost <- old })
	t.Cleanup(stop)
	nc, err := n.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	other := appendNotice(nil, "acct\x00dev", 41, false)
	other[0] = noticeVersion + 1
	if _, err := nc.Request(ownersSubject("node-a"), other, 300*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a notice of another version was answered: %v", err)
	}
	if got := o.Malformed.Load(); got != 1 {
		t.Fatalf("Malformed = %d after a notice of another version, want 1", got)
	}
	if _, err := nc.Request(ownersSubject("node-a"), appendNotice(nil, "acct\x00dev", 41, false), 5*time.Second); err != nil {
		t.Fatalf("a notice of its own version: %v", err)
	}
	select {
	case c := <-lost:
		if c.Key != "acct\x00dev" || c.Epoch != 41 || c.Fresh || c.Node != "node-a" {
			t.Fatalf("handed over %+v", c)
		}
	default:
		t.Fatal("answered, but the session was not handed over")
	}
	if len(lost) != 0 {
		t.Fatal("a notice of another version handed a session over")
	}
}
