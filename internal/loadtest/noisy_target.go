package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// noisyTenant is one account of the noisy-neighbour run with what its
// clients authenticate with.
type noisyTenant struct {
	account, email     string
	pubUser, pubPass   string
	subUser, subPass   string
	token              string   // svc_mqtt_rest_...
	loopTokens         []string // the attacker's: one more per expensive-filter loop
	maxRetained        int      // the plan's bound on retained messages
	clients            []string
	historyClient      string // a client with stored history
	historyRecords     int
	historyFillSeconds float64
}

// The attacker's MQTT clients.
const (
	attFlood  = "att-flood"
	attPub    = "att-pub"
	attRetain = "att-retain"
	attProps  = "att-props"
)

// noisyNewDevices is how many never-connected victim devices there are for
// the connect probe (one per phase).
const noisyNewDevices = 32

// provisionNoisy creates the victim and attacker accounts (with unique
// owner addresses, so a PostgreSQL database may be reused) and fills
// their history through the store: the victim's 1,000 records of
// victim-pub, the attacker's records spread over 10 clients.
func provisionNoisy(ctx context.Context, cfg *NoisyConfig, dir string) (victim, attacker *noisyTenant, err error) {
	var st *sqlstore.Store
	if cfg.Database != "" {
		st, err = sqlstore.Open(ctx, cfg.Database)
	} else {
		st, err = sqlstore.OpenDir(ctx, dir)
	}
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	svc := control.New(st)
	if err := svc.PutPlan(ctx, &fleetmq.Plan{Name: "noisy-victim", MaxPublisherClients: 100, QoS2DailyPool: 1_000_000, HistoryRetentionDays: 30}, unlimitedRates()); err != nil {
		return nil, nil, err
	}
	ap := fleetmq.Plan{Name: "noisy-attacker", MaxPublisherClients: cfg.AttackerClients, QoS2DailyPool: 1_000_000, HistoryRetentionDays: 30}
	rates := unlimitedRates()
	if cfg.AttackerRates != "none" {
		i := slices.IndexFunc(fleetmq.DefaultPlans, func(p fleetmq.Plan) bool { return p.Name == cfg.AttackerRates })
		if i < 0 {
			return nil, nil, fmt.Errorf("-attacker-rates %q: not a catalog plan (or none)", cfg.AttackerRates)
		}
		c := fleetmq.DefaultPlans[i]
		rates = control.PlanRates{Publish: &c.MaxPublishRate, PublishBytes: &c.MaxPublishBytesRate,
			AccountPublish: &c.MaxAccountPublishRate, AccountPublishBytes: &c.MaxAccountPublishBytesRate}
	}
	if err := svc.PutPlan(ctx, &ap, rates); err != nil {
		return nil, nil, err
	}
	run := randomHex(4)
	vclients := []string{"victim-pub"}
	for i := range noisyNewDevices {
		vclients = append(vclients, fmt.Sprintf("victim-new-%d", i))
	}
	victim, err = newNoisyTenant(ctx, svc, "victim", run, "noisy-victim", vclients)
	if err != nil {
		return nil, nil, err
	}
	attacker, err = newNoisyTenant(ctx, svc, "attacker", run, "noisy-attacker", []string{attFlood, attPub, attRetain, attProps})
	if err != nil {
		return nil, nil, err
	}
	victim.maxRetained = 100 * platform.RetainedPerClient
	attacker.maxRetained = cfg.AttackerClients * platform.RetainedPerClient
	for i := range cfg.FilterLoops {
		_, tok, err := svc.CreateRESTToken(ctx, attacker.account, control.NewRESTToken{Label: fmt.Sprintf("noisy loop %d", i)})
		if err != nil {
			return nil, nil, err
		}
		attacker.loopTokens = append(attacker.loopTokens, tok)
	}
	if err := fillNoisyHistory(ctx, st, victim, 1, 1000); err != nil {
		return nil, nil, err
	}
	start := time.Now()
	if err := fillNoisyHistory(ctx, st, attacker, 10, cfg.AttackerRecords); err != nil {
		return nil, nil, err
	}
	attacker.historyFillSeconds = time.Since(start).Seconds()
	return victim, attacker, nil
}

func newNoisyTenant(ctx context.Context, svc *control.Service, name, run, plan string, clients []string) (*noisyTenant, error) {
	email := fmt.Sprintf("noisy-%s-%s@fleetmq.invalid", name, run)
	acc, _, err := svc.CreateAccount(ctx, control.NewAccount{Name: "noisy " + name, OwnerEmail: email, Plan: plan})
	if err != nil {
		return nil, err
	}
	for _, x := range []fleetmq.AddOn{fleetmq.AddOnHistoryDownload, fleetmq.AddOnLiveREST} {
		if err := svc.SetAddOn(ctx, acc.ID, x, true); err != nil {
			return nil, err
		}
	}
	for _, id := range clients {
		if _, err := svc.CreateClient(ctx, acc.ID, control.ClientInput{ClientID: id}); err != nil {
			return nil, fmt.Errorf("client %s: %w", id, err)
		}
	}
	pub, pubPass, err := svc.CreateCredential(ctx, acc.ID, control.NewCredential{Kind: fleetmq.KindPublisher, Label: "noisy"})
	if err != nil {
		return nil, err
	}
	sub, subPass, err := svc.CreateCredential(ctx, acc.ID, control.NewCredential{Kind: fleetmq.KindSubscriber, Label: "noisy"})
	if err != nil {
		return nil, err
	}
	_, token, err := svc.CreateRESTToken(ctx, acc.ID, control.NewRESTToken{Label: "noisy"})
	if err != nil {
		return nil, err
	}
	return &noisyTenant{account: acc.ID, email: email, pubUser: pub.Username, pubPass: pubPass,
		subUser: sub.Username, subPass: subPass, token: token, clients: clients}, nil
}

// fillNoisyHistory stores n small JSON records of the tenant, spread over
// clients clients, one per millisecond up to now (well inside retention).
func fillNoisyHistory(ctx context.Context, st *sqlstore.Store, t *noisyTenant, clients, n int) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	recs := make([]*fleetmq.Record, 0, 2048)
	for i := range n {
		c := "victim-pub"
		if clients > 1 {
			c = fmt.Sprintf("att-%d", i%clients)
		}
		recs = append(recs, &fleetmq.Record{AccountID: t.account, ClientID: c, Topic: t.account + "/" + c + "/telemetry/fill",
			Class: "telemetry", QoS: 1, PublishedQoS: 1, Payload: []byte(fmt.Sprintf(`{"seq":%d,"v":21.5}`, i)),
			Received: now.Add(-time.Duration(n-i) * time.Millisecond)})
		if len(recs) == cap(recs) || i == n-1 {
			if err := st.AppendHistory(ctx, recs); err != nil {
				return err
			}
			recs = recs[:0]
		}
	}
	t.historyClient, t.historyRecords = "victim-pub", n
	if clients > 1 {
		t.historyClient = "att-0"
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// startNoisyServe provisions the tenants and starts "fleetmq serve" on
// loopback ports with its metrics and health on a listener of their own.
func startNoisyServe(ctx context.Context, cfg *NoisyConfig) (*soakTarget, *noisyTenant, *noisyTenant, error) {
	dir, err := os.MkdirTemp("", "fleetmq-noisy-")
	if err != nil {
		return nil, nil, nil, err
	}
	t := &soakTarget{kind: "serve", dir: dir, keep: cfg.KeepData}
	victim, attacker, err := provisionNoisy(ctx, cfg, dir)
	if err != nil {
		t.removeDir()
		return nil, nil, nil, fmt.Errorf("provision the tenants: %w", err)
	}
	argv := []string{cfg.Bin, "serve", "-data", dir, "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0",
		"-metrics-listen", "127.0.0.1:0", "-log-format", "json", "-log-level", "info",
		"-rest-rate-limit", fmt.Sprint(cfg.RESTRateLimit)}
	if cfg.Database != "" {
		argv = append(argv, "-database", cfg.Database)
	}
	argv = append(argv, cfg.ServeArgs...)
	if err := t.start(argv, cfg.ServerLog); err != nil {
		t.removeDir()
		return nil, nil, nil, err
	}
	if t.httpURL == "" || t.metricsURL == "" {
		t.stop()
		return nil, nil, nil, fmt.Errorf("serve named no HTTP or metrics listener")
	}
	return t, victim, attacker, nil
}
