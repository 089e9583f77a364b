package control

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// checkText records in f why a name or label cannot be kept: fewer than min
// or more than max characters, invalid UTF-8, or a character that does not
// print (a control character: NUL cannot even be stored in PostgreSQL
// text, and none of them displays in the portal or a terminal).
func checkText(f map[string]string, field, v string, min, max int) {
	n := utf8.RuneCountInString(v)
	switch {
	case n < min || n > max:
		if min > 0 {
			f[field] = fmt.Sprintf("must be %d-%d characters", min, max)
		} else {
			f[field] = fmt.Sprintf("must be at most %d characters", max)
		}
	case !printable(v):
		f[field] = "must be printable characters only (no control characters)"
	}
}

// printable reports whether s is valid UTF-8 of printable characters
// (letters, marks, numbers, punctuation, symbols and the ASCII space).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
