package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq/control"
	"github.com/fleetmq/fleetmq/internal/app"
)

// The operator commands open the store directly: SQLite in the data
// directory, or the PostgreSQL database of -database. SQLite in WAL mode
// lets them write while "fleetmq serve" runs; serve picks the change up
// at its next reload on either database, and a command that changed
// something returns only once every running serve has (awaitApplied).

// adminCmd is one operator subcommand.
type adminCmd struct {
	usage string // "account create -name NAME -email EMAIL [-plan PLAN]"
	help  string
	args  int // positional arguments required
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, svc *control.Service, pos []string, out io.Writer) error
	// stream: the command changes nothing and its output may be larger
	// than memory (an export), so it goes to standard output as it is
	// made instead of after the wait for running servers.
	stream bool
}

// runAdmin dispatches "fleetmq GROUP VERB ...".
func runAdmin(ctx context.Context, group string, cmds map[string]*adminCmd, args []string, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage:\n")
		for _, verb := range sortedKeys(cmds) {
			fmt.Fprintf(w, "  fleetmq %s\n      %s\n", cmds[verb].usage, cmds[verb].help)
		}
		fmt.Fprintf(w, "Every command takes -data DIR (default ./data, or FLEETMQ_DATA) or -database URL (PostgreSQL, or FLEETMQ_DATABASE).\nA command that changes something returns once every running fleetmq serve enforces the change (-wait, default 5s).\n")
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		usage(stderr)
		return flag.ErrHelp
	}
	c := cmds[args[0]]
	if c == nil {
		usage(stderr)
		return fmt.Errorf("unknown command %q", group+" "+args[0])
	}
	fs := flag.NewFlagSet(group+" "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, "Usage: fleetmq %s\n  %s\n", c.usage, c.help); fs.PrintDefaults() }
	var dir, database string
	storeFlags(fs, &dir, &database)
	wait := fs.Duration("wait", 5*time.Second, "after a change, how long to wait until every running fleetmq serve enforces it (0: do not wait)")
	if c.flags != nil {
		c.flags(fs)
	}
	pos, err := parseCommand(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != c.args {
		fs.Usage()
		return fmt.Errorf("%s %s: want %d argument(s), got %d", group, args[0], c.args, len(pos))
	}
	if database == "" {
		if err := existingDataDir(dir); err != nil {
			return err
		}
	}
	store, err := app.OpenStore(ctx, dir, database)
	if err != nil {
		return err
	}
	defer store.Close()
	svc := control.New(store)
	before, err := store.Version(ctx)
	if err != nil {
		return err
	}
	if c.stream {
		return c.run(ctx, svc, pos, stdout)
	}
	// The output waits with the command: a script reading it (read -r ID
	// PASSWORD < <(fleetmq ... -print id,password)) goes on only once the
	// change is in force, not as soon as the line is printed.
	var out bytes.Buffer
	if err := c.run(ctx, svc, pos, &out); err != nil {
		stdout.Write(out.Bytes())
		return err
	}
	err = awaitApplied(ctx, svc, before, *wait, stderr)
	if _, werr := stdout.Write(out.Bytes()); werr != nil && err == nil {
		err = werr
	}
	return err
}

// existingDataDir refuses a data directory that does not exist: an
// operator command works on serve's store, and a new empty one made at a
// mistyped -data (or in another working directory than serve's ./data)
// would show no accounts and keep what is created from every serve. serve
// creates the directory at its first start; a directory made by hand is a
// store too, so accounts can be set up before that start.
func existingDataDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("data directory %s does not exist: pass the -data (or FLEETMQ_DATA) of your fleetmq serve, which creates it at its first start (or create the directory to set up a store before serve runs)", dir)
	case err != nil:
		return fmt.Errorf("data directory: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("data directory %s is not a directory: pass the -data (or FLEETMQ_DATA) of your fleetmq serve", dir)
	}
	return nil
}

// awaitApplied returns once a change the command stored (the control-plane
// version moved from before) is in force on every running fleetmq serve,
// so that what the command made can be used on the next line of a script:
// a credential to connect with, a revocation already enforced. When serve
// is not running, or has not applied the change within wait, it says so on
// stderr; the change is stored either way, and the exit status is 0.
func awaitApplied(ctx context.Context, svc *control.Service, before int64, wait time.Duration, stderr io.Writer) error {
	if wait <= 0 {
		return nil
	}
	if v, err := svc.Store.Version(ctx); err != nil || v == before {
		return err // a read, or a write that changed nothing
	}
	a, err := svc.AwaitApplied(ctx, wait, 20*time.Millisecond)
	if err != nil {
		return fmt.Errorf("stored; could not check that fleetmq serve applied it: %w", err)
	}
	if !a.Running() || !a.Done() {
		fmt.Fprintln(stderr, a)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// table writes rows under header in aligned columns (cells separated by
// tabs, rows by newlines). A cell holding what tenants wrote (a topic, a
// client id, a problem's detail) goes through cell; whatever else the rows
// hold, control characters are written as escapes (\x1b), so that nothing
// reaches the operator's terminal as a command.
func table(out io.Writer, header string, rows func(w io.Writer)) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(escapeControls{tw})
	return tw.Flush()
}

// cell is s for a table: every control character, tab and newline
// included (a tenant's tab or newline would make cells or rows of its
// own), and every byte that is not UTF-8, written as a Go escape.
func cell(s string) string {
	return string(appendEscaped(nil, []byte(s), false))
}

// escapeControls writes to w what it is given with control characters
// other than the table's tabs and newlines escaped (appendEscaped).
type escapeControls struct{ w io.Writer }

func (e escapeControls) Write(p []byte) (int, error) {
	if _, err := e.w.Write(appendEscaped(nil, p, true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// appendEscaped appends p to b with every control character (C0, DEL, C1)
// and every byte that is not UTF-8 written as a Go escape (\x1b, \u0085);
// layout keeps tabs and newlines.
func appendEscaped(b, p []byte, layout bool) []byte {
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = fmt.Appendf(b, `\x%02x`, p[i])
		case unicode.IsControl(r) && !(layout && (r == '\t' || r == '\n')):
			q := strconv.QuoteRuneToASCII(r) // '\x1b'
			b = append(b, q[1:len(q)-1]...)
		default:
			b = append(b, p[i:i+n]...)
		}
		i += n
	}
	return b
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
