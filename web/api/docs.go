package api

import (
	_ "embed"
	"net/http"
	"strings"

	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"
)

// The docs page is our own, with no inline script or style, so that its
// Content-Security-Policy allows scripts from this server only (the page
// shares its origin with the portal, whose forms an injected script could
// post). Swagger UI's own files come from the binary (swgui's embedded
// copy, no CDN).
var (
	//go:embed docs/index.html
	docsIndex []byte
	//go:embed docs/docs.js
	docsJS []byte
	//go:embed docs/docs.css
	docsCSS []byte
)

// docsCSP is the docs page's Content-Security-Policy. Swagger UI sets
// inline styles on its elements (allowed: they cannot run code) and
// fetches only the OpenAPI document and the API's routes.
const docsCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// docsHandler serves Swagger UI over openapi.json: the page, its start
// script and stylesheet, and Swagger UI's embedded files. Its Authorize
// button takes a pasted REST API token (the document's bearer security
// scheme) and "Try it out" sends it.
func docsHandler() http.Handler {
	assets := v5emb.NewWithConfig(swgui.Config{BasePath: Prefix + "/docs/"})("", "", "")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", docsCSP)
		switch strings.TrimPrefix(r.URL.Path, Prefix+"/docs") {
		case "", "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(docsIndex)
		case "/fleetmq-docs.js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(docsJS)
		case "/fleetmq-docs.css":
			w.Header().Set("Content-Type", "text/css; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(docsCSS)
		default:
			assets.ServeHTTP(w, r)
		}
	})
}
