package control_test

import (
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/mqtt/broker"
	"github.com/fleetmq/fleetmq/mqtt/packet"
	"github.com/fleetmq/fleetmq/platform"
)

// TestDryRunIsWhatTheBrokerDoes: on the same stored layouts, the dry run
// and the broker's publish path give the same answer for every wire topic:
// the layout, client id, subpath and fanout the dry run shows are what the
// broker applies to the client's publish, and a topic the dry run finds no
// rule for the broker refuses.
func TestDryRunIsWhatTheBrokerDoes(t *testing.T) {
	f := newFixture(t)
	f.twoAccounts(t, "starter")
	// Two layouts on one root, the second shadowed for "status", and a
	// third root; the store lists them by name.
	for _, l := range []*fleetmq.Layout{
		{Name: "acme", WireRoot: "acme", Fanout: true, Rules: []string{
			"acme/{client_id}/status=state/summary",
			"acme/{client_id}/sensor/+=telemetry/{1}",
			"acme/{client_id}/alarm/#=event/alarm/{#}",
		}},
		{Name: "acme-late", WireRoot: "acme", Rules: []string{
			"acme/{client_id}/status=event/never",
			"acme/{client_id}/x/+/+=sample/{2}/{1}",
		}},
		{Name: "quiet", WireRoot: "quiet", Rules: []string{"quiet/site/+/{client_id}/#=sample/{1}/{#}"}},
	} {
		must(t, f.svc.PutLayout(f.ctx, l))
	}
	for _, c := range []string{"dev1", "dev7", "site"} {
		_, err := f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: c})
		must(t, err)
	}
	cred, secret, err := f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindPublisher})
	must(t, err)
	snap, err := platform.StoreSource{Store: f.store}.Load(f.ctx)
	must(t, err)
	pol := platform.NewPolicy(platform.Options{Now: f.clock.Now}, snap)

	matched := 0
	for _, wire := range []string{
		"acme/dev1/status", "acme/dev7/sensor/temp", "acme/dev1/alarm/door/open", "acme/site/status",
		"acme/dev1/x/a/b", "quiet/site/north/dev7/a/b", "quiet/site/north/dev7",
		"acme/dev1/other", "acme/dev1/sensor", "acme/dev1/alarm", "acme", "quiet/dev1/a",
		"other/dev1/status", "acmex/dev1/status",
	} {
		r, err := f.svc.DryRunLayout(f.ctx, wire)
		must(t, err)
		client := r.ClientID
		if client == "" {
			client = "dev1"
		}
		id, err := pol.Authenticate(f.ctx, &broker.ConnectRequest{Connect: &packet.Connect{
			ClientID: client, HasUsername: true, Username: cred.Username, HasPassword: true, Password: []byte(secret)}})
		must(t, err)
		pk := &packet.Publish{Topic: wire, QoS: 1, Payload: []byte("1")}
		m := &broker.Message{Topic: wire, QoS: 1, PublishedQoS: 1, Payload: pk.Payload}
		perr := pol.Publish(id, pk, m)
		if r.Layout == "" {
			pe, ok := perr.(*packet.Error)
			if !ok || pe.Code != packet.NotAuthorized {
				t.Errorf("%s: the dry run matched nothing (%s), the broker answered %v", wire, r.Reason, perr)
				continue
			}
			if ruleless := strings.Contains(r.Reason, "no rule matches"); ruleless != strings.Contains(pe.Reason, "matches no rule") {
				t.Errorf("%s: the dry run says %q, the broker %q", wire, r.Reason, pe.Reason)
			}
			continue
		}
		matched++
		info, _ := m.Data.(*platform.MessageInfo)
		if perr != nil || info == nil {
			t.Errorf("%s: the dry run matched %+v, the broker refused: %v", wire, r, perr)
			continue
		}
		if want := accA + "/" + r.ClientID + "/" + r.Subpath; m.Topic != want || info.Layout != r.Layout || m.NoDeliver != !r.Fanout {
			t.Errorf("%s: the dry run gives %+v; the broker topic %q, layout %q, fanout %v", wire, r, m.Topic, info.Layout, !m.NoDeliver)
		}
	}
	if matched != 6 {
		t.Errorf("%d wire topics matched a layout, want 6", matched)
	}
}
