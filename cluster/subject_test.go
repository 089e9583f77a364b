package cluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq/mqtt/topic"
)

func TestSubjects(t *testing.T) {
	for _, c := range []struct{ topic, subject string }{
		{"a/b/c", "fleetmq.m.a.b.c"},
		{"a//c", "fleetmq.m.a.%.c"},
		{"/a", "fleetmq.m.%.a"},
		{"a/", "fleetmq.m.a.%"},
		{"v1.2/x*y/>/%", "fleetmq.m.v1%2E2.x%2Ay.%3E.%25"},
		{"with space/tab\there", "fleetmq.m.with%20space.tab%09here"},
		{"größe/温度", "fleetmq.m.größe.温度"},
	} {
		if got := Subject(c.topic); got != c.subject {
			t.Errorf("Subject(%q) = %q, want %q", c.topic, got, c.subject)
		}
	}
	for _, c := range []struct {
		filter   string
		subjects []string
	}{
		{"a/b", []string{"fleetmq.m.a.b"}},
		{"a/+/c", []string{"fleetmq.m.a.*.c"}},
		{"a/#", []string{"fleetmq.m.a", "fleetmq.m.a.>"}},
		{"#", []string{"fleetmq.m.>"}},
		{"+/#", []string{"fleetmq.m.*", "fleetmq.m.*.>"}},
		{"a.b/#", []string{"fleetmq.m.a%2Eb", "fleetmq.m.a%2Eb.>"}},
	} {
		if got := FilterSubjects(c.filter); !slices.Equal(got, c.subjects) {
			t.Errorf("FilterSubjects(%q) = %q, want %q", c.filter, got, c.subjects)
		}
	}
}

// natsMatch is NATS's rule for a literal subject and a subscription
// subject: tokens compare one by one, '*' matches one token, a final '>'
// one or more.
func natsMatch(subject, sub string) bool {
	st, ft := strings.Split(subject, "."), strings.Split(sub, ".")
	for i, f := range ft {
		if f == ">" && i == len(ft)-1 {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(st) == len(ft)
}

// FuzzSubjects: a topic's subject is a valid NATS subject, different
// topics never share one, and a filter's subjects match exactly the
// topics the MQTT filter matches (for topics not starting with '$').
func FuzzSubjects(f *testing.F) {
	for _, s := range [][2]string{{"a/b/c", "a/+/c"}, {"a//c", "a/#"}, {"a.b/c", "#"}, {"x/%2E", "+/+"}, {"", "+"}, {"/", "/#"}} {
		f.Add(s[0], s[1], "a/b")
	}
	f.Fuzz(func(t *testing.T, name, filter, other string) {
		if topic.ValidateName(name) != nil || strings.HasPrefix(name, "$") {
			return
		}
		subj := Subject(name)
		for tok := range strings.SplitSeq(subj, ".") {
			if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
				t.Fatalf("Subject(%q) = %q: token %q is not a valid NATS token", name, subj, tok)
			}
		}
		if topic.ValidateName(other) == nil && other != name && Subject(other) == subj {
			t.Fatalf("%q and %q share subject %q", name, other, subj)
		}
		if topic.ValidateFilter(filter) != nil {
			return
		}
		want := topic.Match(filter, name)
		got := false
		for _, s := range FilterSubjects(filter) {
			got = got || natsMatch(subj, s)
		}
		if got != want {
			t.Fatalf("filter %q, topic %q: NATS subjects %q match %v, MQTT %v", filter, name, FilterSubjects(filter), got, want)
		}
	})
}
