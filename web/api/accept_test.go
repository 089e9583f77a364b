package api

import (
	"testing"

	"github.com/fleetmq/fleetmq/history"
)

func TestAcceptedFormat(t *testing.T) {
	for accept, want := range map[string]history.Format{
		"text/csv":                                   history.CSV,
		"application/x-ndjson":                       history.NDJSON,
		"application/json, text/csv;q=0.1":           history.JSON,
		"text/csv;q=0.5, application/x-ndjson":       history.NDJSON,
		"*/*":                                        history.JSON,
		"text/html, TEXT/CSV":                        history.CSV,
		"text/csv;q=0, application/json;q=0.2":       history.JSON,
		"application/x-ndjson;q=0.9, text/csv;q=0.9": history.NDJSON,
	} {
		if got := acceptedFormat(accept); got != want {
			t.Errorf("Accept %q: %s, want %s", accept, got, want)
		}
	}
}
