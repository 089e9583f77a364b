package topic

import "strings"

// Covers reports whether every topic name matched by filter inner is also
// matched by filter outer (both valid, non-shared filters). A broker policy
// uses it to check a requested filter against the filters a client is
// granted. It compares the filters level by level, so it never reports a
// filter covered that is not, but it may miss a cover that only the whole
// name space shows: "+/#" matches every name "#" matches, yet
// Covers("+/#", "#") is false.
func Covers(outer, inner string) bool {
	top := true
	for {
		o, orest, omore := strings.Cut(outer, "/")
		i, irest, imore := strings.Cut(inner, "/")
		switch {
		case o == "#":
			// A leading wildcard does not match $-topics, so it cannot
			// cover a filter that names one.
			return !(top && strings.HasPrefix(i, "$"))
		case i == "#":
			return false
		case o == "+":
			if top && strings.HasPrefix(i, "$") {
				return false
			}
		case o != i:
			return false
		}
		top = false
		switch {
		case !omore && !imore:
			return true
		case !imore:
			// inner ends here; "x/#" also matches "x".
			return orest == "#"
		case !omore:
			return false
		}
		outer, inner = orest, irest
	}
}
