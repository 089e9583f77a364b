package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq/internal/pgtest"
)

// sessionOwner returns the node whose claim holds the session of client
// under namespace in the cluster's database ("" when no row holds it).
func sessionOwner(t *testing.T, db *sql.DB, namespace, client string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var node string
	err := db.QueryRowContext(ctx, `SELECT node FROM session_owners WHERE key = $1`, []byte(namespace+"\x00"+client)).Scan(&node)
	if err == sql.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// TestClusterRevokedSessionEndsOnItsNode: a persistent session held
// offline by node 2, whose subscriber password is revoked through the
// CLI (node 1 and node 2 running), ends on node 2 and its claim leaves
// PostgreSQL, while another account's session there stays; a session of
// node 2 whose password is revoked while node 2 is down loses its claim
// at once, and node 2 restarting from its data directory does not bring
// it back, nor the first one.
func TestClusterRevokedSessionEndsOnItsNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir := pgtest.DSN(t), t.TempDir()
	accA, _, subA := clusterAccount(t, dir, dsn, "Acme")
	accB, _, subB := clusterAccount(t, dir, dsn, "Beta")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	nodes := startCluster(t, dsn, 2)

	nsA, nsB := accA+"/"+subA.ID, accB+"/"+subB.ID
	for acc, s := range map[string]credential{accA: subA, accB: subB} {
		c := connectV5(t, nodes[1].addr, "follower", s.Username, s.Password, false)
		c.Sub(t, acc+"/#", 1)
		c.Disconnect(&paho.Disconnect{})
	}
	eventually(t, "node 2 to hold both sessions", func() bool {
		return sessionOwner(t, db, nsA, "follower") == "n2" && sessionOwner(t, db, nsB, "follower") == "n2"
	})

	mustCLI(t, dir, "credential", "revoke", accA, subA.ID, "-database", dsn)
	eventually(t, "node 2 to end Acme's session and release its claim", func() bool {
		return sessionOwner(t, db, nsA, "follower") == ""
	})
	if got := sessionOwner(t, db, nsB, "follower"); got != "n2" {
		t.Fatalf("Beta's session, whose password stays, is held by %q, want n2", got)
	}

	// Node 2 is down when Beta's password is revoked; its data directory
	// still has the session.
	nodes[1].stop(t)
	mustCLI(t, dir, "credential", "revoke", accB, subB.ID, "-database", dsn)
	if got := sessionOwner(t, db, nsB, "follower"); got != "" {
		t.Fatalf("Beta's session, its password revoked while node 2 is down, is still claimed by %q", got)
	}
	// Node 2 restores its sessions before it listens.
	nodes[1] = startServe(t, nodes[1].dir, "-database", dsn, "-node-id", "n2", "-cluster-listen", "127.0.0.1:0",
		"-cluster-routes", nodes[0].route)
	for _, ns := range []string{nsA, nsB} {
		if got := sessionOwner(t, db, ns, "follower"); got != "" {
			t.Fatalf("session %s, its password revoked, is claimed again by %q after node 2 restarted", ns, got)
		}
	}
}

// clusterUsage is what a test reads of GET /usage.
type clusterUsage struct {
	Pool struct {
		UsedToday    int64      `json:"used_today"`
		Demoted      bool       `json:"demoted"`
		DemotedSince *time.Time `json:"demoted_since"`
	} `json:"qos2_pool"`
}

// TestClusterUsageDemotedSinceOnEveryNode: an account whose QoS 2 pool
// ran out through node 1's device reads the same demoted_since on node 2,
// where none of its devices published (once node 1 flushed its usage),
// and the same again later, not the time of each request; the other
// account is demoted on neither node.
func TestClusterUsageDemotedSinceOnEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir := pgtest.DSN(t), t.TempDir()
	// Beta's pool has room beyond the block a node takes of it ahead.
	mustCLI(t, dir, "plan", "set", "tiny", "-max-clients", "10", "-qos2-pool", "2", "-retention-days", "7", "-database", dsn)
	mustCLI(t, dir, "plan", "set", "roomy", "-max-clients", "10", "-qos2-pool", "1000", "-retention-days", "7", "-database", dsn)
	var accs []string
	var tokens []string
	var pubs []credential
	for _, a := range [][2]string{{"Acme", "tiny"}, {"Beta", "roomy"}} {
		acc := createAccount(t, dir, a[0], strings.ToLower(a[0])+"@example.com", "-database", dsn, "-plan", a[1]).ID
		for _, addon := range []string{"qos2", "mgmt_rest_api"} {
			mustCLI(t, dir, "account", "addon", acc, addon, "on", "-database", dsn)
		}
		mustCLI(t, dir, "client", "add", acc, "dev1", "-max-qos", "2", "-database", dsn)
		accs, tokens = append(accs, acc), append(tokens, restToken(t, dsn, acc))
		pubs = append(pubs, createCredential(t, dir, acc, "-kind", "publisher", "-database", dsn))
	}
	var nodes []*serveProcess
	for i := range 2 {
		args := []string{"-database", dsn, "-node-id", fmt.Sprintf("n%d", i+1), "-cluster-listen", "127.0.0.1:0",
			"-http-listen", "127.0.0.1:0", "-reload-interval", "100ms"}
		if i > 0 {
			args = append(args, "-cluster-routes", nodes[0].route)
		}
		nodes = append(nodes, startServe(t, t.TempDir(), args...))
	}
	usage := func(node *serveProcess, token string) clusterUsage {
		var u clusterUsage
		restJSON(t, "http://"+node.http+"/api/v1/subscriber/usage", token, &u)
		return u
	}

	devA := connectV3(t, nodes[0].addr, "dev1", pubs[0].Username, pubs[0].Password)
	for range 4 { // 4 QoS 2 messages for a pool of 2
		devA.Pub(t, accs[0]+"/dev1/event/n", 2, false, "q2")
	}
	devB := connectV3(t, nodes[0].addr, "dev1", pubs[1].Username, pubs[1].Password)
	devB.Pub(t, accs[1]+"/dev1/event/n", 2, false, "q2")

	u := usage(nodes[0], tokens[0])
	if !u.Pool.Demoted || u.Pool.DemotedSince == nil {
		t.Fatalf("node 1: Acme's pool %+v, want demoted with demoted_since", u.Pool)
	}
	since := *u.Pool.DemotedSince
	// Asked every 100 ms: the account's REST requests are rate limited.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(waitFor); ; <-tick.C {
		u = usage(nodes[1], tokens[0])
		if u.Pool.Demoted && u.Pool.DemotedSince != nil && u.Pool.DemotedSince.Equal(since) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2: Acme's pool %+v (demoted_since %v), want demoted since %v as node 1 says", u.Pool, u.Pool.DemotedSince, since)
		}
	}
	for i, nd := range nodes {
		if u := usage(nd, tokens[0]); u.Pool.DemotedSince == nil || !u.Pool.DemotedSince.Equal(since) {
			t.Fatalf("node %d, later: Acme's demoted_since %v, want %v", i+1, u.Pool.DemotedSince, since)
		}
		if u := usage(nd, tokens[1]); u.Pool.Demoted || u.Pool.DemotedSince != nil {
			t.Fatalf("node %d: Beta's pool %+v, want not demoted", i+1, u.Pool)
		}
	}
}

// TestClusterRemovedClientSessionNotResumedAfterItsNodeDied: a device's
// persistent session held by node 2, which dies, is not resumed through
// node 1 after its client was removed from the account (and added again):
// the removal ended it, as it does on a running node; another account's
// device of the same client id, not removed, resumes its session there.
func TestClusterRemovedClientSessionNotResumedAfterItsNodeDied(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fleetmq serve processes")
	}
	dsn, dir := pgtest.DSN(t), t.TempDir()
	accA, pubA, _ := clusterAccount(t, dir, dsn, "Acme", "dev1")
	accB, pubB, _ := clusterAccount(t, dir, dsn, "Beta", "dev1")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	nodes := startCluster(t, dsn, 2)
	saved := func(ns string) bool {
		var ok bool
		err := db.QueryRow(`SELECT node = 'n2' AND state IS NOT NULL FROM session_owners WHERE key = $1`, []byte(ns+"\x00dev1")).Scan(&ok)
		return err == nil && ok
	}
	for acc, pub := range map[string]credential{accA: pubA, accB: pubB} {
		c := connectV5(t, nodes[1].addr, "dev1", pub.Username, pub.Password, false)
		c.Sub(t, acc+"/dev1/cmd/#", 1)
		c.Disconnect(&paho.Disconnect{})
	}
	eventually(t, "node 2 to save both sessions", func() bool { return saved(accA) && saved(accB) })
	nodes[1].kill(t)

	mustCLI(t, dir, "client", "remove", accA, "dev1", "-database", dsn)
	mustCLI(t, dir, "client", "add", accA, "dev1", "-database", dsn)
	a := connectV5(t, nodes[0].addr, "dev1", pubA.Username, pubA.Password, false)
	if a.Connack.SessionPresent {
		t.Fatal("Acme's dev1, removed and added again while node 2 was dead, resumed the session it had before: CONNACK session present 1, want 0")
	}
	b := connectV5(t, nodes[0].addr, "dev1", pubB.Username, pubB.Password, false)
	if !b.Connack.SessionPresent {
		t.Fatal("Beta's dev1 did not resume its session of the dead node 2: CONNACK session present 0, want 1")
	}
}
