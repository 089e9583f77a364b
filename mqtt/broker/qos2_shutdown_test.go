package broker_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// holdingPolicy defers every acknowledgement (as a history writer does
// until its commit) and hands the messages to the test.
type holdingPolicy struct {
	broker.OpenPolicy
	held     chan *broker.Message
	accepted atomic.Int32
}

func (p *holdingPolicy) Accepted(_ *broker.Identity, m *broker.Message) bool {
	p.accepted.Add(1)
	p.held <- m
	return true
}

// TestQoS2AckedWhileClosingIsAnsweredAfterRestart: a QoS 2 message whose
// acknowledgement the policy still owes when the server closes is
// acknowledged while Close waits (the history writer commits it), and the
// state saved after that keeps its packet id as answered: the copy the
// client sends again after the restart gets PUBREC without being offered
// to the policy a second time (stored once, exactly once).
func TestQoS2AckedWhileClosingIsAnsweredAfterRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	pol := &holdingPolicy{held: make(chan *broker.Message, 4)}
	b1 := startBroker(t, broker.Options{StatePath: state, SaveInterval: -1, Policy: pol})
	dev, _ := hcConnect(t, b1.Addr, "q2-dev", true, 300, 0)
	q2 := &packet.Publish{Topic: "dev/q2", QoS: 2, PacketID: 7, Payload: []byte("once")}
	dev.Must(t, q2)
	m := <-pol.held // not acknowledged yet: no PUBREC

	closed := make(chan error, 1)
	go func() { closed <- b1.Close(context.Background()) }()
	dev.Closed(t) // the server ended the connection: Close is under way
	dev.Conn.Close()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the policy answered the QoS 2 message it still owed", err)
	case <-time.After(hcAbsence): // Close waits for the answer before it saves
	}
	m.Ack() // the commit
	if err := <-closed; err != nil {
		t.Fatal(err)
	}

	b2 := startBroker(t, broker.Options{StatePath: state, SaveInterval: -1, Policy: pol})
	dev, ack := hcConnect(t, b2.Addr, "q2-dev", false, 300, 0)
	if !ack.SessionPresent {
		t.Fatal("session not present after the restart")
	}
	again := *q2
	again.Dup = true
	dev.Must(t, &again)
	hcExpectAck(t, dev, packet.PUBREC, 7)
	dev.Must(t, &packet.Ack{Kind: packet.PUBREL, PacketID: 7})
	hcExpectAck(t, dev, packet.PUBCOMP, 7)
	if n := pol.accepted.Load(); n != 1 {
		t.Fatalf("the message was offered to the policy %d times, want once", n)
	}
}
