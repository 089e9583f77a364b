package sqlstore_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// t0 is a fixed instant; the store takes times from its callers.
var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

const (
	accA = "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a"
	accB = "9e1d2c3b-4a59-4687-8f6e-5d4c3b2a1908"
)

// The store tests are a contract suite: every test runs against SQLite and
// PostgreSQL (pgtest.ForEachDSN), as subtests "sqlite" and "postgres", each
// on a database of its own. PostgreSQL comes from FLEETMQ_TEST_POSTGRES;
// without it the postgres subtests skip, or fail under
// FLEETMQ_REQUIRE_TOOLS=1.

// forEachDSN is pgtest.ForEachDSN: a fresh database's DSN per backend.
func forEachDSN(t *testing.T, f func(t *testing.T, dsn string)) { pgtest.ForEachDSN(t, f) }

// forEachStore runs f once per backend, in parallel subtests, on a fresh
// store closed when the subtest ends.
func forEachStore(t *testing.T, f func(t *testing.T, s *sqlstore.Store)) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		s := open(t, dsn)
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
}

func open(t *testing.T, dsn string) *sqlstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := fleetmq.CodeOf(err); got != code {
		t.Fatalf("%s: got error %v (code %q), want code %q", what, err, got, code)
	}
}

// twoAccounts creates accounts A and B on plan "starter".
func twoAccounts(t *testing.T, s *sqlstore.Store) {
	t.Helper()
	ctx := ctxT(t)
	must(t, s.CreateAccount(ctx, &fleetmq.Account{ID: accA, Name: "A", OwnerEmail: "a@example.com", Plan: "starter", CreatedAt: t0}, "hash-a"))
	must(t, s.CreateAccount(ctx, &fleetmq.Account{ID: accB, Name: "B", OwnerEmail: "b@example.com", Plan: "starter", CreatedAt: t0.Add(time.Second)}, "hash-b"))
}

func client(acc, id string, qos int) *fleetmq.MQTTClient {
	return &fleetmq.MQTTClient{AccountID: acc, ClientID: id, Label: "label of " + id, MaxPublishQoS: qos, CreatedAt: t0}
}

func cred(acc, id, user, kind string) *fleetmq.Credential {
	c := &fleetmq.Credential{ID: id, AccountID: acc, Kind: kind, Username: user, Label: "l", SecretHash: fleetmq.HashSecret("s-" + id), CreatedAt: t0}
	if kind == fleetmq.KindSubscriber {
		c.Filters = []string{acc + "/#", acc + "/+/state/#"}
	}
	return c
}

func TestMigrationsApplyOnceAndReopenIsNoOp(t *testing.T) {
	forEachDSN(t, testMigrationsApplyOnce)
}

func testMigrationsApplyOnce(t *testing.T, dsn string) {
	ctx := ctxT(t)
	s := open(t, dsn)
	var n int
	must(t, s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n))
	if n == 0 {
		t.Fatal("no migration recorded after the first open")
	}
	plans, err := s.Plans(ctx)
	must(t, err)
	if !reflect.DeepEqual(plans, fleetmq.DefaultPlans) {
		t.Fatalf("a new store's plans = %+v, want the default catalog %+v", plans, fleetmq.DefaultPlans)
	}
	must(t, s.CreateAccount(ctx, &fleetmq.Account{ID: accA, Name: "A", OwnerEmail: "a@example.com", CreatedAt: t0}, "h"))
	v1, err := s.Version(ctx)
	must(t, err)
	must(t, s.Close())

	for i := 0; i < 2; i++ {
		s = open(t, dsn)
		var m int
		must(t, s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&m))
		if m != n {
			t.Fatalf("reopen %d: %d migrations recorded, want %d (none re-applied)", i+1, m, n)
		}
		v, err := s.Version(ctx)
		must(t, err)
		if v != v1 {
			t.Fatalf("reopen %d: version %d, want %d (reopening is not a write)", i+1, v, v1)
		}
		again, err := s.Plans(ctx)
		must(t, err)
		if !reflect.DeepEqual(again, plans) {
			t.Fatalf("reopen %d: plans %+v, want %+v", i+1, again, plans)
		}
		a, err := s.Account(ctx, accA)
		must(t, err)
		if a.Name != "A" || !a.CreatedAt.Equal(t0) {
			t.Fatalf("reopen %d: account %+v lost its data", i+1, a)
		}
		must(t, s.Close())
	}
}

// TestConcurrentOpensMigrateOnce: several fleetmq processes may start on
// one database at once; each migration is applied once and every open
// succeeds (PostgreSQL: advisory lock; SQLite: immediate transaction).
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		const n = 6
		stores := make([]*sqlstore.Store, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				stores[i], errs[i] = sqlstore.Open(ctx, dsn)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("open %d: %v", i, err)
			}
			t.Cleanup(func() { stores[i].Close() })
		}
		ctx := ctxT(t)
		var rows, distinct int
		must(t, stores[0].DB().QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&rows, &distinct))
		if rows == 0 || rows != distinct {
			t.Fatalf("schema_migrations has %d rows for %d versions", rows, distinct)
		}
		plans, err := stores[n-1].Plans(ctx)
		must(t, err)
		if !reflect.DeepEqual(plans, fleetmq.DefaultPlans) {
			t.Fatalf("plans after concurrent opens = %+v (seeded more than once?)", plans)
		}
	})
}

// TestNewerSchemaIsRefused: a binary does not run on a schema a newer
// fleetmq migrated.
func TestNewerSchemaIsRefused(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		ctx := ctxT(t)
		s := open(t, dsn)
		_, err := s.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')`)
		must(t, err)
		must(t, s.Close())
		s, err = sqlstore.Open(ctx, dsn)
		if err == nil {
			s.Close()
			t.Fatal("opened a database with schema version 9999")
		}
		if !strings.Contains(err.Error(), "schema version 9999") {
			t.Fatalf("error %q does not name the schema version", err)
		}
	})
}

func TestOpenUnreachablePostgresFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there.
	s, err := sqlstore.Open(ctx, "postgres://fleet:s3cret@127.0.0.1:1/fleetmq?sslmode=disable&connect_timeout=5")
	if err == nil {
		s.Close()
		t.Fatal("opened a PostgreSQL store with no server")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

func TestVersionMovesOnEveryWriteAndNotOnReads(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		version := func() int64 {
			t.Helper()
			v, err := s.Version(ctx)
			must(t, err)
			return v
		}
		reads := func() {
			t.Helper()
			before := version()
			_, err := s.Account(ctx, accA)
			must(t, err)
			_, err = s.Accounts(ctx)
			must(t, err)
			_, _, err = s.OwnerPasswordHash(ctx, "a@example.com")
			must(t, err)
			_, err = s.Plans(ctx)
			must(t, err)
			_, err = s.Plan(ctx, "starter")
			must(t, err)
			_, err = s.SubscriptionChanges(ctx, accA)
			must(t, err)
			_, err = s.Clients(ctx, accA)
			must(t, err)
			_, err = s.AllClients(ctx)
			must(t, err)
			_, err = s.Credentials(ctx, accA, "")
			must(t, err)
			_, err = s.ActiveCredentials(ctx)
			must(t, err)
			_, err = s.Layouts(ctx)
			must(t, err)
			_, err = s.Usage(ctx, accA, "2026-01-01", "2026-12-31")
			must(t, err)
			_, err = s.ClientUsage(ctx, accA, "2026-01-01", "2026-12-31")
			must(t, err)
			// Usage is metering, not control plane: flushing it every reload
			// interval must not make the broker reload its snapshot.
			must(t, s.AddUsage(ctx, []fleetmq.DailyUsage{{AccountID: accA, Day: "2026-03-14", Messages: [3]int64{1}}}, nil))
			if v := version(); v != before {
				t.Fatalf("reads (and AddUsage) moved the version from %d to %d", before, v)
			}
		}
		writes := []struct {
			name string
			f    func() error
		}{
			{"CreateAccount", func() error {
				return s.CreateAccount(ctx, &fleetmq.Account{ID: accA, Name: "A", OwnerEmail: "a@example.com", CreatedAt: t0}, "h")
			}},
			{"SetSuspended", func() error { return s.SetSuspended(ctx, accA, true) }},
			{"PutPlan", func() error {
				return s.PutPlan(ctx, fleetmq.Plan{Name: "tiny", MaxPublisherClients: 2, QoS2DailyPool: 5, HistoryRetentionDays: 1})
			}},
			{"SetPlan", func() error { return s.SetPlan(ctx, accA, "tiny", t0) }},
			{"SetAddOn", func() error { return s.SetAddOn(ctx, accA, fleetmq.AddOnQoS2, true, t0) }},
			{"CreateClient", func() error { return s.CreateClient(ctx, client(accA, "dev1", 1), 2) }},
			{"UpdateClient", func() error { return s.UpdateClient(ctx, client(accA, "dev1", 0)) }},
			{"DeleteClient", func() error { return s.DeleteClient(ctx, accA, "dev1") }},
			{"CreateCredential", func() error {
				return s.CreateCredential(ctx, cred(accA, "c1", "pub-one", fleetmq.KindPublisher))
			}},
			{"RevokeCredential", func() error { return s.RevokeCredential(ctx, accA, "c1", t0) }},
			{"PutLayout", func() error {
				return s.PutLayout(ctx, &fleetmq.Layout{ID: "l1", Name: "acme", WireRoot: "acme", Rules: []string{"acme/{client_id}/s=state/s"}, CreatedAt: t0})
			}},
			{"DeleteLayout", func() error { return s.DeleteLayout(ctx, "acme") }},
		}
		for i, w := range writes {
			before := version()
			must(t, w.f())
			after := version()
			if after == before {
				t.Fatalf("%s did not move the version (%d)", w.name, before)
			}
			if i == 0 {
				reads()
			}
		}
		reads()

		// A write that fails changes nothing, the version included.
		before := version()
		wantCode(t, "DeleteLayout of a missing layout", s.DeleteLayout(ctx, "acme"), fleetmq.CodeNotFound)
		wantCode(t, "SetPlan to a missing plan", s.SetPlan(ctx, accA, "nope", t0), fleetmq.CodeNotFound)
		if v := version(); v != before {
			t.Fatalf("failed writes moved the version from %d to %d", before, v)
		}
	})
}

func TestAccountScopedMethodsStayInTheirAccount(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		// The same client id in both accounts, plus one only B has.
		must(t, s.CreateClient(ctx, client(accA, "dev1", 1), 10))
		must(t, s.CreateClient(ctx, client(accB, "dev1", 1), 10))
		must(t, s.CreateClient(ctx, client(accB, "only-b", 1), 10))
		must(t, s.CreateCredential(ctx, cred(accA, "cred-a", "pub-a", fleetmq.KindPublisher)))
		must(t, s.CreateCredential(ctx, cred(accB, "cred-b", "pub-b", fleetmq.KindPublisher)))
		must(t, s.CreateCredential(ctx, cred(accB, "cred-b-sub", "sub-b", fleetmq.KindSubscriber)))
		snapshotB := func() ([]*fleetmq.MQTTClient, []*fleetmq.Credential) {
			t.Helper()
			cs, err := s.Clients(ctx, accB)
			must(t, err)
			cr, err := s.Credentials(ctx, accB, "")
			must(t, err)
			return cs, cr
		}
		bClients, bCreds := snapshotB()
		if len(bClients) != 2 || len(bCreds) != 2 {
			t.Fatalf("B has %d clients and %d credentials, want 2 and 2", len(bClients), len(bCreds))
		}

		_, err := s.Client(ctx, accA, "only-b")
		wantCode(t, "A reading B's client", err, fleetmq.CodeNotFound)
		got, err := s.Client(ctx, accA, "dev1")
		must(t, err)
		if got.AccountID != accA {
			t.Fatalf("Client(A, dev1) returned account %s's row", got.AccountID)
		}
		cs, err := s.Clients(ctx, accA)
		must(t, err)
		if len(cs) != 1 || cs[0].AccountID != accA || cs[0].ClientID != "dev1" {
			t.Fatalf("Clients(A) = %+v, want A's dev1 only", cs)
		}
		wantCode(t, "A updating B's client", s.UpdateClient(ctx, &fleetmq.MQTTClient{AccountID: accA, ClientID: "only-b", Label: "stolen", MaxPublishQoS: 0}), fleetmq.CodeNotFound)
		wantCode(t, "A deleting B's client", s.DeleteClient(ctx, accA, "only-b"), fleetmq.CodeNotFound)
		cr, err := s.Credentials(ctx, accA, "")
		must(t, err)
		if len(cr) != 1 || cr[0].ID != "cred-a" {
			t.Fatalf("Credentials(A) = %+v, want cred-a only", cr)
		}
		cr, err = s.Credentials(ctx, accA, fleetmq.KindSubscriber)
		must(t, err)
		if len(cr) != 0 {
			t.Fatalf("Credentials(A, subscriber) = %+v, want none (the subscriber password is B's)", cr)
		}
		wantCode(t, "A revoking B's credential", s.RevokeCredential(ctx, accA, "cred-b", t0), fleetmq.CodeNotFound)
		wantCode(t, "A revoking B's subscriber password", s.RevokeCredential(ctx, accA, "cred-b-sub", t0), fleetmq.CodeNotFound)

		// A's own writes on the shared client id leave B's row alone.
		must(t, s.UpdateClient(ctx, &fleetmq.MQTTClient{AccountID: accA, ClientID: "dev1", Label: "A's", MaxPublishQoS: 0}))
		must(t, s.DeleteClient(ctx, accA, "dev1"))
		must(t, s.RevokeCredential(ctx, accA, "cred-a", t0))

		nowClients, nowCreds := snapshotB()
		if !reflect.DeepEqual(nowClients, bClients) || !reflect.DeepEqual(nowCreds, bCreds) {
			t.Fatalf("B's rows changed:\nclients %+v\nwas     %+v\ncreds %+v\nwas   %+v", nowClients, bClients, nowCreds, bCreds)
		}
		active, err := s.ActiveCredentials(ctx)
		must(t, err)
		if len(active) != 2 {
			t.Fatalf("%d active credentials, want B's 2 (A's one revoked)", len(active))
		}
		for _, c := range active {
			if c.AccountID != accB {
				t.Fatalf("active credential %s of account %s, want only B's", c.ID, c.AccountID)
			}
		}
		// B's subscriber filters came back as stored.
		for _, c := range nowCreds {
			if c.Kind == fleetmq.KindSubscriber && !reflect.DeepEqual(c.Filters, []string{accB + "/#", accB + "/+/state/#"}) {
				t.Fatalf("filters read back as %q", c.Filters)
			}
		}

		// Plans, add-ons and their history are per account too.
		must(t, s.SetAddOn(ctx, accA, fleetmq.AddOnQoS2, true, t0))
		must(t, s.SetPlan(ctx, accA, "growth", t0))
		b, err := s.Account(ctx, accB)
		must(t, err)
		if b.HasAddOn(fleetmq.AddOnQoS2) || b.Plan != "starter" {
			t.Fatalf("B changed with A's subscription: %+v", b)
		}
		ch, err := s.SubscriptionChanges(ctx, accB)
		must(t, err)
		if len(ch) != 1 || ch[0].Kind != "plan" || ch[0].Value != "starter" {
			t.Fatalf("B's subscription history = %+v, want only its initial plan", ch)
		}
	})
}

// raceToLimit runs create(0..tries-1) at once on as many goroutines and
// checks that exactly max of them succeed and the others are conflicts:
// a limit checked and enforced in one transaction.
func raceToLimit(t *testing.T, what string, tries, max int, create func(i int) error) {
	t.Helper()
	errs := make([]error, tries)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = create(i)
		}()
	}
	close(start)
	wg.Wait()
	ok, conflict := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case fleetmq.CodeOf(err) == fleetmq.CodeConflict:
			conflict++
		default:
			t.Errorf("%s %d: unexpected error %v", what, i, err)
		}
	}
	if ok != max || conflict != tries-max {
		t.Fatalf("%s: %d succeeded and %d were conflicts, want %d and %d", what, ok, conflict, max, tries-max)
	}
}

func TestCreateClientEnforcesMaxAtomically(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		const tries, max = 20, 5
		raceToLimit(t, "CreateClient", tries, max, func(i int) error {
			return s.CreateClient(ctx, client(accA, fmt.Sprintf("dev-%02d", i), 1), max)
		})
		cs, err := s.Clients(ctx, accA)
		must(t, err)
		if len(cs) != max {
			t.Fatalf("%d clients registered, want %d", len(cs), max)
		}
		// B's limit is its own: A being full does not stop B.
		must(t, s.CreateClient(ctx, client(accB, "dev-00", 1), max))
		// A duplicate client id within the account is a conflict, not a second row.
		must(t, s.DeleteClient(ctx, accA, cs[0].ClientID))
		wantCode(t, "duplicate client id", s.CreateClient(ctx, client(accA, cs[1].ClientID, 1), max), fleetmq.CodeConflict)
	})
}

func TestUniqueOwnerEmailAndUsername(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		err := s.CreateAccount(ctx, &fleetmq.Account{ID: "11111111-2222-4333-8444-555555555555", Name: "C", OwnerEmail: "a@example.com", CreatedAt: t0}, "h")
		wantCode(t, "second account with A's owner e-mail", err, fleetmq.CodeConflict)
		err = s.CreateAccount(ctx, &fleetmq.Account{ID: accA, Name: "A again", OwnerEmail: "c@example.com", CreatedAt: t0}, "h")
		wantCode(t, "second account with A's id", err, fleetmq.CodeConflict)
		as, err := s.Accounts(ctx)
		must(t, err)
		if len(as) != 2 {
			t.Fatalf("%d accounts after refused duplicates, want 2", len(as))
		}
		id, hash, err := s.OwnerPasswordHash(ctx, "A@Example.com")
		must(t, err)
		if id != accA || hash != "hash-a" {
			t.Fatalf("OwnerPasswordHash = %s, %s; want A's", id, hash)
		}

		must(t, s.CreateCredential(ctx, cred(accA, "c1", "pub-same", fleetmq.KindPublisher)))
		wantCode(t, "same username in another account", s.CreateCredential(ctx, cred(accB, "c2", "pub-same", fleetmq.KindPublisher)), fleetmq.CodeConflict)
		wantCode(t, "same username in the same account", s.CreateCredential(ctx, cred(accA, "c3", "pub-same", fleetmq.KindSubscriber)), fleetmq.CodeConflict)
		cr, err := s.Credentials(ctx, accB, "")
		must(t, err)
		if len(cr) != 0 {
			t.Fatalf("B has %+v after a refused duplicate username", cr)
		}
	})
}

func TestSetAddOnRecordsOnlyChanges(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		steps := []struct {
			on bool
			at time.Time
		}{
			{true, t0.Add(1 * time.Minute)},
			{true, t0.Add(2 * time.Minute)}, // already on
			{false, t0.Add(3 * time.Minute)},
			{false, t0.Add(4 * time.Minute)}, // already off
			{true, t0.Add(5 * time.Minute)},
		}
		for _, st := range steps {
			must(t, s.SetAddOn(ctx, accA, fleetmq.AddOnQoS2, st.on, st.at))
			a, err := s.Account(ctx, accA)
			must(t, err)
			if a.HasAddOn(fleetmq.AddOnQoS2) != st.on {
				t.Fatalf("after SetAddOn(%v) the add-on is %v", st.on, a.HasAddOn(fleetmq.AddOnQoS2))
			}
		}
		must(t, s.SetAddOn(ctx, accA, fleetmq.AddOnLiveREST, true, t0.Add(6*time.Minute)))
		wantCode(t, "SetAddOn on a missing account", s.SetAddOn(ctx, "00000000-0000-4000-8000-000000000000", fleetmq.AddOnQoS2, true, t0), fleetmq.CodeNotFound)

		got, err := s.SubscriptionChanges(ctx, accA)
		must(t, err)
		want := []fleetmq.SubscriptionChange{
			{At: t0, Kind: "plan", Value: "starter"},
			{At: t0.Add(1 * time.Minute), Kind: "addon_on", Value: "qos2"},
			{At: t0.Add(3 * time.Minute), Kind: "addon_off", Value: "qos2"},
			{At: t0.Add(5 * time.Minute), Kind: "addon_on", Value: "qos2"},
			{At: t0.Add(6 * time.Minute), Kind: "addon_on", Value: "live_rest_api"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("subscription changes:\n got %+v\nwant %+v", got, want)
		}
		a, err := s.Account(ctx, accA)
		must(t, err)
		if !reflect.DeepEqual(a.AddOns, map[fleetmq.AddOn]bool{fleetmq.AddOnQoS2: true, fleetmq.AddOnLiveREST: true}) {
			t.Fatalf("A's add-ons = %v", a.AddOns)
		}
		b, err := s.Account(ctx, accB)
		must(t, err)
		if len(b.AddOns) != 0 {
			t.Fatalf("B's add-ons = %v, want none", b.AddOns)
		}
		// Plan changes are always recorded, "" (none) included.
		must(t, s.SetPlan(ctx, accA, "", t0.Add(7*time.Minute)))
		got, err = s.SubscriptionChanges(ctx, accA)
		must(t, err)
		if last := got[len(got)-1]; last.Kind != "plan" || last.Value != "" || !last.At.Equal(t0.Add(7*time.Minute)) {
			t.Fatalf("last change = %+v, want plan removed", last)
		}
		a, err = s.Account(ctx, accA)
		must(t, err)
		if a.Plan != "" {
			t.Fatalf("plan = %q after removing it", a.Plan)
		}
	})
}

// TestUsageKeepsTheEarliestDemotion: the time an account's QoS 2 pool ran
// out, written with its day's usage by every flush (and every node) that
// saw it, reads back as the earliest of them; a flush without one leaves
// it; the other account's day has none.
func TestUsageKeepsTheEarliestDemotion(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		first := time.Date(2026, 3, 13, 9, 30, 0, 123456000, time.UTC)
		for _, at := range []time.Time{first.Add(time.Hour), {}, first, first.Add(time.Minute)} {
			must(t, s.AddUsage(ctx, []fleetmq.DailyUsage{
				{AccountID: accA, Day: "2026-03-13", Demotions: 1, DemotedSince: at},
				{AccountID: accB, Day: "2026-03-13", PoolUsed: 1},
			}, nil))
		}
		a, err := s.Usage(ctx, accA, "2026-03-13", "2026-03-13")
		must(t, err)
		if len(a) != 1 || !a[0].DemotedSince.Equal(first) || a[0].Demotions != 4 {
			t.Fatalf("Usage(A) = %+v, want 4 demotions since %v", a, first)
		}
		b, err := s.Usage(ctx, accB, "2026-03-13", "2026-03-13")
		must(t, err)
		if len(b) != 1 || !b[0].DemotedSince.IsZero() {
			t.Fatalf("Usage(B) = %+v, want no demotion", b)
		}
	})
}

func TestAddUsageAccumulates(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		daily := []fleetmq.DailyUsage{
			{AccountID: accA, Day: "2026-03-13", Messages: [3]int64{1, 2, 3}, Bytes: [3]int64{10, 20, 30}, PoolUsed: 3, Demotions: 1, Refused: 2,
				Drops: map[string]int64{"queue_full": 4, "expired": 1}},
			{AccountID: accA, Day: "2026-03-14", Messages: [3]int64{5, 0, 0}, Bytes: [3]int64{50, 0, 0}},
			{AccountID: accB, Day: "2026-03-14", Messages: [3]int64{0, 7, 0}, Bytes: [3]int64{0, 70, 0}},
		}
		clients := []fleetmq.ClientUsage{
			{AccountID: accA, ClientID: "dev1", Day: "2026-03-13", Messages: [3]int64{1, 2, 3}},
			{AccountID: accA, ClientID: "dev1", Day: "2026-03-14", Messages: [3]int64{5, 0, 0}},
			{AccountID: accA, ClientID: "dev2", Day: "2026-03-14", Messages: [3]int64{0, 1, 0}},
			{AccountID: accB, ClientID: "dev1", Day: "2026-03-14", Messages: [3]int64{0, 7, 0}},
		}
		must(t, s.AddUsage(ctx, daily, clients))
		must(t, s.AddUsage(ctx, daily, clients))
		// Drops on a day with no messages still show up.
		must(t, s.AddUsage(ctx, []fleetmq.DailyUsage{{AccountID: accA, Day: "2026-03-15", Drops: map[string]int64{"queue_full": 1}}}, nil))

		got, err := s.Usage(ctx, accA, "2026-03-01", "2026-03-31")
		must(t, err)
		want := []fleetmq.DailyUsage{
			{AccountID: accA, Day: "2026-03-13", Messages: [3]int64{2, 4, 6}, Bytes: [3]int64{20, 40, 60}, PoolUsed: 6, Demotions: 2, Refused: 4,
				Drops: map[string]int64{"queue_full": 8, "expired": 2}},
			{AccountID: accA, Day: "2026-03-14", Messages: [3]int64{10, 0, 0}, Bytes: [3]int64{100, 0, 0}},
			{AccountID: accA, Day: "2026-03-15", Drops: map[string]int64{"queue_full": 1}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Usage(A):\n got %+v\nwant %+v", got, want)
		}
		// Ranges are inclusive at both ends.
		got, err = s.Usage(ctx, accA, "2026-03-14", "2026-03-14")
		must(t, err)
		if len(got) != 1 || got[0].Day != "2026-03-14" || got[0].Messages[0] != 10 {
			t.Fatalf("Usage(A, one day) = %+v", got)
		}
		got, err = s.Usage(ctx, accA, "2026-03-13", "2026-03-13")
		must(t, err)
		if len(got) != 1 || got[0].Drops["queue_full"] != 8 {
			t.Fatalf("Usage(A, 13th) = %+v", got)
		}
		got, err = s.Usage(ctx, accA, "2026-03-16", "2026-04-01")
		must(t, err)
		if len(got) != 0 {
			t.Fatalf("Usage after the last day = %+v, want none", got)
		}
		got, err = s.Usage(ctx, accB, "2026-03-01", "2026-03-31")
		must(t, err)
		if len(got) != 1 || got[0].Messages != [3]int64{0, 14, 0} || got[0].Drops != nil {
			t.Fatalf("Usage(B) = %+v, want its one day only", got)
		}

		cu, err := s.ClientUsage(ctx, accA, "2026-03-13", "2026-03-14")
		must(t, err)
		wantCU := []fleetmq.ClientUsage{
			{AccountID: accA, ClientID: "dev1", Day: "2026-03-13..2026-03-14", Messages: [3]int64{12, 4, 6}},
			{AccountID: accA, ClientID: "dev2", Day: "2026-03-13..2026-03-14", Messages: [3]int64{0, 2, 0}},
		}
		if !reflect.DeepEqual(cu, wantCU) {
			t.Fatalf("ClientUsage(A):\n got %+v\nwant %+v", cu, wantCU)
		}
		cu, err = s.ClientUsage(ctx, accA, "2026-03-13", "2026-03-13")
		must(t, err)
		if len(cu) != 1 || cu[0].ClientID != "dev1" || cu[0].Messages != [3]int64{2, 4, 6} {
			t.Fatalf("ClientUsage(A, 13th) = %+v", cu)
		}
		cu, err = s.ClientUsage(ctx, accB, "2026-03-13", "2026-03-14")
		must(t, err)
		if len(cu) != 1 || cu[0].ClientID != "dev1" || cu[0].Messages != [3]int64{0, 14, 0} {
			t.Fatalf("ClientUsage(B) = %+v", cu)
		}
	})
}

// TestListsRoundTripWhole: a filter or rule is stored as one value whatever
// it contains, so a line break can never turn one filter into two (the
// control service refuses such values too; the store does not rely on it).
func TestListsRoundTripWhole(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		twoAccounts(t, s)
		ctx := ctxT(t)
		c := cred(accA, "c1", "sub-lines", fleetmq.KindSubscriber)
		c.Filters = []string{accA + "/a\n" + accB + "/#"}
		must(t, s.CreateCredential(ctx, c))
		got, err := s.Credentials(ctx, accA, fleetmq.KindSubscriber)
		must(t, err)
		if len(got) != 1 || len(got[0].Filters) != 1 || got[0].Filters[0] != c.Filters[0] {
			t.Fatalf("filters came back as %q", got[0].Filters)
		}
		l := &fleetmq.Layout{ID: "l1", Name: "acme", WireRoot: "acme", Rules: []string{"acme/{client_id}/a=state/a\nacme/x=state/b", "acme/{client_id}/b=state/b"}, CreatedAt: t0}
		must(t, s.PutLayout(ctx, l))
		ls, err := s.Layouts(ctx)
		must(t, err)
		if len(ls) != 1 || len(ls[0].Rules) != 2 || ls[0].Rules[0] != l.Rules[0] {
			t.Fatalf("rules came back as %q", ls[0].Rules)
		}
		pub := cred(accA, "c2", "pub-none", fleetmq.KindPublisher)
		must(t, s.CreateCredential(ctx, pub))
		got, err = s.Credentials(ctx, accA, fleetmq.KindPublisher)
		must(t, err)
		if len(got) != 1 || got[0].Filters != nil {
			t.Fatalf("publisher filters %q, want none", got[0].Filters)
		}
	})
}

// TestPlanPublishRates: a plan's publish rates round-trip (0, unlimited,
// included), and migration 0007 gives the plans of an older database
// rates: the catalog its documented ones, any other plan the starter
// per-client rates and an account rate of that times its clients.
func TestPlanPublishRates(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		ctx := ctxT(t)
		s := open(t, dsn)
		p := fleetmq.Plan{Name: "flood", MaxPublisherClients: 3, QoS2DailyPool: 1, HistoryRetentionDays: 1,
			MaxPublishRate: 7, MaxPublishBytesRate: 5 << 30, MaxAccountPublishRate: 0, MaxAccountPublishBytesRate: 2048}
		must(t, s.PutPlan(ctx, p))
		got, err := s.Plan(ctx, "flood")
		must(t, err)
		if *got != p {
			t.Fatalf("plan came back as %+v, want %+v", *got, p)
		}
		p.MaxPublishRate, p.MaxAccountPublishRate = 0, 9
		must(t, s.PutPlan(ctx, p))
		if got, err = s.Plan(ctx, "flood"); err != nil || *got != p {
			t.Fatalf("updated plan came back as %+v (%v), want %+v", got, err, p)
		}

		// The database as it was before 0007, with an operator's plan.
		must(t, s.PutPlan(ctx, fleetmq.Plan{Name: "enterprise", MaxPublisherClients: 5000, QoS2DailyPool: 1, HistoryRetentionDays: 1}))
		for _, col := range []string{"max_publish_rate", "max_publish_bytes_rate", "max_account_publish_rate", "max_account_publish_bytes_rate"} {
			_, err := s.DB().ExecContext(ctx, `ALTER TABLE plans DROP COLUMN `+col)
			must(t, err)
		}
		_, err = s.DB().ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = 7`)
		must(t, err)
		must(t, s.Close())

		s = open(t, dsn)
		defer s.Close()
		for _, want := range fleetmq.DefaultPlans {
			got, err := s.Plan(ctx, want.Name)
			must(t, err)
			if *got != want {
				t.Fatalf("migrated %s = %+v, want %+v", want.Name, *got, want)
			}
		}
		got, err = s.Plan(ctx, "enterprise")
		must(t, err)
		if got.MaxPublishRate != 100 || got.MaxPublishBytesRate != 256<<10 || got.MaxAccountPublishRate != 500_000 || got.MaxAccountPublishBytesRate != 5000*256<<10 {
			t.Fatalf("migrated enterprise plan = %+v, want 100 msg/s and 256 KiB/s per client, 500000 msg/s and 5000 x 256 KiB/s per account", *got)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("migrated enterprise plan does not validate: %v", err)
		}
	})
}

// TestAddUsageOnce: a usage write sent again with its id (its first
// commit's success was not reported) is not counted twice; writes with
// other ids add up; each account's usage stays its own.
func TestAddUsageOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		twoAccounts(t, s)
		daily := []fleetmq.DailyUsage{
			{AccountID: accA, Day: "2026-03-13", Messages: [3]int64{1, 2, 0}, Drops: map[string]int64{"queue_full": 1}},
			{AccountID: accB, Day: "2026-03-13", Messages: [3]int64{0, 5, 0}},
		}
		must(t, s.AddUsageOnce(ctx, "write-1", daily, nil))
		must(t, s.AddUsageOnce(ctx, "write-1", daily, nil)) // sent again
		must(t, s.AddUsageOnce(ctx, "write-2", daily[:1], nil))
		for acc, want := range map[string]fleetmq.DailyUsage{
			accA: {AccountID: accA, Day: "2026-03-13", Messages: [3]int64{2, 4, 0}, Drops: map[string]int64{"queue_full": 2}},
			accB: {AccountID: accB, Day: "2026-03-13", Messages: [3]int64{0, 5, 0}},
		} {
			got, err := s.Usage(ctx, acc, "2026-03-01", "2026-03-31")
			must(t, err)
			if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Fatalf("usage of %s = %+v, want %+v", acc, got, want)
			}
		}
	})
}
