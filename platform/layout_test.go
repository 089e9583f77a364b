package platform

import (
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
)

func TestCompileLayout(t *testing.T) {
	tests := []struct {
		name  string
		root  string
		rules []string
		err   string // "" for a good layout; else a fragment of the error
	}{
		{"one literal rule", "acme", []string{"acme/{client_id}/status=state/summary"}, ""},
		{"captures", "acme", []string{"acme/{client_id}/+/+=telemetry/{2}/{1}", "acme/{client_id}/alarm/#=event/{#}"}, ""},
		{"client id anywhere", "acme", []string{"acme/site/+/{client_id}/#=sample/{1}/{#}"}, ""},
		{"spaces around", "acme", []string{"  acme/{client_id}/s = state/s  "}, ""},
		{"capture reused", "acme", []string{"acme/{client_id}/+=event/{1}/{1}"}, ""},

		{"empty root", "", []string{"/{client_id}/s=state/s"}, "wire root"},
		{"root with /", "a/b", []string{"a/b/{client_id}/s=state/s"}, "wire root"},
		{"root with +", "+", []string{"+/{client_id}/s=state/s"}, "wire root"},
		{"root with #", "#", []string{"#=state/s"}, "wire root"},
		{"root with $", "$SYS", []string{"$SYS/{client_id}/s=state/s"}, "wire root"},
		{"root is an account id", "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a", []string{"0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a/{client_id}/s=state/s"}, "account id"},
		{"no rules", "acme", nil, "no rules"},
		{"no =", "acme", []string{"acme/{client_id}/s"}, "PATTERN=SUBPATH"},
		{"other root", "acme", []string{"other/{client_id}/s=state/s"}, "wire root"},
		{"no client id", "acme", []string{"acme/+/s=state/s"}, "{client_id}"},
		{"client id twice", "acme", []string{"acme/{client_id}/{client_id}=state/s"}, "{client_id}"},
		{"client id inside a level", "acme", []string{"acme/x{client_id}/s=state/s"}, "literals"},
		{"# not last", "acme", []string{"acme/{client_id}/#/x=event/{#}"}, "'#' must be the last"},
		{"partial +", "acme", []string{"acme/{client_id}/a+=state/s"}, "literals"},
		{"empty level", "acme", []string{"acme//{client_id}=state/s"}, "literals"},
		{"bad class", "acme", []string{"acme/{client_id}/s=config/s"}, "subpath must start"},
		{"class only", "acme", []string{"acme/{client_id}/s=state"}, "subpath must start"},
		{"capture as class", "acme", []string{"acme/{client_id}/+={1}/x"}, "subpath must start"},
		{"{2} with one +", "acme", []string{"acme/{client_id}/+=telemetry/{2}"}, "{2}"},
		{"{0}", "acme", []string{"acme/{client_id}/+=telemetry/{0}"}, "{0}"},
		{"{x}", "acme", []string{"acme/{client_id}/+=telemetry/{x}"}, "{x}"},
		{"{#} without #", "acme", []string{"acme/{client_id}/+=event/{#}"}, "{#}"},
		{"wildcard in subpath", "acme", []string{"acme/{client_id}/s=state/+"}, "subpath level"},
		{"empty subpath level", "acme", []string{"acme/{client_id}/s=state//x"}, "subpath level"},
		{"one bad rule of two", "acme", []string{"acme/{client_id}/s=state/s", "acme/{client_id}/t=bogus/t"}, "bogus/t"},
	}
	for _, tt := range tests {
		l, err := CompileLayout(&fleetmq.Layout{Name: "n", WireRoot: tt.root, Rules: tt.rules, Fanout: true})
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "" && (l == nil || l.WireRoot != tt.root || !l.Fanout || l.Normalize == nil):
			t.Errorf("%s: compiled to %+v", tt.name, l)
		case tt.err != "" && err == nil:
			t.Errorf("%s: compiled, want an error about %q", tt.name, tt.err)
		case tt.err != "" && !strings.Contains(err.Error(), tt.err):
			t.Errorf("%s: error %q does not mention %q", tt.name, err, tt.err)
		}
	}
}

func TestNormalize(t *testing.T) {
	l, err := CompileLayout(&fleetmq.Layout{Name: "acme", WireRoot: "acme", Rules: []string{
		"acme/{client_id}/status=state/summary",
		"acme/{client_id}/sensor/+=telemetry/{1}",
		"acme/{client_id}/sensor/+/+=telemetry/{2}/{1}",
		"acme/{client_id}/alarm/#=event/alarm/{#}",
		"acme/site/+/{client_id}=sample/site/{1}",
		"acme/{client_id}/status=event/never", // shadowed: the first match wins
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		wire, client, subpath string
		ok                    bool
	}{
		{"acme/dev1/status", "dev1", "state/summary", true},
		{"acme/dev1/sensor/temp", "dev1", "telemetry/temp", true},
		{"acme/dev1/sensor/temp/probe2", "dev1", "telemetry/probe2/temp", true},
		{"acme/dev1/alarm/door", "dev1", "event/alarm/door", true},
		{"acme/dev1/alarm/door/open/now", "dev1", "event/alarm/door/open/now", true},
		{"acme/site/north/dev7", "dev7", "sample/site/north", true},
		{"acme/site/status", "site", "state/summary", true}, // a client may be called "site"
		{"acme/dev1/alarm", "", "", false},                  // '#' needs a level to name
		{"acme/dev1/sensor", "", "", false},
		{"acme/dev1/sensor/a/b/c", "", "", false},
		{"acme/dev1/status/x", "", "", false},
		{"acme//status", "", "", false},        // empty client id
		{"acme/dev1/sensor/", "", "", false},   // empty '+' capture
		{"acme/site//dev7", "", "", false},     // empty '+' capture
		{"acme/dev1/sensor//x", "", "", false}, // empty '+' capture
		{"acme", "", "", false},
		{"acme/", "", "", false},
		{"other/dev1/status", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		c, sp, ok := l.Normalize(tt.wire)
		if c != tt.client || sp != tt.subpath || ok != tt.ok {
			t.Errorf("Normalize(%q) = %q, %q, %v; want %q, %q, %v", tt.wire, c, sp, ok, tt.client, tt.subpath, tt.ok)
		}
	}
}

// fuzzLayouts are fixed layouts every fuzzed wire topic is run through.
var fuzzLayouts = [][]string{
	{"acme/{client_id}/status=state/summary", "acme/{client_id}/sensor/+=telemetry/{1}", "acme/{client_id}/alarm/#=event/{#}"},
	{"acme/site/+/{client_id}/+/#=sample/{2}/{1}/{#}"},
	{"acme/{client_id}=state/x", "acme/+/{client_id}/#=event/{1}/{#}"},
}

// FuzzLayoutNormalize checks that compiling any rule and normalizing any
// wire topic never panics, and that a match names a client id that is one
// of the wire topic's levels and a subpath that starts with a topic class.
func FuzzLayoutNormalize(f *testing.F) {
	f.Add("acme/{client_id}/status=state/summary", "acme/dev1/status")
	f.Add("acme/{client_id}/sensor/+=telemetry/{1}", "acme/dev1/sensor/temp")
	f.Add("acme/{client_id}/alarm/#=event/{#}", "acme/dev1/alarm/a/b")
	f.Add("acme/{client_id}/alarm/#=event/{#}", "acme/dev1/alarm/")
	f.Add("acme/site/+/{client_id}/+/#=sample/{2}/{1}/{#}", "acme/site/n/dev/x/y")
	f.Add("acme/+/+/{client_id}=event/{2}/{1}", "acme///dev")
	f.Add("x/{client_id}/#=state/{#}", "x/a//b")
	f.Add("acme/{client_id}=state/{1}", "acme/+")
	f.Fuzz(func(t *testing.T, rule, wire string) {
		layouts := make([]*Layout, 0, len(fuzzLayouts)+1)
		for _, rules := range fuzzLayouts {
			l, err := CompileLayout(&fleetmq.Layout{Name: "fixed", WireRoot: "acme", Rules: rules})
			if err != nil {
				t.Fatalf("fixed layout %q: %v", rules, err)
			}
			layouts = append(layouts, l)
		}
		root, _, _ := strings.Cut(strings.TrimSpace(rule), "/")
		if l, err := CompileLayout(&fleetmq.Layout{Name: "fuzz", WireRoot: root, Rules: []string{rule}}); err == nil {
			layouts = append(layouts, l)
		}
		levels := strings.Split(wire, "/")
		for _, l := range layouts {
			client, subpath, ok := l.Normalize(wire)
			if !ok {
				if client != "" || subpath != "" {
					t.Fatalf("no match but client %q subpath %q", client, subpath)
				}
				continue
			}
			if client == "" || !slices.Contains(levels, client) {
				t.Fatalf("rule(s) of %s matched %q with client id %q, not one of its levels", l.Name, wire, client)
			}
			class, _, _ := strings.Cut(subpath, "/")
			if !ValidClass(class) || !strings.Contains(subpath, "/") {
				t.Fatalf("rule(s) of %s matched %q with subpath %q, which does not start with a class", l.Name, wire, subpath)
			}
			c2, s2, ok2 := l.Normalize(wire)
			if c2 != client || s2 != subpath || !ok2 {
				t.Fatalf("Normalize(%q) is not deterministic", wire)
			}
		}
	})
}
