package main

import (
	"flag"
	"io"
	"testing"

	"github.com/fleetmq/fleetmq/internal/app"
)

// TestEveryFlagHasItsVariable: every flag of serve and broker names, at
// the end of its help, the FLEETMQ_* variable that sets it (parseFlags
// reads the variable from there), and no two flags of a command share
// one.
func TestEveryFlagHasItsVariable(t *testing.T) {
	serve := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cfg app.Config
	var lf logFlags
	serveFlags(serve, &cfg, &lf)
	brk := flag.NewFlagSet("broker", flag.ContinueOnError)
	var bc brokerConfig
	bc.flags(brk)
	for _, fs := range []*flag.FlagSet{serve, brk} {
		fs.SetOutput(io.Discard)
		seen := map[string]string{}
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			m := envName.FindStringSubmatch(f.Usage)
			if m == nil {
				t.Errorf("%s -%s: its help names no [FLEETMQ_*] variable: %q", fs.Name(), f.Name, f.Usage)
				return
			}
			if other, dup := seen[m[1]]; dup {
				t.Errorf("%s: -%s and -%s both name %s", fs.Name(), other, f.Name, m[1])
			}
			seen[m[1]] = f.Name
		})
		if n < 10 {
			t.Fatalf("%s has %d flags: the flag set was not built", fs.Name(), n)
		}
	}
}
