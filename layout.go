package fleetmq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Layout is a registered vendor wire layout of the platform catalog. Its
// rules map a wire topic pattern to a platform subpath:
//
//	acme/{client_id}/status=state/summary
//	acme/{client_id}/sensor/+=telemetry/{1}
//	acme/{client_id}/alarm/#=event/{#}
//
// The pattern's levels are literals, {client_id} (exactly once), "+"
// (captured as {1}, {2}, ... in order) and a final "#" (captured as {#},
// the rest of the topic). The subpath starts with a topic class and may use
// the captures. The first level of every pattern is the layout's wire root.
// CompileLayout checks the rules.
type Layout struct {
	ID        string
	Name      string
	WireRoot  string
	Rules     []string // "wire pattern=platform subpath"
	Fanout    bool
	CreatedAt time.Time
}

// CompiledLayout is a layout whose rules are checked and ready to map wire
// topics (CompileLayout).
type CompiledLayout struct {
	ID       string
	Name     string
	WireRoot string
	Fanout   bool
	rules    []layoutRule
}

type layoutRule struct {
	pattern []string
	target  []string
}

// CompileLayout checks a layout's rules and returns its compiled form.
// Errors name the rule and what is wrong with it.
func CompileLayout(l *Layout) (*CompiledLayout, error) {
	if l.WireRoot == "" || strings.ContainsAny(l.WireRoot, "/+#$") || ValidAccountID(l.WireRoot) {
		return nil, fmt.Errorf("wire root %q: must be one topic level without wildcards or '$', and not an account id", l.WireRoot)
	}
	if len(l.Rules) == 0 {
		return nil, fmt.Errorf("layout %q has no rules", l.Name)
	}
	rules := make([]layoutRule, 0, len(l.Rules))
	for _, r := range l.Rules {
		pat, tgt, ok := strings.Cut(r, "=")
		if !ok {
			return nil, fmt.Errorf("rule %q: want PATTERN=SUBPATH", r)
		}
		lr, err := compileRule(l.WireRoot, strings.TrimSpace(pat), strings.TrimSpace(tgt))
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", r, err)
		}
		rules = append(rules, lr)
	}
	return &CompiledLayout{ID: l.ID, Name: l.Name, WireRoot: l.WireRoot, Fanout: l.Fanout, rules: rules}, nil
}

// Normalize maps a wire topic to the client id it names and the platform
// subpath ("state/...", ...) by the first of the layout's rules that
// matches it; ok is false when none does.
func (l *CompiledLayout) Normalize(wire string) (clientID, subpath string, ok bool) {
	levels := strings.Split(wire, "/")
	for i := range l.rules {
		if c, sp, ok := l.rules[i].apply(levels); ok {
			return c, sp, true
		}
	}
	return "", "", false
}

// LayoutIndex holds compiled layouts by wire root, each root's in the
// order of the store's list.
type LayoutIndex map[string][]*CompiledLayout

// CompileLayouts compiles the registered layouts (ControlStore.Layouts)
// into an index. The error names the first layout that does not compile.
func CompileLayouts(ls []*Layout) (LayoutIndex, error) {
	ix := LayoutIndex{}
	for _, l := range ls {
		cl, err := CompileLayout(l)
		if err != nil {
			return nil, fmt.Errorf("layout %q: %w", l.Name, err)
		}
		ix[l.WireRoot] = append(ix[l.WireRoot], cl)
	}
	return ix, nil
}

// Match finds the layout that maps a wire topic: the first layout
// registered for the topic's root (its first level) one of whose rules
// matches, with the client id and subpath it maps the topic to. l is nil
// when none matches; rootKnown reports whether any layout is registered
// for the root. It is the one lookup of vendor layouts: the broker's
// publish path and the operator's dry run both use it.
func (ix LayoutIndex) Match(wire string) (l *CompiledLayout, clientID, subpath string, rootKnown bool) {
	root, _, _ := strings.Cut(wire, "/")
	ls := ix[root]
	for _, cl := range ls {
		if c, sp, ok := cl.Normalize(wire); ok {
			return cl, c, sp, true
		}
	}
	return nil, "", "", len(ls) > 0
}

func compileRule(root, pat, tgt string) (layoutRule, error) {
	p := strings.Split(pat, "/")
	if p[0] != root {
		return layoutRule{}, fmt.Errorf("pattern must start with the wire root %q", root)
	}
	plus, ids := 0, 0
	hash := false
	for i, lv := range p {
		switch {
		case lv == "{client_id}":
			ids++
		case lv == "+":
			plus++
		case lv == "#":
			if i != len(p)-1 {
				return layoutRule{}, fmt.Errorf("'#' must be the last level")
			}
			hash = true
		case lv == "" || strings.ContainsAny(lv, "+#{}"):
			return layoutRule{}, fmt.Errorf("level %q: literals must be non-empty and free of + # { }", lv)
		}
	}
	if ids != 1 {
		return layoutRule{}, fmt.Errorf("pattern must contain {client_id} exactly once as a whole level")
	}
	t := strings.Split(tgt, "/")
	if !ValidClass(t[0]) || len(t) < 2 {
		return layoutRule{}, fmt.Errorf("subpath must start with state/, event/, telemetry/ or sample/ and name a topic")
	}
	for _, lv := range t {
		switch {
		case lv == "{#}":
			if !hash {
				return layoutRule{}, fmt.Errorf("{#} used but the pattern has no '#'")
			}
		case strings.HasPrefix(lv, "{") && strings.HasSuffix(lv, "}"):
			n, err := strconv.Atoi(lv[1 : len(lv)-1])
			if err != nil || n < 1 || n > plus {
				return layoutRule{}, fmt.Errorf("%s: the pattern has %d '+' captures", lv, plus)
			}
		case lv == "" || strings.ContainsAny(lv, "+#{}"):
			return layoutRule{}, fmt.Errorf("subpath level %q: must be non-empty and free of + # { }", lv)
		}
	}
	return layoutRule{pattern: p, target: t}, nil
}

// apply matches wire levels; it returns the client id and the subpath.
func (r *layoutRule) apply(levels []string) (clientID, subpath string, ok bool) {
	var caps []string
	rest := ""
	for i, p := range r.pattern {
		if p == "#" {
			if i >= len(levels) {
				return "", "", false // '#' here needs at least one level to name
			}
			rest = strings.Join(levels[i:], "/")
			break
		}
		if i >= len(levels) {
			return "", "", false
		}
		lv := levels[i]
		switch p {
		case "{client_id}":
			if lv == "" {
				return "", "", false
			}
			clientID = lv
		case "+":
			if lv == "" {
				return "", "", false
			}
			caps = append(caps, lv)
		default:
			if lv != p {
				return "", "", false
			}
		}
		if i == len(r.pattern)-1 && len(levels) != len(r.pattern) {
			return "", "", false
		}
	}
	out := make([]string, len(r.target))
	for i, t := range r.target {
		switch {
		case t == "{#}":
			out[i] = rest
		case strings.HasPrefix(t, "{"):
			n, _ := strconv.Atoi(t[1 : len(t)-1])
			out[i] = caps[n-1]
		default:
			out[i] = t
		}
	}
	return clientID, strings.Join(out, "/"), true
}
