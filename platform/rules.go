package platform

import (
	"strings"

	"github.com/fleetmq/fleetmq"
)

// StripPrefix removes a configured topic_prefix ("legacy/site") and its
// separator from a wire topic or filter. With no prefix configured it
// returns t unchanged; with one, t must carry it.
func StripPrefix(prefix, t string) (string, bool) {
	if prefix == "" {
		return t, true
	}
	if len(t) > len(prefix) && strings.HasPrefix(t, prefix) && t[len(prefix)] == '/' {
		return t[len(prefix)+1:], true
	}
	return "", false
}

// EffectiveQoS applies the platform's QoS rules (docs/design.md "QoS rules") to a
// published QoS on a topic class. poolTake is called only when a QoS 2 on
// state/ or event/ with the add-on active needs a unit of the daily pool; it
// reports whether one was available. demoted reports a QoS 2 lowered because
// the pool was used up.
func EffectiveQoS(published byte, class string, qos2AddOn bool, poolTake func() bool) (effective byte, demoted bool) {
	if published < 2 {
		return published, false
	}
	if !qos2AddOn || (class != fleetmq.ClassState && class != fleetmq.ClassEvent) {
		return 1, false
	}
	if poolTake() {
		return 2, false
	}
	return 1, true
}
