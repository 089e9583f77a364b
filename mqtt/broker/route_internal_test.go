package broker

import (
	"math/rand/v2"
	"testing"
)

// TestRouterLink: link chains every session's non-shared matches from its
// first one, whatever their number and order (pairwise for a few, hashed
// for more), and leaves shared matches alone.
func TestRouterLink(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	big := new(routeScratch)
	for round := range 2000 {
		n := 1 + r.IntN(40)
		if round%10 == 0 {
			n = 1 + r.IntN(3000)
		}
		sessions := make([]*session, 1+r.IntN(n))
		for i := range sessions {
			sessions[i] = &session{}
		}
		want := map[*session][]int{}
		var ms []routeMatch
		for i := range n {
			ss := sessions[r.IntN(len(sessions))]
			x := routeMatch{sess: ss, next: -1, shared: r.IntN(10) == 0}
			ms = append(ms, x)
			if !x.shared {
				want[ss] = append(want[ss], i)
			}
		}
		link(ms, big)
		heads := 0
		seen := make([]bool, n)
		for i, x := range ms {
			if x.shared {
				if x.dup || x.next >= 0 {
					t.Fatalf("round %d: shared match %d linked", round, i)
				}
				continue
			}
			if x.dup {
				continue
			}
			heads++
			if want[x.sess][0] != i {
				t.Fatalf("round %d: match %d heads its session's chain, its first match is %d", round, i, want[x.sess][0])
			}
			k := 0
			for j := int32(i); j >= 0; j = ms[j].next {
				if ms[j].sess != x.sess || ms[j].shared || seen[j] {
					t.Fatalf("round %d: chain from %d reaches %d (another session's, or seen)", round, i, j)
				}
				seen[j] = true
				k++
			}
			if k != len(want[x.sess]) {
				t.Fatalf("round %d: chain from %d has %d matches, want %d", round, i, k, len(want[x.sess]))
			}
		}
		if heads != len(want) {
			t.Fatalf("round %d: %d chains for %d sessions", round, heads, len(want))
		}
	}
}
