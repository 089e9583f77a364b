package lines

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestLines: a key has at most Per holders at once; another key's place
// is free meanwhile; a wait ends with its context; empty lines go.
func TestLines(t *testing.T) {
	l := &Lines{Per: 2}
	ctx := context.Background()
	r1, _ := l.Take(ctx, "a")
	r2, _ := l.Take(ctx, "a")
	got := make(chan func(), 1)
	go func() {
		r, _ := l.Take(ctx, "a")
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("a third holder of a's line with two places")
	case <-time.After(50 * time.Millisecond): // the wait that must not end
	}
	rb, err := l.Take(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	rb()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Take(cctx, "a"); err == nil {
		t.Fatal("a wait whose context ended took a place")
	}
	r1()
	r3 := <-got
	r2()
	r3()
	l.mu.Lock()
	n := len(l.lines)
	l.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d lines kept with no one in them", n)
	}
	// Many at once: never more than Per.
	var mu sync.Mutex
	in, most := 0, 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			r, _ := l.Take(ctx, "c")
			mu.Lock()
			in++
			most = max(most, in)
			mu.Unlock()
			time.Sleep(time.Millisecond) // hold the place a moment
			mu.Lock()
			in--
			mu.Unlock()
			r()
		})
	}
	wg.Wait()
	if most > 2 {
		t.Fatalf("%d holders at once, Per 2", most)
	}
}
