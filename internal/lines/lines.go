// Package lines bounds work under way per tenant: each key (an account)
// has a line of its own with a fixed number of places, so that one
// tenant's burst of work waits behind itself, not in front of the others
// on a resource they share (database connections, a store's reads).
package lines

import (
	"context"
	"sync"
)

// Lines is a line per key, Per places each. The zero value is not ready:
// set Per (at least 1). Lines of keys no one is in are forgotten.
type Lines struct {
	Per int

	mu    sync.Mutex
	lines map[string]*line
}

type line struct {
	places chan struct{}
	users  int // goroutines in the line: holding a place or waiting
}

// Take waits for one of key's places, or for ctx to end (then it returns
// ctx's error). release gives the place back.
func (l *Lines) Take(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	if l.lines == nil {
		l.lines = make(map[string]*line)
	}
	ln := l.lines[key]
	if ln == nil {
		ln = &line{places: make(chan struct{}, max(l.Per, 1))}
		l.lines[key] = ln
	}
	ln.users++
	l.mu.Unlock()
	leave := func() {
		l.mu.Lock()
		if ln.users--; ln.users == 0 {
			delete(l.lines, key)
		}
		l.mu.Unlock()
	}
	select {
	case ln.places <- struct{}{}:
		return func() { <-ln.places; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
