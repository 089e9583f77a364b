package api

import (
	"net/http"

	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"
)

// docsHandler serves Swagger UI, embedded in the binary (no CDN), over
// openapi.json. Its Authorize button takes a pasted REST API token (the
// document's bearer security scheme) and "Try it out" sends it.
func docsHandler() http.Handler {
	return v5emb.NewWithConfig(swgui.Config{
		Title:       "fleetmq subscriber API",
		SwaggerJSON: Prefix + "/openapi.json",
		BasePath:    Prefix + "/docs/",
		SettingsUI: map[string]string{
			"persistAuthorization":   "false",
			"tryItOutEnabled":        "true",
			"displayRequestDuration": "true",
		},
	})("fleetmq subscriber API", Prefix+"/openapi.json", Prefix+"/docs/")
}
