package fleetmq_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
)

// TestCompileLayout: good rules compile; each kind of bad rule is refused with
// an error that says what is wrong.
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
		l, err := fleetmq.CompileLayout(&fleetmq.Layout{Name: "n", WireRoot: tt.root, Rules: tt.rules, Fanout: true})
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err == "" && (l == nil || l.WireRoot != tt.root || l.Name != "n" || !l.Fanout):
			t.Errorf("%s: compiled to %+v", tt.name, l)
		case tt.err != "" && err == nil:
			t.Errorf("%s: compiled, want an error about %q", tt.name, tt.err)
		case tt.err != "" && !strings.Contains(err.Error(), tt.err):
			t.Errorf("%s: error %q does not mention %q", tt.name, err, tt.err)
		}
	}
}

// TestNormalize: the first matching rule maps a wire topic to its client id
// and subpath; a topic no rule matches maps to nothing.
func TestNormalize(t *testing.T) {
	l, err := fleetmq.CompileLayout(&fleetmq.Layout{Name: "acme", WireRoot: "acme", Rules: []string{
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

// TestLayoutIndexMatch: a wire topic is mapped by the first layout of its
// root, in the store's order, that has a matching rule; Match says whether
// the root is registered when none matches.
func TestLayoutIndexMatch(t *testing.T) {
	ix, err := fleetmq.CompileLayouts([]*fleetmq.Layout{
		{Name: "acme", WireRoot: "acme", Fanout: true, Rules: []string{"acme/{client_id}/status=state/summary", "acme/{client_id}/sensor/+=telemetry/{1}"}},
		{Name: "acme-late", WireRoot: "acme", Rules: []string{"acme/{client_id}/status=event/never", "acme/site/+/{client_id}=sample/{1}"}},
		{Name: "quiet", WireRoot: "quiet", Rules: []string{"quiet/{client_id}/t/+=telemetry/{1}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		wire, layout, client, subpath string
		rootKnown                     bool
	}{
		{"acme/dev1/status", "acme", "dev1", "state/summary", true}, // acme-late's rule comes too late
		{"acme/dev1/sensor/temp", "acme", "dev1", "telemetry/temp", true},
		{"acme/site/north/dev7", "acme-late", "dev7", "sample/north", true},
		{"quiet/dev2/t/x", "quiet", "dev2", "telemetry/x", true},
		{"acme/dev1/other", "", "", "", true},
		{"quiet", "", "", "", true},
		{"acmex/dev1/status", "", "", "", false},
		{"other/dev1/status", "", "", "", false},
		{"", "", "", "", false},
	}
	for _, tt := range tests {
		l, client, subpath, known := ix.Match(tt.wire)
		name := ""
		if l != nil {
			name = l.Name
		}
		if name != tt.layout || client != tt.client || subpath != tt.subpath || known != tt.rootKnown {
			t.Errorf("Match(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", tt.wire, name, client, subpath, known, tt.layout, tt.client, tt.subpath, tt.rootKnown)
		}
	}
	if l, _, _, known := fleetmq.LayoutIndex(nil).Match("acme/dev1/status"); l != nil || known {
		t.Errorf("an empty index matched: %v, root known %v", l, known)
	}
	_, err = fleetmq.CompileLayouts([]*fleetmq.Layout{
		{Name: "good", WireRoot: "acme", Rules: []string{"acme/{client_id}/s=state/s"}},
		{Name: "bad", WireRoot: "acme", Rules: []string{"acme/{client_id}/s=bogus/s"}},
	})
	if err == nil || !strings.Contains(err.Error(), `layout "bad"`) {
		t.Errorf("CompileLayouts with a bad layout: %v, want an error naming it", err)
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
		layouts := make([]*fleetmq.CompiledLayout, 0, len(fuzzLayouts)+1)
		for _, rules := range fuzzLayouts {
			l, err := fleetmq.CompileLayout(&fleetmq.Layout{Name: "fixed", WireRoot: "acme", Rules: rules})
			if err != nil {
				t.Fatalf("fixed layout %q: %v", rules, err)
			}
			layouts = append(layouts, l)
		}
		root, _, _ := strings.Cut(strings.TrimSpace(rule), "/")
		if l, err := fleetmq.CompileLayout(&fleetmq.Layout{Name: "fuzz", WireRoot: root, Rules: []string{rule}}); err == nil {
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
			if !fleetmq.ValidClass(class) || !strings.Contains(subpath, "/") {
				t.Fatalf("rule(s) of %s matched %q with subpath %q, which does not start with a class", l.Name, wire, subpath)
			}
			c2, s2, ok2 := l.Normalize(wire)
			if c2 != client || s2 != subpath || !ok2 {
				t.Fatalf("Normalize(%q) is not deterministic", wire)
			}
		}
	})
}
