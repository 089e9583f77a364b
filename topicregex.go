package fleetmq

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// Bounds of a history topic expression (HistoryQuery.TopicRegex).
const (
	MaxTopicRegexLen   = 1024   // characters
	MaxTopicRegexInsts = 10_000 // instructions of its compiled program
)

// CheckTopicRegex reports why expr cannot be a history topic expression:
// it must be a Go (RE2) regular expression of at most MaxTopicRegexLen
// characters whose program has at most MaxTopicRegexInsts instructions.
// Any such expression is safe to run: it is only ever applied to the
// topics of the caller's own account (the query's account condition
// keeps the others out), and RE2 runs in time linear in the topic.
func CheckTopicRegex(expr string) error {
	if len(expr) > MaxTopicRegexLen {
		return fmt.Errorf("longer than %d characters", MaxTopicRegexLen)
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return fmt.Errorf("not a valid regular expression: %v", err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return fmt.Errorf("not a valid regular expression: %v", err)
	}
	if len(prog.Inst) > MaxTopicRegexInsts {
		return fmt.Errorf("too complex (%d instructions, at most %d)", len(prog.Inst), MaxTopicRegexInsts)
	}
	if _, err := regexp.Compile(expr); err != nil {
		return fmt.Errorf("not a valid regular expression: %v", err)
	}
	return nil
}

// TopicRegexPrefix returns the text every match of expr starts with when
// expr is anchored at the start of the topic (a leading ^ or \A): the
// literal characters that follow the anchor, up to the first that is not
// one (a class, a repeat, a group). It is "" when expr is not anchored
// there, starts with something else, or does not parse. Stores use it to
// read only the index range of topics with that prefix;
// regexp.Regexp.LiteralPrefix cannot serve, as it gives "" for many
// anchored expressions.
func TopicRegexPrefix(expr string) string {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return ""
	}
	re = re.Simplify()
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	if len(subs) == 0 || subs[0].Op != syntax.OpBeginText {
		return ""
	}
	var b strings.Builder
	for _, s := range subs[1:] {
		if s.Op != syntax.OpLiteral || s.Flags&syntax.FoldCase != 0 {
			break
		}
		b.WriteString(string(s.Rune))
	}
	return b.String()
}
