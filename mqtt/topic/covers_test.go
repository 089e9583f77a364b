package topic

import "testing"

// TestCovers: a filter covers another when it matches every name the other matches,
// judged level by level, with $-names out of reach of a leading wildcard.
func TestCovers(t *testing.T) {
	tests := []struct {
		outer, inner string
		want         bool
	}{
		{"A/#", "A/#", true},
		{"A/#", "A/dev/state/x", true},
		{"A/#", "A", true}, // "A/#" matches "A"
		{"A/#", "A/+/telemetry/#", true},
		{"A/#", "#", false},
		{"A/#", "+/#", false},
		{"A/#", "B/#", false},
		{"A/#", "+", false},
		{"A/+/state/#", "A/d1/state/x", true},
		{"A/+/state/#", "A/+/state/#", true},
		{"A/+/state/#", "A/d1/event/x", false},
		{"A/+/state/#", "A/#", false},
		{"A/d1/#", "A/+/state/x", false}, // + is wider than d1
		{"A/+", "A/x", true},
		{"A/+", "A/x/y", false},
		{"A/+", "A/#", false},
		{"A/x", "A/x", true},
		{"A/x", "A/x/y", false},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"#", "a/b", true},
		{"$SYS/#", "$SYS/x", true},
		{"+/#", "#", false}, // the same names, but not level by level
		{"+", "$SYS", false},
		{"#", "+", true},
		{"a/#", "a", true},
		{"a/+", "a", false},
		{"", "", true}, // an empty level is a level
		{"+", "", true},
		{"a//b", "a/+/b", false},
	}
	for _, tt := range tests {
		if got := Covers(tt.outer, tt.inner); got != tt.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tt.outer, tt.inner, got, tt.want)
		}
	}
}
