package history_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/sqlstore"
)

// TestDocsTopicRegexExamples: every topic expression docs/history.md and
// docs/api.md show (a backquoted expression starting with ^) is accepted
// and runs as written, {account_id} standing for the caller's account: each
// finds the records it describes and nothing of another account.
func TestDocsTopicRegexExamples(t *testing.T) {
	var examples []string
	for _, file := range []string{"../docs/history.md", "../docs/api.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("`(\\^[^`]+)`").FindAllStringSubmatch(string(b), -1) {
			// A | inside a Markdown table cell is written \|.
			examples = append(examples, strings.ReplaceAll(m[1], `\|`, `|`))
		}
	}
	if len(examples) < 3 {
		t.Fatalf("found %d topic expressions in the docs: %q", len(examples), examples)
	}
	forEachStore(t, func(t *testing.T, st *sqlstore.Store) {
		for _, acc := range []string{accA, accB} {
			appendAll(t, st,
				rec(acc, "pump-1", "state/level", t0, "1"),
				rec(acc, "pump-12", "state/level", t0.Add(1), "2"),
				rec(acc, "a-hist", "state/x", t0.Add(2), "3"),
				rec(acc, "a-hist", "event/y", t0.Add(3), "4"),
				rec(acc, "a-hist", "telemetry/z", t0.Add(4), "5"),
			)
		}
		for _, ex := range examples {
			expr := strings.NewReplacer("{account_id}", accA, "{other_account}", accB).Replace(ex)
			got := query(t, st, accA, history.Params{TopicRegex: expr}) // fails on a record of another account
			switch other := strings.Contains(ex, "{other_account}"); {
			case other && len(got) > 0:
				t.Errorf("docs example %s (%s) run by another account found %q", ex, expr, got)
			case !other && len(got) == 0:
				t.Errorf("docs example %s (%s) found nothing", ex, expr)
			}
		}
	})
}
