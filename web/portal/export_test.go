package portal

// RoutePatterns lists the patterns of the signed-in routes (for the
// tests that must cover every POST).
func RoutePatterns() []string {
	var out []string
	for _, r := range (&Portal{}).routeTable() {
		out = append(out, r.pattern)
	}
	return out
}
