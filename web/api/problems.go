package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/fleetmq/fleetmq"
)

// ClientProblem is something that went wrong for one MQTT client: a
// refusal, a connection the server ended, or messages it did not get.
// Repeats are one entry with a count.
type ClientProblem struct {
	ClientID   string    `json:"client_id" example:"pump-17"`
	Kind       string    `json:"kind" enum:"connect_refused,publish_refused,subscribe_refused,will_refused,disconnected,dropped" doc:"What went wrong: a refused CONNECT, PUBLISH, SUBSCRIBE filter or will, a connection the server ended (disconnected), or messages not delivered to this client (dropped)."`
	Topic      string    `json:"topic,omitempty" example:"2c9654d9-9c8e-437b-a391-699d4fb8c874/pump-17/data/level" doc:"The refused PUBLISH's or will's topic, the refused SUBSCRIBE's filter, or the dropped message's topic."`
	QoS        int       `json:"qos" enum:"0,1,2"`
	ReasonCode int       `json:"reason_code" example:"144" doc:"The MQTT reason code the client was answered with (0 for drops); MQTT 3.1.1 clients get their version's equivalent."`
	Reason     string    `json:"reason" example:"topic_name_invalid" doc:"A stable name: the reason code's for refusals, the close reason for disconnects (keepalive_timeout, write_timeout, qos_not_allowed, session_taken_over, not_authorized, ...), the drop reason for drops (queue_full, offline_qos0, expired, connection_closed, ...)."`
	Detail     string    `json:"detail" example:"topic class \"data/\" is not one of state, event, telemetry, sample" doc:"Why, in words (the latest repeat's)."`
	Count      int64     `json:"count" doc:"How many times it happened between first_at and last_at."`
	FirstAt    time.Time `json:"first_at"`
	LastAt     time.Time `json:"last_at"`
}

// ProblemList is a client's or an account's recent problems, most recent
// first.
type ProblemList struct {
	Problems []ClientProblem `json:"problems"`
}

type clientProblemsInput struct {
	ClientID string    `path:"client_id" maxLength:"128" example:"pump-17"`
	Since    time.Time `query:"since" doc:"Only problems last seen at or after this time (RFC 3339); default 7 days ago, which is also how long problems are kept."`
	Limit    int       `query:"limit" minimum:"1" maximum:"1000" default:"100"`
}

type accountProblemsInput struct {
	ClientID string    `query:"client_id" maxLength:"128" doc:"Only this client (a registered device or a subscriber's client id)."`
	Since    time.Time `query:"since" doc:"Only problems last seen at or after this time (RFC 3339); default 7 days ago, which is also how long problems are kept."`
	Limit    int       `query:"limit" minimum:"1" maximum:"1000" default:"100"`
}

const problemsDoc = " Each client keeps its 50 most recent problems and the account its 1,000 most recent, for 7 days; " +
	"a problem reaches this list within a second or two."

func (a *API) registerProblems() {
	huma.Register(a.huma, op("publisherProblems", http.MethodGet, "/publishers/{client_id}/problems", "Recent problems of an MQTT client",
		"Why a device's data does not arrive: its refused connects, publishes, subscriptions and wills (with the topic and the reason), "+
			"the connections the server ended, and messages it did not get, most recent first."+problemsDoc,
		fleetmq.AddOnLiveREST, http.StatusOK, http.StatusNotFound, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *clientProblemsInput) (*struct{ Body ProblemList }, error) {
			account := caller(ctx).account.ID
			if _, err := a.deps.Store.Client(ctx, account, in.ClientID); err != nil {
				return nil, a.fail(ctx, err, "")
			}
			return a.problems(ctx, account, in.ClientID, in.Since, in.Limit)
		})
	huma.Register(a.huma, op("accountProblems", http.MethodGet, "/problems", "Recent problems of every MQTT client",
		"The recent problems of all the account's MQTT clients, devices and subscribers alike, most recent first."+problemsDoc,
		fleetmq.AddOnLiveREST, http.StatusOK, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *accountProblemsInput) (*struct{ Body ProblemList }, error) {
			return a.problems(ctx, caller(ctx).account.ID, in.ClientID, in.Since, in.Limit)
		})
}

func (a *API) problems(ctx context.Context, account, clientID string, since time.Time, limit int) (*struct{ Body ProblemList }, error) {
	if since.IsZero() {
		since = a.deps.Now().Add(-fleetmq.ProblemsKeptFor)
	}
	ps, err := a.deps.Store.Problems(ctx, account, clientID, since, limit)
	if err != nil {
		return nil, a.fail(ctx, err, "")
	}
	out := &struct{ Body ProblemList }{Body: ProblemList{Problems: make([]ClientProblem, 0, len(ps))}}
	for _, p := range ps {
		out.Body.Problems = append(out.Body.Problems, ClientProblem{ClientID: p.ClientID, Kind: p.Kind, Topic: p.Topic, QoS: p.QoS,
			ReasonCode: p.Code, Reason: p.Reason, Detail: p.Detail, Count: p.Count, FirstAt: p.First.UTC(), LastAt: p.Last.UTC()})
	}
	return out, nil
}
