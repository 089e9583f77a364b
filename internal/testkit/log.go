package testkit

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
)

// LogSink collects what a component logs, as JSON lines, for tests that
// check the event log.
type LogSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// NewLog returns a debug-level JSON logger writing into a new sink.
func NewLog() (*slog.Logger, *LogSink) {
	s := &LogSink{}
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug})), s
}

// Write implements io.Writer.
func (s *LogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// String returns everything logged so far.
func (s *LogSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Lines returns the logged lines with message msg ("" for any) whose
// string attributes include every key, value pair of match.
func (s *LogSink) Lines(msg string, match ...string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || msg != "" && m["msg"] != msg {
			continue
		}
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			if v, _ := m[match[i]].(string); v != match[i+1] {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}
