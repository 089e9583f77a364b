package cluster

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/mqtt/broker"
)

// heldShared subscribes a shared subscription's handler (sharedHandler)
// to a subject of its own on n's NATS, with its first call held until
// release is closed; after is called on the handler's goroutine once
// each message is handled. It returns the subject, a connection to
// publish on, the subscription, and a channel closed when the first call
// is held.
func heldShared(t *testing.T, n *node, share string, release <-chan struct{}, after func(*nats.Subscription)) (subject string, nc *nats.Conn, sub *nats.Subscription, held <-chan struct{}) {
	t.Helper()
	nc, err := n.nats.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	handle, closed := n.router.sharedHandler(share, "test.queue", &shareSubs{})
	entered := make(chan struct{})
	first := true
	subject = "test.shared"
	sub, err = nc.Subscribe(subject, func(m *nats.Msg) {
		if first {
			first = false
			close(entered)
			<-release
		}
		handle(m)
		after(m.Sub)
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetClosedHandler(closed)
	return subject, nc, sub, entered
}

// sharedJob is a message for the member of $share/g/jobs/#, in its
// envelope from another node.
func sharedJob(payload string) []byte {
	m := &broker.Message{Topic: "jobs/1", QoS: 1, PublishedQoS: 1, Payload: []byte(payload), Created: time.Now()}
	return appendEnvelope(nil, "other", 1, m)
}

// TestSharedMemberWrittenWhateverComesLast: a shared subscription's
// message from another node is delivered to its member, and written, when
// the message after it, the last one waiting, does not decode, and when
// the subscription closes before the handler is called again: a write
// left owed would keep the member's connection silent.
func TestSharedMemberWrittenWhateverComesLast(t *testing.T) {
	for _, tc := range []struct {
		name  string
		next  []byte // published while the first message's handling is held
		close bool   // the subscription closes once the first is handled
	}{
		{name: "a message that does not decode comes last", next: []byte{0xff}},
		{name: "the subscription closes", next: sharedJob("never handled"), close: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nn := startCluster(t, 1)[0]
			member := mqtttest.DialV3(t, nn.addr, "member")
			got := member.Subscription(t, "$share/g/jobs/#", 1)
			release := make(chan struct{})
			handled := 0
			subject, nc, sub, held := heldShared(t, nn, "$share/g/jobs/#", release, func(s *nats.Subscription) {
				if handled++; handled == 1 && tc.close {
					s.Unsubscribe() // before NATS looks at its queue again
				}
			})
			if err := nc.Publish(subject, sharedJob("job")); err != nil {
				t.Fatal(err)
			}
			select {
			case <-held:
			case <-time.After(5 * time.Second):
				t.Fatal("the shared subscription's handler was not called")
			}
			if err := nc.Publish(subject, tc.next); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "both messages waiting for the handler", func() bool {
				n, _, _ := sub.Pending()
				return n == 2
			})
			close(release)
			if m := mqtttest.NextV3(t, got); string(m.Payload()) != "job" {
				t.Fatalf("the member got %q; want job", m.Payload())
			}
		})
	}
}
