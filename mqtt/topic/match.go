package topic

// Match is the simple reference matcher: it reports whether the non-shared filter matches
// the topic name. '+' matches exactly one level, '#' the rest of the name including the
// parent level ("a/#" matches "a"), and a wildcard in the first level never matches a
// name starting with '$' (MQTT-4.7.2-1). Empty levels are real levels. Both arguments are
// assumed valid; Match does not allocate.
func Match(filter, name string) bool {
	if name != "" && name[0] == '$' {
		if first, _ := level(filter, 0); first == "+" || first == "#" {
			return false
		}
	}
	fi, ni := 0, 0
	for fi >= 0 {
		fl, fnext := level(filter, fi)
		if fl == "#" {
			return true
		}
		if ni < 0 {
			return false
		}
		nl, nnext := level(name, ni)
		if fl != "+" && fl != nl {
			return false
		}
		fi, ni = fnext, nnext
	}
	return ni < 0
}
