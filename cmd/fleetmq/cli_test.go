package main

// Tests of the operator CLI and "fleetmq serve", driven in-process through
// run(ctx, args, stdout, stderr) on a data directory in t.TempDir(), as an
// operator would type the commands.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/mqtttest"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// waitFor bounds every wait for something to happen; commandTimeout bounds
// one CLI command, only against a hang: an account create hashes the
// owner's password with argon2id (64 MiB), which under -race beside other
// busy packages has taken over 10 s.
const (
	waitFor        = 10 * time.Second
	commandTimeout = 2 * time.Minute
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// cli runs "fleetmq GROUP VERB -data dir ARGS...".
func cli(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	full := append([]string{}, args[0])
	if len(args) > 1 {
		full = append(full, args[1])
	}
	full = append(full, "-data", dir)
	if len(args) > 2 {
		full = append(full, args[2:]...)
	}
	var out, errOut bytes.Buffer
	err := run(ctx, full, &out, &errOut)
	return out.String(), err
}

func mustCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := cli(t, dir, args...)
	if err != nil {
		t.Fatalf("fleetmq %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// cliErr runs a command that must fail and checks its error mentions want.
func cliErr(t *testing.T, dir, want string, args ...string) error {
	t.Helper()
	out, err := cli(t, dir, args...)
	if err == nil {
		t.Fatalf("fleetmq %s succeeded, want an error about %q:\n%s", strings.Join(args, " "), want, out)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("fleetmq %s: error %q does not mention %q", strings.Join(args, " "), err, want)
	}
	return err
}

// field returns the value of a "key: value" line of a command's output.
func field(t *testing.T, out, key string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %q in output:\n%s", key, out)
	return ""
}

// row returns the fields of the table row whose first column is first.
func row(out, first string) []string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

type account struct{ ID, Password string }

func createAccount(t *testing.T, dir, name, email string, extra ...string) account {
	t.Helper()
	out := mustCLI(t, dir, append([]string{"account", "create", "-name", name, "-email", email}, extra...)...)
	a := account{ID: field(t, out, "account_id"), Password: field(t, out, "portal password")}
	if !fleetmq.ValidAccountID(a.ID) || len(a.Password) < 16 {
		t.Fatalf("account create printed id %q and password %q", a.ID, a.Password)
	}
	return a
}

type credential struct{ ID, Username, Password string }

func createCredential(t *testing.T, dir, acc string, args ...string) credential {
	t.Helper()
	out := mustCLI(t, dir, append([]string{"credential", "create", acc}, args...)...)
	return credential{ID: field(t, out, "id"), Username: field(t, out, "username"), Password: field(t, out, "password")}
}

// openStore opens the data directory to check what the CLI stored.
func openStore(t *testing.T, dir string) *sqlstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := sqlstore.OpenDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestCLIAdmin(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	// account create: the id and the owner's portal password, which signs in.
	A := createAccount(t, dir, "Acme Fleet", "Owner@Acme.example", "-plan", "starter")
	B := createAccount(t, dir, "Beta", "owner@beta.example")
	st := openStore(t, dir)
	hashA := ownerHash(t, st, "owner@acme.example", A.ID)
	hashB := ownerHash(t, st, "owner@beta.example", B.ID)
	for _, c := range []struct {
		hash, pw string
		want     bool
	}{{hashA, A.Password, true}, {hashB, B.Password, true}, {hashA, B.Password, false}} {
		if ok, err := control.CheckPassword(c.hash, c.pw); err != nil || ok != c.want {
			t.Fatalf("portal password check = %v, %v; want %v", ok, err, c.want)
		}
	}
	cliErr(t, dir, "already exists", "account", "create", "-name", "Dup", "-email", "OWNER@acme.example")
	cliErr(t, dir, "owner_email", "account", "create", "-name", "Bad", "-email", "not-an-email")
	cliErr(t, dir, "name", "account", "create", "-email", "x@example.com")
	cliErr(t, dir, `plan "gold" not found`, "account", "create", "-name", "Gold", "-email", "g@example.com", "-plan", "gold")

	// account list / show.
	out := mustCLI(t, dir, "account", "list")
	if r := row(out, A.ID); len(r) < 3 || !strings.Contains(out, "Acme Fleet") || !strings.Contains(strings.Join(r, " "), "owner@acme.example starter") {
		t.Fatalf("account list, A's row %q:\n%s", r, out)
	}
	if r := row(out, B.ID); r == nil || !strings.Contains(strings.Join(r, " "), "owner@beta.example - - active") {
		t.Fatalf("account list, B's row %q:\n%s", r, out)
	}
	out = mustCLI(t, dir, "account", "show", A.ID)
	if field(t, out, "plan") != "starter" || field(t, out, "status") != "active" || field(t, out, "add-ons") != "-" || field(t, out, "clients") != "0" ||
		!strings.Contains(field(t, out, "limits"), "10 publisher clients") {
		t.Fatalf("account show A:\n%s", out)
	}

	// set-plan (recorded), addon on/off.
	mustCLI(t, dir, "account", "set-plan", B.ID, "growth")
	if out := mustCLI(t, dir, "account", "show", B.ID); field(t, out, "plan") != "growth" || !strings.Contains(out, "plan      growth") {
		t.Fatalf("after set-plan growth:\n%s", out)
	}
	mustCLI(t, dir, "account", "set-plan", B.ID, "none")
	if out := mustCLI(t, dir, "account", "show", B.ID); field(t, out, "plan") != "-" {
		t.Fatalf("after set-plan none:\n%s", out)
	}
	cliErr(t, dir, `plan "gold" not found`, "account", "set-plan", B.ID, "gold")
	mustCLI(t, dir, "account", "addon", A.ID, "qos2", "on")
	mustCLI(t, dir, "account", "addon", A.ID, "QOS2", "on") // already on: not recorded twice
	if out := mustCLI(t, dir, "account", "show", A.ID); field(t, out, "add-ons") != "qos2" || strings.Count(out, "addon_on") != 1 {
		t.Fatalf("after addon qos2 on:\n%s", out)
	}
	if out := mustCLI(t, dir, "account", "show", B.ID); field(t, out, "add-ons") != "-" {
		t.Fatalf("B got A's add-on:\n%s", out)
	}
	mustCLI(t, dir, "account", "addon", A.ID, "live_rest_api", "on")
	mustCLI(t, dir, "account", "addon", A.ID, "live_rest_api", "off")
	if out := mustCLI(t, dir, "account", "show", A.ID); field(t, out, "add-ons") != "qos2" || !strings.Contains(out, "addon_off live_rest_api") {
		t.Fatalf("after live_rest_api on and off:\n%s", out)
	}
	cliErr(t, dir, `unknown add-on "gold"`, "account", "addon", A.ID, "gold", "on")
	cliErr(t, dir, `want on or off, got "maybe"`, "account", "addon", A.ID, "qos2", "maybe")

	// plan list / set.
	out = mustCLI(t, dir, "plan", "list")
	for _, p := range fleetmq.DefaultPlans {
		if r := row(out, p.Name); len(r) < 4 || r[1] != strconv.Itoa(p.MaxPublisherClients) || r[2] != strconv.FormatInt(p.QoS2DailyPool, 10) {
			t.Fatalf("plan list, %s row %q:\n%s", p.Name, r, out)
		}
	}
	for _, p := range fleetmq.DefaultPlans {
		want := fmt.Sprintf("%d %d %d %d", p.MaxPublishRate, p.MaxPublishBytesRate, p.MaxAccountPublishRate, p.MaxAccountPublishBytesRate)
		if r := row(out, p.Name); len(r) != 9 || strings.Join(r[5:], " ") != want {
			t.Fatalf("plan list, %s row %q: want publish rates %s:\n%s", p.Name, r, want, out)
		}
	}
	// A new plan without publish rates gets starter's; a change keeps the
	// rates not given; 0 is unlimited.
	mustCLI(t, dir, "plan", "set", "tiny", "-max-clients", "2", "-qos2-pool", "5", "-retention-days", "3")
	if r := row(mustCLI(t, dir, "plan", "list"), "tiny"); strings.Join(r, " ") != "tiny 2 5 3 6 100 262144 1000 2097152" {
		t.Fatalf("plan tiny listed as %q", r)
	}
	out = mustCLI(t, dir, "plan", "set", "tiny", "-max-clients", "2", "-qos2-pool", "5", "-retention-days", "3", "-publish-rate", "7", "-account-publish-bytes-rate", "0")
	if field(t, out, "publish_rate") != "7 msg/s, 262144 bytes/s" || field(t, out, "account_publish_rate") != "1000 msg/s, unlimited bytes/s" {
		t.Fatalf("plan set tiny -publish-rate 7 -account-publish-bytes-rate 0:\n%s", out)
	}
	if r := row(mustCLI(t, dir, "plan", "list"), "tiny"); strings.Join(r, " ") != "tiny 2 5 3 6 7 262144 1000 0" {
		t.Fatalf("plan tiny listed as %q after changing two rates", r)
	}
	if out := mustCLI(t, dir, "plan", "show", "tiny"); field(t, out, "max_publisher_clients") != "2" || field(t, out, "publish_rate") != "7 msg/s, 262144 bytes/s" {
		t.Fatalf("plan show tiny:\n%s", out)
	}
	cliErr(t, dir, "max_publish_bytes_rate", "plan", "set", "tiny", "-max-clients", "2", "-retention-days", "3", "-publish-bytes-rate", "100")
	cliErr(t, dir, "max_account_publish_rate", "plan", "set", "tiny", "-max-clients", "2", "-retention-days", "3", "-account-publish-rate", "-1")
	cliErr(t, dir, `plan "gold" not found`, "plan", "show", "gold")
	cliErr(t, dir, "max_publisher_clients", "plan", "set", "bad", "-max-clients", "0", "-retention-days", "3")
	cliErr(t, dir, "name", "plan", "set", "Bad Name", "-max-clients", "1", "-retention-days", "3")

	// client add / list / set / remove.
	mustCLI(t, dir, "account", "set-plan", B.ID, "tiny")
	out = mustCLI(t, dir, "client", "add", A.ID, "dev1", "-label", "Front door")
	if !strings.Contains(out, "client dev1 registered: max_publish_qos 1, history_topic_prefix "+A.ID+"/dev1") {
		t.Fatalf("client add:\n%s", out)
	}
	mustCLI(t, dir, "client", "add", A.ID, "dev2", "-max-qos", "2") // A has the qos2 add-on
	cliErr(t, dir, "Guaranteed delivery (QoS 2)", "client", "add", B.ID, "dev2", "-max-qos", "2")
	mustCLI(t, dir, "client", "add", B.ID, "dev1")
	mustCLI(t, dir, "client", "add", B.ID, "b2")
	cliErr(t, dir, "the plan allows 2 publisher clients", "client", "add", B.ID, "b3")
	cliErr(t, dir, "client_id", "client", "add", A.ID, "a/b")
	cliErr(t, dir, "already registered", "client", "add", A.ID, "dev1")
	out = mustCLI(t, dir, "client", "list", A.ID)
	if r := row(out, "dev1"); strings.Join(r, " ") == "" || !strings.Contains(out, "Front door") || row(out, "dev2") == nil || row(out, "b2") != nil {
		t.Fatalf("client list A:\n%s", out)
	}
	out = mustCLI(t, dir, "client", "set", A.ID, "dev1", "-max-qos", "0")
	if !strings.Contains(out, `client dev1: label "Front door", max_publish_qos 0`) {
		t.Fatalf("client set:\n%s", out)
	}
	if r := row(mustCLI(t, dir, "client", "list", B.ID), "dev1"); len(r) < 3 || r[2] != "1" {
		t.Fatalf("B's dev1 changed with A's: %q", r)
	}
	cliErr(t, dir, "max_publish_qos", "client", "set", A.ID, "dev1", "-max-qos", "3")
	cliErr(t, dir, "invalid value", "client", "set", A.ID, "dev1", "-max-qos", "high")
	cliErr(t, dir, `client "b2" not found`, "client", "set", A.ID, "b2", "-label", "x")
	cliErr(t, dir, `client "b2" not found`, "client", "remove", A.ID, "b2")
	mustCLI(t, dir, "client", "remove", A.ID, "dev2")
	if out := mustCLI(t, dir, "client", "list", A.ID); row(out, "dev2") != nil || row(out, "dev1") == nil {
		t.Fatalf("after client remove dev2:\n%s", out)
	}
	if out := mustCLI(t, dir, "account", "show", B.ID); field(t, out, "clients") != "2" {
		t.Fatalf("account show B:\n%s", out)
	}

	// credential create / list / revoke.
	pub := createCredential(t, dir, A.ID, "-kind", "publisher", "-label", "fleet", "-expires-in-days", "30")
	sub := createCredential(t, dir, A.ID, "-kind", "subscriber", "-filter", A.ID+"/+/state/#", "-filter", A.ID+"/dev1/#")
	subB := createCredential(t, dir, B.ID, "-kind", "subscriber")
	if !strings.HasPrefix(pub.Username, "pub-") || !strings.HasPrefix(sub.Username, "sub-") || len(pub.Password) < 32 {
		t.Fatalf("credentials %+v %+v", pub, sub)
	}
	stored, err := st.Credentials(ctx, A.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 || stored[0].SecretHash != fleetmq.HashSecret(pub.Password) || stored[1].SecretHash != fleetmq.HashSecret(sub.Password) {
		t.Fatalf("stored credentials %+v: want the printed passwords' SHA-256", stored)
	}
	if d := time.Until(stored[0].ExpiresAt); d < 29*24*time.Hour || d > 30*24*time.Hour {
		t.Fatalf("-expires-in-days 30 stored expiry %v", stored[0].ExpiresAt)
	}
	cliErr(t, dir, "filters", "credential", "create", A.ID, "-kind", "subscriber", "-filter", "#")
	cliErr(t, dir, "filters", "credential", "create", A.ID, "-kind", "subscriber", "-filter", B.ID+"/#")
	cliErr(t, dir, "filters", "credential", "create", A.ID, "-kind", "subscriber", "-filter", "$SYS/#")
	cliErr(t, dir, "kind", "credential", "create", A.ID)
	cliErr(t, dir, "expires_in_days", "credential", "create", A.ID, "-kind", "publisher", "-expires-in-days", "4000")
	out = mustCLI(t, dir, "credential", "list", A.ID)
	if r := row(out, pub.ID); len(r) < 5 || r[2] != pub.Username || r[4] != "active" || strings.Contains(out, pub.Password) || strings.Contains(out, sub.Password) {
		t.Fatalf("credential list A (row %q):\n%s", r, out)
	}
	if r := row(out, sub.ID); r == nil || r[len(r)-1] != A.ID+"/dev1/#" || r[len(r)-2] != A.ID+"/+/state/#" {
		t.Fatalf("credential list A, subscriber row %q", r)
	}
	if out := mustCLI(t, dir, "credential", "list", B.ID); row(out, pub.ID) != nil || row(out, subB.ID) == nil || !strings.Contains(out, B.ID+"/#") {
		t.Fatalf("credential list B:\n%s", out)
	}
	cliErr(t, dir, fmt.Sprintf("credential %q not found", subB.ID), "credential", "revoke", A.ID, subB.ID)
	mustCLI(t, dir, "credential", "revoke", A.ID, pub.ID)
	if r := row(mustCLI(t, dir, "credential", "list", A.ID), pub.ID); len(r) < 5 || r[4] != "revoked" {
		t.Fatalf("after revoke: %q", r)
	}
	if r := row(mustCLI(t, dir, "credential", "list", B.ID), subB.ID); len(r) < 5 || r[4] != "active" {
		t.Fatalf("B's password after A's revoke: %q", r)
	}

	// layout add / list / dry-run / remove.
	out = mustCLI(t, dir, "layout", "add", "acme", "-root", "acme", "-fanout",
		"-rule", "acme/{client_id}/status=state/summary", "-rule", "acme/{client_id}/sensor/+=telemetry/{1}")
	if !strings.Contains(out, `layout acme registered for wire root "acme" (2 rules, fanout true)`) {
		t.Fatalf("layout add:\n%s", out)
	}
	for _, bad := range [][]string{
		{"-root", "vend", "-rule", "vend/status=state/summary"},         // no {client_id}
		{"-root", "vend", "-rule", "vend/{client_id}/s=config/x"},       // bad class
		{"-root", "vend", "-rule", "vend/{client_id}/+=telemetry/{2}"},  // {2} with one '+'
		{"-root", "vend", "-rule", "vend/{client_id}/s=event/{#}"},      // {#} without '#'
		{"-root", A.ID, "-rule", A.ID + "/{client_id}/s=state/summary"}, // root is an account id
	} {
		cliErr(t, dir, "rules", append([]string{"layout", "add", "vend"}, bad...)...)
	}
	out = mustCLI(t, dir, "layout", "list")
	if r := row(out, "acme"); len(r) < 4 || r[1] != "acme" || r[2] != "true" || row(out, "vend") != nil {
		t.Fatalf("layout list:\n%s", out)
	}
	out = mustCLI(t, dir, "layout", "dry-run", "acme/dev1/sensor/temp")
	if field(t, out, "layout") != "acme" || field(t, out, "client") != "dev1" || field(t, out, "platform") != "{account_id}/dev1/telemetry/temp" {
		t.Fatalf("dry-run matched:\n%s", out)
	}
	if out := mustCLI(t, dir, "layout", "dry-run", "acme/dev1/status", "-client", "dev9"); !strings.Contains(out, `refused: the topic names client "dev1" but the connecting client is "dev9"`) {
		t.Fatalf("dry-run other client:\n%s", out)
	}
	if out := mustCLI(t, dir, "layout", "dry-run", "acme/dev1/other"); !strings.Contains(out, "refused: the wire root is registered but no rule matches") {
		t.Fatalf("dry-run unmatched:\n%s", out)
	}
	if out := mustCLI(t, dir, "layout", "dry-run", "vend/dev1/status"); !strings.Contains(out, `refused: no layout is registered for wire root "vend"`) {
		t.Fatalf("dry-run unregistered:\n%s", out)
	}
	cliErr(t, dir, "topic", "layout", "dry-run", "acme/+/status")
	mustCLI(t, dir, "layout", "remove", "acme")
	if out := mustCLI(t, dir, "layout", "list"); row(out, "acme") != nil {
		t.Fatalf("layout list after remove:\n%s", out)
	}
	cliErr(t, dir, `layout "acme" not found`, "layout", "remove", "acme")

	// account usage: what the meter flushed, per account and client.
	today := time.Now().UTC().Format(time.DateOnly)
	if err := st.AddUsage(ctx, []fleetmq.DailyUsage{
		{AccountID: A.ID, Day: today, Messages: [3]int64{3, 5, 2}, Bytes: [3]int64{30, 50, 20}, PoolUsed: 2, Demotions: 1, Refused: 4, Drops: map[string]int64{"queue_full": 6}},
		{AccountID: B.ID, Day: today, Messages: [3]int64{0, 9, 0}},
	}, []fleetmq.ClientUsage{{AccountID: A.ID, ClientID: "dev1", Day: today, Messages: [3]int64{3, 5, 2}}}); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, dir, "account", "usage", A.ID)
	if r := row(out, today); strings.Join(r, " ") != today+" 3 5 2 100 2 1 4 queue_full=6" {
		t.Fatalf("account usage A, today %q:\n%s", r, out)
	}
	if r := row(out, "dev1"); len(r) < 4 || r[1] != "3" || r[2] != "5" || r[3] != "2" || !strings.Contains(out, "Q0 30% Q1 50% Q2 20%") {
		t.Fatalf("account usage A, dev1 %q:\n%s", r, out)
	}
	if r := row(mustCLI(t, dir, "account", "usage", B.ID, "-days", "1"), today); strings.Join(r, " ") != today+" 0 9 0 0 0 0 0 -" {
		t.Fatalf("account usage B, today %q", r)
	}
	cliErr(t, dir, "-days must be 1..3660", "account", "usage", A.ID, "-days", "0")
}

func ownerHash(t *testing.T, st *sqlstore.Store, email, wantID string) string {
	t.Helper()
	id, h, err := st.OwnerPasswordHash(context.Background(), email)
	if err != nil || id != wantID {
		t.Fatalf("owner %s: account %q, %v; want %s", email, id, err, wantID)
	}
	return h
}

// TestCLIErrors: unknown account ids, bad flags and missing arguments are
// errors that say what is wrong, and nothing is created.
func TestCLIErrors(t *testing.T) {
	dir := t.TempDir()
	A := createAccount(t, dir, "Acme", "owner@acme.example", "-plan", "starter")
	B := createAccount(t, dir, "Beta", "owner@beta.example", "-plan", "starter")
	mustCLI(t, dir, "client", "add", B.ID, "devb")
	const missing = "00000000-0000-4000-8000-000000000000"
	notFound := fmt.Sprintf("account %q not found", missing)
	for _, args := range [][]string{
		{"account", "show", missing},
		{"account", "suspend", missing},
		{"account", "set-plan", missing, "starter"},
		{"account", "addon", missing, "qos2", "on"},
		{"account", "usage", missing},
		{"client", "add", missing, "dev1"},
		{"client", "list", missing},
		{"client", "set", missing, "dev1", "-max-qos", "0"},
		{"credential", "create", missing, "-kind", "publisher"},
		{"credential", "list", missing},
	} {
		cliErr(t, dir, notFound, args...)
	}
	// Another account's things are not found through A either.
	cliErr(t, dir, `client "devb" not found`, "client", "remove", A.ID, "devb")
	cliErr(t, dir, `client "devb" not found`, "client", "set", A.ID, "devb", "-label", "x")
	cliErr(t, dir, `credential "`+missing+`" not found`, "credential", "revoke", A.ID, missing)

	for _, tc := range []struct {
		want string
		args []string
	}{
		{"flag provided but not defined: -bogus", []string{"client", "add", A.ID, "dev1", "-bogus"}},
		{"flag needs an argument", []string{"account", "create", "-name"}},
		{`invalid value "ten"`, []string{"plan", "set", "x", "-max-clients", "ten"}},
		{"want 2 argument(s), got 1", []string{"client", "add", A.ID}},
		{"want 1 argument(s), got 0", []string{"account", "show"}},
		{"want 1 argument(s), got 2", []string{"account", "show", A.ID, "extra"}},
		{"want 3 argument(s), got 2", []string{"account", "addon", A.ID, "qos2"}},
		{`unknown command "account frobnicate"`, []string{"account", "frobnicate"}},
		{`unknown command "frobnicate"`, []string{"frobnicate"}},
	} {
		cliErr(t, dir, tc.want, tc.args...)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"client"}, &out, &errOut); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "fleetmq client add ACCOUNT_ID CLIENT_ID") {
		t.Fatalf("fleetmq client: %v\n%s", err, errOut.String())
	}
	if err := run(context.Background(), []string{"serve", "-data", dir, "-topic-prefix", "a/+", "-listen", "127.0.0.1:0", "-http-listen", ""}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "-topic-prefix") {
		t.Fatalf("serve with a bad prefix: %v", err)
	}
	if err := run(context.Background(), []string{"serve", "-data", dir, "-listen", "", "-http-listen", ""}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "no listener") {
		t.Fatalf("serve with no listener: %v", err)
	}

	// None of the failures created anything.
	if out := mustCLI(t, dir, "client", "list", A.ID); row(out, "dev1") != nil {
		t.Fatalf("a failed command registered a client:\n%s", out)
	}
	if out := mustCLI(t, dir, "account", "list"); strings.Count(out, "\n") != 3 {
		t.Fatalf("account list after errors:\n%s", out)
	}
}

// TestCLIRefusesAMissingDataDirectory: an operator command on a data
// directory that does not exist (a mistyped -data, or a shell in another
// directory than serve's ./data) fails, says what to pass, and creates
// nothing; before, it made a new empty store there, so "account list"
// showed no accounts and "account create" stored one no serve would see.
func TestCLIRefusesAMissingDataDirectory(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "dta")
	for _, args := range [][]string{
		{"account", "list"},
		{"account", "create", "-name", "Acme", "-email", "owner@acme.example"},
		{"plan", "list"},
	} {
		err := cliErr(t, missing, "data directory "+missing+" does not exist", args...)
		if !strings.Contains(err.Error(), "-data") {
			t.Errorf("fleetmq %s: error %q does not say which flag to fix", strings.Join(args, " "), err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the commands created the missing data directory: %v", err)
	}
	file := filepath.Join(parent, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cliErr(t, file, "is not a directory", "account", "list")
	// An existing directory is a store, new or not: accounts can be made
	// before serve's first start.
	createAccount(t, parent, "Acme", "owner@acme.example")
}

// connectNow connects once, without retrying: a CLI command that changed
// the control plane returns only when serve enforces the change, so what
// it made works on the next line. ok, when set, checks the CONNACK.
func connectNow(t *testing.T, what, addr, clientID, user, pass string, ok func(*mqtttest.V5) bool) *mqtttest.V5 {
	t.Helper()
	c, ack, err := mqtttest.TryV5(t, addr, mqtttest.Login(clientID, user, pass))
	if err != nil || (ok != nil && !ok(c)) {
		t.Fatalf("%s right after the CLI returned: connect %s as %s: %v (connack %+v)", what, clientID, user, err, ack)
	}
	return c
}

func maxQoS(c *mqtttest.V5) int {
	if c.Connack == nil || c.Connack.Properties == nil || c.Connack.Properties.MaximumQoS == nil {
		return -1 // absent: 2
	}
	return int(*c.Connack.Properties.MaximumQoS)
}

// serve runs "fleetmq serve" on dir (with extra flags) until the test
// ends; it returns the MQTT and HTTP addresses from its "serving" line, a
// channel with run's result, and the cancel that stops it.
func serve(t *testing.T, dir string, extra ...string) (mqttAddr, httpAddr string, done chan error, stop context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	done = make(chan error, 1)
	args := append([]string{"serve", "-data", dir, "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-reload-interval", "100ms"}, extra...)
	go func() {
		done <- run(ctx, args, &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Errorf("serve did not stop")
		}
		if t.Failed() {
			t.Logf("serve stderr:\n%s", stderr.String())
		}
	})
	serving := regexp.MustCompile(`fleetmq serving .* on (.*)\n`)
	var m []string
	testkit.CheckFor(t, waitFor, func() error {
		if m = serving.FindStringSubmatch(stdout.String()); m != nil {
			return nil
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned %v before serving:\n%s", err, stderr.String())
		default:
		}
		return fmt.Errorf("serve printed no serving line:\n%s\n%s", stdout.String(), stderr.String())
	})
	for _, u := range strings.Fields(m[1]) {
		if a, ok := strings.CutPrefix(u, "mqtt://"); ok {
			mqttAddr = a
		}
		if a, ok := strings.CutPrefix(u, "http://"); ok {
			httpAddr = a
		}
	}
	if mqttAddr == "" || httpAddr == "" {
		t.Fatalf("serving line without mqtt:// and http:// addresses: %q", m[0])
	}
	return mqttAddr, httpAddr, done, cancel
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: waitFor}
	r, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return r.StatusCode, string(b)
}

// metric returns the value of one sample line of a Prometheus exposition.
func metric(body, sample string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestServeWithLiveCLI runs "fleetmq serve" and changes the control plane
// with CLI commands while it serves, the way an operator does: each change
// is in force when its command returns (serve keeps its default reload
// interval of 1 s; nothing retries), and serve shuts down cleanly.
func TestServeWithLiveCLI(t *testing.T) {
	dir := t.TempDir()
	mqttAddr, httpAddr, done, stop := serve(t, dir, "-reload-interval", "1s")

	A := createAccount(t, dir, "Acme", "owner@acme.example", "-plan", "starter")
	B := createAccount(t, dir, "Beta", "owner@beta.example", "-plan", "starter")
	mustCLI(t, dir, "client", "add", A.ID, "dev1")
	mustCLI(t, dir, "client", "add", B.ID, "devb")
	pubA := createCredential(t, dir, A.ID, "-kind", "publisher")
	subA := createCredential(t, dir, A.ID, "-kind", "subscriber")
	pubB := createCredential(t, dir, B.ID, "-kind", "publisher")
	subB := createCredential(t, dir, B.ID, "-kind", "subscriber")

	// The new credentials work at once.
	sa := connectNow(t, "A's subscriber connects", mqttAddr, "sub-a", subA.Username, subA.Password, nil)
	pa := connectNow(t, "A's publisher connects", mqttAddr, "dev1", pubA.Username, pubA.Password, nil)
	sb := connectNow(t, "B's subscriber connects", mqttAddr, "sub-b", subB.Username, subB.Password, nil)
	pb := connectNow(t, "B's publisher connects", mqttAddr, "devb", pubB.Username, pubB.Password, nil)
	if q := maxQoS(pa); q != 1 {
		t.Fatalf("dev1 (max_publish_qos 1 by default) got Maximum QoS %d in CONNACK, want 1", q)
	}
	sa.MustSubscribe(t, paho.SubscribeOptions{Topic: A.ID + "/#", QoS: 1})
	sb.MustSubscribe(t, paho.SubscribeOptions{Topic: B.ID + "/#", QoS: 1})

	// Publish/subscribe within the account; nothing crosses to B.
	pa.Pub(t, A.ID+"/dev1/state/door", 1, "open")
	sa.ExpectOn(t, A.ID+"/dev1/state/door", "open")
	pb.Pub(t, B.ID+"/devb/event/x", 1, "b-marker")
	sb.ExpectOn(t, B.ID+"/devb/event/x", "b-marker") // B's first message: A's never arrived
	pa.Pub(t, A.ID+"/dev1/event/y", 1, "a-marker")
	sa.ExpectOn(t, A.ID+"/dev1/event/y", "a-marker") // and B's never reached A

	// Revoking the publisher credential has ended its live session when
	// the command returns (the DISCONNECT is on its way), and the
	// credential is refused.
	mustCLI(t, dir, "credential", "revoke", A.ID, pubA.ID)
	if _, ack, err := mqtttest.TryV5(t, mqttAddr, mqtttest.Login("dev1", pubA.Username, pubA.Password)); err == nil || ack == nil || ack.ReasonCode != 0x86 {
		t.Fatalf("the revoked credential connecting again: %v (connack %+v), want 0x86 Bad user name or password", err, ack)
	}
	select {
	case d := <-pa.Disc:
		if d.ReasonCode != 0x87 {
			t.Fatalf("revoked publisher disconnected with 0x%02x, want 0x87 Not authorized", d.ReasonCode)
		}
	case <-time.After(waitFor):
		t.Fatal("the revoked publisher got no DISCONNECT")
	}
	select {
	case d := <-sb.Disc:
		t.Fatalf("B's subscriber disconnected with A's revocation: %+v", d)
	case d := <-sa.Disc:
		t.Fatalf("A's subscriber disconnected with the publisher's revocation: %+v", d)
	default:
	}

	// client set -max-qos 0: a new connection is told Maximum QoS 0.
	mustCLI(t, dir, "client", "set", A.ID, "dev1", "-max-qos", "0")
	pubA2 := createCredential(t, dir, A.ID, "-kind", "publisher")
	pa2 := connectNow(t, "dev1 gets Maximum QoS 0", mqttAddr, "dev1", pubA2.Username, pubA2.Password, func(c *mqtttest.V5) bool { return maxQoS(c) == 0 })
	pa2.Pub(t, A.ID+"/dev1/telemetry/temp", 0, "21.5")
	sa.ExpectOn(t, A.ID+"/dev1/telemetry/temp", "21.5") // A's subscriber is still connected

	// A client added and the QoS 2 add-on switched on are usable on the
	// next line; switched off, the next QoS 2 message is already metered
	// (and delivered) at QoS 1.
	mustCLI(t, dir, "account", "addon", A.ID, "qos2", "on")
	mustCLI(t, dir, "client", "add", A.ID, "dev3", "-max-qos", "2")
	pub3 := createCredential(t, dir, A.ID, "-kind", "publisher")
	p3 := connectNow(t, "dev3 gets Maximum QoS 2", mqttAddr, "dev3", pub3.Username, pub3.Password, func(c *mqtttest.V5) bool { return maxQoS(c) == -1 }) // absent: 2
	p3.Pub(t, A.ID+"/dev3/state/valve", 2, "q2-on")
	sa.ExpectOn(t, A.ID+"/dev3/state/valve", "q2-on")
	mustCLI(t, dir, "account", "addon", A.ID, "qos2", "off")
	p3.Pub(t, A.ID+"/dev3/state/valve", 2, "q2-off")
	sa.ExpectOn(t, A.ID+"/dev3/state/valve", "q2-off")

	// serve's node row says it runs here and has applied every change.
	st := openStore(t, dir)
	v, err := st.Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := st.Nodes(context.Background()); err != nil || len(ns) != 1 || ns[0].PID != os.Getpid() || ns[0].Applied != v || !ns[0].Live(time.Now()) {
		t.Fatalf("nodes while serving: %+v (%v), want this process at version %d", ns, err, v)
	}

	// Metrics and readiness.
	code, body := httpGet(t, "http://"+httpAddr+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "fleetmq_platform_messages_total") {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	if v, ok := metric(body, `fleetmq_platform_messages_total{qos="1"}`); !ok || v != 4 {
		t.Fatalf(`fleetmq_platform_messages_total{qos="1"} = %v (found %v), want 4`, v, ok)
	}
	if v, ok := metric(body, `fleetmq_platform_messages_total{qos="2"}`); !ok || v != 1 {
		t.Fatalf(`fleetmq_platform_messages_total{qos="2"} = %v (found %v), want 1 (the message sent while the add-on was on)`, v, ok)
	}
	if v, ok := metric(body, `fleetmq_platform_messages_total{qos="0"}`); !ok || v != 1 {
		t.Fatalf(`fleetmq_platform_messages_total{qos="0"} = %v (found %v), want 1`, v, ok)
	}
	if code, body := httpGet(t, "http://"+httpAddr+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}

	// Cancelling the context shuts serve down cleanly.
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v on shutdown", err)
		}
		done <- nil // for the cleanup
	case <-time.After(waitFor):
		t.Fatal("serve did not return after its context was cancelled")
	}
	if _, err := os.Stat(filepath.Join(dir, app.BrokerStateFile)); err != nil {
		t.Fatalf("broker state after shutdown: %v", err)
	}
	// A clean shutdown takes serve's row out of the nodes the CLI waits for.
	if ns, err := openStore(t, dir).Nodes(context.Background()); err != nil || len(ns) != 0 {
		t.Fatalf("nodes after shutdown: %+v (%v), want none", ns, err)
	}
	// The usage was flushed on the way out: each account's own messages.
	sum := func(out string) [3]int64 {
		var s [3]int64
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && len(f[0]) == 10 && f[0][4] == '-' {
				for q := range 3 {
					n, _ := strconv.ParseInt(f[1+q], 10, 64)
					s[q] += n
				}
			}
		}
		return s
	}
	if got := sum(mustCLI(t, dir, "account", "usage", A.ID)); got != [3]int64{1, 3, 1} {
		t.Fatalf("A's usage after shutdown: %v messages by QoS, want [1 3 1]", got)
	}
	if got := sum(mustCLI(t, dir, "account", "usage", B.ID)); got != [3]int64{0, 1, 0} {
		t.Fatalf("B's usage after shutdown: %v messages by QoS, want [0 1 0]", got)
	}
}
