package topic

import "testing"

// matchTests are the examples of MQTT 5 section 4.7 plus edge cases around empty levels
// and '$' names. Both Match and Index.Match are checked against them.
var matchTests = []struct {
	filter, name string
	want         bool
}{
	// 4.7.1.2 multi-level wildcard
	{"sport/tennis/player1/#", "sport/tennis/player1", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/ranking", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true},
	{"sport/tennis/player1/#", "sport/tennis/player2", false},
	{"sport/tennis/player1/#", "sport/tennis", false},
	{"sport/#", "sport", true},
	{"#", "sport", true},
	{"#", "sport/tennis/player1", true},
	{"#", "/", true},
	// 4.7.1.3 single-level wildcard
	{"sport/tennis/+", "sport/tennis/player1", true},
	{"sport/tennis/+", "sport/tennis/player2", true},
	{"sport/tennis/+", "sport/tennis/player1/ranking", false},
	{"sport/+", "sport", false},
	{"sport/+", "sport/", true},
	{"+/tennis/#", "sport/tennis", true},
	{"+/tennis/#", "sport/tennis/player1", true},
	{"+/tennis/#", "sport/football", false},
	{"sport/+/player1", "sport/tennis/player1", true},
	{"sport/+/player1", "sport/tennis/player2", false},
	{"+/+", "/finance", true},
	{"/+", "/finance", true},
	{"+", "/finance", false},
	{"+", "finance", true},
	{"+/+", "a", false},
	{"+/+", "a/b/c", false},
	// 4.7.2 topics beginning with $
	{"#", "$SYS", false},
	{"#", "$SYS/monitor/Clients", false},
	{"+/monitor/Clients", "$SYS/monitor/Clients", false},
	{"+", "$SYS", false},
	{"$SYS/#", "$SYS/monitor/Clients", true},
	{"$SYS/#", "$SYS", true},
	{"$SYS/monitor/+", "$SYS/monitor/Clients", true},
	{"$SYS/+", "$SYS/monitor/Clients", false},
	{"a/+", "a/$x", true}, // '$' only matters in the first level
	{"a/#", "a/$x/y", true},
	// empty levels are real levels
	{"a//b", "a//b", true},
	{"a/+/b", "a//b", true},
	{"a/b", "a//b", false},
	{"a//b", "a/b", false},
	{"/", "/", true},
	{"+/+", "/", true},
	{"+", "/", false},
	{"/#", "/", true},
	{"/#", "/a/b", true},
	{"a/", "a", false},
	{"a", "a/", false},
	{"a/#", "a/", true},
	{"a/+", "a/", true},
	{"a/+/#", "a/b", true},
	{"a/+/#", "a", false},
	// literal
	{"a/b", "a/b", true},
	{"a/b", "a/bc", false},
	{"a/bc", "a/b", false},
	{"A/b", "a/b", false},
}

func TestMatch(t *testing.T) {
	for _, tt := range matchTests {
		if got := Match(tt.filter, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.filter, tt.name, got, tt.want)
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		Match("sport/+/player1/#", "sport/tennis/player1/score/wimbledon")
	})
	if allocs != 0 {
		t.Fatalf("Match allocates %v times per call, want 0", allocs)
	}
}
