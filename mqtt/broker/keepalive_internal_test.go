package broker

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// TestKeepAliveFromConnack: a CONNECT whose resume waits (its replay in
// its account's line) longer than 1.5 x its keep alive is not ended for
// silence meanwhile (the client cannot send before the CONNACK): its
// first packet is the CONNACK [MQTT-3.2.0-1], and the keep alive counts
// from there.
func TestKeepAliveFromConnack(t *testing.T) {
	st := &memStates{}
	sv := savedSession{Saved: time.Now(), ClientID: "dev", Limits: Limits{MaxQueued: 100, MaxInflight: 10}, Expiry: 3600,
		DisconnectedAt: time.Now(), Subs: []savedSub{{Wire: "t/#", Filter: "t/#", QoS: 1}}}
	st.take, _ = json.Marshal(&sv)
	replay := func(ctx context.Context, id *Identity, filters []string, since time.Time, max int, fn func(*Message)) error {
		select { // waits in the account's line of replays
		case <-time.After(4 * time.Second): // past 1.5 x the keep alive of 2 s
		case <-ctx.Done():
		}
		return nil
	}
	_, addr := startStates(t, Options{States: st, Owners: &elsewhere{}, Replay: replay})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ClientID, c.ProtocolName, c.ProtocolVersion, c.KeepAlive = "dev", "MQTT", 5, 2
	expiry := uint32(3600)
	c.Properties = &packets.Properties{SessionExpiryInterval: &expiry}
	if _, err := cp.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	first, err := packets.ReadPacket(nc)
	if err != nil {
		t.Fatal(err)
	}
	if first.Type != packets.CONNACK {
		t.Fatalf("the first packet is type %d, not CONNACK [MQTT-3.2.0-1]", first.Type)
	}
	if code := first.Content.(*packets.Connack).ReasonCode; code != 0 {
		t.Fatalf("CONNACK 0x%02X, want success", code)
	}
}
