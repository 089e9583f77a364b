package history_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq/history"
	"github.com/fleetmq/fleetmq/mqtt/topic"
)

// FuzzFilterRegex: the regular expression a history query uses for an MQTT
// filter matches exactly the platform topics of the account that the
// broker's reference matcher matches, and never a topic of another account.
func FuzzFilterRegex(f *testing.F) {
	for _, s := range [][2]string{
		{accA + "/+/state/#", accA + "/c1/state/x"},
		{"#", accA + "/c1/state"},
		{"+/c1/#", accA + "/c1"},
		{accA + "/c.1/+", accA + "/cx1/a"},
		{accA + "/c1/a//b", accA + "/c1/a//b"},
		{accA + "/+/+", accB + "/c1/x"},
		{accA + "/(a|b)*/#", accA + "/aaa/x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, filter, name string) {
		re, client, err := history.FilterRegex(accA, filter)
		if err != nil {
			return
		}
		rx, err := regexp.Compile(re)
		if err != nil {
			t.Fatalf("filter %q gave an invalid expression %q: %v", filter, re, err)
		}
		if topic.ValidateName(name) != nil {
			return
		}
		got := rx.MatchString(name)
		// The reference: the filter with a first-level wildcard standing
		// for the account, matched only against the account's topics.
		ref := filter
		switch {
		case ref == "#":
			ref = accA + "/#"
		case strings.HasPrefix(ref, "+/"), ref == "+":
			ref = accA + ref[1:]
		case strings.HasPrefix(ref, "#"):
			ref = accA + "/#"
		}
		want := topic.Match(ref, name) && strings.HasPrefix(name+"/", accA+"/")
		if got != want {
			t.Fatalf("filter %q (expression %q) on %q: %v, reference %v", filter, re, name, got, want)
		}
		if got && client != "" && !strings.HasPrefix(name, accA+"/"+client+"/") && name != accA+"/"+client {
			t.Fatalf("filter %q names client %q but matched %q", filter, client, name)
		}
	})
}
