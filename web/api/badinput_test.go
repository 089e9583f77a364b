package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
)

// badCase is a request that must be refused with a problem.
type badCase struct {
	name         string
	method, path string
	body         any      // nil: no body
	headers      []string // name, value pairs
	status       int
	code         string
	location     string // a field error location the problem must name ("" for none)
}

// TestBadInput: malformed JSON, wrong types, unknown fields, empty and
// oversized bodies, a long query string, unknown query parameters,
// invalid dates, limits out of range, bad cursors and odd client ids get
// the 4xx problem they should, with a stable code and, for fields, where
// the fault is; never a 500, and nothing is changed.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "starter", allAddOns, "dev1")
	B := e.tenant(t, "B", "starter", allAddOns)
	big := `{"client_id":"big","label":"` + strings.Repeat("x", 1<<20) + `"}`
	descCursor := history.EncodeCursor(fleetmq.Position{ID: 1}, false)
	ascCursor := history.EncodeCursor(fleetmq.Position{ID: 1}, true)
	long := strings.Repeat("a", 129)
	expect := []string{"Expect", "100-continue"}

	const (
		bad      = http.StatusBadRequest
		invalid  = http.StatusUnprocessableEntity
		notFound = http.StatusNotFound
	)
	val := fleetmq.CodeValidation
	cases := []badCase{
		// Bodies.
		{name: "malformed JSON", method: "POST", path: "/publishers", body: `{"client_id":`, status: bad, code: "bad_request"},
		{name: "not JSON", method: "POST", path: "/publishers", body: `client_id=dev9`, status: bad, code: "bad_request"},
		{name: "trailing garbage", method: "POST", path: "/publishers", body: `{"client_id":"dev9"} x`, status: bad, code: "bad_request"},
		{name: "empty body", method: "POST", path: "/publishers", body: ``, status: bad, code: "bad_request"},
		{name: "no body", method: "POST", path: "/publishers", status: bad, code: "bad_request"},
		{name: "null body", method: "POST", path: "/publishers", body: `null`, status: invalid, code: val},
		{name: "array body", method: "POST", path: "/publishers", body: `[{"client_id":"dev9"}]`, status: invalid, code: val, location: "body"},
		{name: "string body", method: "POST", path: "/publishers", body: `"dev9"`, status: invalid, code: val, location: "body"},
		{name: "client_id a number", method: "POST", path: "/publishers", body: `{"client_id":5}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id missing", method: "POST", path: "/publishers", body: `{"label":"x"}`, status: invalid, code: val, location: "body"},
		{name: "unknown field", method: "POST", path: "/publishers", body: `{"client_id":"dev9","colour":"red"}`, status: invalid, code: val, location: "body.colour"},
		{name: "max_publish_qos 3", method: "POST", path: "/publishers", body: `{"client_id":"dev9","max_publish_qos":3}`, status: invalid, code: val, location: "body.max_publish_qos"},
		{name: "max_publish_qos -1", method: "POST", path: "/publishers", body: `{"client_id":"dev9","max_publish_qos":-1}`, status: invalid, code: val, location: "body.max_publish_qos"},
		{name: "max_publish_qos 1.5", method: "POST", path: "/publishers", body: `{"client_id":"dev9","max_publish_qos":1.5}`, status: invalid, code: val, location: "body.max_publish_qos"},
		{name: "max_publish_qos huge", method: "POST", path: "/publishers", body: `{"client_id":"dev9","max_publish_qos":1e400}`, status: bad, code: "bad_request"},
		{name: "label an object", method: "POST", path: "/publishers", body: `{"client_id":"dev9","label":{"a":1}}`, status: invalid, code: val, location: "body.label"},
		{name: "label too long", method: "POST", path: "/publishers", body: `{"client_id":"dev9","label":"` + strings.Repeat("é", 201) + `"}`, status: invalid, code: val, location: "body.label"},
		{name: "client_id with slash", method: "POST", path: "/publishers", body: `{"client_id":"a/b"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id with hash", method: "POST", path: "/publishers", body: `{"client_id":"a#"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id plus", method: "POST", path: "/publishers", body: `{"client_id":"+"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id unicode", method: "POST", path: "/publishers", body: `{"client_id":"gerät"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id space", method: "POST", path: "/publishers", body: `{"client_id":"dev 9"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id NUL", method: "POST", path: "/publishers", body: `{"client_id":"dev\u00009"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id empty", method: "POST", path: "/publishers", body: `{"client_id":""}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id too long", method: "POST", path: "/publishers", body: `{"client_id":"` + long + `"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "client_id invalid UTF-8", method: "POST", path: "/publishers", body: []byte("{\"client_id\":\"dev\xff\"}"), status: invalid, code: val, location: "body.client_id"},
		{name: "deep nesting", method: "POST", path: "/publishers", body: `{"client_id":"dev9","label":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, status: invalid, code: val},
		// Oversized bodies are refused before they are read: a client that
		// waits for "100 Continue" (curl does above 1 MiB) gets the 413
		// without sending them. TestOversizedBody sends them whole.
		{name: "1 MiB body", method: "POST", path: "/publishers", body: big, headers: expect, status: http.StatusRequestEntityTooLarge, code: "request_too_large"},
		{name: "1 MiB PATCH", method: "PATCH", path: "/publishers/dev1", body: big, headers: expect, status: http.StatusRequestEntityTooLarge, code: "request_too_large"},
		{name: "1 MiB on a GET", method: "GET", path: "/publishers", body: big, headers: expect, status: http.StatusRequestEntityTooLarge, code: "request_too_large"},
		{name: "1 MiB of credentials", method: "POST", path: "/subscriber-mqtt-passwords", body: big, headers: expect, status: http.StatusRequestEntityTooLarge, code: "request_too_large"},
		{name: "text/plain body", method: "POST", path: "/publishers", body: `{"client_id":"dev9"}`, headers: []string{"Content-Type", "text/plain"}, status: http.StatusUnsupportedMediaType, code: "unsupported_media_type"},
		{name: "PATCH wrong type", method: "PATCH", path: "/publishers/dev1", body: `{"max_publish_qos":"2"}`, status: invalid, code: val, location: "body.max_publish_qos"},
		{name: "PATCH null qos", method: "PATCH", path: "/publishers/dev1", body: `{"max_publish_qos":null,"label":null}`, status: http.StatusOK},
		{name: "PATCH unknown field", method: "PATCH", path: "/publishers/dev1", body: `{"client_id":"dev2"}`, status: invalid, code: val, location: "body.client_id"},
		{name: "PATCH malformed", method: "PATCH", path: "/publishers/dev1", body: `{`, status: bad, code: "bad_request"},
		{name: "password negative expiry", method: "POST", path: "/subscriber-mqtt-passwords", body: `{"expires_in_days":-1}`, status: invalid, code: val, location: "body.expires_in_days"},
		{name: "password expiry too far", method: "POST", path: "/subscriber-mqtt-passwords", body: `{"expires_in_days":100000}`, status: invalid, code: val, location: "body.expires_in_days"},
		{name: "password expiry a string", method: "POST", path: "/subscriber-mqtt-passwords", body: `{"expires_in_days":"30"}`, status: invalid, code: val, location: "body.expires_in_days"},
		{name: "password filter of B", method: "POST", path: "/subscriber-mqtt-passwords", body: map[string]any{"filters": []string{B.ID + "/#"}}, status: invalid, code: val, location: "body.filters"},
		{name: "password filter #", method: "POST", path: "/subscriber-mqtt-passwords", body: `{"filters":["#"]}`, status: invalid, code: val, location: "body.filters"},
		{name: "password filter +/#", method: "POST", path: "/subscriber-mqtt-passwords", body: `{"filters":["+/#"]}`, status: invalid, code: val, location: "body.filters"},
		{name: "password filter $SYS", method: "POST", path: "/subscriber-mqtt-passwords", body: `{"filters":["$SYS/#"]}`, status: invalid, code: val, location: "body.filters"},
		{name: "password filter shared", method: "POST", path: "/subscriber-mqtt-passwords", body: map[string]any{"filters": []string{"$share/g/" + A.ID + "/#"}}, status: invalid, code: val, location: "body.filters"},
		{name: "password filter line break", method: "POST", path: "/subscriber-mqtt-passwords", body: map[string]any{"filters": []string{A.ID + "/x\n" + B.ID + "/#"}}, status: invalid, code: val, location: "body.filters"},
		{name: "password filter bad wildcard", method: "POST", path: "/subscriber-mqtt-passwords", body: map[string]any{"filters": []string{A.ID + "/a#"}}, status: invalid, code: val, location: "body.filters"},
		{name: "password filters a string", method: "POST", path: "/subscriber-mqtt-passwords", body: map[string]any{"filters": A.ID + "/#"}, status: invalid, code: val, location: "body.filters"},
		{name: "password too many filters", method: "POST", path: "/subscriber-mqtt-passwords", body: map[string]any{"filters": make([]string, 33)}, status: invalid, code: val, location: "body.filters"},
		{name: "password label too long", method: "POST", path: "/subscriber-mqtt-passwords", body: map[string]any{"label": strings.Repeat("x", 201)}, status: invalid, code: val, location: "body.label"},
		{name: "publisher credential with filters", method: "POST", path: "/publisher-credentials", body: map[string]any{"filters": []string{A.ID + "/#"}}, status: invalid, code: val, location: "body.filters"},
		{name: "publisher credential kind", method: "POST", path: "/publisher-credentials", body: `{"kind":"subscriber"}`, status: invalid, code: val, location: "body.kind"},

		// Query strings.
		{name: "16 KiB query", method: "GET", path: "/history?topic=" + strings.Repeat("a", 16<<10), status: http.StatusRequestURITooLong, code: "uri_too_long"},
		{name: "16 KiB query without token", method: "GET", path: "/usage?x=" + strings.Repeat("a", 16<<10), headers: []string{"Authorization", ""}, status: http.StatusRequestURITooLong, code: "uri_too_long"},
		{name: "unknown query parameter", method: "GET", path: "/history?colour=red", status: invalid, code: val, location: "query.colour"},
		{name: "unknown query parameter on usage", method: "GET", path: "/usage?account_id=" + B.ID, status: invalid, code: val, location: "query.account_id"},
		{name: "unknown query parameter on a list", method: "GET", path: "/publisher-credentials?all=1", status: invalid, code: val, location: "query.all"},
		{name: "history limit 0", method: "GET", path: "/history?limit=0", status: invalid, code: val, location: "query.limit"},
		{name: "history limit 100000", method: "GET", path: "/history?limit=100000", status: invalid, code: val, location: "query.limit"},
		{name: "history limit -1", method: "GET", path: "/history?limit=-1", status: invalid, code: val, location: "query.limit"},
		{name: "history limit text", method: "GET", path: "/history?limit=ten", status: invalid, code: val, location: "query.limit"},
		{name: "history limit overflow", method: "GET", path: "/history?limit=99999999999999999999999", status: invalid, code: val, location: "query.limit"},
		{name: "history from not a date", method: "GET", path: "/history?from=yesterday", status: invalid, code: val, location: "query.from"},
		{name: "history from date only", method: "GET", path: "/history?from=2030-03-10", status: invalid, code: val, location: "query.from"},
		{name: "history to month 13", method: "GET", path: "/history?to=2030-13-01T00:00:00Z", status: invalid, code: val, location: "query.to"},
		{name: "history to before from", method: "GET", path: "/history?from=2030-03-10T12:00:00Z&to=2030-03-10T11:00:00Z", status: invalid, code: val, location: "query.to"},
		{name: "history order", method: "GET", path: "/history?order=up", status: invalid, code: val, location: "query.order"},
		{name: "history class", method: "GET", path: "/history?class=metrics", status: invalid, code: val, location: "query.class"},
		{name: "history format", method: "GET", path: "/history?format=xml", status: invalid, code: val, location: "query.format"},
		{name: "history cursor garbage", method: "GET", path: "/history?cursor=!!!", status: invalid, code: val, location: "query.cursor"},
		{name: "history cursor base64 junk", method: "GET", path: "/history?cursor=" + "aGVsbG8", status: invalid, code: val, location: "query.cursor"},
		{name: "history cursor of the other order", method: "GET", path: "/history?order=asc&cursor=" + descCursor, status: invalid, code: val, location: "query.cursor"},
		{name: "history cursor of the other order (desc)", method: "GET", path: "/history?cursor=" + ascCursor, status: invalid, code: val, location: "query.cursor"},
		{name: "history cursor too long", method: "GET", path: "/history?cursor=" + strings.Repeat("A", 300), status: invalid, code: val, location: "query.cursor"},
		{name: "history client_id slash", method: "GET", path: "/history?client_id=a%2Fb", status: invalid, code: val, location: "query.client_id"},
		{name: "history client_id hash", method: "GET", path: "/history?client_id=a%23", status: invalid, code: val, location: "query.client_id"},
		{name: "history client_id plus", method: "GET", path: "/history?client_id=%2B", status: invalid, code: val, location: "query.client_id"},
		{name: "history client_id unicode", method: "GET", path: "/history?client_id=ger%C3%A4t", status: invalid, code: val, location: "query.client_id"},
		{name: "history client_id too long", method: "GET", path: "/history?client_id=" + long, status: invalid, code: val, location: "query.client_id"},
		{name: "history topic bad filter", method: "GET", path: "/history?topic=" + url.QueryEscape(A.ID+"/a#/b"), status: invalid, code: val, location: "query.topic"},
		{name: "history topic $SYS", method: "GET", path: "/history?topic=" + url.QueryEscape("$SYS/#"), status: invalid, code: val, location: "query.topic"},
		{name: "history topic and regex", method: "GET", path: "/history?topic=%23&topic_regex=" + url.QueryEscape("^"+A.ID+"/"), status: invalid, code: val, location: "query.topic"},
		{name: "history regex too long", method: "GET", path: "/history?topic_regex=" + strings.Repeat("a", fleetmq.MaxTopicRegexLen+1), status: invalid, code: val, location: "query.topic_regex"},
		{name: "history regex broken", method: "GET", path: "/history?topic_regex=" + url.QueryEscape("^"+A.ID+"/(("), status: invalid, code: val, location: "query.topic_regex"},
		{name: "history topic of a client and another client_id", method: "GET", path: "/history?client_id=dev2&topic=" + url.QueryEscape(A.ID+"/dev1/#"), status: invalid, code: val, location: "query.topic"},
		{name: "history bad percent escape", method: "GET", path: "/history?client_id=%zz", status: bad, code: "bad_request"},
		{name: "history Accept xml", method: "GET", path: "/history", headers: []string{"Accept", "application/xml"}, status: http.StatusOK},
		{name: "publishers limit 0", method: "GET", path: "/publishers?limit=0", status: invalid, code: val, location: "query.limit"},
		{name: "publishers limit 100000", method: "GET", path: "/publishers?limit=100000", status: invalid, code: val, location: "query.limit"},
		{name: "publishers cursor garbage", method: "GET", path: "/publishers?cursor=%%%", status: bad, code: "bad_request"},
		{name: "publishers cursor not base64", method: "GET", path: "/publishers?cursor=***", status: invalid, code: val, location: "query.cursor"},
		{name: "usage from not a date", method: "GET", path: "/usage?from=2030-02-30", status: invalid, code: val, location: "query.from"},
		{name: "usage to a timestamp", method: "GET", path: "/usage?to=2030-03-10T00:00:00Z", status: invalid, code: val, location: "query.to"},
		{name: "usage from after to", method: "GET", path: "/usage?from=2030-03-10&to=2030-03-01", status: invalid, code: val, location: "query.from"},
		{name: "usage range too long", method: "GET", path: "/usage?from=2020-01-01&to=2030-03-01", status: invalid, code: val, location: "query.from"},
		{name: "live client_id unknown", method: "GET", path: "/publishers/live?client_id=nobody", status: notFound, code: fleetmq.CodeNotFound},
		{name: "live client_id unicode", method: "GET", path: "/publishers/live?client_id=ger%C3%A4t", status: notFound, code: fleetmq.CodeNotFound},

		// Paths.
		{name: "path client_id slash", method: "GET", path: "/publishers/a%2Fb", status: notFound, code: fleetmq.CodeNotFound},
		{name: "path client_id hash", method: "GET", path: "/publishers/a%23b", status: notFound, code: fleetmq.CodeNotFound},
		{name: "path client_id plus", method: "PATCH", path: "/publishers/+", body: `{"label":"x"}`, status: notFound, code: fleetmq.CodeNotFound},
		{name: "path client_id unicode", method: "DELETE", path: "/publishers/ger%C3%A4t", status: notFound, code: fleetmq.CodeNotFound},
		{name: "path client_id too long", method: "GET", path: "/publishers/" + long, status: invalid, code: val, location: "path.client_id"},
		{name: "path client_id encoded NUL", method: "DELETE", path: "/publishers/dev%001", status: notFound, code: fleetmq.CodeNotFound},
		{name: "credential id not a UUID", method: "DELETE", path: "/subscriber-mqtt-passwords/nope", status: notFound, code: fleetmq.CodeNotFound},
		{name: "credential id too long", method: "DELETE", path: "/publisher-credentials/" + strings.Repeat("a", 101), status: invalid, code: val, location: "path.id"},
		{name: "unknown route", method: "GET", path: "/nope", status: notFound, code: fleetmq.CodeNotFound},
		{name: "route below a route", method: "GET", path: "/publishers/dev1/extra", status: notFound, code: fleetmq.CodeNotFound},
		{name: "method not allowed", method: "PUT", path: "/publishers", body: `{}`, status: http.StatusMethodNotAllowed, code: "method_not_allowed"},
		{name: "method not allowed on an item", method: "POST", path: "/publishers/dev1", body: `{}`, status: http.StatusMethodNotAllowed, code: "method_not_allowed"},
		{name: "DELETE the list", method: "DELETE", path: "/subscriber-mqtt-passwords", status: http.StatusMethodNotAllowed, code: "method_not_allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			headers := append([]string{}, c.headers...)
			token := A.Token
			for i := 0; i+1 < len(headers); i += 2 {
				if headers[i] == "Authorization" && headers[i+1] == "" {
					token = ""
				}
			}
			r := e.req(t, token, c.method, c.path, c.body, headers...)
			if r.Status >= 500 {
				t.Fatalf("%s: a server error", r)
			}
			if r.Status != c.status {
				t.Fatalf("%s: want %d %s", r, c.status, c.code)
			}
			if c.status < 400 {
				return
			}
			p := r.problem(t, c.status, c.code)
			if c.location != "" && !p.hasLocation(c.location) {
				t.Fatalf("%s: want a field error at %s, have %v", r, c.location, p.locations())
			}
			if c.status == http.StatusMethodNotAllowed && r.Header.Get("Allow") == "" {
				t.Fatalf("%s: no Allow header", r)
			}
		})
	}

	// Nothing above changed anything: A still has only dev1, unchanged but
	// for the PATCH that was allowed (both fields null: no change), and the
	// credentials the tenant started with.
	var pub struct {
		Label         string `json:"label"`
		MaxPublishQoS int    `json:"max_publish_qos"`
	}
	e.get(t, A.Token, "/publishers/dev1").ok(t, http.StatusOK, &pub)
	if pub.Label != "" || pub.MaxPublishQoS != 2 {
		t.Fatalf("dev1 after the bad requests: %+v", pub)
	}
	if cs, _ := e.Store.Clients(e.ctx, A.ID); len(cs) != 1 {
		t.Fatalf("A has %d clients after the bad requests, want 1", len(cs))
	}
	for _, kind := range []string{fleetmq.KindPublisher, fleetmq.KindSubscriber} {
		if cs, _ := e.Store.Credentials(e.ctx, A.ID, kind); len(cs) != 1 {
			t.Fatalf("A has %d %s credentials after the bad requests, want 1", len(cs), kind)
		}
	}
}

// TestBadInputFuzz sends mutated bodies and query strings (a fixed seed,
// so a failure repeats) and checks that every answer is a success or a 4xx
// problem with a code: never a 5xx, never a problem without a code, never
// an error that is not a problem.
func TestBadInputFuzz(t *testing.T) {
	t.Parallel()
	e := start(t)
	A := e.tenant(t, "A", "growth", allAddOns, "dev1")
	rng := rand.New(rand.NewSource(20301)) // fixed: a failure repeats
	n := 400
	if testing.Short() {
		n = 100
	}

	values := []any{nil, true, false, 0, -1, 1, 2, 3, 1.5, 1e308, -1e308, "", "x", "dev9", "a/b", "#", "+", "gerät", "\u0000", "\ufffd",
		strings.Repeat("z", 300), []any{}, []any{"x"}, []any{A.ID + "/#"}, map[string]any{}, map[string]any{"a": 1}}
	fields := []string{"client_id", "label", "max_publish_qos", "expires_in_days", "filters", "kind", "id", ""}
	targets := []struct{ method, path string }{
		{"POST", "/publishers"}, {"PATCH", "/publishers/dev1"}, {"POST", "/subscriber-mqtt-passwords"}, {"POST", "/publisher-credentials"},
	}
	mutate := func(b []byte) []byte {
		b = append([]byte(nil), b...)
		for k := rng.Intn(4); k >= 0 && len(b) > 0; k-- {
			switch i := rng.Intn(len(b)); rng.Intn(4) {
			case 0: // flip a byte
				b[i] = byte(rng.Intn(256))
			case 1: // delete one
				b = append(b[:i], b[i+1:]...)
			case 2: // duplicate a span
				j := min(len(b), i+rng.Intn(8))
				b = append(b[:j], append(append([]byte(nil), b[i:j]...), b[j:]...)...)
			case 3: // insert a structural character
				b = append(b[:i], append([]byte{`{}[]",:\`[rng.Intn(8)]}, b[i:]...)...)
			}
		}
		return b
	}
	statuses := map[int]int{}
	check := func(r *response) {
		t.Helper()
		statuses[r.Status]++
		if r.Status >= 500 {
			t.Fatalf("%s: a server error", r)
		}
		if r.Status >= 400 {
			r.asProblem(t)
		}
	}
	for i := 0; i < n; i++ {
		tg := targets[rng.Intn(len(targets))]
		obj := map[string]any{}
		for k := rng.Intn(4); k > 0; k-- {
			obj[fields[rng.Intn(len(fields))]] = values[rng.Intn(len(values))]
		}
		b, _ := json.Marshal(obj)
		if rng.Intn(2) == 0 {
			b = mutate(b)
		}
		check(e.req(t, A.Token, tg.method, tg.path, b))
	}

	params := []string{"client_id", "topic", "topic_regex", "class", "station_controller_device_id", "from", "to", "order", "limit", "cursor", "format", "x"}
	qvals := []string{"", "0", "1", "-5", "99999", "asc", "desc", "json", "ndjson", "csv", "state", "#", "+/#", A.ID + "/#", A.ID + "/+/state/#",
		"^" + A.ID + "/", "^" + A.ID + "/(", "2030-03-10T12:00:00Z", "2030-03-10", "not a time", "\x00", "ü", "%", "a b", strings.Repeat("q", 500),
		history.EncodeCursor(fleetmq.Position{ID: 5}, false), history.EncodeCursor(fleetmq.Position{ID: -1}, true)}
	paths := []string{"/history", "/usage", "/publishers", "/publishers/live", "/subscriber-mqtt-passwords"}
	for i := 0; i < n; i++ {
		q := url.Values{}
		for k := rng.Intn(5); k > 0; k-- {
			q.Add(params[rng.Intn(len(params))], qvals[rng.Intn(len(qvals))])
		}
		raw := q.Encode()
		if rng.Intn(4) == 0 {
			// Mutated, but still a request target net/http sends: printable
			// ASCII, no fragment.
			b := mutate([]byte(raw))
			for i, c := range b {
				if c <= ' ' || c >= 0x7f || c == '#' {
					b[i] = "%&=+;/?:@!$'()*,~"[rng.Intn(17)]
				}
			}
			raw = string(b)
		}
		hr, err := http.NewRequest(http.MethodGet, e.url(paths[rng.Intn(len(paths))]), nil)
		if err != nil {
			t.Fatal(err)
		}
		hr.URL.RawQuery = raw
		hr.Header.Set("Authorization", "Bearer "+A.Token)
		if rng.Intn(3) == 0 {
			hr.Header.Set("Accept", []string{"text/csv", "application/x-ndjson", "*/*", "application/xml", "text/csv;q=0.1, application/json"}[rng.Intn(5)])
		}
		check(e.send(t, hr))
	}
	// The path parameter too.
	for i := 0; i < n/4; i++ {
		seg := url.PathEscape(string(mutate([]byte(fmt.Sprintf("dev%d/#+ü", i)))))
		for _, m := range []string{"GET", "PATCH", "DELETE"} {
			var body any
			if m == "PATCH" {
				body = bytes.Repeat([]byte(" "), rng.Intn(3))
			}
			check(e.req(t, A.Token, m, "/publishers/"+seg, body))
		}
	}
	t.Logf("statuses: %v", statuses)
	// Not degenerate: some requests passed, most were refused for what
	// they said (not all for one reason such as a broken token).
	if statuses[200]+statuses[201] == 0 || statuses[422] == 0 || statuses[400] == 0 || statuses[401] > 0 || statuses[429] > 0 {
		t.Fatalf("statuses %v: the fuzz did not exercise the routes", statuses)
	}
}
