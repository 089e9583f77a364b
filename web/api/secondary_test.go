package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/app"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// try is a GET with a token that returns its error instead of failing the
// test, for goroutines other than the test's.
func (e *env) try(token, path string) (*response, error) {
	hr, err := http.NewRequest(http.MethodGet, e.url(path), nil)
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.http.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{Method: hr.Method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// secondary fails unless r is the 429 of an account's secondary limit:
// rate_limited, a detail that names the limit (want) and says it is the
// account's, and Retry-After in whole seconds.
func secondary(t *testing.T, r *response, want, retryAfter string) {
	t.Helper()
	p := r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	if !strings.Contains(p.Detail, "over all its tokens") || !strings.Contains(p.Detail, want) {
		t.Fatalf("%s: detail %q, want the account's limit (%q)", r, p.Detail, want)
	}
	if got := r.Header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("%s: Retry-After %q, want %s", r, got, retryAfter)
	}
}

// TestAccountRateLimit: account A's three tokens, hammering in parallel,
// share one bucket of 10 requests refilled at 1 a second (the test clock
// stands still): 10 of their 30 requests are answered, the other 20 get
// 429 rate_limited with Retry-After 1 and a detail naming the account's
// limit, and none of those is counted against its token's hour; account B,
// in the same moment, has every request answered. Three seconds later A
// may make three more.
func TestAccountRateLimit(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.Config) {
		c.RESTRateLimit = 100
		c.RESTAccountLimits = restauth.AccountLimits{Concurrency: 100, Rate: 1, Burst: 10, RefusalPause: time.Millisecond}
	})
	A := e.tenant(t, "A", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	B := e.tenant(t, "B", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	a2, _ := e.token(t, A.ID, "a2")
	a3, _ := e.token(t, A.ID, "a3")
	tokensA := []string{A.Token, a2, a3}

	type result struct {
		token string
		r     *response
		err   error
	}
	const each = 10
	results := make(chan result, each*4)
	var wg sync.WaitGroup
	for _, tok := range append(tokensA, B.Token) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r, err := e.try(tok, "/usage")
				results <- result{tok, r, err}
			}
		}()
	}
	wg.Wait()
	close(results)
	answered := map[string]int{}
	refused := 0
	for res := range results {
		if res.err != nil {
			t.Fatal(res.err)
		}
		switch {
		case res.token == B.Token:
			res.r.ok(t, http.StatusOK, nil)
			answered[res.token]++
		case res.r.Status == http.StatusOK:
			answered[res.token]++
		default:
			secondary(t, res.r, "faster than 1 a second after a burst of 10", "1")
			if res.r.Header.Get("X-RateLimit-Limit") != "100" {
				t.Fatalf("%s: no X-RateLimit-* headers on the refusal", res.r)
			}
			refused++
		}
	}
	if got := answered[A.Token] + answered[a2] + answered[a3]; got != 10 || refused != 20 {
		t.Fatalf("account A's 30 requests at once: %d answered, %d refused; want 10 and 20 (its burst)", got, refused)
	}
	if answered[B.Token] != each {
		t.Fatalf("account B: %d of %d answered", answered[B.Token], each)
	}

	// Three seconds refill three requests; the refused ones were not
	// counted against any token's hour.
	e.clock.Add(3 * time.Second)
	for _, tok := range tokensA {
		r := e.get(t, tok, "/usage").ok(t, http.StatusOK, nil)
		if got, want := r.Header.Get("X-RateLimit-Used"), strconv.Itoa(answered[tok]+1); got != want {
			t.Fatalf("%s: X-RateLimit-Used %s, want %s (its answered requests only)", r, got, want)
		}
	}
	secondary(t, e.get(t, a2, "/usage"), "faster than 1 a second", "1")
	e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil)
}

// TestAccountLimitsLetASequentialClientSpendItsHour: with an hourly limit
// of 200 per token and an account burst of as many (the rate never
// refills: the test clock stands still), one client making one request
// after another spends its token's whole hour and is then told so by the
// hourly limit (Retry-After until the hour); the account's other token,
// whose hour is untouched, is then refused by the account's limit, while
// account B is answered.
func TestAccountLimitsLetASequentialClientSpendItsHour(t *testing.T) {
	t.Parallel()
	const hour = 200
	e := start(t, func(c *app.Config) {
		c.RESTRateLimit = hour
		c.RESTAccountLimits = restauth.AccountLimits{Burst: hour, RefusalPause: time.Millisecond}
	})
	A := e.tenant(t, "A", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	B := e.tenant(t, "B", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	other, _ := e.token(t, A.ID, "other")
	reset := time.Date(2030, 3, 10, 13, 0, 0, 0, time.UTC) // t0 is 12:20
	for i := 1; i <= hour; i++ {
		r := e.get(t, A.Token, "/usage")
		if r.Status != http.StatusOK {
			t.Fatalf("request %d of a sequential client: %s", i, r)
		}
		if i == hour {
			rateHeaders(t, r, hour, hour, reset)
		}
	}
	r := e.get(t, A.Token, "/usage")
	p := r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	if !strings.Contains(p.Detail, "this token made 200 requests this hour") || r.Header.Get("Retry-After") != strconv.Itoa(40*60) {
		t.Fatalf("%s: want the hourly limit's refusal, Retry-After until 13:00", r)
	}
	r = e.get(t, other, "/usage")
	secondary(t, r, "after a burst of 200", "1")
	rateHeaders(t, r, hour, 0, reset)
	e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil)
}

// TestAccountConcurrencyLimit: with 2 requests of an account in flight at
// once, two NDJSON exports of account A that its client never reads (each
// with a token of its own) hold both; a third request of A, on a third
// token and a route that is not history, gets 429 rate_limited with
// Retry-After 1 at once, not counted against its hour, while account B's
// requests in the same moment are answered. When one export's client goes
// away, A's request is answered again.
func TestAccountConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.Config) {
		c.RESTAccountLimits = restauth.AccountLimits{Concurrency: 2, RefusalPause: time.Millisecond}
	})
	A := e.tenant(t, "A", "starter", allAddOns, "dev1")
	B := e.tenant(t, "B", "starter", allAddOns)
	a2, _ := e.token(t, A.ID, "a2")
	a3, _ := e.token(t, A.ID, "a3")
	// About 6 MB of history: more than the sockets of an export buffer
	// (the client's receive buffer is 4 KiB, the server's send buffer at
	// most 4 MiB), so an unread export stays in flight.
	payload := []byte(`{"v":"` + strings.Repeat("x", 2000) + `"}`)
	for i := range 3 {
		var recs []*fleetmq.Record
		for j := range 1000 {
			recs = append(recs, &fleetmq.Record{AccountID: A.ID, ClientID: "dev1", Topic: A.topic("dev1", "telemetry/t"), Class: "telemetry",
				QoS: 1, PublishedQoS: 1, Payload: payload, Received: t0.Add(-time.Hour + time.Duration(i*1000+j)*time.Millisecond)})
		}
		if err := e.Store.AppendHistory(e.ctx, recs); err != nil {
			t.Fatal(err)
		}
	}

	// export opens an NDJSON export of the whole history, reads its status
	// line and nothing more.
	export := func(token string) net.Conn {
		d := net.Dialer{Timeout: waitFor, Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
				return err
			}
			return serr
		}}
		ctx, cancel := context.WithTimeout(e.ctx, waitFor)
		defer cancel()
		nc, err := d.DialContext(ctx, "tcp", e.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		fmt.Fprintf(nc, "GET /api/v1/subscriber/history?format=ndjson HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
		nc.SetReadDeadline(time.Now().Add(waitFor))
		resp, err := http.ReadResponse(bufio.NewReaderSize(nc, 1024), nil)
		if err != nil {
			t.Fatalf("export: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("export: %d", resp.StatusCode)
		}
		return nc
	}
	first := export(A.Token)
	export(a2)

	reset := time.Date(2030, 3, 10, 13, 0, 0, 0, time.UTC)
	for range 3 {
		r := e.get(t, a3, "/usage")
		secondary(t, r, "2 requests in flight already", "1")
		rateHeaders(t, r, restauth.DefaultRateLimit, 0, reset)
		e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil)
		e.get(t, B.Token, "/history?limit=10").ok(t, http.StatusOK, nil)
	}

	first.Close()
	var r *response
	eventually(t, "A's request answered once an export's client went away", func() bool {
		r = e.get(t, a3, "/usage")
		return r.Status == http.StatusOK
	})
	rateHeaders(t, r, restauth.DefaultRateLimit, 1, reset)
}

// TestRefusalPause: a refused request's 429 is sent after the refusal
// pause (here 3 s; the token's hour resets in 40 minutes), so a client
// that ignores Retry-After cannot make refusals by the thousand; the
// waiting refusal holds none of the account's requests in flight (its
// bound is 1 here): the account's other token and account B are
// answered meanwhile.
func TestRefusalPause(t *testing.T) {
	t.Parallel()
	const pause = 3 * time.Second
	e := start(t, func(c *app.Config) {
		c.RESTRateLimit = 1
		c.RESTAccountLimits = restauth.AccountLimits{Concurrency: 1, RefusalPause: pause}
	})
	A := e.tenant(t, "A", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	B := e.tenant(t, "B", "starter", []fleetmq.AddOn{fleetmq.AddOnMgmtREST})
	other, _ := e.token(t, A.ID, "other")
	e.get(t, A.Token, "/usage").ok(t, http.StatusOK, nil)

	type result struct {
		r    *response
		err  error
		took time.Duration
	}
	refused := make(chan result, 1)
	go func() {
		start := time.Now()
		r, err := e.try(A.Token, "/usage")
		refused <- result{r, err, time.Since(start)}
	}()
	// Answered while the refusal waits.
	e.get(t, other, "/usage").ok(t, http.StatusOK, nil)
	e.get(t, B.Token, "/usage").ok(t, http.StatusOK, nil)
	select {
	case res := <-refused:
		t.Fatalf("the refusal came before the others were answered, after %v: %v %v", res.took, res.r, res.err)
	default:
	}
	res := <-refused
	if res.err != nil {
		t.Fatal(res.err)
	}
	res.r.problem(t, http.StatusTooManyRequests, fleetmq.CodeRateLimited)
	if res.took < pause {
		t.Fatalf("the 429 came after %v, want the pause of %v", res.took, pause)
	}
	if res.r.Header.Get("Retry-After") != strconv.Itoa(40*60) {
		t.Fatalf("%s: Retry-After %q, want until 13:00", res.r, res.r.Header.Get("Retry-After"))
	}
}
