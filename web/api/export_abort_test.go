package api_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/internal/testkit"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/sqlstore"
	"github.com/fleetmq/fleetmq/web/api"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// failingStore is a SQLite store whose history reads fail from the
// failAt-th on (counted from 1; 0: never), the way fail makes them fail.
type failingStore struct {
	*sqlstore.Store
	failAt int32
	fail   func(ctx context.Context, s *sqlstore.Store) context.Context
	calls  atomic.Int32
}

func (f *failingStore) QueryHistory(ctx context.Context, q *fleetmq.HistoryQuery, fn func(*fleetmq.Record) error) error {
	if n := f.calls.Add(1); f.failAt > 0 && n >= f.failAt {
		ctx = f.fail(ctx, f.Store)
	}
	return f.Store.QueryHistory(ctx, q, fn)
}

// closeStore closes the database under the store (as a store that is
// shutting down, or has lost its database, answers).
func closeStore(ctx context.Context, s *sqlstore.Store) context.Context {
	s.Close()
	return ctx
}

// timeOut gives the read a context whose deadline has passed (as a
// statement that timed out).
func timeOut(ctx context.Context, _ *sqlstore.Store) context.Context {
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	_ = cancel // the deadline has passed: nothing to release early
	return ctx
}

func exportServer(t *testing.T, records int, failAt int32, fail func(context.Context, *sqlstore.Store) context.Context) (*httptest.Server, string, *testkit.LogSink) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlstore.OpenSQLite(ctx, filepath.Join(t.TempDir(), "fleetmq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := control.New(st)
	acc, _, err := svc.CreateAccount(ctx, control.NewAccount{Name: "A", OwnerEmail: "a@example.com", Plan: "starter"})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.SetAddOn(ctx, acc.ID, fleetmq.AddOnHistoryDownload, true); err != nil {
		t.Fatal(err)
	}
	_, token, err := svc.CreateRESTToken(ctx, acc.ID, control.NewRESTToken{Label: "tests"})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*fleetmq.Record, records)
	for i := range recs {
		recs[i] = &fleetmq.Record{AccountID: acc.ID, ClientID: "dev1", Topic: acc.ID + "/dev1/telemetry/t", Class: "telemetry",
			QoS: 1, PublishedQoS: 1, Payload: fmt.Appendf(nil, `{"n":%d}`, i), Received: t0.Add(time.Duration(i) * time.Millisecond)}
	}
	if err := st.AppendHistory(ctx, recs); err != nil {
		t.Fatal(err)
	}
	auth, err := restauth.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := platform.StoreSource{Store: st}.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.LogSink{} // written by the handler while the test reads it
	h := api.New(api.Deps{Service: svc, Store: &failingStore{Store: st, failAt: failAt, fail: fail}, Policy: platform.NewPolicy(platform.Options{}, snap),
		Auth: auth, Limiter: restauth.NewLimiter(nil, 1<<20), Accounts: restauth.NewAccountLimiter(restauth.AccountLimits{Rate: 1 << 20, Burst: 1 << 20}),
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, token, logs
}

// TestExportFailingMidwayIsCutOff: an export whose store fails after the
// status and some records went out does not end like a complete one: the
// client reads an error (the chunked body lacks its last chunk; over
// HTTP/1.0, whose body ends with its connection, the connection is
// reset), and the server logs the failure at error level. One that fails
// before anything went out is answered 500. The same exports complete
// when the store does not fail.
func TestExportFailingMidwayIsCutOff(t *testing.T) {
	const records = 2*history.ExportBatch + 500 // three batches
	get := func(t *testing.T, srv *httptest.Server, token, query string) (*http.Response, []byte, error) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+api.Prefix+"/history?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", query, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, body, err
	}
	lines := func(body []byte) int { return bytes.Count(body, []byte("\n")) }

	t.Run("complete", func(t *testing.T) {
		srv, token, _ := exportServer(t, records, 0, nil)
		for _, f := range []struct{ format, ctype string }{{"ndjson", "application/x-ndjson"}, {"csv", "text/csv; charset=utf-8"}} {
			resp, body, err := get(t, srv, token, "format="+f.format)
			want := records
			if f.format == "csv" {
				want++ // the header row
			}
			if err != nil || resp.StatusCode != http.StatusOK || lines(body) != want || resp.Header.Get("Content-Type") != f.ctype {
				t.Fatalf("%s export: %d %q, %d lines, %v; want 200 %q, %d lines and no error", f.format, resp.StatusCode, resp.Header.Get("Content-Type"), lines(body), err, f.ctype, want)
			}
		}
		resp, body, err := get(t, srv, token, "format=ndjson&client_id=nobody")
		if err != nil || resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("empty export: %d %q %q, %v; want 200 application/x-ndjson, no body", resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
		}
	})

	for _, c := range []struct {
		name string
		fail func(context.Context, *sqlstore.Store) context.Context
	}{
		{"database closed", closeStore},
		{"read timed out", timeOut},
	} {
		t.Run(c.name+" midway", func(t *testing.T) {
			for _, format := range []string{"ndjson", "csv"} {
				srv, token, logs := exportServer(t, records, 2, c.fail) // the second batch fails
				resp, body, err := get(t, srv, token, "format="+format)
				if resp.StatusCode != http.StatusOK || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("%s export: %d, reading the body: %v; want 200 and io.ErrUnexpectedEOF", format, resp.StatusCode, err)
				}
				if n := lines(body); n < 1 || n > history.ExportBatch+1 {
					t.Errorf("%s export: %d lines before the error; want the first batch's at most", format, n)
				}
				if log := logs.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "history export failed midway") {
					t.Errorf("%s export: the failure was not logged at error level:\n%s", format, log)
				}
			}
		})
	}

	t.Run("first batch fails", func(t *testing.T) {
		srv, token, logs := exportServer(t, records, 1, closeStore)
		resp, body, err := get(t, srv, token, "format=ndjson")
		if err != nil || resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!bytes.Contains(body, []byte(`"code":"internal"`)) {
			t.Fatalf("export whose first read fails: %d %q %s, %v; want a 500 problem", resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
		}
		if !strings.Contains(logs.String(), "level=ERROR") {
			t.Errorf("the failure was not logged at error level:\n%s", logs)
		}
	})

	// HTTP/1.0 has no chunks: a closed connection would end the body as
	// a complete one does. The failing export's connection is reset.
	http10 := func(t *testing.T, srv *httptest.Server, token string) (head string, body []byte, err error) {
		t.Helper()
		nc, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(waitFor))
		fmt.Fprintf(nc, "GET %s/history?format=ndjson HTTP/1.0\r\nAuthorization: Bearer %s\r\n\r\n", api.Prefix, token)
		all, err := io.ReadAll(bufio.NewReader(nc))
		head, rest, _ := strings.Cut(string(all), "\r\n\r\n")
		return head, []byte(rest), err
	}
	t.Run("HTTP/1.0", func(t *testing.T) {
		srv, token, _ := exportServer(t, records, 0, nil)
		head, body, err := http10(t, srv, token)
		if err != nil || !strings.HasPrefix(head, "HTTP/1.0 200") || lines(body) != records {
			t.Fatalf("HTTP/1.0 export: %q, %d lines, %v; want 200, %d lines, the connection closed", head, lines(body), err, records)
		}
		srv, token, _ = exportServer(t, records, 2, closeStore)
		head, body, err = http10(t, srv, token)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("HTTP/1.0 export failing midway: %q, %d bytes, read error %v; want the connection reset", head, len(body), err)
		}
	})

	// curl, as docs/api.md says: exit status 18 over HTTP/1.1 ("transfer
	// closed with outstanding read data remaining"), 56 over HTTP/1.0
	// ("Connection reset by peer").
	t.Run("curl", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Skip("no curl")
		}
		for _, c := range []struct {
			proto string
			code  int
		}{{"--http1.1", 18}, {"--http1.0", 56}} {
			srv, token, _ := exportServer(t, records, 2, closeStore)
			cmd := exec.Command("curl", "-sS", c.proto, "-o", filepath.Join(t.TempDir(), "out"), "-H", "Authorization: Bearer "+token, srv.URL+api.Prefix+"/history?format=ndjson")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Errorf("curl %s of an export failing midway: %v (%s); want exit status %d", c.proto, err, out, c.code)
			}
		}
	})
}
