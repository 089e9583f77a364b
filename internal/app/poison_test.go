package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
)

// TestPoisonMessageRefusedOthersFlow: a message the history store refuses
// (a trigger refuses it here, on real SQLite) while it takes the others is
// refused to its publisher, MQTT 5 with PUBACK 0x83 and the reason, 3.1.1
// by closing the connection (it would resend); its account's owner sees it
// among the client's problems; and every other message, the other
// tenant's too, is acknowledged and stored as before.
func TestPoisonMessageRefusedOthersFlow(t *testing.T) {
	t.Parallel()
	p := startPlatform(t)
	// On the table of the day of the platform's clock.
	for i, at := range []time.Time{p.clock.Now()} {
		table, err := p.Store.HistoryTable(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Store.DB().Exec(fmt.Sprintf(`CREATE TRIGGER poison%d BEFORE INSERT ON %s
			WHEN NEW.topic LIKE '%%/poison/%%' BEGIN SELECT RAISE(ABORT, 'poison record'); END`, i, table)); err != nil {
			t.Fatal(err)
		}
	}
	A := p.newTenant(t, "A", "starter", false, "dev1", "dev3")
	B := p.newTenant(t, "B", "starter", false, "dev1")
	p.synced(t)
	devA := dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
	devB := dialV5(t, p.MQTTAddr, "dev1", B.PubUser, B.PubPass)

	r, err := devA.TryPublish(&paho.Publish{Topic: A.topic("dev1", "state/poison/x"), QoS: 1, Payload: []byte("p")})
	if r == nil || r.ReasonCode != 0x83 || !strings.Contains(r.Properties.ReasonString, "store refused") {
		t.Fatalf("the poison message's PUBACK: %+v %v, want 0x83 with the reason", r, err)
	}
	devA.Pub(t, A.topic("dev1", "state/fine"), 1, "ok")
	devB.Pub(t, B.topic("dev1", "state/fine"), 1, "ok")

	dev3 := dialV3(t, p.MQTTAddr, "dev3", A.PubUser, A.PubPass)
	dev3.Publish(A.topic("dev3", "state/poison/y"), 1, false, "p")
	select {
	case <-dev3.Lost:
	case <-time.After(waitFor):
		t.Fatal("the 3.1.1 publisher of a message the store refused is still connected")
	}

	if n := len(p.storedHistory(t, A.ID)); n != 1 {
		t.Fatalf("A's history holds %d records, want the 1 fine one", n)
	}
	if n := len(p.storedHistory(t, B.ID)); n != 1 {
		t.Fatalf("B's history holds %d records, want 1", n)
	}
	eventually(t, "the refusals among A's problems", func() bool {
		ps, err := p.Store.Problems(p.ctx, A.ID, "", p.clock.Now().AddDate(0, 0, -1), 10)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, pr := range ps {
			if pr.Kind == fleetmq.ProblemPublishRefused && pr.Reason == "not_stored" {
				n++
			}
		}
		return n == 2
	})
}
