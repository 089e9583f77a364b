package api_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/fleetmq/fleetmq"
)

// TestDocsErrorTable: the table of codes in docs/api.md lists exactly the
// registered codes (fleetmq.ErrorCodes), each with its status.
func TestDocsErrorTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| ([0-9]{3}) \\| `([a-z_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented[m[2]], _ = strconv.Atoi(m[1])
	}
	for _, c := range fleetmq.ErrorCodes {
		if got, ok := documented[c.Code]; !ok || got != c.Status {
			t.Errorf("docs/api.md lists %s with status %d, want %d (0: not listed)", c.Code, got, c.Status)
		}
		delete(documented, c.Code)
	}
	for code, status := range documented {
		t.Errorf("docs/api.md lists %s (%d), which is not registered in fleetmq.ErrorCodes", code, status)
	}
}
