package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
)

// envName finds the [FLEETMQ_*] variable named at the end of a flag's help.
var envName = regexp.MustCompile(`\[(FLEETMQ_[A-Z0-9_]+)\]$`)

// parseFlags parses args (flags only), then applies the FLEETMQ_* variable
// of every flag not given on the command line, with the flag's own
// validation: a bad value in the environment is an error, never silently
// ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	pos, err := parseCommand(fs, args)
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q", pos[0])
	}
	return err
}

// parseCommand is parseFlags for commands with positional arguments, which
// may come before, between or after the flags. It returns them.
func parseCommand(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
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
	return pos, err
}
