package fleetmq

import (
	"strings"
	"testing"
)

// TestTopicRegexPrefix: the literal start of anchored expressions,
// including those regexp.Regexp.LiteralPrefix gives "" for.
func TestTopicRegexPrefix(t *testing.T) {
	for expr, want := range map[string]string{
		`^A/pump-[0-9]+/state/`:     "A/pump-",
		`^A/a-hist/(state|event)/`:  "A/a-hist/",
		`^A/x/state/t$`:             "A/x/state/t",
		`\AA/x`:                     "A/x",
		`^A/ab+`:                    "A/a",
		`^A/x|^A/y`:                 "", // not factored: no prefix, still correct
		`^A/x|^B/y`:                 "",
		`A/x`:                       "", // not anchored: matches anywhere
		`.*`:                        "",
		`^(?i)a/x`:                  "", // case folded
		`^[0-9a-f]{8}-[0-9a-f]{4}/`: "",
		`(`:                         "",
	} {
		if got := TopicRegexPrefix(expr); got != want {
			t.Errorf("TopicRegexPrefix(%q) = %q, want %q", expr, got, want)
		}
	}
}

// TestCheckTopicRegex: any RE2 expression within the bounds is taken;
// invalid, over-long and over-complex ones are refused with the reason.
func TestCheckTopicRegex(t *testing.T) {
	for _, ok := range []string{`^A/pump-[0-9]+/state/`, `.*`, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/`, `state|event`} {
		if err := CheckTopicRegex(ok); err != nil {
			t.Errorf("CheckTopicRegex(%q) = %v, want accepted", ok, err)
		}
	}
	long := make([]byte, MaxTopicRegexLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for expr, want := range map[string]string{
		`^A/(`:                            "not a valid regular expression",
		string(long):                      "longer than",
		`(a{1000}){1000}`:                 "", // any refusal: RE2's own repeat bound or ours
		`((((a{100}){100}){100}){100})`:   "",
		strings.Repeat(`[a-z]{1000}`, 11): "too complex",
	} {
		err := CheckTopicRegex(expr)
		if err == nil {
			t.Errorf("CheckTopicRegex(%.40q) accepted", expr)
			continue
		}
		if want != "" && !strings.Contains(err.Error(), want) {
			t.Errorf("CheckTopicRegex(%.40q) = %v, want %q", expr, err, want)
		}
	}
}
