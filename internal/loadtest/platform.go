package loadtest

import (
	"context"
	"fmt"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// platformSetup is what the platform loads authenticate with: one account
// on the bench plan with the QoS 2 add-on, publishers (dev0..devN-1 for
// the comparison, the soak's devices for the soak) allowed QoS 2, a fleet
// credential and a subscriber password.
type platformSetup struct {
	account          string
	pubUser, pubPass string
	subUser, subPass string
}

// benchClientIDs are the comparison's publishers, dev0..devN-1.
func benchClientIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("dev%d", i)
	}
	return ids
}

// provisionPlatform creates the benchmark account in a data directory,
// with the given publisher client ids.
func provisionPlatform(ctx context.Context, dir string, clientIDs []string) (*platformSetup, error) {
	publishers := len(clientIDs)
	store, err := sqlstore.OpenDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	svc := control.New(store)
	// Plenty of clients and pool, so the loads run under the real rules
	// without the plan itself refusing them.
	if err := svc.PutPlan(ctx, &fleetmq.Plan{Name: "bench", MaxPublisherClients: max(publishers, 1000), QoS2DailyPool: 100_000_000, HistoryRetentionDays: 1}, unlimitedRates()); err != nil {
		return nil, err
	}
	acc, _, err := svc.CreateAccount(ctx, control.NewAccount{Name: "bench", OwnerEmail: "bench@fleetmq.invalid", Plan: "bench"})
	if err != nil {
		return nil, err
	}
	if err := svc.SetAddOn(ctx, acc.ID, fleetmq.AddOnQoS2, true); err != nil {
		return nil, err
	}
	two := 2
	for _, id := range clientIDs {
		if _, err := svc.CreateClient(ctx, acc.ID, control.ClientInput{ClientID: id, MaxPublishQoS: &two}); err != nil {
			return nil, err
		}
	}
	pub, pubPass, err := svc.CreateCredential(ctx, acc.ID, control.NewCredential{Kind: fleetmq.KindPublisher, Label: "bench"})
	if err != nil {
		return nil, err
	}
	sub, subPass, err := svc.CreateCredential(ctx, acc.ID, control.NewCredential{Kind: fleetmq.KindSubscriber, Label: "bench"})
	if err != nil {
		return nil, err
	}
	return &platformSetup{account: acc.ID, pubUser: pub.Username, pubPass: pubPass, subUser: sub.Username, subPass: subPass}, nil
}

// pubsub fills a load's identities and topics: devices publish on state/
// (where QoS 2 stays QoS 2 under the add-on) and the subscriber follows
// the whole account.
func (p *platformSetup) pubsub(c *PubSubConfig) {
	c.PubClientID = "dev{i}"
	c.PubTopic = p.account + "/dev{i}/state/bench"
	c.PubUsername, c.PubPassword = p.pubUser, p.pubPass
	c.SubFilter = p.account + "/#"
	c.SubUsername, c.SubPassword = p.subUser, p.subPass
}

// fleet fills a fleet load's identities and topics: devices dev{i} with
// the publisher credential, on {account}/dev{i}/state/device and
// {account}/dev{i}/telemetry/sensors (the platform layout wants a level
// after the class), and subscribers following the whole account.
func (p *platformSetup) fleet(c *FleetConfig) {
	c.DeviceID = "dev{i}"
	c.StateTopic = p.account + "/dev{i}/state/device"
	c.TelemetryTopic = p.account + "/dev{i}/telemetry/sensors"
	c.DeviceUsername, c.DevicePassword = p.pubUser, p.pubPass
	c.SubFilter = p.account + "/#"
	c.SubUsername, c.SubPassword = p.subUser, p.subPass
}

// idle fills an idle load's credentials (subscriber passwords connect with
// any client id).
func (p *platformSetup) idle(c *IdleConfig) {
	c.Username, c.Password = p.subUser, p.subPass
}

// historyCount counts the records in the platform's history (the broker
// is stopped, so the count is final).
func (p *platformSetup) historyCount(ctx context.Context, dir string) (int64, error) {
	store, err := sqlstore.OpenDir(ctx, dir)
	if err != nil {
		return 0, err
	}
	defer store.Close()
	return store.CountHistory(ctx, p.account)
}

// unlimitedRates are a plan's publish rates all given as 0 (unlimited), for
// the benchmark plans whose loads the rates must not shape.
func unlimitedRates() control.PlanRates {
	var zero int
	var zero64 int64
	return control.PlanRates{Publish: &zero, AccountPublish: &zero, PublishBytes: &zero64, AccountPublishBytes: &zero64}
}
