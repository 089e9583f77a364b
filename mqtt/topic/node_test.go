package topic

import (
	"math/rand/v2"
	"testing"
)

// TestSetAgainstMap drives a set through both its scanning and its position-map sizes
// and compares it with a plain map after every step.
func TestSetAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var s set[int, int]
	model := map[int]int{}
	for step := range 20_000 {
		k := r.IntN(40)
		if r.IntN(2) == 0 {
			_, had := model[k]
			if got := s.put(k, step); got != had {
				t.Fatalf("step %d: put(%d) replaced = %v, want %v", step, k, got, had)
			}
			model[k] = step
		} else {
			_, had := model[k]
			if got := s.remove(k); got != had {
				t.Fatalf("step %d: remove(%d) = %v, want %v", step, k, got, had)
			}
			delete(model, k)
		}
		if s.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, s.len(), len(model))
		}
		for i, e := range s.items {
			if v, ok := model[e.key]; !ok || v != e.val {
				t.Fatalf("step %d: item %d = %+v, model has %d (present %v)", step, i, e, v, ok)
			}
			if s.find(e.key) != i {
				t.Fatalf("step %d: find(%d) = %d, want %d", step, e.key, s.find(e.key), i)
			}
		}
		if (s.pos != nil) && len(s.pos) != len(s.items) {
			t.Fatalf("step %d: position map has %d keys for %d items", step, len(s.pos), len(s.items))
		}
	}
}
