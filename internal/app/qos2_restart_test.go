package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// TestQoS2NotStoredAtShutdownIsStoredWhenSentAgain: a QoS 2 PUBLISH whose
// record the ingest writer could not commit before shutdown (the disk is
// full, Close's deadline passes) is "neither stored nor acknowledged
// (their QoS 1/2 publishers send them again)" (App.Close). After the
// restart the device sends it again, with the same packet id: the PUBREC
// it gets means the message is in history (the saved state does not hold
// its id as answered).
func TestQoS2NotStoredAtShutdownIsStoredWhenSentAgain(t *testing.T) {
	dir := t.TempDir()
	p := startOnDir(t, dir)
	a1 := p.App
	p.plan(t, "q2", 10, 1000)
	A := p.newTenant(t, "A", "q2", true)
	p.addClient(t, A, "dev1", 2)
	p.synced(t)

	connect := func(addr string, first bool) *mqtttest.Raw {
		t.Helper()
		c := &packet.Connect{ClientID: "dev1", CleanStart: first, KeepAlive: 30, ProtocolLevel: packet.Version5,
			HasUsername: true, Username: A.PubUser, HasPassword: true, Password: []byte(A.PubPass)}
		c.Properties.SetSessionExpiry(3600)
		rc, ack := mqtttest.ConnectRaw(t, addr, c)
		if ack.SessionPresent == first {
			t.Fatalf("session present %v", ack.SessionPresent)
		}
		return rc
	}
	topic := A.topic("dev1", "state/valve")
	rc := connect(a1.MQTTAddr, true)

	p.Store.SetMaxPages(1) // the disk is full
	rc.Must(t, &packet.Publish{Topic: topic, QoS: 2, PacketID: 7, Payload: []byte(strings.Repeat("closed ", 30000))})
	eventually(t, "a failed commit of the QoS 2 record", func() bool { return a1.Ingest.Stats().StoreErrors >= 1 })

	// SIGTERM while the disk is still full: Close's deadline passes with
	// the record unstored (and, as documented, unacknowledged).
	// The device reads until the server closes its connection, as a
	// client does (it gets DISCONNECT 0x8B, and no PUBREC).
	go func() {
		for {
			pk, err := rc.ReadPacket()
			if err != nil {
				rc.Conn.Close()
				return
			}
			if pk.Type() == packet.PUBREC {
				t.Errorf("PUBREC before the record is stored")
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	cerr := a1.Close(ctx)
	cancel()
	t.Logf("first Close: %v", cerr)
	if st := a1.Ingest.Stats(); st.Written != 0 {
		t.Fatalf("the record was written after all (%+v): the test needs it not to be", st)
	}

	// Restart on the same data directory; the disk has room again. The
	// device never had its PUBREC, so it sends the PUBLISH again (DUP).
	p2 := startPlatform(t, func(c *app.Config) { c.DataDir = dir })
	p2.synced(t)
	rc2 := connect(p2.MQTTAddr, false)
	rc2.Must(t, &packet.Publish{Topic: topic, QoS: 2, PacketID: 7, Payload: []byte(strings.Repeat("closed ", 30000)), Dup: true})
	a := rc2.Expect(t, packet.PUBREC).(*packet.Ack)
	if a.PacketID != 7 || a.ReasonCode >= 0x80 {
		t.Fatalf("PUBREC %+v", a)
	}
	// Acked means stored: by the PUBREC the record is committed.
	if got := p2.storedHistory(t, A.ID); len(got) != 1 {
		t.Fatalf("the resent QoS 2 PUBLISH was answered PUBREC 0x%02x (success), but history holds %d records of it: the message is lost (Ingest stats after restart: %+v)",
			byte(a.ReasonCode), len(got), p2.Ingest.Stats())
	}
}

// TestDropsOfRestoredSessionsAreMetered: after a restart, the drops of a
// persistent session restored from the state file (its client not back
// yet) count in its account's daily usage, as they do in its problems.
func TestDropsOfRestoredSessionsAreMetered(t *testing.T) {
	dir := t.TempDir()
	p := startOnDir(t, dir)
	p.plan(t, "meter", 10, 0)
	A := p.newTenant(t, "A", "meter", false, "pump-17")
	p.synced(t)
	p.offlineSubscriber(t, A, "night-dash", A.topic("pump-17", "telemetry/#"))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	err := p.Close(ctx) // saves the offline session in the state file
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	p2 := startPlatform(t, func(c *app.Config) { c.DataDir = dir })
	p2.synced(t)
	dev := dialV5(t, p2.MQTTAddr, "pump-17", A.PubUser, A.PubPass)
	for range 3 {
		dev.Pub(t, A.topic("pump-17", "telemetry/temp"), 0, "21")
	}
	eventually(t, "the restored session's QoS 0 dropped", func() bool { return p2.Broker.Stats().Drops[broker.DropOffline] >= 3 })
	p2.usage(t, A.ID, p2.day(), "3 offline_qos0 drops", func(u fleetmq.DailyUsage) bool { return u.Drops["offline_qos0"] >= 3 })
}

// TestRestoredSessionOfARevokedCredentialEnds: after a restart, the
// persistent session of a subscriber password, restored from the state
// file while its client is away, ends when the password is revoked, as
// the session of a connected client does: what it held is dropped and
// the account's messages stop queueing for it. Another account's
// restored session keeps its messages and resumes.
func TestRestoredSessionOfARevokedCredentialEnds(t *testing.T) {
	dir := t.TempDir()
	p := startOnDir(t, dir)
	A := p.newTenant(t, "A", "starter", false, "pump-17")
	B := p.newTenant(t, "B", "starter", false, "pump-17")
	p.synced(t)
	leave := func(tn *tenant, first bool) *mqtttest.Raw {
		t.Helper()
		var expiry packet.Properties
		expiry.SetSessionExpiry(3600)
		c, ack := mqtttest.ConnectRaw(t, p.MQTTAddr, &packet.Connect{ClientID: "night-dash", KeepAlive: 30, CleanStart: first,
			Username: tn.SubUser, HasUsername: true, Password: []byte(tn.SubPass), HasPassword: true, Properties: expiry})
		if ack.SessionPresent == first {
			t.Fatalf("session present %v", ack.SessionPresent)
		}
		return c
	}
	for _, tn := range []*tenant{A, B} {
		c := leave(tn, true)
		c.Must(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: tn.all(), QoS: 1}}})
		c.Expect(t, packet.SUBACK)
		c.Must(t, &packet.Disconnect{})
		c.Conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	err := p.Close(ctx) // saves both offline sessions in the state file
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	p2 := startPlatform(t, func(c *app.Config) { c.DataDir = dir })
	p2.synced(t)
	devA := dialV5(t, p2.MQTTAddr, "pump-17", A.PubUser, A.PubPass)
	devB := dialV5(t, p2.MQTTAddr, "pump-17", B.PubUser, B.PubPass)
	devA.Pub(t, A.topic("pump-17", "state/valve"), 1, "open")
	devB.Pub(t, B.topic("pump-17", "state/valve"), 1, "open")
	eventually(t, "both restored sessions queue their account's message", func() bool { return p2.Broker.Stats().Queued == 2 })
	sessions := p2.Broker.Stats().Sessions

	if err := p2.Service.RevokeCredential(p2.ctx, A.ID, A.SubCredID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A's restored session ended with its credential", func() bool {
		st := p2.Broker.Stats()
		return st.Sessions == sessions-1 && st.Queued == 1
	})
	devA.Pub(t, A.topic("pump-17", "state/valve"), 1, "closed")
	devB.Pub(t, B.topic("pump-17", "state/valve"), 1, "closed")
	eventually(t, "B's session queues its message", func() bool { return p2.Broker.Stats().Queued == 2 })
	if st := p2.Broker.Stats(); st.Queued != 2 || st.Sessions != sessions-1 {
		t.Fatalf("queued %d in %d sessions, want B's 2 in %d: A's messages still queue for a revoked credential", st.Queued, st.Sessions, sessions-1)
	}
	p2.usage(t, A.ID, p2.day(), "A's queued message dropped with its session", func(u fleetmq.DailyUsage) bool { return u.Drops["session_expired"] == 1 })

	// B's subscriber resumes its session and gets both messages.
	p = p2
	c := leave(B, false)
	for _, want := range []string{"open", "closed"} {
		pk := c.Expect(t, packet.PUBLISH).(*packet.Publish)
		if string(pk.Payload) != want {
			t.Fatalf("B's session delivered %q, want %q", pk.Payload, want)
		}
		c.Must(t, &packet.Ack{Kind: packet.PUBACK, PacketID: pk.PacketID})
	}
}
