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

// SetChartScanBudget sets the most records a chart reads until the test
// ends.
func SetChartScanBudget(t interface{ Cleanup(func()) }, n int) {
	old := chartScanBudget.Swap(int64(n))
	t.Cleanup(func() { chartScanBudget.Store(old) })
}
