package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"

	"github.com/fleetmq/fleetmq"
)

// openAPIDoc is the part of an OpenAPI 3.1 document the test reads.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title   string `json:"title"`
		Version string `json:"version"`
	} `json:"info"`
	Servers []struct {
		URL string `json:"url"`
	} `json:"servers"`
	Security   []map[string][]string `json:"security"`
	Components struct {
		SecuritySchemes map[string]struct {
			Type   string `json:"type"`
			Scheme string `json:"scheme"`
		} `json:"securitySchemes"`
		Schemas map[string]json.RawMessage `json:"schemas"`
	} `json:"components"`
	Paths map[string]map[string]openAPIOp `json:"paths"`
}

type openAPIOp struct {
	OperationID string                `json:"operationId"`
	Summary     string                `json:"summary"`
	Description string                `json:"description"`
	Tags        []string              `json:"tags"`
	Security    []map[string][]string `json:"security"`
	Parameters  []struct {
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	Responses map[string]struct {
		Content map[string]struct {
			Schema struct {
				Ref string `json:"$ref"`
			} `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

// fetchOpenAPI GETs the served document (no token needed) and decodes it.
func (e *env) fetchOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	r := e.get(t, "", "/openapi.json")
	if r.Status != http.StatusOK || !strings.Contains(r.Header.Get("Content-Type"), "json") {
		t.Fatalf("%s", r)
	}
	var d openAPIDoc
	if err := json.Unmarshal(r.Body, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return &d
}

// TestOpenAPIDocument: the served document is OpenAPI 3.1 with the API's
// server prefix, declares the bearer security scheme and requires it,
// gives every operation an id, a summary and its add-on (a tag with the
// add-on's title and the add-on's id in the description), and documents
// the problem responses (401, 403, 429 as application/problem+json with
// the Problem schema; 404 on routes with an id in the path).
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	e := start(t)
	d := e.fetchOpenAPI(t)
	if !strings.HasPrefix(d.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", d.OpenAPI)
	}
	if d.Info.Title == "" || d.Info.Version == "" {
		t.Fatalf("info %+v", d.Info)
	}
	if len(d.Servers) != 1 || d.Servers[0].URL != "/api/v1/subscriber" {
		t.Fatalf("servers %+v, want /api/v1/subscriber", d.Servers)
	}
	bearer := ""
	for name, s := range d.Components.SecuritySchemes {
		if s.Type == "http" && strings.EqualFold(s.Scheme, "bearer") {
			bearer = name
		}
	}
	if bearer == "" {
		t.Fatalf("no http bearer security scheme: %+v", d.Components.SecuritySchemes)
	}
	if _, ok := d.Components.Schemas["Problem"]; !ok {
		t.Fatal("no Problem schema")
	}
	requires := func(sec []map[string][]string) bool {
		for _, s := range sec {
			if _, ok := s[bearer]; ok {
				return true
			}
		}
		return false
	}
	byRoute := map[string]route{}
	for _, rt := range routes {
		byRoute[rt.Method+" "+rt.Path] = rt
	}
	ids := map[string]bool{}
	for path, ops := range d.Paths {
		for method, o := range ops {
			name := strings.ToUpper(method) + " " + path
			if o.OperationID == "" || ids[o.OperationID] || o.Summary == "" {
				t.Errorf("%s: operation id %q (unique) and summary %q", name, o.OperationID, o.Summary)
			}
			ids[o.OperationID] = true
			sec := o.Security
			if sec == nil {
				sec = d.Security
			}
			if !requires(sec) {
				t.Errorf("%s: does not require the bearer token", name)
			}
			rt, ok := byRoute[name]
			if !ok {
				continue // TestOpenAPIMatchesRoutes reports it
			}
			if len(o.Tags) != 1 || o.Tags[0] != rt.AddOn.Title() || !strings.Contains(o.Description, "`"+string(rt.AddOn)+"`") {
				t.Errorf("%s: tags %v and description do not name its add-on %s (%s)", name, o.Tags, rt.AddOn, rt.AddOn.Title())
			}
			codes := []string{"401", "403", "429"}
			if strings.Contains(path, "{") {
				codes = append(codes, "404")
			}
			for _, code := range codes {
				resp, ok := o.Responses[code]
				if !ok || resp.Content["application/problem+json"].Schema.Ref != "#/components/schemas/Problem" {
					t.Errorf("%s: response %s is not documented as a Problem", name, code)
				}
			}
			// The path parameters are documented.
			for _, m := range regexp.MustCompile(`\{([a-z_]+)\}`).FindAllStringSubmatch(path, -1) {
				found := false
				for _, p := range o.Parameters {
					found = found || p.In == "path" && p.Name == m[1]
				}
				if !found {
					t.Errorf("%s: path parameter %s not documented", name, m[1])
				}
			}
		}
	}
	// The documented error codes are exactly the registered ones, in
	// their order, each described with its status.
	var problem struct {
		Properties map[string]struct {
			Enum        []string `json:"enum"`
			Description string   `json:"description"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(d.Components.Schemas["Problem"], &problem); err != nil {
		t.Fatalf("Problem schema: %v", err)
	}
	code := problem.Properties["code"]
	var registered []string
	for _, c := range fleetmq.ErrorCodes {
		registered = append(registered, c.Code)
		if want := fmt.Sprintf("`%s` (%d): ", c.Code, c.Status); !strings.Contains(code.Description, want) {
			t.Errorf("Problem.code's description lacks %q:\n%s", want, code.Description)
		}
	}
	if got, want := strings.Join(code.Enum, ","), strings.Join(registered, ","); got != want {
		t.Errorf("Problem.code enum\n%s\nwant fleetmq.ErrorCodes\n%s", got, want)
	}
	var addOns []string
	for _, x := range fleetmq.AddOns {
		addOns = append(addOns, string(x))
	}
	if got, want := strings.Join(problem.Properties["addon"].Enum, ","), strings.Join(addOns, ","); got != want {
		t.Errorf("Problem.addon enum %s, want fleetmq.AddOns %s", got, want)
	}
}

// TestOpenAPIMatchesRoutes: the operations registered in App.API, the
// served document and the tests' route list are the same set; every
// documented operation exists (a request to it, with a token of an
// account with every add-on, is not the 404 "no such route" or 405
// problem); and a path or method that is not documented is one of those.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	e := start(t)
	tn := e.tenant(t, "A", "growth", allAddOns)

	registered := map[string]bool{}
	for path, item := range e.API.OpenAPI().Paths {
		for method, op := range map[string]*huma.Operation{"GET": item.Get, "POST": item.Post, "PATCH": item.Patch, "DELETE": item.Delete,
			"PUT": item.Put, "HEAD": item.Head, "OPTIONS": item.Options, "TRACE": item.Trace} {
			if op != nil {
				registered[method+" "+path] = true
			}
		}
	}
	served := map[string]bool{}
	for path, ops := range e.fetchOpenAPI(t).Paths {
		for method := range ops {
			served[strings.ToUpper(method)+" "+path] = true
		}
	}
	listed := map[string]bool{}
	for _, rt := range routes {
		listed[rt.Method+" "+rt.Path] = true
	}
	if a, b := keys(registered), keys(listed); a != b {
		t.Fatalf("registered operations and the tests' route list differ:\nregistered %s\nlisted     %s", a, b)
	}
	if a, b := keys(served), keys(listed); a != b {
		t.Fatalf("the served document and the tests' route list differ:\nserved %s\nlisted %s", a, b)
	}

	// Every documented operation answers (not "no such route", not 405).
	for _, rt := range routes {
		path, body, status := rt.call(t, e, tn)
		r := e.req(t, tn.Token, rt.Method, path, body)
		if r.Status != status {
			t.Errorf("%s %s: %s, want %d", rt.Method, rt.Path, r, status)
		}
	}
	// Paths and methods that are not documented are not served either.
	for _, c := range []struct{ method, path string }{
		{"GET", "/tokens"}, {"POST", "/tokens"}, {"GET", "/accounts"}, {"GET", "/history/export"}, {"PUT", "/publishers/dev1"},
		{"POST", "/usage"}, {"DELETE", "/history"}, {"GET", "/subscriber-mqtt-passwords/x"}, {"PATCH", "/publisher-credentials/x"},
		{"POST", "/publishers/live"}, {"GET", ""}, {"GET", "/"},
	} {
		r := e.req(t, tn.Token, c.method, c.path, nil)
		if r.Status != http.StatusNotFound && r.Status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s (not documented): %s, want 404 or 405", c.method, c.path, r)
			continue
		}
		p := r.asProblem(t)
		if r.Status == http.StatusNotFound && !strings.HasPrefix(p.Detail, "no such route") {
			t.Errorf("%s %s: %s", c.method, c.path, r)
		}
	}
	// The docs are served, and need no token.
	r := e.get(t, "", "/docs")
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), "swagger-ui") {
		t.Fatalf("GET /docs: %s", r)
	}
	document := false // the page's start script loads openapi.json
	for _, asset := range regexp.MustCompile(`(?:src|href)="(/api/v1/subscriber/docs/[^"]+)"`).FindAllStringSubmatch(string(r.Body), -1) {
		a := e.get(t, "", strings.TrimPrefix(asset[1], "/api/v1/subscriber"))
		if a.Status != http.StatusOK || len(a.Body) == 0 {
			t.Errorf("docs asset %s: %d", asset[1], a.Status)
		}
		document = document || strings.Contains(string(a.Body), `"/api/v1/subscriber/openapi.json"`)
	}
	if !document {
		t.Error("no script of the docs page loads /api/v1/subscriber/openapi.json")
	}
}

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
