package fleetmq_test

import (
	"testing"

	"github.com/fleetmq/fleetmq"
)

func TestParsePlatformTopic(t *testing.T) {
	const acc = "0b6f5a6e-7d1c-4c33-9a43-1f2e3d4c5b6a"
	tests := []struct {
		topic string
		ok    bool
		class string
		sub   string
	}{
		{acc + "/dev1/state/summary", true, "state", "state/summary"},
		{acc + "/dev1/event/change", true, "event", "event/change"},
		{acc + "/dev1/telemetry/temp_probe", true, "telemetry", "telemetry/temp_probe"},
		{acc + "/dev1/sample/a/b/c", true, "sample", "sample/a/b/c"},
		{acc + "/dev1/state", false, "", ""},    // nothing after the class
		{acc + "/dev1/state/", false, "", ""},   // empty level after the class
		{acc + "/dev1/config/x", false, "", ""}, // unknown class
		{acc + "/dev1", false, "", ""},          // no subpath
		{acc + "//state/x", false, "", ""},      // empty client id
		{"/dev1/state/x", false, "", ""},        // empty account
		{acc + "/dev1/State/x", false, "", ""},  // classes are lower case
	}
	for _, tt := range tests {
		got, ok := fleetmq.ParsePlatformTopic(tt.topic)
		if ok != tt.ok || ok && (got.Class != tt.class || got.Subpath != tt.sub || got.AccountID != acc || got.ClientID != "dev1") {
			t.Errorf("ParsePlatformTopic(%q) = %+v, %v; want class %q subpath %q ok %v", tt.topic, got, ok, tt.class, tt.sub, tt.ok)
		}
	}
}
