package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/testkit"
)

type clientProblem struct {
	ClientID   string    `json:"client_id"`
	Kind       string    `json:"kind"`
	Topic      string    `json:"topic"`
	QoS        int       `json:"qos"`
	ReasonCode int       `json:"reason_code"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail"`
	Count      int64     `json:"count"`
	FirstAt    time.Time `json:"first_at"`
	LastAt     time.Time `json:"last_at"`
}

// problemsUntil polls path until ok accepts its problems.
func (e *env) problemsUntil(t *testing.T, token, path, what string, ok func([]clientProblem) bool) []clientProblem {
	t.Helper()
	var got struct{ Problems []clientProblem }
	testkit.CheckFor(t, waitFor, func() error {
		e.get(t, token, path).ok(t, http.StatusOK, &got)
		if !ok(got.Problems) {
			return fmt.Errorf("%s: GET %s gave %+v", what, path, got.Problems)
		}
		return nil
	})
	return got.Problems
}

// TestClientProblems: a device's refused publishes (a wrong topic class,
// repeated), a refused subscription and a wrong password are listed for
// its account's owner with topic, reason code, reason, detail and count,
// most recent first; the other account sees none of them and gets 404
// for the device; since and client_id narrow the lists.
func TestClientProblems(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns, "pump-17", "valve-2")
	B := e.tenant(t, "B", "starter", allAddOns, "pump-17")
	e.synced(t)

	dev := e.dial(t, "pump-17", A.PubUser, A.PubPass)
	wrong := A.topic("pump-17", "data/level")
	for range 3 {
		r, err := dev.TryPublish(&paho.Publish{Topic: wrong, QoS: 1, Payload: []byte("1")})
		if err == nil && r.ReasonCode < 0x80 {
			t.Fatalf("publish to %s accepted: %+v", wrong, r)
		}
	}
	if code := dev.SubCode(t, B.ID+"/#", 1); code < 0x80 {
		t.Fatalf("subscribe to B's account: 0x%02x", code)
	}
	e.refused(t, "valve-2", A.PubUser, "not-the-password")
	bdev := e.dial(t, "pump-17", B.PubUser, B.PubPass)
	bdev.Pub(t, B.topic("pump-17", "state/ok"), 1, "fine")

	got := e.problemsUntil(t, A.Token, "/publishers/pump-17/problems", "pump-17's problems", func(ps []clientProblem) bool {
		return len(ps) == 2 && ps[0].Count+ps[1].Count == 4
	})
	var pub, sub clientProblem
	for _, p := range got {
		switch p.Kind {
		case fleetmq.ProblemPublishRefused:
			pub = p
		case fleetmq.ProblemSubscribeRefused:
			sub = p
		}
	}
	if pub.Topic != wrong || pub.Count != 3 || pub.QoS != 1 || pub.ReasonCode != 0x90 || pub.Reason != "topic_name_invalid" ||
		pub.Detail != `topic class "data/" is not one of state, event, telemetry, sample` || pub.ClientID != "pump-17" || pub.FirstAt.After(pub.LastAt) {
		t.Fatalf("the refused publishes: %+v", pub)
	}
	if sub.Topic != B.ID+"/#" || sub.Count != 1 || sub.ReasonCode != 0x87 || sub.Reason != "not_authorized" || sub.Detail == "" {
		t.Fatalf("the refused subscription: %+v", sub)
	}
	valve := e.problemsUntil(t, A.Token, "/publishers/valve-2/problems", "valve-2's refused connect", func(ps []clientProblem) bool { return len(ps) == 1 })
	if v := valve[0]; v.Kind != fleetmq.ProblemConnectRefused || v.ReasonCode != 0x86 || v.Reason != "bad_user_name_or_password" ||
		v.Detail != "wrong password for credential "+A.PubCredID {
		t.Fatalf("valve-2's refused connect: %+v", v)
	}

	// The account-wide list has all three; client_id narrows it; since
	// after them leaves none.
	e.problemsUntil(t, A.Token, "/problems", "A's problems", func(ps []clientProblem) bool { return len(ps) == 3 })
	e.problemsUntil(t, A.Token, "/problems?client_id=valve-2", "A's problems of valve-2", func(ps []clientProblem) bool {
		return len(ps) == 1 && ps[0].ClientID == "valve-2"
	})
	later := url.QueryEscape(e.clock.Now().Add(time.Second).Format(time.RFC3339))
	e.problemsUntil(t, A.Token, "/problems?since="+later, "A's problems since later", func(ps []clientProblem) bool { return len(ps) == 0 })

	// B: its own pump-17 has no problems, A's are not visible.
	e.problemsUntil(t, B.Token, "/publishers/pump-17/problems", "B's pump-17", func(ps []clientProblem) bool { return len(ps) == 0 })
	e.problemsUntil(t, B.Token, "/problems", "B's problems", func(ps []clientProblem) bool { return len(ps) == 0 })
	e.get(t, B.Token, "/publishers/valve-2/problems").problem(t, http.StatusNotFound, fleetmq.CodeNotFound)
	e.get(t, A.Token, "/problems?since=yesterday").problem(t, http.StatusUnprocessableEntity, fleetmq.CodeValidation)
}
