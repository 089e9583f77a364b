package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
)

// envName finds the [FLEETMQ_*] variable named at the end of a flag's help.
var envName = regexp.MustCompile(`\[(FLEETMQ_[A-Z0-9_]+)\]$`)

// parseFlags parses args, then applies the FLEETMQ_* variable of every flag
// not given on the command line, with the flag's own validation: a bad
// value in the environment is an error, never silently ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		m := envName.FindStringSubmatch(f.Usage)
		if err != nil || m == nil || given[f.Name] {
			return
		}
		if v, ok := os.LookupEnv(m[1]); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", m[1], v, serr)
			}
		}
	})
	return err
}
