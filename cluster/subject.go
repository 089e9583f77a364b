package cluster

import (
	"strings"
)

// subjectPrefix starts the subject of every message the nodes exchange.
const subjectPrefix = "fleetmq.m"

// longSubject carries the messages whose topic's subject would pass
// maxSubject (NATS refuses a protocol line longer than its
// max_control_line, 4 KiB by default, and closes the connection). Every
// node subscribes to it, and each shared subscription's queue group too:
// a filter with wildcards, short or long, may match a long topic. The
// node's subscription index sorts out what each of its sessions gets.
const longSubject = "fleetmq.long"

// maxSubject is the longest subject used as is.
const maxSubject = 3 << 10

// Subject returns the NATS subject of an MQTT topic: the prefix, then one
// token per topic level. A NATS token cannot be empty or hold '.', '*',
// '>' or white space, all of which an MQTT level may; those bytes (and
// '%', the escape itself) are written as %XX, and an empty level is a
// lone '%', which no escaped level can be. Two topics have the same
// subject only if they are the same topic.
func Subject(topic string) string {
	if s := subject(topic); len(s) <= maxSubject {
		return s
	}
	return longSubject
}

func subject(topic string) string {
	var b strings.Builder
	b.Grow(len(subjectPrefix) + 1 + len(topic) + 8)
	b.WriteString(subjectPrefix)
	for level := range strings.SplitSeq(topic, "/") {
		b.WriteByte('.')
		writeToken(&b, level)
	}
	return b.String()
}

// FilterSubjects returns the NATS subjects whose union matches what the
// MQTT filter matches: '+' becomes '*', and a final '#' becomes '>' plus
// the parent level itself ("a/#" matches "a" too; NATS "a.>" does not).
// A leading wildcard of MQTT does not match a topic starting with '$';
// the subjects here do, and the node's own subscription index, which
// decides every delivery, leaves those out.
func FilterSubjects(filter string) []string {
	subs := filterSubjects(filter)
	short := subs[:0]
	for _, s := range subs {
		if len(s) <= maxSubject {
			short = append(short, s)
		}
	}
	if len(short) == 0 {
		// Every topic it matches is long: on longSubject, which every
		// node hears anyway.
		return []string{longSubject}
	}
	return short
}

func filterSubjects(filter string) []string {
	var b strings.Builder
	b.WriteString(subjectPrefix)
	levels := strings.Split(filter, "/")
	for i, level := range levels {
		switch {
		case level == "#" && i == len(levels)-1:
			parent := b.String()
			if i == 0 {
				// "#" alone: every topic ("fleetmq.m.>" has at least one level).
				return []string{parent + ".>"}
			}
			return []string{parent, parent + ".>"}
		case level == "+":
			b.WriteString(".*")
		default:
			b.WriteByte('.')
			writeToken(&b, level)
		}
	}
	return []string{b.String()}
}

const hexDigits = "0123456789ABCDEF"

func writeToken(b *strings.Builder, level string) {
	if level == "" {
		b.WriteByte('%')
		return
	}
	for i := 0; i < len(level); i++ {
		c := level[i]
		switch c {
		case '.', '*', '>', '%', ' ', '\t', '\r', '\n', '\f', '\v', 0:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		default:
			b.WriteByte(c)
		}
	}
}
