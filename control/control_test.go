package control_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/sqlstore"
)

var t0 = time.Date(2026, 3, 14, 23, 59, 30, 0, time.UTC)

const (
	accA = "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a"
	accB = "9e1d2c3b-4a59-4687-8f6e-5d4c3b2a1908"
)

type fixture struct {
	svc   *control.Service
	store *sqlstore.Store
	clock *testkit.Clock
	ctx   context.Context
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := sqlstore.OpenDir(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := testkit.NewClock(t0)
	return &fixture{svc: &control.Service{Store: st, Now: c.Now}, store: st, clock: c, ctx: ctx}
}

// twoAccounts adds accounts A and B straight to the store (the service's
// CreateAccount hashes with argon2id, which is slow; it has its own test),
// both on the given plan.
func (f *fixture) twoAccounts(t *testing.T, plan string) {
	t.Helper()
	for i, id := range []string{accA, accB} {
		a := &fleetmq.Account{ID: id, Name: "acc" + id[:4], OwnerEmail: id[:8] + "@example.com", Plan: plan, CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		if err := f.store.CreateAccount(f.ctx, a, "unused"); err != nil {
			t.Fatal(err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func domainErr(t *testing.T, what string, err error, code string) *fleetmq.Error {
	t.Helper()
	var e *fleetmq.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("%s: got %v, want a %s error", what, err, code)
	}
	return e
}

// invalid checks err is validation_failed naming exactly the fields.
func invalid(t *testing.T, what string, err error, fields ...string) {
	t.Helper()
	e := domainErr(t, what, err, fleetmq.CodeValidation)
	got := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		got = append(got, k)
		if e.Fields[k] == "" {
			t.Errorf("%s: field %s has no message", what, k)
		}
	}
	if len(got) != len(fields) {
		t.Fatalf("%s: fields %v, want %v", what, e.Fields, fields)
	}
	for _, k := range fields {
		if _, ok := e.Fields[k]; !ok {
			t.Fatalf("%s: fields %v, want %v", what, e.Fields, fields)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestCreateAccount(t *testing.T) {
	f := newFixture(t)
	bad := []struct {
		in     control.NewAccount
		fields []string
	}{
		{control.NewAccount{Name: "Acme", OwnerEmail: "not-an-email"}, []string{"owner_email"}},
		{control.NewAccount{Name: "Acme", OwnerEmail: "Owner <owner@example.com>"}, []string{"owner_email"}},
		{control.NewAccount{Name: "Acme", OwnerEmail: "owner@example.com, x@example.com"}, []string{"owner_email"}},
		{control.NewAccount{Name: "Acme", OwnerEmail: ""}, []string{"owner_email"}},
		{control.NewAccount{Name: "", OwnerEmail: "owner@example.com"}, []string{"name"}},
		{control.NewAccount{Name: "   ", OwnerEmail: "owner@example.com"}, []string{"name"}},
		{control.NewAccount{Name: strings.Repeat("n", 201), OwnerEmail: "owner@example.com"}, []string{"name"}},
		{control.NewAccount{Name: "", OwnerEmail: "nope"}, []string{"name", "owner_email"}},
	}
	for _, tt := range bad {
		a, pw, err := f.svc.CreateAccount(f.ctx, tt.in)
		invalid(t, "CreateAccount "+tt.in.Name+"/"+tt.in.OwnerEmail, err, tt.fields...)
		if a != nil || pw != "" {
			t.Fatalf("a refused account came back with %+v and a password", a)
		}
	}
	_, _, err := f.svc.CreateAccount(f.ctx, control.NewAccount{Name: "Acme", OwnerEmail: "owner@example.com", Plan: "platinum"})
	domainErr(t, "unknown plan", err, fleetmq.CodeNotFound)
	if as, _ := f.store.Accounts(f.ctx); len(as) != 0 {
		t.Fatalf("refused creations left %d accounts", len(as))
	}

	a, pwA, err := f.svc.CreateAccount(f.ctx, control.NewAccount{Name: "  Acme  ", OwnerEmail: " Owner@Example.COM ", Plan: "starter"})
	must(t, err)
	if !fleetmq.ValidAccountID(a.ID) || a.Name != "Acme" || a.OwnerEmail != "owner@example.com" || a.Plan != "starter" || !a.CreatedAt.Equal(t0) {
		t.Fatalf("created account %+v", a)
	}
	b, pwB, err := f.svc.CreateAccount(f.ctx, control.NewAccount{Name: "Beta", OwnerEmail: "beta@example.com"})
	must(t, err)
	if b.ID == a.ID || b.Plan != "" || pwA == pwB || len(pwA) < 16 {
		t.Fatalf("second account %+v (password %d chars, equal to the first: %v)", b, len(pwA), pwA == pwB)
	}
	_, _, err = f.svc.CreateAccount(f.ctx, control.NewAccount{Name: "Dup", OwnerEmail: "OWNER@example.com"})
	domainErr(t, "second account with the same owner e-mail", err, fleetmq.CodeConflict)

	idA, hashA, err := f.store.OwnerPasswordHash(f.ctx, "owner@example.com")
	must(t, err)
	idB, hashB, err := f.store.OwnerPasswordHash(f.ctx, "beta@example.com")
	must(t, err)
	if idA != a.ID || idB != b.ID {
		t.Fatalf("owners map to %s and %s, want %s and %s", idA, idB, a.ID, b.ID)
	}
	if strings.Contains(hashA, pwA) || !strings.HasPrefix(hashA, "$argon2id$") {
		t.Fatalf("the owner password is not stored as an argon2id hash: %q", hashA)
	}
	for _, c := range []struct {
		hash, pw string
		want     bool
	}{
		{hashA, pwA, true},
		{hashB, pwB, true},
		{hashA, pwB, false}, // B's password does not open A
		{hashA, pwA + "x", false},
	} {
		ok, err := control.CheckPassword(c.hash, c.pw)
		must(t, err)
		if ok != c.want {
			t.Fatalf("CheckPassword(%s…, %q) = %v, want %v", c.hash[:20], c.pw, ok, c.want)
		}
	}
	if _, err := control.CheckPassword("plain", pwA); err == nil {
		t.Fatal("CheckPassword accepted a hash that is not argon2id")
	}
}

func TestCreateClientRules(t *testing.T) {
	f := newFixture(t)
	must(t, f.store.PutPlan(f.ctx, fleetmq.Plan{Name: "tiny", MaxPublisherClients: 2, QoS2DailyPool: 5, HistoryRetentionDays: 1}))
	f.twoAccounts(t, "")

	// No base plan: no clients.
	_, err := f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: "dev1"})
	domainErr(t, "client without a plan", err, fleetmq.CodeBasePlanRequired)
	must(t, f.svc.SetPlan(f.ctx, accA, "tiny"))
	must(t, f.svc.SetPlan(f.ctx, accB, "tiny"))

	c, err := f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: "dev1", Label: ptr("  front door  ")})
	must(t, err)
	want := &fleetmq.MQTTClient{AccountID: accA, ClientID: "dev1", Label: "front door", MaxPublishQoS: 1, CreatedAt: t0}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("created %+v, want %+v (default max_publish_qos 1, label trimmed)", c, want)
	}

	// QoS 2 needs the add-on: A has it, B does not.
	must(t, f.svc.SetAddOn(f.ctx, accA, fleetmq.AddOnQoS2, true))
	_, err = f.svc.CreateClient(f.ctx, accB, control.ClientInput{ClientID: "q2", MaxPublishQoS: ptr(2)})
	if e := domainErr(t, "max_publish_qos 2 without the add-on", err, fleetmq.CodeAddOnRequired); e.AddOn != "qos2" {
		t.Fatalf("addon_required names add-on %q, want qos2", e.AddOn)
	}
	c, err = f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: "q2", MaxPublishQoS: ptr(2)})
	must(t, err)
	if c.MaxPublishQoS != 2 {
		t.Fatalf("max_publish_qos %d, want 2", c.MaxPublishQoS)
	}
	for _, q := range []int{-1, 3} {
		_, err = f.svc.CreateClient(f.ctx, accB, control.ClientInput{ClientID: "qx", MaxPublishQoS: ptr(q)})
		invalid(t, "max_publish_qos out of range", err, "max_publish_qos")
	}

	// The plan allows 2: A is full, B is not.
	_, err = f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: "dev3"})
	domainErr(t, "third client on a plan of 2", err, fleetmq.CodeConflict)
	_, err = f.svc.CreateClient(f.ctx, accB, control.ClientInput{ClientID: "dev1", MaxPublishQoS: ptr(0)})
	must(t, err)

	for _, id := range []string{"a/b", "a+b", "+", "a#", "#", "", "$sys", "-lead", "has space", strings.Repeat("x", 129)} {
		_, err = f.svc.CreateClient(f.ctx, accB, control.ClientInput{ClientID: id})
		invalid(t, "client id "+id, err, "client_id")
	}
	long := strings.Repeat("x", 128)
	_, err = f.svc.CreateClient(f.ctx, accB, control.ClientInput{ClientID: long})
	must(t, err)
	_, err = f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: "dev9", Label: ptr(strings.Repeat("l", 201))})
	invalid(t, "label too long", err, "label")

	// UpdateClient: the same rules, and only within the account.
	_, err = f.svc.UpdateClient(f.ctx, accB, control.ClientInput{ClientID: "dev1", MaxPublishQoS: ptr(2)})
	domainErr(t, "raising B's client to 2 without the add-on", err, fleetmq.CodeAddOnRequired)
	_, err = f.svc.UpdateClient(f.ctx, accA, control.ClientInput{ClientID: long, MaxPublishQoS: ptr(0)})
	domainErr(t, "A updating B's client", err, fleetmq.CodeNotFound)
	err = f.svc.DeleteClient(f.ctx, accA, long)
	domainErr(t, "A deleting B's client", err, fleetmq.CodeNotFound)
	u, err := f.svc.UpdateClient(f.ctx, accA, control.ClientInput{ClientID: "dev1", MaxPublishQoS: ptr(2)})
	must(t, err)
	if u.MaxPublishQoS != 2 || u.Label != "front door" {
		t.Fatalf("updated %+v: max_publish_qos 2 and the label kept", u)
	}
	bc, err := f.store.Client(f.ctx, accB, "dev1")
	must(t, err)
	if bc.MaxPublishQoS != 0 {
		t.Fatalf("B's dev1 changed with A's: %+v", bc)
	}
	// Deleting frees a slot under the limit.
	must(t, f.svc.DeleteClient(f.ctx, accA, "dev1"))
	_, err = f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: "dev3"})
	must(t, err)
}

func TestCredentials(t *testing.T) {
	f := newFixture(t)
	f.twoAccounts(t, "starter")

	pub, secret, err := f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindPublisher, Label: " fleet "})
	must(t, err)
	if len(secret) < 32 || pub.SecretHash != fleetmq.HashSecret(secret) || !strings.HasPrefix(pub.Username, "pub-") ||
		pub.Label != "fleet" || !pub.ExpiresAt.IsZero() || pub.Filters != nil || !pub.CreatedAt.Equal(t0) {
		t.Fatalf("publisher credential %+v (secret %d chars)", pub, len(secret))
	}
	stored, err := f.store.Credentials(f.ctx, accA, "")
	must(t, err)
	if len(stored) != 1 || stored[0].SecretHash != fleetmq.HashSecret(secret) {
		t.Fatalf("stored %+v, want the secret's SHA-256 only", stored)
	}
	if s := stored[0]; s.SecretHash == secret || s.Username == secret || s.Label == secret || strings.Contains(strings.Join(s.Filters, ""), secret) {
		t.Fatal("the secret itself is stored")
	}

	sub, subSecret, err := f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindSubscriber})
	must(t, err)
	if !reflect.DeepEqual(sub.Filters, []string{accA + "/#"}) || !strings.HasPrefix(sub.Username, "sub-") || subSecret == secret {
		t.Fatalf("subscriber password %+v: want default filter %s/#", sub, accA)
	}
	narrow, _, err := f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindSubscriber,
		Filters: []string{accA + "/+/state/#", accA + "/dev1/#", accA + "/dev2/telemetry/temp"}})
	must(t, err)
	if len(narrow.Filters) != 3 {
		t.Fatalf("filters %q", narrow.Filters)
	}
	for _, flt := range []string{"#", "+/#", accB + "/#", "$SYS/#", "$share/g/" + accA + "/#", accA + "x/#", accA + "/#/x", accA + "/a+", "",
		accA + "/a\n" + accB + "/#"} { // stored one per line: must not smuggle in B's filter
		_, _, err := f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindSubscriber, Filters: []string{accA + "/ok/#", flt}})
		invalid(t, "subscriber filter "+flt, err, "filters")
	}
	_, _, err = f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindPublisher, Filters: []string{accA + "/#"}})
	invalid(t, "publisher with filters", err, "filters")
	_, _, err = f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: "admin"})
	invalid(t, "unknown kind", err, "kind")
	_, _, err = f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindPublisher, Label: strings.Repeat("l", 201)})
	invalid(t, "long label", err, "label")
	_, _, err = f.svc.CreateCredential(f.ctx, "00000000-0000-4000-8000-000000000000", control.NewCredential{Kind: fleetmq.KindPublisher})
	domainErr(t, "credential of a missing account", err, fleetmq.CodeNotFound)

	// Expiry in days: 0 never, 1..3650, from the service's clock.
	for _, d := range []int{-1, 3651} {
		_, _, err = f.svc.CreateCredential(f.ctx, accB, control.NewCredential{Kind: fleetmq.KindPublisher, ExpiresInDays: d})
		invalid(t, "expiry days out of range", err, "expires_in_days")
	}
	now := t0.Add(48 * time.Hour)
	f.clock.Set(now)
	for _, d := range []int{1, 30, 3650} {
		c, _, err := f.svc.CreateCredential(f.ctx, accB, control.NewCredential{Kind: fleetmq.KindPublisher, ExpiresInDays: d})
		must(t, err)
		want := now.AddDate(0, 0, d)
		if !c.ExpiresAt.Equal(want) || !c.CreatedAt.Equal(now) {
			t.Fatalf("%d days: expires %v, want %v", d, c.ExpiresAt, want)
		}
		if !c.Active(want.Add(-time.Microsecond)) || c.Active(want) {
			t.Fatalf("%d days: active until just before %v, not at it", d, want)
		}
	}

	// Usernames are unique across every credential of both accounts.
	seen := map[string]bool{}
	for _, acc := range []string{accA, accB} {
		for i := 0; i < 20; i++ {
			kind := fleetmq.KindPublisher
			if i%2 == 1 {
				kind = fleetmq.KindSubscriber
			}
			_, _, err := f.svc.CreateCredential(f.ctx, acc, control.NewCredential{Kind: kind})
			must(t, err)
		}
		cs, err := f.store.Credentials(f.ctx, acc, "")
		must(t, err)
		for _, c := range cs {
			if seen[c.Username] {
				t.Fatalf("username %s issued twice", c.Username)
			}
			seen[c.Username] = true
		}
	}

	// Revocation is per account.
	bCreds, err := f.store.Credentials(f.ctx, accB, "")
	must(t, err)
	domainErr(t, "A revoking B's credential", f.svc.RevokeCredential(f.ctx, accA, bCreds[0].ID), fleetmq.CodeNotFound)
	must(t, f.svc.RevokeCredential(f.ctx, accA, pub.ID))
	must(t, f.svc.RevokeCredential(f.ctx, accA, pub.ID)) // twice is fine
	after, err := f.store.Credentials(f.ctx, accB, "")
	must(t, err)
	if !reflect.DeepEqual(after, bCreds) {
		t.Fatal("B's credentials changed when A revoked")
	}
	aCreds, err := f.store.Credentials(f.ctx, accA, fleetmq.KindPublisher)
	must(t, err)
	for _, c := range aCreds {
		if c.ID == pub.ID && !c.RevokedAt.Equal(now) {
			t.Fatalf("revoked at %v, want %v", c.RevokedAt, now)
		}
	}
}

func TestPutLayout(t *testing.T) {
	f := newFixture(t)
	good := &fleetmq.Layout{Name: "acme", WireRoot: "acme", Fanout: true, Rules: []string{
		"acme/{client_id}/status=state/summary",
		"acme/{client_id}/sensor/+=telemetry/{1}",
		"acme/{client_id}/alarm/#=event/alarm/{#}",
		" acme/site/+/{client_id}/+/raw = sample/{2}/{1} ",
	}}
	must(t, f.svc.PutLayout(f.ctx, good))
	if good.ID == "" || !good.CreatedAt.Equal(t0) {
		t.Fatalf("registered layout %+v", good)
	}

	bad := []struct {
		name string
		l    fleetmq.Layout
		want string // field
	}{
		{"missing {client_id}", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/status=state/summary"}}, "rules"},
		{"{client_id} twice", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/{client_id}=state/s"}}, "rules"},
		{"bad class", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/cfg=config/x"}}, "rules"},
		{"class only", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/s=state"}}, "rules"},
		{"{2} with one +", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/+=telemetry/{2}"}}, "rules"},
		{"{0}", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/+=telemetry/{0}"}}, "rules"},
		{"{#} without #", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/a=event/{#}"}}, "rules"},
		{"# not last", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/#/a=event/{#}"}}, "rules"},
		{"root is a UUID", fleetmq.Layout{Name: "x", WireRoot: accA, Rules: []string{accA + "/{client_id}/s=state/s"}}, "rules"},
		{"root with a wildcard", fleetmq.Layout{Name: "x", WireRoot: "v+", Rules: []string{"v+/{client_id}/s=state/s"}}, "rules"},
		{"root with $", fleetmq.Layout{Name: "x", WireRoot: "$SYS", Rules: []string{"$SYS/{client_id}/s=state/s"}}, "rules"},
		{"pattern off the root", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"other/{client_id}/s=state/s"}}, "rules"},
		{"no =", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/s"}}, "rules"},
		{"no rules", fleetmq.Layout{Name: "x", WireRoot: "vend"}, "rules"},
		{"line break", fleetmq.Layout{Name: "x", WireRoot: "vend", Rules: []string{"vend/{client_id}/s=state/s\nvend/x=bad"}}, "rules"},
		{"bad name", fleetmq.Layout{Name: "Bad Name", WireRoot: "vend", Rules: []string{"vend/{client_id}/s=state/s"}}, "name"},
	}
	for _, tt := range bad {
		l := tt.l
		invalid(t, tt.name, f.svc.PutLayout(f.ctx, &l), tt.want)
	}
	ls, err := f.store.Layouts(f.ctx)
	must(t, err)
	if len(ls) != 1 || ls[0].Name != "acme" || !reflect.DeepEqual(ls[0].Rules, good.Rules) || !ls[0].Fanout {
		t.Fatalf("layouts after refused ones: %+v", ls)
	}

	// Replacing by name.
	must(t, f.svc.PutLayout(f.ctx, &fleetmq.Layout{Name: "acme", WireRoot: "acme", Rules: []string{"acme/{client_id}/status=state/summary"}}))
	ls, err = f.store.Layouts(f.ctx)
	must(t, err)
	if len(ls) != 1 || len(ls[0].Rules) != 1 || ls[0].Fanout {
		t.Fatalf("after replacing: %+v", ls)
	}
}

func TestDryRunLayout(t *testing.T) {
	f := newFixture(t)
	must(t, f.svc.PutLayout(f.ctx, &fleetmq.Layout{Name: "acme", WireRoot: "acme", Fanout: true, Rules: []string{
		"acme/{client_id}/status=state/summary",
		"acme/{client_id}/sensor/+=telemetry/{1}",
		"acme/{client_id}/alarm/#=event/alarm/{#}",
	}}))
	must(t, f.svc.PutLayout(f.ctx, &fleetmq.Layout{Name: "acme-site", WireRoot: "acme", Rules: []string{
		"acme/site/+/{client_id}=sample/{1}",
	}}))
	matched := []struct {
		wire, layout, client, subpath string
		fanout                        bool
	}{
		{"acme/dev1/status", "acme", "dev1", "state/summary", true},
		{"acme/dev1/sensor/temp", "acme", "dev1", "telemetry/temp", true},
		{"acme/dev1/alarm/door/open", "acme", "dev1", "event/alarm/door/open", true},
		{"acme/site/north/dev7", "acme-site", "dev7", "sample/north", false},
	}
	for _, tt := range matched {
		r, err := f.svc.DryRunLayout(f.ctx, tt.wire)
		must(t, err)
		want := &control.DryRun{Layout: tt.layout, ClientID: tt.client, Subpath: tt.subpath, Fanout: tt.fanout}
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("dry run %s = %+v, want %+v", tt.wire, r, want)
		}
	}
	for _, wire := range []string{"acme/dev1/other", "acme/dev1/sensor", "acme/dev1/sensor/a/b", "acme/dev1/status/x", "acme/dev1/alarm", "acme"} {
		r, err := f.svc.DryRunLayout(f.ctx, wire)
		must(t, err)
		if r.Layout != "" || !strings.Contains(r.Reason, "registered but no rule matches") {
			t.Fatalf("dry run %s (registered root, no rule) = %+v", wire, r)
		}
	}
	for _, wire := range []string{"other/dev1/status", "acmex/dev1/status"} {
		r, err := f.svc.DryRunLayout(f.ctx, wire)
		must(t, err)
		if r.Layout != "" || !strings.Contains(r.Reason, "no layout is registered") {
			t.Fatalf("dry run %s (unregistered root) = %+v", wire, r)
		}
	}
	for _, wire := range []string{"acme/+/status", "acme/#", ""} {
		_, err := f.svc.DryRunLayout(f.ctx, wire)
		invalid(t, "dry run of "+wire, err, "topic")
	}
	// Removing the layouts makes the root unregistered.
	must(t, f.store.DeleteLayout(f.ctx, "acme"))
	must(t, f.store.DeleteLayout(f.ctx, "acme-site"))
	r, err := f.svc.DryRunLayout(f.ctx, "acme/dev1/status")
	must(t, err)
	if r.Layout != "" || !strings.Contains(r.Reason, "no layout is registered") {
		t.Fatalf("after removal: %+v", r)
	}
}

// TestCreatedTimesReadBackTheSame: what a create returns is what a later
// read returns, to the store's precision, even when the clock has
// nanoseconds.
func TestCreatedTimesReadBackTheSame(t *testing.T) {
	f := newFixture(t)
	f.twoAccounts(t, "starter")
	f.clock.Set(t0.Add(123456789 * time.Nanosecond))
	c, err := f.svc.CreateClient(f.ctx, accA, control.ClientInput{ClientID: "pump-1"})
	must(t, err)
	stored, err := f.store.Client(f.ctx, accA, "pump-1")
	must(t, err)
	if !c.CreatedAt.Equal(stored.CreatedAt) {
		t.Errorf("client created at %v, read back %v", c.CreatedAt, stored.CreatedAt)
	}
	cr, _, err := f.svc.CreateCredential(f.ctx, accA, control.NewCredential{Kind: fleetmq.KindSubscriber, ExpiresInDays: 30})
	must(t, err)
	crs, err := f.store.Credentials(f.ctx, accA, "")
	must(t, err)
	if len(crs) != 1 || !cr.CreatedAt.Equal(crs[0].CreatedAt) || !cr.ExpiresAt.Equal(crs[0].ExpiresAt) {
		t.Errorf("credential created %v expires %v, read back %+v", cr.CreatedAt, cr.ExpiresAt, crs)
	}
}
