package portal

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq"
)

// parsePages parses every page of templates/ with the layout and the
// shared partials: one template set per page.
func parsePages(funcs template.FuncMap) map[string]*template.Template {
	base := template.Must(template.New("base").Funcs(funcs).ParseFS(assets, "templates/layout/*.html"))
	pages := map[string]*template.Template{}
	files, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		t := template.Must(template.Must(base.Clone()).ParseFS(assets, f))
		pages[strings.TrimSuffix(path.Base(f), ".html")] = t
	}
	return pages
}

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string // the active section: overview, clients, subscriptions, settings
	Tab     string // the active tab within the section
	Account *fleetmq.Account
	Plan    *fleetmq.Plan
	CSRF    string
	Flash   *flash
	Now     time.Time
	Asset   string // cache-busting version of the static files
	Data    any
	// Form and Errors re-render a form after a validation failure.
	Form   map[string]string
	Errors map[string]string
}

// render writes a page of a signed-in owner.
func (c *call) render(status int, page, title, nav, tab string, data any) {
	c.renderForm(status, page, title, nav, tab, data, nil, nil)
}

// renderForm writes a page with a form's values and errors.
func (c *call) renderForm(status int, page, title, nav, tab string, data any, form, errs map[string]string) {
	v := &view{Title: title, Nav: nav, Tab: tab, Account: c.acc, Plan: c.plan, CSRF: c.csrf, Flash: c.flash, Now: c.now,
		Asset: c.p.assetVersion, Data: data, Form: form, Errors: errs}
	c.p.write(c.w, c.r, status, page, v)
}

// write executes a page into a buffer first, so a template error becomes
// a 500 rather than half a page.
func (p *Portal) write(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	t := p.pages[page]
	if t == nil {
		p.deps.Logger.Error("portal: no such page", "page", page)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if v.Asset == "" {
		v.Asset = p.assetVersion
	}
	if v.Now.IsZero() {
		v.Now = p.deps.Now().UTC()
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		p.deps.Logger.Error("portal: render", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// errorData is the body of an error page.
type errorData struct {
	Status  int
	Heading string
	Message string
}

// errorPage writes an error page (with the navigation when signed in).
func (p *Portal) errorPage(w http.ResponseWriter, r *http.Request, status int, heading, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	p.write(w, r, status, "error", &view{Title: heading, Data: errorData{Status: status, Heading: heading, Message: msg}})
}

func (p *Portal) forbidden(w http.ResponseWriter, r *http.Request, msg string) {
	p.errorPage(w, r, http.StatusForbidden, "Request refused", msg)
}

func (p *Portal) notFound(w http.ResponseWriter, r *http.Request) {
	p.errorPage(w, r, http.StatusNotFound, "Page not found", "There is nothing at this address.")
}

func (p *Portal) serverError(w http.ResponseWriter, r *http.Request, err error) {
	p.deps.Logger.Error("portal", "path", r.URL.Path, "error", err)
	p.errorPage(w, r, http.StatusInternalServerError, "Something went wrong", "The server could not complete the request. Try again in a moment.")
}

// notFound answers for a missing thing of the account (or another's).
func (c *call) notFound(what string) {
	c.render(http.StatusNotFound, "error", what+" not found", "", "",
		errorData{Status: http.StatusNotFound, Heading: what + " not found", Message: "It does not exist in this account, or it was removed."})
}

// fail answers an unexpected error.
func (c *call) fail(err error) { c.p.serverError(c.w, c.r, err) }

// funcs are the template helpers.
func (p *Portal) funcs() template.FuncMap {
	return template.FuncMap{
		"time":      fmtTime,
		"date":      func(t time.Time) string { return t.UTC().Format("Jan 2, 2006") },
		"iso":       func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago":       ago,
		"until":     until,
		"num":       num,
		"pct":       fmtPct,
		"addonDesc": addonDesc,
		"add":       func(a, b int) int { return a + b },
		"qosMix":    qosMixSVG,
		"meter":     meterSVG,
		"dropName":  dropName,
		"hasAddOn":  func(a *fleetmq.Account, x string) bool { return a != nil && a.AddOns[fleetmq.AddOn(x)] },
		"field":     func(m map[string]string, k string) string { return m[k] },
		"list":      func(s ...string) []string { return s },
		"copyArgs":  func(id, value, label string) copyArgs { return copyArgs{ID: id, Value: value, Label: label} },
		"problemsArgs": func(now time.Time, rows []problemRow, overview bool) problemsArgs {
			return problemsArgs{Now: now, Rows: rows, Overview: overview}
		},
		"credSection": func(v *view, pre, kind, title, intro string, rows []credRow) credSection {
			return credSection{View: v, Pre: pre, Kind: kind, Title: title, Intro: intro, Rows: rows}
		},
		"initial": func(s string) string {
			for _, r := range s {
				return strings.ToUpper(string(r))
			}
			return "?"
		},
	}
}

// copyArgs are the arguments of the "copy" template: a value with a copy
// button.
type copyArgs struct{ ID, Value, Label string }

// problemsArgs are the "problems" partial's: the rows, and whether it is
// the Overview's (a column for the client).
type problemsArgs struct {
	Now      time.Time
	Rows     []problemRow
	Overview bool
}

// credSection are the arguments of the "credential-section" template.
type credSection struct {
	View                    *view
	Pre, Kind, Title, Intro string
	Rows                    []credRow
}

// fmtTime formats a time for tables: "2026-03-10 12:20 UTC"; "—" for zero.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// ago says how long before now t was: "just now", "5 minutes ago".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		return "just now"
	}
	return span(d) + " ago"
}

// until says how long after now t is: "in 3 hours".
func until(now, t time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "now"
	}
	return "in " + span(d)
}

func span(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return "a few seconds"
	case d < time.Minute:
		return plural(int(d/time.Second), "second")
	case d < time.Hour:
		return plural(int(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return plural(int(d/time.Hour), "hour")
	}
	return plural(int(d/(24*time.Hour)), "day")
}

// num formats an integer with thousands separators.
func num(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	default:
		return fmt.Sprint(v)
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtPct formats a percentage: "42%", "0.4%", "<0.1%".
func fmtPct(v float64) string {
	switch {
	case v == 0:
		return "0%"
	case v < 0.1:
		return "<0.1%"
	case v < 10 && math.Round(v) != v:
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(math.Round(v), 'f', 0, 64) + "%"
}

// dropName explains a drop reason.
func dropName(r string) string {
	switch r {
	case "queue_full":
		return "Subscriber queue full"
	case "retained_burst":
		return "Retained catch-up over the burst bound"
	case "packet_too_large":
		return "Larger than the subscriber's maximum packet size"
	case "expired":
		return "Message expired before delivery"
	case "session_expired":
		return "Subscriber session expired"
	case "offline_qos0":
		return "QoS 0 for an offline subscriber"
	case "connection_closed":
		return "Connection closed with the message in flight or queued"
	}
	return r
}
