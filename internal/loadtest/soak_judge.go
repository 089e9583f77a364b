package loadtest

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// How a soak run is judged: losses, duplicates, closes and memory.

// fail records a failed check.
func (r *SoakResult) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// judge turns the tally into failures.
func (r *SoakResult) judge() {
	if r.Lost > 0 {
		r.fail("%d QoS 1/2 deliveries lost (%s)", r.Lost, formatCounts(r.LostBy))
	}
	if r.DupBad > 0 {
		r.fail("%d duplicates the protocol does not allow", r.DupBad)
	}
	if r.QoSAbove > 0 {
		r.fail("%d copies delivered above the subscription's or the publish's QoS", r.QoSAbove)
	}
	if r.SessionLost > 0 {
		r.fail("%d persistent sessions were not present on resume", r.SessionLost)
	}
	if r.Unexplained > 0 {
		r.fail("%d connections closed without a stated reason", r.Unexplained)
	}
	if n := sumCounts(r.Unprovoked); n > 0 {
		r.fail("%d connections of well-behaved clients closed by the server (%s)", n, formatCounts(r.Unprovoked))
	}
	if r.PingTimeouts > 0 {
		r.fail("%d connections ended by their client: no PINGRESP within the keep alive", r.PingTimeouts)
	}
	if r.ConnectFailures > 0 {
		r.fail("%d connection attempts failed", r.ConnectFailures)
	}
	if r.Refused > 0 {
		r.fail("%d publishes or subscriptions refused", r.Refused)
	}
	if r.Owed == 0 {
		r.fail("no QoS 1/2 delivery was owed: the fleet did not run")
	}
}

// judgeCloses matches every connection's end with the server's account
// of it.
func (r *SoakResult) judgeCloses(led *ledger, log *serverLog) {
	r.ServerCloses, r.Provoked, r.Unprovoked = map[string]int{}, map[string]int{}, map[string]int{}
	led.mu.Lock()
	conns := append([]*connRecord(nil), led.conns...)
	led.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		end, code, detail, local, ended, provoked := c.end, c.code, c.detail, c.local, c.ended, c.provoked
		c.mu.Unlock()
		if detail == "connect failed" {
			continue
		}
		r.Connections++
		var sc *serverClose
		if log != nil && local != "" {
			sc = log.closeFor(local, ended)
		}
		reason := ""
		switch {
		case sc != nil && sc.by == "server":
			reason = sc.reason
		case end == endServerMsg:
			reason = v5CloseName(code)
		}
		who := fmt.Sprintf("%s %s (MQTT %s) from %s, connected %s", c.role, c.client, versionName(c.version), local, c.opened.Format("15:04:05.000"))
		switch {
		case reason == "session_taken_over" && end == endHarness:
			// The harness had closed it, and its next connection reached
			// the server before the close did.
			r.ClosedByHarness++
		case reason != "":
			r.ServerCloses[reason]++
			switch {
			case provoked == reason:
				r.Provoked[reason]++
			case provoked != "":
				r.fail("%s: closed by the server for %s, the canary provokes %s", who, reason, provoked)
			default:
				r.Unprovoked[reason]++
				if len(r.UnexplainedExamples) < 10 {
					r.UnexplainedExamples = append(r.UnexplainedExamples, fmt.Sprintf("%s: closed by the server (%s: %s)", who, reason, serverDetail(sc, detail)))
				}
			}
		case end == endHarness || end == endOpen:
			r.ClosedByHarness++
			if provoked != "" {
				r.fail("%s: the server did not close it (%s expected)", who, provoked)
			}
		case isPingTimeout(detail):
			r.PingTimeouts++
			if len(r.UnexplainedExamples) < 10 {
				r.UnexplainedExamples = append(r.UnexplainedExamples, fmt.Sprintf("%s: ended by the client at %s: %s", who, ended.Format("15:04:05.000"), detail))
			}
		default:
			r.Unexplained++
			if len(r.UnexplainedExamples) < 10 {
				server := "no server log line"
				if sc != nil {
					server = fmt.Sprintf("server: by=%s reason=%s %s", sc.by, sc.reason, sc.detail)
				} else if log == nil {
					server = "server log not read"
				}
				r.UnexplainedExamples = append(r.UnexplainedExamples, fmt.Sprintf("%s: ended %s: %s; %s",
					who, ended.Format("15:04:05.000"), detail, server))
			}
		}
	}
}

// isPingTimeout recognises the error with which paho.golang and
// paho.mqtt.golang end a connection whose PINGREQ went unanswered.
func isPingTimeout(detail string) bool {
	return strings.Contains(detail, "PINGRESP timed out") || strings.Contains(detail, "pingresp not received")
}

func serverDetail(sc *serverClose, clientDetail string) string {
	if sc != nil {
		return sc.detail
	}
	return clientDetail
}

// v5CloseName names a v5 DISCONNECT reason code as the broker's log does.
func v5CloseName(code byte) string {
	switch packet.ReasonCode(code) {
	case packet.KeepAliveTimeout:
		return "keepalive_timeout"
	case packet.ServerShuttingDown:
		return "server_shutdown"
	case packet.SessionTakenOver:
		return "session_taken_over"
	case packet.NotAuthorized:
		return "not_authorized"
	case packet.MalformedPacket:
		return "malformed_packet"
	case packet.PacketTooLarge:
		return "packet_too_large"
	case packet.QoSNotSupported:
		return "qos_not_allowed"
	}
	return fmt.Sprintf("disconnect_0x%02X", code)
}

func versionName(v byte) string {
	switch v {
	case 4:
		return "3.1.1"
	case 5:
		return "5"
	}
	return "none"
}

// judgeMemory compares the second half of the run with the first.
func (r *SoakResult) judgeMemory(cfg *SoakConfig, samples []soakSample, run time.Duration) {
	r.Samples = samples
	var first, second []soakSample
	for _, s := range samples {
		switch {
		case s.At < run/10 || s.At > run:
		case s.At < run/2:
			first = append(first, s)
		default:
			second = append(second, s)
		}
		if s.RSSKiB > 0 {
			if r.RSS[0] == 0 {
				r.RSS[0] = s.RSSKiB
			}
			r.RSS[1] = s.RSSKiB
			r.RSS[2] = max(r.RSS[2], s.RSSKiB)
		}
		r.Goroutines[1] = max(r.Goroutines[1], s.Goroutines)
	}
	med := func(ss []soakSample, get func(soakSample) float64) float64 {
		v := make([]float64, 0, len(ss))
		for _, s := range ss {
			v = append(v, get(s))
		}
		if len(v) == 0 {
			return 0
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	rss := func(s soakSample) float64 { return float64(s.RSSKiB) }
	anon := func(s soakSample) float64 { return float64(s.AnonKiB) }
	heap := func(s soakSample) float64 { return s.HeapBytes / (1 << 20) }
	r.RSSHalvesKiB = [2]int64{int64(med(first, rss)), int64(med(second, rss))}
	r.AnonHalvesKiB = [2]int64{int64(med(first, anon)), int64(med(second, anon))}
	r.HeapHalvesMiB = [2]float64{med(first, heap), med(second, heap)}
	if r.Goroutines[0] > 0 && r.Goroutines[2] > r.Goroutines[0]+goroutineSlack {
		r.fail("server goroutines did not come back down once every client left: %.0f, %.0f before the fleet came",
			r.Goroutines[2], r.Goroutines[0])
	}
	if r.RSS[0] == 0 {
		return // no process to measure
	}
	if len(first) < 3 || len(second) < 3 {
		r.fail("too few memory samples (%d, %d) to compare the halves of the run: lower -sample", len(first), len(second))
		return
	}
	r.RSSAllowedKiB = int64(float64(r.RSSHalvesKiB[0])*(1+cfg.RSSGrowth) + cfg.RSSSlackMiB*1024)
	if r.RSSHalvesKiB[1] > r.RSSAllowedKiB {
		r.fail("server RSS grew: median %d KiB in the second half against %d KiB in the first (at most %d KiB allowed)",
			r.RSSHalvesKiB[1], r.RSSHalvesKiB[0], r.RSSAllowedKiB)
	}
}
