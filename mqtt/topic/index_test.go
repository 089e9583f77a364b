package topic

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// hit is one call of the Match callback.
type hit struct {
	key, val, group string
}

// collect returns the calls Index.Match makes for name, sorted.
func collect(ix *Index[string, string], name string) []hit {
	var hits []hit
	ix.Match(name, func(k, v, g string) { hits = append(hits, hit{k, v, g}) })
	slices.SortFunc(hits, func(a, b hit) int {
		return strings.Compare(a.key+"\x00"+a.val+"\x00"+a.group, b.key+"\x00"+b.val+"\x00"+b.group)
	})
	return hits
}

// nodeCount returns how many trie nodes the index holds besides the shard roots. It walks
// with an explicit stack: fuzzed filters can be tens of thousands of levels deep.
func nodeCount[K comparable, V any](ix *Index[K, V]) int {
	stack := []*node[K, V]{ix.wild.root}
	for i := range ix.shards {
		stack = append(stack, ix.shards[i].root)
	}
	total := -len(stack)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		total++
		for _, c := range n.children {
			stack = append(stack, c)
		}
		if n.plus != nil {
			stack = append(stack, n.plus)
		}
		if n.hash != nil {
			stack = append(stack, n.hash)
		}
	}
	return total
}

func TestIndexMatchTable(t *testing.T) {
	for _, tt := range matchTests {
		ix := NewIndex[string, string]()
		ix.Subscribe(tt.filter, "k", "plain")
		ix.Subscribe("$share/g/"+tt.filter, "k", "shared")
		got := collect(ix, tt.name)
		var want []hit
		if tt.want {
			want = []hit{{"k", "plain", ""}, {"k", "shared", "g"}}
		}
		if !slices.Equal(got, want) {
			t.Errorf("filter %q name %q: Match reported %v, want %v", tt.filter, tt.name, got, want)
		}
	}
}

func TestIndexSubscribeReplaceUnsubscribe(t *testing.T) {
	ix := NewIndex[string, string]()
	if ix.Subscribe("a/+", "s1", "v1") {
		t.Error("first Subscribe reported a replacement")
	}
	if !ix.Subscribe("a/+", "s1", "v2") {
		t.Error("second Subscribe of the same key and filter did not report a replacement")
	}
	if ix.Subscribe("a/+", "s2", "v3") {
		t.Error("Subscribe of another key reported a replacement")
	}
	if ix.Subscribe("$share/g/a/+", "s1", "v4") {
		t.Error("shared Subscribe on a filter the key holds unshared reported a replacement")
	}
	if ix.Subscribe("$share/h/a/+", "s1", "v5") {
		t.Error("Subscribe to a second group reported a replacement")
	}
	if !ix.Subscribe("$share/g/a/+", "s1", "v6") {
		t.Error("shared re-Subscribe did not report a replacement")
	}
	if got := ix.Len(); got != 4 {
		t.Errorf("Len = %d, want 4", got)
	}
	want := []hit{{"s1", "v2", ""}, {"s1", "v5", "h"}, {"s1", "v6", "g"}, {"s2", "v3", ""}}
	if got := collect(ix, "a/b"); !slices.Equal(got, want) {
		t.Errorf("Match = %v, want %v", got, want)
	}

	if !ix.Unsubscribe("a/+", "s1") {
		t.Error("Unsubscribe of an existing subscription returned false")
	}
	if ix.Unsubscribe("a/+", "s1") {
		t.Error("second Unsubscribe returned true")
	}
	if ix.Unsubscribe("a/b", "s2") || ix.Unsubscribe("a/+/c", "s2") || ix.Unsubscribe("$share/x/a/+", "s1") {
		t.Error("Unsubscribe of a filter never subscribed returned true")
	}
	if ix.Unsubscribe("$share/g/a/+", "s2") {
		t.Error("Unsubscribe of a non-member from a group returned true")
	}
	want = []hit{{"s1", "v5", "h"}, {"s1", "v6", "g"}, {"s2", "v3", ""}}
	if got := collect(ix, "a/b"); !slices.Equal(got, want) {
		t.Errorf("after Unsubscribe, Match = %v, want %v", got, want)
	}
	for _, f := range []string{"$share/g/a/+", "$share/h/a/+"} {
		if !ix.Unsubscribe(f, "s1") {
			t.Errorf("Unsubscribe(%q) returned false", f)
		}
	}
	if !ix.Unsubscribe("a/+", "s2") {
		t.Error("Unsubscribe of s2 returned false")
	}
	if got := ix.Len(); got != 0 {
		t.Errorf("Len = %d after removing everything, want 0", got)
	}
	if got := collect(ix, "a/b"); len(got) != 0 {
		t.Errorf("empty index matched %v", got)
	}
	if n := nodeCount(ix); n != 0 {
		t.Errorf("empty index still holds %d trie nodes", n)
	}
}

func TestIndexInvalidFilterIgnored(t *testing.T) {
	ix := NewIndex[string, string]()
	for _, f := range []string{"", "a/#/b", "a+", "$share//a", "$share/g", "a\x00"} {
		if ix.Subscribe(f, "k", "v") {
			t.Errorf("Subscribe(%q) reported a replacement", f)
		}
		if ix.Unsubscribe(f, "k") {
			t.Errorf("Unsubscribe(%q) returned true", f)
		}
	}
	if ix.Len() != 0 || nodeCount(ix) != 0 {
		t.Errorf("invalid filters were stored: Len %d, %d nodes", ix.Len(), nodeCount(ix))
	}
}

func TestIndexSharedRoundRobin(t *testing.T) {
	ix := NewIndex[string, int]()
	for _, k := range []string{"m1", "m2", "m3"} {
		ix.Subscribe("$share/workers/jobs/+", k, 0)
	}
	ix.Subscribe("jobs/+", "observer", 0)
	counts := map[string]int{}
	for i := range 300 {
		ix.Match(fmt.Sprintf("jobs/%d", i), func(k string, _ int, g string) {
			counts[k+"/"+g]++
		})
	}
	want := map[string]int{"m1/workers": 100, "m2/workers": 100, "m3/workers": 100, "observer/": 300}
	if !mapsEqual(counts, want) {
		t.Errorf("deliveries = %v, want %v", counts, want)
	}

	// A member that leaves stops receiving; the others share its load.
	ix.Unsubscribe("$share/workers/jobs/+", "m2")
	clear(counts)
	for range 100 {
		ix.Match("jobs/x", func(k string, _ int, g string) { counts[k+"/"+g]++ })
	}
	want = map[string]int{"m1/workers": 50, "m3/workers": 50, "observer/": 100}
	if !mapsEqual(counts, want) {
		t.Errorf("after m2 left, deliveries = %v, want %v", counts, want)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestIndexSharedGroupsAreIndependent(t *testing.T) {
	ix := NewIndex[string, string]()
	ix.Subscribe("$share/g/a/#", "k1", "v")
	ix.Subscribe("$share/g/a/+", "k2", "v") // same group, other filter: a separate shared subscription
	ix.Subscribe("$share/h/a/#", "k3", "v")
	want := []hit{{"k1", "v", "g"}, {"k2", "v", "g"}, {"k3", "v", "h"}}
	if got := collect(ix, "a/b"); !slices.Equal(got, want) {
		t.Errorf("Match = %v, want %v", got, want)
	}
}

func TestIndexOverlappingFiltersEachReported(t *testing.T) {
	ix := NewIndex[string, string]()
	filters := []string{"a/b", "a/+", "a/#", "+/b", "#", "+/+", "$share/g/a/b"}
	for _, f := range filters {
		ix.Subscribe(f, "k", f)
	}
	ix.Subscribe("a/c", "k", "a/c") // does not match
	got := collect(ix, "a/b")
	var want []hit
	for _, f := range filters {
		g := ""
		if strings.HasPrefix(f, "$share/") {
			g = "g"
		}
		want = append(want, hit{"k", f, g})
	}
	slices.SortFunc(want, func(a, b hit) int { return strings.Compare(a.val, b.val) })
	slices.SortFunc(got, func(a, b hit) int { return strings.Compare(a.val, b.val) })
	if !slices.Equal(got, want) {
		t.Errorf("Match = %v, want %v", got, want)
	}
}

func TestIndexDollarNames(t *testing.T) {
	ix := NewIndex[string, string]()
	for _, f := range []string{"#", "+/monitor/#", "$SYS/#", "$SYS/+/clients", "$share/g/#", "$share/g/$SYS/#"} {
		ix.Subscribe(f, f, "")
	}
	want := []hit{{"$SYS/#", "", ""}, {"$SYS/+/clients", "", ""}, {"$share/g/$SYS/#", "", "g"}}
	if got := collect(ix, "$SYS/monitor/clients"); !slices.Equal(got, want) {
		t.Errorf("Match($SYS/monitor/clients) = %v, want %v", got, want)
	}
	want = []hit{{"#", "", ""}, {"$share/g/#", "", "g"}, {"+/monitor/#", "", ""}}
	if got := collect(ix, "SYS/monitor/clients"); !slices.Equal(got, want) {
		t.Errorf("Match(SYS/monitor/clients) = %v, want %v", got, want)
	}
}

func TestIndexPrunesEmptyNodes(t *testing.T) {
	ix := NewIndex[string, string]()
	ix.Subscribe("a/b", "k", "")
	ix.Subscribe("a/b/c/d", "k", "")
	ix.Subscribe("a/+/#", "k", "")
	ix.Unsubscribe("a/b/c/d", "k")
	if n := nodeCount(ix); n != 4 { // a, a/b, a/+, a/+/#
		t.Errorf("after removing a/b/c/d: %d nodes, want 4", n)
	}
	ix.Unsubscribe("a/+/#", "k")
	if n := nodeCount(ix); n != 2 {
		t.Errorf("after removing a/+/#: %d nodes, want 2", n)
	}
	ix.Unsubscribe("a/b", "k")
	if n := nodeCount(ix); n != 0 {
		t.Errorf("after removing everything: %d nodes, want 0", n)
	}

	// Churn through many filters and sets large enough to switch to a position map.
	for i := range 1000 {
		ix.Subscribe(fmt.Sprintf("t%d/dev/+/x", i%7), fmt.Sprintf("k%d", i), "")
		ix.Subscribe(fmt.Sprintf("$share/g/t%d/#", i%5), fmt.Sprintf("k%d", i), "")
	}
	if got := ix.Len(); got != 2000 {
		t.Errorf("Len = %d, want 2000", got)
	}
	for i := range 1000 {
		ix.Unsubscribe(fmt.Sprintf("t%d/dev/+/x", i%7), fmt.Sprintf("k%d", i))
		ix.Unsubscribe(fmt.Sprintf("$share/g/t%d/#", i%5), fmt.Sprintf("k%d", i))
	}
	if ix.Len() != 0 || nodeCount(ix) != 0 {
		t.Errorf("after churn: Len %d, %d nodes; want 0, 0", ix.Len(), nodeCount(ix))
	}
}

func TestIndexLargeSubscriberSet(t *testing.T) {
	ix := NewIndex[int, int]()
	const n = 50
	for k := range n {
		ix.Subscribe("a", k, k)
	}
	for k := 0; k < n; k += 2 {
		if !ix.Unsubscribe("a", k) {
			t.Fatalf("Unsubscribe key %d returned false", k)
		}
	}
	for k := 1; k < n; k += 2 {
		if !ix.Subscribe("a", k, -k) {
			t.Fatalf("re-Subscribe key %d did not report a replacement", k)
		}
	}
	got := map[int]int{}
	ix.Match("a", func(k, v int, _ string) { got[k] = v })
	if len(got) != n/2 {
		t.Errorf("matched %d keys, want %d", len(got), n/2)
	}
	for k, v := range got {
		if k%2 == 0 || v != -k {
			t.Errorf("key %d has value %d, want an odd key with value %d", k, v, -k)
		}
	}
}

func TestIndexCopiesFilterStrings(t *testing.T) {
	ix := NewIndex[string, string]()
	buf := []byte("$share/grp/acct/dev")
	filter := unsafe.String(&buf[0], len(buf)) // aliases buf, as a packet buffer would
	ix.Subscribe(filter, "k", "v")
	copy(buf, "$share/xxx/xxxx/xxx") // the buffer is reused
	want := []hit{{"k", "v", "grp"}}
	if got := collect(ix, "acct/dev"); !slices.Equal(got, want) {
		t.Errorf("Match after buffer reuse = %v, want %v", got, want)
	}
}

func TestIndexMatchDoesNotAllocate(t *testing.T) {
	ix := NewIndex[string, int]()
	ix.Subscribe("acct/dev1/state/#", "s1", 1)
	ix.Subscribe("acct/+/state/+", "s2", 2)
	ix.Subscribe("$share/g/acct/#", "s3", 3)
	ix.Subscribe("$share/g/acct/#", "s4", 4)
	ix.Subscribe("+/+/state/#", "s5", 5)
	n := 0
	fn := func(string, int, string) { n++ }
	allocs := testing.AllocsPerRun(100, func() { ix.Match("acct/dev1/state/temp", fn) })
	if allocs != 0 {
		t.Errorf("Index.Match allocates %v times per call, want 0", allocs)
	}
	if n != 101*4 { // AllocsPerRun runs the function once more as a warm-up
		t.Errorf("callback ran %d times, want %d", n, 101*4)
	}
}

// TestIndexConcurrent runs Subscribe, Unsubscribe and Match together; run it with -race.
func TestIndexConcurrent(t *testing.T) {
	ix := NewIndex[string, int]()
	ix.Subscribe("acct0/#", "fixed", 0)
	filters := []string{"acct%d/dev/+", "acct%d/#", "+/dev/x", "#", "$share/g/acct%d/dev/x", "$share/g/+/dev/#"}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			key := fmt.Sprintf("writer%d", w)
			for i := range 500 {
				f := filters[i%len(filters)]
				if strings.Contains(f, "%d") {
					f = fmt.Sprintf(f, i%3)
				}
				ix.Subscribe(f, key, i)
				if i%2 == 1 {
					ix.Unsubscribe(f, key)
				}
			}
			// Remove whatever this writer still holds.
			for i := range 500 {
				f := filters[i%len(filters)]
				if strings.Contains(f, "%d") {
					f = fmt.Sprintf(f, i%3)
				}
				ix.Unsubscribe(f, key)
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for i := range 2000 {
				fixed := 0
				ix.Match(fmt.Sprintf("acct%d/dev/x", i%3), func(k string, _ int, _ string) {
					if k == "fixed" {
						fixed++
					}
				})
				want := 0
				if i%3 == 0 {
					want = 1
				}
				if fixed != want {
					t.Errorf("fixed subscription reported %d times for acct%d, want %d", fixed, i%3, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := ix.Len(); got != 1 {
		t.Errorf("Len = %d after writers cleaned up, want 1", got)
	}
	if n := nodeCount(ix); n != 2 { // acct0, acct0/#
		t.Errorf("%d trie nodes left, want 2", n)
	}
}
