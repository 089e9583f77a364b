package api_test

// Requests at the HTTP level: oversized and broken bodies sent over raw
// TCP, where what happens to the connection afterwards matters.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/web/api"
)

// rawExchange writes a raw request on a new connection and reads every
// response the server sends on it until it closes the connection (or
// waitFor passes).
func (e *env) rawExchange(t *testing.T, request []byte) []*response {
	t.Helper()
	c, err := net.Dial("tcp", e.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitFor))
	go c.Write(request) // may block or fail once the server stops reading
	br := bufio.NewReader(c)
	var out []*response
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, &response{Method: "RAW", Path: fmt.Sprint(len(out)), Status: resp.StatusCode, Header: resp.Header, Body: b})
		if err != nil {
			return out
		}
	}
}

// TestBodyTailIsNotARequest: a chunked body over the limit is refused
// with 413 and the connection is closed: what the server did not read of
// the body is never parsed as a next request. The body carries a complete
// request at the offset where net/http stops discarding (64 KiB and a
// byte read by the API, then 256 KiB discarded); were the connection
// kept, that request would run as the caller.
func TestBodyTailIsNotARequest(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	smuggled := fmt.Sprintf("POST /api/v1/subscriber/publishers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 25\r\n\r\n{\"client_id\":\"smuggled\"}\n", A.Token)
	const at = api.MaxBodyBytes + 1 + 256<<10 // what huma reads, then what net/http discards
	var body bytes.Buffer
	body.WriteString(`{"label":"`)
	body.WriteString(strings.Repeat("x", at-body.Len()))
	body.WriteString(smuggled)
	body.WriteString(strings.Repeat("y", 700<<10))
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /api/v1/subscriber/publishers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n%x\r\n", A.Token, body.Len())
	req.Write(body.Bytes())
	req.WriteString("\r\n0\r\n\r\n")

	rs := e.rawExchange(t, req.Bytes())
	if len(rs) == 0 {
		t.Fatal("no response")
	}
	rs[0].problem(t, http.StatusRequestEntityTooLarge, "request_too_large")
	if len(rs) > 1 {
		t.Fatalf("the connection went on after the 413: %s", rs[1])
	}
	if c, err := e.Store.Client(e.ctx, A.ID, "smuggled"); err == nil {
		t.Fatalf("the body's tail ran as a request: client %+v exists", c)
	}
}

// TestBrokenChunkedBody: a body whose chunked encoding is broken is a
// 400 problem, not a 500.
func TestBrokenChunkedBody(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	req := "POST /api/v1/subscriber/publishers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + A.Token +
		"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"cli\r\nzz\r\n"
	rs := e.rawExchange(t, []byte(req))
	if len(rs) == 0 {
		t.Fatal("no response")
	}
	p := rs[0].problem(t, http.StatusBadRequest, "bad_request")
	if !p.hasLocation("body") {
		t.Fatalf("%s: want the fault located in the body", rs[0])
	}
	if cs, _ := e.Store.Clients(e.ctx, A.ID); len(cs) != 0 {
		t.Fatalf("a broken body registered %d clients", len(cs))
	}
}

// TestOversizedBody sends 1 MiB bodies whole, with a Content-Length and
// chunked (no length: the limit applies while reading). The server answers
// 413 request_too_large and closes the connection; a client still sending
// may see the connection reset instead of the answer (net/http closes a
// connection whose unread body is large), so a transport error is
// accepted, a 2xx or 5xx never. Nothing is created and the server keeps
// serving.
func TestOversizedBody(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	big := []byte(`{"client_id":"big","label":"` + strings.Repeat("x", 1<<20) + `"}`)
	answered := 0
	for i := 0; i < 10; i++ {
		for _, chunked := range []bool{false, true} {
			var body io.Reader = bytes.NewReader(big)
			if chunked {
				body = io.MultiReader(body) // no length known: sent chunked
			}
			hr, err := http.NewRequest(http.MethodPost, e.url("/publishers"), body)
			if err != nil {
				t.Fatal(err)
			}
			hr.Header.Set("Authorization", "Bearer "+A.Token)
			hr.Header.Set("Content-Type", "application/json")
			resp, err := e.http.Do(hr)
			if err != nil {
				continue // reset while sending
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("1 MiB body (chunked %v): %d %s", chunked, resp.StatusCode, b)
			}
			if err != nil {
				continue // reset while reading the answer
			}
			r := &response{Method: "POST", Path: "/publishers", Status: resp.StatusCode, Header: resp.Header, Body: b}
			r.problem(t, http.StatusRequestEntityTooLarge, "request_too_large")
			answered++
		}
	}
	t.Logf("%d of 20 oversized requests were answered before the connection closed", answered)
	if cs, _ := e.Store.Clients(e.ctx, A.ID); len(cs) != 0 {
		t.Fatalf("an oversized body registered %d clients", len(cs))
	}
	// A body at the limit is read (and refused for what it says, not its size).
	atLimit := `{"client_id":"ok","label":"` + strings.Repeat("x", 64<<10-40) + `"}`
	if len(atLimit) > 64<<10 {
		t.Fatalf("test body is %d bytes", len(atLimit))
	}
	e.req(t, A.Token, http.MethodPost, "/publishers", atLimit).problem(t, http.StatusUnprocessableEntity, fleetmq.CodeValidation)
	e.req(t, A.Token, http.MethodPost, "/publishers", map[string]any{"client_id": "ok"}).ok(t, http.StatusCreated, nil)
}

// TestBodyLimitBoundary: a body of exactly 64 KiB is read (and judged by
// what it says), one byte more is 413 request_too_large, with a
// Content-Length and chunked alike.
func TestBodyLimitBoundary(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns)
	body := func(n int) []byte {
		pre := `{"client_id":"x","label":"`
		return []byte(pre + strings.Repeat("x", n-len(pre)-2) + `"}`)
	}
	for _, chunked := range []bool{false, true} {
		for _, c := range []struct {
			size   int
			status int
			code   string
		}{
			{api.MaxBodyBytes - 1, http.StatusUnprocessableEntity, fleetmq.CodeValidation}, // the label is too long
			{api.MaxBodyBytes, http.StatusUnprocessableEntity, fleetmq.CodeValidation},
			{api.MaxBodyBytes + 1, http.StatusRequestEntityTooLarge, "request_too_large"},
		} {
			b := body(c.size)
			if len(b) != c.size {
				t.Fatalf("test body of %d bytes, want %d", len(b), c.size)
			}
			var rd io.Reader = bytes.NewReader(b)
			if chunked {
				rd = io.MultiReader(rd)
			}
			hr, err := http.NewRequest(http.MethodPost, e.url("/publishers"), rd)
			if err != nil {
				t.Fatal(err)
			}
			hr.Header.Set("Authorization", "Bearer "+A.Token)
			hr.Header.Set("Content-Type", "application/json")
			r := e.send(t, hr)
			p := r.problem(t, c.status, c.code)
			if c.status == http.StatusRequestEntityTooLarge && !strings.Contains(p.Detail, fmt.Sprint(api.MaxBodyBytes)) {
				t.Fatalf("%s: the detail does not give the limit", r)
			}
			if c.status == http.StatusUnprocessableEntity && !p.hasLocation("body.label") {
				t.Fatalf("%s (chunked %v, %d bytes): want the label refused, not the size", r, chunked, c.size)
			}
		}
	}
}
