package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/internal/pgtest"
)

// TestValuesEveryStoreTakes: values PostgreSQL cannot store in text (NUL)
// and other control characters, arriving in a message payload or a REST
// request, are refused or left out at the edge on both engines: the device
// gets its acknowledgement and the history writer goes on (on PostgreSQL a
// NUL used to stop every tenant's acknowledgements), and the REST API
// answers 4xx, never 500.
func TestValuesEveryStoreTakes(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			edit := []func(*app.Config){func(c *app.Config) { c.HTTPListen = "127.0.0.1:0" }}
			if engine == "postgres" {
				dsn := pgtest.DSN(t)
				edit = append(edit, func(c *app.Config) { c.Database = dsn })
			}
			p := startPlatform(t, edit...)
			A := p.newTenant(t, "A", "starter", false, "dev1")
			for _, x := range []fleetmq.AddOn{fleetmq.AddOnMgmtREST, fleetmq.AddOnLiveREST, fleetmq.AddOnHistoryDownload} {
				if err := p.Service.SetAddOn(p.ctx, A.ID, x, true); err != nil {
					t.Fatal(err)
				}
			}
			_, token, err := p.Service.CreateRESTToken(p.ctx, A.ID, control.NewRESTToken{Label: "t"})
			if err != nil {
				t.Fatal(err)
			}
			p.synced(t)

			dev := dialV5(t, p.MQTTAddr, "dev1", A.PubUser, A.PubPass)
			dev.Pub(t, A.topic("dev1", "state/sc"), 1, `{"station_controller_device_id":"sc\u0000-7","v":1}`)
			dev.Pub(t, A.topic("dev1", "state/sc"), 1, `{"station_controller_device_id":"sc\u0007-8","v":2}`)
			dev.Pub(t, A.topic("dev1", "state/sc"), 1, `{"station_controller_device_id":"sc-9","v":3}`)
			recs := p.storedHistory(t, A.ID)
			if len(recs) != 3 || recs[0].StationControllerDeviceID != "" || recs[1].StationControllerDeviceID != "" || recs[2].StationControllerDeviceID != "sc-9" {
				t.Fatalf("stored %d records; station controllers %q, want every message stored, the ids with control characters left out", len(recs), stationIDs(recs))
			}

			api := "http://" + p.HTTPAddr + "/api/v1/subscriber"
			for _, r := range []struct {
				method, path, body string
				want               int
			}{
				{"GET", "/publishers/a%00b", "", http.StatusNotFound},
				{"GET", "/publishers/a%00b/problems", "", http.StatusNotFound},
				{"POST", "/publishers", `{"client_id":"a\u0000b"}`, http.StatusUnprocessableEntity},
				{"POST", "/publishers", `{"client_id":"pump-2","label":"a\u0000b"}`, http.StatusUnprocessableEntity},
				{"PATCH", "/publishers/dev1", `{"label":"tab\tin label"}`, http.StatusUnprocessableEntity},
				{"POST", "/subscriber-mqtt-passwords", `{"label":"a\u0000b"}`, http.StatusUnprocessableEntity},
				{"POST", "/subscriber-mqtt-passwords", `{"filters":["` + A.ID + `/a\u0000b/#"]}`, http.StatusUnprocessableEntity},
				{"POST", "/publisher-credentials", `{"label":"a\u0000b"}`, http.StatusUnprocessableEntity},
				{"GET", "/history?client_id=a%00b", "", http.StatusUnprocessableEntity},
				{"GET", "/history?topic=" + A.ID + "/%00/%23", "", http.StatusUnprocessableEntity},
				{"GET", "/publishers/live?client_id=a%00b", "", http.StatusNotFound},
				{"GET", "/problems?client_id=a%00b", "", http.StatusOK}, // none
			} {
				req, err := http.NewRequestWithContext(context.Background(), r.method, api+r.path, strings.NewReader(r.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				if r.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != r.want {
					t.Errorf("%s %s %s: %d %s, want %d", r.method, r.path, r.body, resp.StatusCode, bytes.TrimSpace(body), r.want)
				}
			}
			// The writer is not stuck: one more message is acknowledged and stored.
			dev.Pub(t, A.topic("dev1", "event/after"), 1, "after")
			if n := len(p.storedHistory(t, A.ID)); n != 4 {
				t.Fatalf("%d records stored after the bad requests, want 4", n)
			}
		})
	}
}

func stationIDs(recs []*fleetmq.Record) []string {
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.StationControllerDeviceID)
	}
	return ids
}
