package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/platform"
)

// Publisher is a registered MQTT client (a device).
type Publisher struct {
	ClientID           string    `json:"client_id" example:"pump-17" doc:"The device's MQTT client id."`
	Label              string    `json:"label" example:"Pump 17, north field"`
	MaxPublishQoS      int       `json:"max_publish_qos" enum:"0,1,2" doc:"Highest QoS the device may publish with; a PUBLISH above it ends the connection."`
	HistoryTopicPrefix string    `json:"history_topic_prefix" example:"2c9654d9-9c8e-437b-a391-699d4fb8c874/pump-17" doc:"The platform path prefix of the device's messages in history: {account_id}/{client_id}."`
	CreatedAt          time.Time `json:"created_at"`
}

func publisherOf(c *fleetmq.MQTTClient) Publisher {
	return Publisher{ClientID: c.ClientID, Label: c.Label, MaxPublishQoS: c.MaxPublishQoS,
		HistoryTopicPrefix: c.HistoryTopicPrefix(), CreatedAt: c.CreatedAt.UTC()}
}

// PublisherList is a page of publishers.
type PublisherList struct {
	Publishers []Publisher `json:"publishers"`
	NextCursor string      `json:"next_cursor,omitempty" doc:"Pass as cursor for the next page; absent on the last page."`
}

// RetainedMessage is a live retained state message of a device.
type RetainedMessage struct {
	Topic           string          `json:"topic"`
	QoS             int             `json:"qos"`
	ReceivedAt      time.Time       `json:"received_at"`
	ExpiresAt       *time.Time      `json:"expires_at,omitempty"`
	PayloadEncoding string          `json:"payload_encoding" enum:"json,base64"`
	Payload         json.RawMessage `json:"payload" doc:"The payload as JSON when it is JSON, else a base64 string."`
}

// LivePublisher is what the broker knows of a device now.
type LivePublisher struct {
	ClientID       string            `json:"client_id"`
	Label          string            `json:"label"`
	MaxPublishQoS  int               `json:"max_publish_qos"`
	Connected      bool              `json:"connected"`
	ConnectedSince *time.Time        `json:"connected_since,omitempty"`
	LastSeen       *time.Time        `json:"last_seen,omitempty" doc:"When the broker last read from the device, or when its last connection ended. Absent if it has not connected since the server started."`
	Protocol       string            `json:"protocol,omitempty" enum:"MQTT 3.1,MQTT 3.1.1,MQTT 5.0"`
	Transport      string            `json:"transport,omitempty" enum:"tcp,tls,websocket"`
	RemoteAddr     string            `json:"remote_addr,omitempty"`
	LastPublish    *time.Time        `json:"last_publish,omitempty"`
	QoSMixToday    QoSMix            `json:"qos_mix_today" doc:"Messages accepted from the device today (UTC), by effective QoS."`
	Retained       []RetainedMessage `json:"retained" doc:"The device's live retained messages under state/ (at most 100)."`
}

// QoSMix counts messages by effective QoS, with percentages.
type QoSMix struct {
	Q0    int64   `json:"q0"`
	Q1    int64   `json:"q1"`
	Q2    int64   `json:"q2"`
	Total int64   `json:"total"`
	Q0Pct float64 `json:"q0_pct"`
	Q1Pct float64 `json:"q1_pct"`
	Q2Pct float64 `json:"q2_pct"`
}

func mixOf(m [3]int64) QoSMix {
	t := m[0] + m[1] + m[2]
	q := QoSMix{Q0: m[0], Q1: m[1], Q2: m[2], Total: t}
	if t > 0 {
		q.Q0Pct = pct(m[0], t)
		q.Q1Pct = pct(m[1], t)
		q.Q2Pct = pct(m[2], t)
	}
	return q
}

func pct(n, t int64) float64 { return float64(n*1000/t) / 10 }

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := apiTime(t)
	return &u
}

// apiTime is a time as the API shows every time: UTC, to the microsecond
// (the store's precision, so the same instant reads the same everywhere).
func apiTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func liveOf(l platform.PublisherLive) LivePublisher {
	out := LivePublisher{ClientID: l.ClientID, Label: l.Label, MaxPublishQoS: l.MaxPublishQoS, Connected: l.Connected,
		ConnectedSince: timePtr(l.ConnectedSince), LastSeen: timePtr(l.LastSeen), Protocol: l.Protocol,
		Transport: l.Transport, RemoteAddr: l.RemoteAddr, LastPublish: timePtr(l.LastPublish),
		QoSMixToday: mixOf(l.Today), Retained: make([]RetainedMessage, 0, len(l.Retained))}
	for _, r := range l.Retained {
		enc, payload := history.EncodePayload(r.Payload)
		out.Retained = append(out.Retained, RetainedMessage{Topic: r.Topic, QoS: r.QoS, ReceivedAt: apiTime(r.Received),
			ExpiresAt: timePtr(r.Expires), PayloadEncoding: enc, Payload: payload})
	}
	return out
}

type listPublishersInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
	Cursor string `query:"cursor" maxLength:"200" doc:"next_cursor of the previous page."`
}

type clientIDPath struct {
	ClientID string `path:"client_id" maxLength:"128" example:"pump-17"`
}

type createPublisherInput struct {
	Body struct {
		ClientID      string  `json:"client_id" minLength:"1" maxLength:"128" pattern:"^[A-Za-z0-9][A-Za-z0-9._:@-]*$" example:"pump-17" doc:"The device's MQTT client id: letters, digits and . _ : @ -, starting with a letter or digit."`
		Label         *string `json:"label,omitempty" maxLength:"200" example:"Pump 17"`
		MaxPublishQoS *int    `json:"max_publish_qos,omitempty" minimum:"0" maximum:"2" doc:"Default 1. 2 needs the Guaranteed delivery (QoS 2) add-on."`
	}
}

type patchPublisherInput struct {
	ClientID string `path:"client_id" maxLength:"128" example:"pump-17"`
	Body     struct {
		Label         *string `json:"label,omitempty" maxLength:"200"`
		MaxPublishQoS *int    `json:"max_publish_qos,omitempty" minimum:"0" maximum:"2" doc:"0, 1 or 2; 2 needs the Guaranteed delivery (QoS 2) add-on."`
	}
}

type publisherOutput struct {
	Body Publisher
}

type livePublishersInput struct {
	ClientID string `query:"client_id" maxLength:"128" doc:"Only this device."`
}

type livePublishersOutput struct {
	Body struct {
		Publishers []LivePublisher `json:"publishers"`
		At         time.Time       `json:"at" doc:"When this view was taken."`
	}
}

func (a *API) registerPublishers() {
	huma.Register(a.huma, op("listPublishers", http.MethodGet, "/publishers", "List MQTT clients",
		"The account's registered MQTT clients (devices), ordered by client_id, in pages.", fleetmq.AddOnMgmtREST, http.StatusOK, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *listPublishersInput) (*struct{ Body PublisherList }, error) {
			p := caller(ctx)
			cs, err := a.deps.Store.Clients(ctx, p.account.ID)
			if err != nil {
				return nil, a.fail(ctx, err, "")
			}
			sort.Slice(cs, func(i, j int) bool { return cs[i].ClientID < cs[j].ClientID })
			after := ""
			if in.Cursor != "" {
				b, err := base64.RawURLEncoding.DecodeString(in.Cursor)
				if err != nil || len(b) == 0 {
					return nil, invalidQuery("cursor", "not a cursor of this list")
				}
				after = string(b)
			}
			out := &struct{ Body PublisherList }{Body: PublisherList{Publishers: []Publisher{}}}
			for _, c := range cs {
				if c.ClientID <= after {
					continue
				}
				if len(out.Body.Publishers) == in.Limit {
					last := out.Body.Publishers[len(out.Body.Publishers)-1].ClientID
					out.Body.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(last))
					break
				}
				out.Body.Publishers = append(out.Body.Publishers, publisherOf(c))
			}
			return out, nil
		})

	huma.Register(a.huma, op("getPublisher", http.MethodGet, "/publishers/{client_id}", "Get an MQTT client",
		"One registered MQTT client.", fleetmq.AddOnMgmtREST, http.StatusOK, http.StatusNotFound),
		func(ctx context.Context, in *clientIDPath) (*publisherOutput, error) {
			c, err := a.deps.Store.Client(ctx, caller(ctx).account.ID, in.ClientID)
			if err != nil {
				return nil, a.fail(ctx, err, "")
			}
			return &publisherOutput{Body: publisherOf(c)}, nil
		})

	huma.Register(a.huma, op("createPublisher", http.MethodPost, "/publishers", "Register an MQTT client",
		"Registers a device's MQTT client id in the account, so that it can connect with a fleet publisher credential. "+
			"The plan's client limit applies (409 `conflict` when reached).",
		fleetmq.AddOnMgmtREST, http.StatusCreated, http.StatusConflict, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *createPublisherInput) (*publisherOutput, error) {
			p := caller(ctx)
			c, err := a.deps.Service.CreateClient(ctx, p.account.ID, control.ClientInput{ClientID: in.Body.ClientID,
				Label: in.Body.Label, MaxPublishQoS: in.Body.MaxPublishQoS})
			if err != nil {
				return nil, a.fail(ctx, err, "body")
			}
			a.changed(ctx)
			return &publisherOutput{Body: publisherOf(c)}, nil
		})

	huma.Register(a.huma, op("updatePublisher", http.MethodPatch, "/publishers/{client_id}", "Change an MQTT client",
		"Changes the label and/or max_publish_qos. A lower max_publish_qos applies to a connected device at once: "+
			"its next PUBLISH above the limit ends its connection.",
		fleetmq.AddOnMgmtREST, http.StatusOK, http.StatusNotFound, http.StatusUnprocessableEntity),
		func(ctx context.Context, in *patchPublisherInput) (*publisherOutput, error) {
			p := caller(ctx)
			c, err := a.deps.Service.UpdateClient(ctx, p.account.ID, control.ClientInput{ClientID: in.ClientID,
				Label: in.Body.Label, MaxPublishQoS: in.Body.MaxPublishQoS})
			if err != nil {
				return nil, a.fail(ctx, err, "body")
			}
			a.changed(ctx)
			return &publisherOutput{Body: publisherOf(c)}, nil
		})

	huma.Register(a.huma, op("deletePublisher", http.MethodDelete, "/publishers/{client_id}", "Remove an MQTT client",
		"Removes the client from the account; a connected device is disconnected and can no longer connect. Its stored history stays.",
		fleetmq.AddOnMgmtREST, http.StatusNoContent, http.StatusNotFound),
		func(ctx context.Context, in *clientIDPath) (*struct{}, error) {
			if err := a.deps.Service.DeleteClient(ctx, caller(ctx).account.ID, in.ClientID); err != nil {
				return nil, a.fail(ctx, err, "")
			}
			a.changed(ctx)
			return nil, nil
		})

	huma.Register(a.huma, op("livePublishers", http.MethodGet, "/publishers/live", "Live state of the MQTT clients",
		"For every registered client: whether it is connected and since when, when it was last seen, its protocol and transport, "+
			"its last publish, today's QoS mix, and its live retained state messages.",
		fleetmq.AddOnLiveREST, http.StatusOK, http.StatusNotFound),
		func(ctx context.Context, in *livePublishersInput) (*livePublishersOutput, error) {
			p := caller(ctx)
			now := a.deps.Now()
			out := &livePublishersOutput{}
			out.Body.At = apiTime(now)
			out.Body.Publishers = []LivePublisher{}
			if in.ClientID != "" {
				l, ok := a.deps.Policy.LivePublisher(p.account.ID, in.ClientID, now)
				if !ok {
					return nil, problemOf(fleetmq.NotFound("client", in.ClientID), "")
				}
				out.Body.Publishers = append(out.Body.Publishers, liveOf(l))
				return out, nil
			}
			for _, l := range a.deps.Policy.LivePublishers(p.account.ID, now) {
				out.Body.Publishers = append(out.Body.Publishers, liveOf(l))
			}
			return out, nil
		})
}

// invalidQuery is a 422 for one query parameter.
func invalidQuery(name, msg string) *Problem {
	p := newProblem(http.StatusUnprocessableEntity, fleetmq.CodeValidation, "validation failed")
	p.Errors = []*FieldError{{Location: "query." + name, Message: msg}}
	return p
}
