package main

// "A docs example is a test": every ```sh block of README.md and docs/*.md
// is either run by a docs test (docsRunBy) or skipped for a stated reason
// (docsSkipped). TestDocsEveryBlockIsCovered fails on a block that is in
// neither, so a new example cannot slip in untested; docBlock refuses a
// block a test is not listed for, and a test that is listed for a block
// but never fetches it fails, so the list says what really runs.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// docRef names a ```sh block: the n-th (from 1) under a heading (the whole
// heading line, "## History"; "" before the first heading) of a file of
// the repository.
type docRef struct {
	file, heading string
	n             int
}

func (r docRef) String() string { return fmt.Sprintf("%s %q block %d", r.file, r.heading, r.n) }

// docsRunBy lists the blocks the docs tests run, and which test runs each.
var docsRunBy = map[docRef]string{
	{"README.md", "## Quickstart", 1}: "TestDocsRunAsWritten",
	{"README.md", "## Quickstart", 2}: "TestDocsAPIRunsAsWritten", // curl with a token

	{"docs/operator.md", "## The operator CLI", 1}:                  "TestDocsRunAsWritten",
	{"docs/operator.md", "### My device's data does not arrive", 1}: "TestDocsRunAsWritten",
	{"docs/operator.md", "### What the account's owner sees", 1}:    "TestDocsRunAsWritten",
	{"docs/operator.md", "### Plans", 1}:                            "TestDocsRunAsWritten",
	{"docs/operator.md", "### Accounts", 1}:                         "TestDocsRunAsWritten",
	{"docs/operator.md", "#### A lost portal password", 1}:          "TestDocsRunAsWritten",
	{"docs/operator.md", "### MQTT clients and credentials", 1}:     "TestDocsRunAsWritten",
	{"docs/operator.md", "### Vendor wire layouts", 1}:              "TestDocsRunAsWritten",
	// Only with FLEETMQ_TEST_POSTGRES (scripts/test.sh sets it); the
	// createdb line is replaced by a fresh test database, see the test.
	{"docs/operator.md", "## PostgreSQL", 1}: "TestDocsPostgresRunsAsWritten",

	{"docs/api.md", "# The subscriber REST API", 1}:                    "TestDocsAPIRunsAsWritten", // the exports
	{"docs/api.md", "## Tokens", 1}:                                    "TestDocsAPIRunsAsWritten",
	{"docs/api.md", "## History", 1}:                                   "TestDocsAPIRunsAsWritten", // queries
	{"docs/api.md", "## History", 2}:                                   "TestDocsAPIRunsAsWritten", // exports
	{"docs/api.md", "## Live state of the devices", 1}:                 "TestDocsAPIRunsAsWritten",
	{"docs/api.md", "## Why data does not arrive: recent problems", 1}: "TestDocsAPIRunsAsWritten",
	{"docs/api.md", "## MQTT clients (publishers)", 1}:                 "TestDocsAPIRunsAsWritten",
	{"docs/api.md", "## Subscriber MQTT passwords", 1}:                 "TestDocsAPIRunsAsWritten",
	{"docs/api.md", "## Fleet publisher credentials", 1}:               "TestDocsAPIRunsAsWritten",
	{"docs/api.md", "## Usage", 1}:                                     "TestDocsAPIRunsAsWritten",

	// The history commands need an account with stored messages: the API
	// test's.
	{"docs/history.md", "## Export", 1}:                           "TestDocsAPIRunsAsWritten",
	{"docs/history.md", "## Charts: numeric fields over time", 1}: "TestDocsAPIRunsAsWritten",
}

// docsSkipped lists the blocks no docs test runs, each with the reason.
var docsSkipped = map[docRef]string{
	// "go run ./cmd/fleetmq serve": the docs tests run serve themselves
	// (serveForDocs, the test binary as ./fleetmq).
	{"README.md", "## The two commands", 1}: "starts the server, which the docs harness does",
	{"README.md", "## The two commands", 2}: "runs the whole test suite itself",
	// "go build" and "./fleetmq serve": covered by the harness, which runs
	// serve from the test binary standing in for the built ./fleetmq.
	{"docs/operator.md", "## Running the platform", 1}:             "builds and starts the server, which the docs harness does",
	{"docs/operator.md", "### Running the tests on PostgreSQL", 1}: "starts a PostgreSQL cluster and runs the test suite itself",
	{"docs/operator.md", "## What a crash can lose", 1}:            "a test command itself (TestCrashSafety, 20 runs)",
	{"docs/cluster.md", "## Three nodes on one machine", 1}:        "starts three servers on fixed ports beside a PostgreSQL: TestClusterDelivery runs serve with these flags (free ports, a throwaway PostgreSQL)",

	{"docs/benchmarks.md", "## fleetmq against Mosquitto (load harness)", 1}:                            "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### CPU per message at a fixed 4,000 msg/s", 1}:                             "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### CPU per message at a fixed 4,000 msg/s", 2}:                             "perf stat attached to a server process during a benchmark (needs its PID)",
	{"docs/benchmarks.md", "### CPU per message at a fixed 4,000 msg/s", 3}:                             "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### The Go runtime's monitor kept awake", 1}:                                "a benchmark: two builds measured in turn under full load",
	{"docs/benchmarks.md", "### One processor while the load is light", 1}:                              "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### One processor while the load is light", 2}:                              "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### Allocations when every packet is its own read", 1}:                      "a test the suite runs anyway (TestMessageAllocationsOnePacketPerRead) and a benchmark (go test -bench)",
	{"docs/benchmarks.md", "### Several nodes", 1}:                                                      "a benchmark: two brokers routed together under load",
	{"docs/benchmarks.md", "### Unthrottled fan-in", 1}:                                                 "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### Memory per idle connection", 1}:                                         "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### A fleet of 15,000 devices", 1}:                                          "a benchmark: 15,000 devices against three brokers (the short form is internal/loadtest's TestFleetShort)",
	{"docs/benchmarks.md", "### A fleet of 15,000 devices", 2}:                                          "a benchmark: the paho.mqtt.golang fleet again, one round (the short form is internal/loadtest's TestFleetShort)",
	{"docs/benchmarks.md", "### A fleet of 15,000 devices", 3}:                                          "a benchmark: the fleet at a 10 s and a 60 s period (the short form is internal/loadtest's TestFleetShort)",
	{"docs/benchmarks.md", "## Stored history: ingest through the broker", 1}:                           "a benchmark: minutes of full load on the machine",
	{"docs/benchmarks.md", "### The ingest writer alone", 1}:                                            "a benchmark (go test -bench)",
	{"docs/benchmarks.md", "### The ingest writer alone", 2}:                                            "a benchmark (go test -bench)",
	{"docs/benchmarks.md", "## Stored history: queries, export and retention on 10 million records", 1}: "a benchmark: writes 10 million records",
	{"docs/benchmarks.md", "## Stored history: queries, export and retention on 10 million records", 2}: "a benchmark on a store of 10 million records",
	{"docs/benchmarks.md", "## Stored history: queries, export and retention on 10 million records", 3}: "a benchmark on a PostgreSQL store of 10 million records, reordered by a prune",
	{"docs/benchmarks.md", "## Stored history: queries, export and retention on 10 million records", 4}: "a benchmark on a SQLite store of 10 million records, reordered by a prune",
	{"docs/benchmarks.md", "## Subscriber REST API", 1}:                                                 "a benchmark: writes 10 million records, then go test -bench",
	{"docs/benchmarks.md", "## Go benchmarks", 1}:                                                       "a benchmark (go test -bench)",
	{"docs/benchmarks.md", "## Soak", 1}:                                                                "a 30-minute soak (its short form is internal/loadtest's TestSoakShort)",
	{"docs/benchmarks.md", "### Soak results", 1}:                                                       "the soak runs behind the figures: 30 and 2 minutes (the short form is TestSoakShort)",
	{"docs/benchmarks.md", "## Noisy neighbours", 1}:                                                    "a benchmark: minutes of attacks on the machine (the short form is internal/loadtest's TestNoisyNeighbourShort)",
	{"docs/benchmarks.md", "### Noisy-neighbour results", 1}:                                            "a benchmark: every attack, on SQLite and on PostgreSQL (the short form is TestNoisyNeighbourShort)",
	{"docs/benchmarks.md", "### Noisy-neighbour results", 2}:                                            "a benchmark: the expensive-filter and sign-in attacks alone (the short form is TestNoisyNeighbourShort)",
	{"docs/benchmarks.md", "### 20,000 idle HTTP connections", 1}:                                       "a benchmark that needs a raised file limit (the short form is TestNoisyNeighbourShort)",

	{"docs/fuzzing.md", "## mqtt/packet", 1}:                "fuzzing: five minutes per target",
	{"docs/fuzzing.md", "## mqtt/topic", 1}:                 "fuzzing: five minutes per target",
	{"docs/fuzzing.md", "## mqtt/broker", 1}:                "fuzzing: five minutes per target",
	{"docs/fuzzing.md", "## history", 1}:                    "fuzzing: five minutes per target",
	{"docs/fuzzing.md", "## platform", 1}:                   "fuzzing: five minutes per target",
	{"docs/fuzzing.md", "## fleetmq (the root package)", 1}: "fuzzing: five minutes per target",

	{"docs/benchmarks.md", "### Filters that match little: the scan budget", 1}: "a benchmark on a store of 10 million records",
	{"docs/benchmarks.md", "### Saving retained messages", 1}:                   "a benchmark (go test -bench)",
}

// docBlockOf is one fenced code block of a Markdown file.
type docBlockOf struct {
	docRef
	lang string
	line int // of the opening fence
	text string
}

// readDocBlocks returns the fenced code blocks of a file of the repository
// (a path relative to its root), in order; sh blocks are numbered per
// heading. Headings are only recognized outside fences, so a "# comment"
// in a block is not one.
func readDocBlocks(t testing.TB, file string) []docBlockOf {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []docBlockOf
		cur     *docBlockOf
		heading string
		n       int
	)
	heading1 := regexp.MustCompile(`^#{1,6} `)
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case cur != nil && strings.HasPrefix(line, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			lang := strings.TrimSpace(strings.TrimPrefix(line, "```"))
			cur = &docBlockOf{docRef: docRef{file: file, heading: heading}, lang: lang, line: i + 1}
			if lang == "sh" {
				n++
				cur.n = n
			}
		case heading1.MatchString(line):
			heading, n = line, 0
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a code block is not closed", file, cur.line)
	}
	return blocks
}

// docFiles are the files whose sh blocks must run: README.md and docs/*.md.
func docFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.ToSlash(filepath.Join("docs", filepath.Base(f))))
	}
	return out
}

// fetched records, per top-level test, the blocks docBlock gave it.
var fetched = struct {
	sync.Mutex
	by map[string]map[docRef]bool
}{by: map[string]map[docRef]bool{}}

// docBlock returns the first ```sh block under a heading of a file of the
// repository (the whole heading line, "## Quickstart").
func docBlock(t *testing.T, file, heading string) string {
	t.Helper()
	return docBlockN(t, file, heading, 1)
}

// docBlockN returns the n-th ```sh block under a heading. The calling test
// must be the one docsRunBy lists for it; at its end, the test must have
// fetched every block listed for it.
func docBlockN(t *testing.T, file, heading string, n int) string {
	t.Helper()
	ref := docRef{file, heading, n}
	test, _, _ := strings.Cut(t.Name(), "/")
	if by := docsRunBy[ref]; by != test {
		t.Fatalf("%v: docsRunBy lists it for %q, not %s: list it there", ref, by, test)
	}
	for _, b := range readDocBlocks(t, file) {
		if b.docRef != ref {
			continue
		}
		fetched.Lock()
		defer fetched.Unlock()
		if fetched.by[test] == nil {
			fetched.by[test] = map[docRef]bool{}
			t.Cleanup(func() { checkFetched(t, test) })
		}
		fetched.by[test][ref] = true
		return b.text
	}
	t.Fatalf("%s has no such sh block: %v", file, ref)
	return ""
}

// checkFetched fails test when it did not fetch every block docsRunBy
// lists for it (unless it failed or was skipped anyway).
func checkFetched(t *testing.T, test string) {
	if t.Failed() || t.Skipped() {
		return
	}
	fetched.Lock()
	defer fetched.Unlock()
	for ref, by := range docsRunBy {
		if by == test && !fetched.by[test][ref] {
			t.Errorf("docsRunBy says %s runs %v, but it never fetched it", test, ref)
		}
	}
}

// TestDocsEveryBlockIsCovered: every ```sh block of README.md and
// docs/*.md is run by a docs test or skipped with a reason; both lists name
// only blocks that exist, and docsRunBy only tests that exist. Command
// blocks must be tagged sh, so a ```bash block cannot escape the check.
func TestDocsEveryBlockIsCovered(t *testing.T) {
	seen := map[docRef]bool{}
	for _, file := range docFiles(t) {
		for _, b := range readDocBlocks(t, file) {
			switch b.lang {
			case "bash", "shell", "console", "zsh", "shell-session":
				t.Errorf("%s:%d: a ```%s block: tag command blocks ```sh (docs tests cover sh blocks)", file, b.line, b.lang)
			}
			if b.lang != "sh" {
				continue
			}
			seen[b.docRef] = true
			_, run := docsRunBy[b.docRef]
			reason, skipped := docsSkipped[b.docRef]
			switch {
			case run && skipped:
				t.Errorf("%s:%d: %v is both run (docsRunBy) and skipped (docsSkipped)", file, b.line, b.docRef)
			case skipped && strings.TrimSpace(reason) == "":
				t.Errorf("%s:%d: %v is skipped without a reason", file, b.line, b.docRef)
			case !run && !skipped:
				t.Errorf("%s:%d: %v runs in no docs test: run it in one (and list it in docsRunBy) or add it to docsSkipped with the reason:\n%s",
					file, b.line, b.docRef, b.text)
			}
		}
	}
	for _, list := range []map[docRef]string{docsRunBy, docsSkipped} {
		for ref := range list {
			if !seen[ref] {
				t.Errorf("%v is listed but not in the docs (a heading or the order of blocks changed?)", ref)
			}
		}
	}
	// The tests docsRunBy names exist.
	var src strings.Builder
	files, _ := filepath.Glob("*_test.go")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	var tests []string
	for _, test := range docsRunBy {
		if !slices.Contains(tests, test) {
			tests = append(tests, test)
		}
	}
	for _, test := range tests {
		if !strings.Contains(src.String(), "\nfunc "+test+"(t *testing.T) {") {
			t.Errorf("docsRunBy names %s, which is no test of this package", test)
		}
	}
}
