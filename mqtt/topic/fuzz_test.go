package topic

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// fuzzLevels is the alphabet filters are built from: few enough that fuzzed filters
// overlap often, with '$' and empty levels to exercise their rules.
var fuzzLevels = []string{"a", "b", "$x", "", "+", "#"}

// fuzzSub identifies one subscription in the model FuzzIndexMatch keeps.
type fuzzSub struct {
	group, inner, key string
}

// fuzzVal is the subscription data: the inner filter lets the checker tell shared
// subscriptions apart, the sequence number shows which Subscribe a value came from.
type fuzzVal struct {
	inner string
	seq   int
}

// FuzzIndexMatch applies a decoded series of Subscribe and Unsubscribe calls to an Index
// and to a plain map, then checks Index.Match against a brute-force loop over Match, and
// Covers against Match on every pair of the subscribed filters.
//
// Each byte of ops either appends a level (low 3 bits 0-5 index fuzzLevels) or ends the
// filter being built: low bits 6 subscribe, 7 unsubscribe; bits 3-4 choose one of four
// keys; bits 5-6 choose not shared, not shared, group g1 or group g2. Each byte of name
// is one level of the published name over "a", "b", "$x", "".
func FuzzIndexMatch(f *testing.F) {
	f.Add([]byte{0, 1, 6, 0, 4, 6 | 1<<3, 5, 6 | 2<<3, 0, 5, 6 | 2<<5}, []byte{0, 1})
	f.Add([]byte{2, 5, 6, 4, 6, 5, 6 | 3<<5, 5, 6 | 3<<5 | 1<<3, 5, 7 | 3<<5}, []byte{2, 0})
	f.Add([]byte{3, 4, 3, 6, 3, 5, 6, 0, 3, 1, 6 | 2<<5}, []byte{3, 3})
	f.Add([]byte{0, 6, 0, 6 | 1<<3, 0, 7, 0, 4, 5, 6}, []byte{0})
	f.Fuzz(func(t *testing.T, ops, nameBytes []byte) {
		if len(ops) > 256 || len(nameBytes) > 8 {
			return
		}
		ix := NewIndex[string, fuzzVal]()
		model := map[fuzzSub]fuzzVal{}
		var levels []string
		seq := 0
		apply := func(b byte) {
			filter := strings.Join(levels, "/")
			levels = levels[:0]
			key := fmt.Sprintf("k%d", b>>3&3)
			full := filter
			if g := b >> 5 & 3; g >= 2 {
				full = fmt.Sprintf("$share/g%d/%s", g-1, filter)
			}
			group, inner, _, err := ParseShare(full)
			if err != nil {
				if ix.Subscribe(full, key, fuzzVal{}) || ix.Unsubscribe(full, key) {
					t.Fatalf("invalid filter %q was accepted: %v", full, err)
				}
				return
			}
			id := fuzzSub{group, inner, key}
			_, had := model[id]
			if b&7 == 6 {
				seq++
				v := fuzzVal{inner, seq}
				if got := ix.Subscribe(full, key, v); got != had {
					t.Fatalf("Subscribe(%q, %s) replaced = %v, want %v", full, key, got, had)
				}
				model[id] = v
			} else {
				if got := ix.Unsubscribe(full, key); got != had {
					t.Fatalf("Unsubscribe(%q, %s) = %v, want %v", full, key, got, had)
				}
				delete(model, id)
			}
		}
		for _, b := range ops {
			if l := b & 7; l < 6 {
				levels = append(levels, fuzzLevels[l])
			} else {
				apply(b)
			}
		}
		if len(levels) > 0 {
			apply(6)
		}
		if got := ix.Len(); got != len(model) {
			t.Fatalf("Len = %d, model holds %d", got, len(model))
		}

		names := []string{fuzzName(nameBytes)}
		for i := range 4 { // and every name of one or two levels
			names = append(names, fuzzName([]byte{byte(i)}))
			for j := range 4 {
				names = append(names, fuzzName([]byte{byte(i), byte(j)}))
			}
		}
		for _, name := range names {
			if ValidateName(name) != nil {
				continue
			}
			checkFuzzMatch(t, ix, model, name)
		}
		checkFuzzCovers(t, model, names)

		for id := range model {
			full := id.inner
			if id.group != "" {
				full = "$share/" + id.group + "/" + id.inner
			}
			if !ix.Unsubscribe(full, id.key) {
				t.Fatalf("Unsubscribe(%q, %s) of a live subscription returned false", full, id.key)
			}
		}
		if ix.Len() != 0 || nodeCount(ix) != 0 {
			t.Fatalf("after removing everything: Len %d, %d trie nodes", ix.Len(), nodeCount(ix))
		}
	})
}

// fuzzName builds a topic name with one level per byte.
func fuzzName(b []byte) string {
	levels := make([]string, len(b))
	for i, c := range b {
		levels[i] = fuzzLevels[c%4]
	}
	return strings.Join(levels, "/")
}

// checkFuzzMatch compares Index.Match for name with Match over every subscription of the model.
func checkFuzzMatch(t *testing.T, ix *Index[string, fuzzVal], model map[fuzzSub]fuzzVal, name string) {
	t.Helper()
	var plain, wantPlain []fuzzSub // group is empty; inner and key identify the subscription
	shared := map[[2]string]int{}  // (group, inner) -> deliveries
	wantShared := map[[2]string]bool{}
	ix.Match(name, func(key string, v fuzzVal, group string) {
		id := fuzzSub{group, v.inner, key}
		if mv, ok := model[id]; !ok || mv != v {
			t.Errorf("name %q: reported %+v with %+v, model has %+v (present %v)", name, id, v, mv, ok)
		}
		if group == "" {
			plain = append(plain, id)
		} else {
			shared[[2]string{group, v.inner}]++
		}
	})
	for id := range model {
		if !Match(id.inner, name) {
			continue
		}
		if id.group == "" {
			wantPlain = append(wantPlain, id)
		} else {
			wantShared[[2]string{id.group, id.inner}] = true
		}
	}
	cmp := func(a, b fuzzSub) int {
		return strings.Compare(a.inner+"\x00"+a.key, b.inner+"\x00"+b.key)
	}
	slices.SortFunc(plain, cmp)
	slices.SortFunc(wantPlain, cmp)
	if !slices.Equal(plain, wantPlain) {
		t.Errorf("name %q: non-shared matches %v, want %v", name, plain, wantPlain)
	}
	for gf, n := range shared {
		if n != 1 || !wantShared[gf] {
			t.Errorf("name %q: shared %v delivered %d times, matches per Match: %v", name, gf, n, wantShared[gf])
		}
	}
	for gf := range wantShared {
		if shared[gf] == 0 {
			t.Errorf("name %q: shared %v matches but was not delivered", name, gf)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// checkFuzzCovers checks Covers against Match on the model's filters (a shared
// subscription's inner filter among them): when one covers another, every valid name of
// names that the inner one matches, the outer one matches too.
func checkFuzzCovers(t *testing.T, model map[fuzzSub]fuzzVal, names []string) {
	t.Helper()
	filters := map[string]bool{}
	for id := range model {
		filters[id.inner] = true
	}
	for outer := range filters {
		for inner := range filters {
			if !Covers(outer, inner) {
				continue
			}
			for _, name := range names {
				if ValidateName(name) == nil && Match(inner, name) && !Match(outer, name) {
					t.Fatalf("Covers(%q, %q), but name %q matches only the inner filter", outer, inner, name)
				}
			}
		}
	}
}

// FuzzValidate checks that validation never panics, that its answers agree with each
// other, and that any filter that validates can be subscribed and unsubscribed.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"a/b", "#", "+/+", "a/#/b", "$share/g/a", "$share//a", "$share/g", "$SYS/#", "a\x00", "\xff", "a+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nameErr := ValidateName(s)
		if nameErr != nil && !errors.Is(nameErr, ErrInvalidName) {
			t.Fatalf("ValidateName(%q) = %v, does not wrap ErrInvalidName", s, nameErr)
		}
		filterErr := ValidateFilter(s)
		group, inner, shared, shareErr := ParseShare(s)
		if (filterErr == nil) != (shareErr == nil) {
			t.Fatalf("ValidateFilter(%q) = %v but ParseShare error = %v", s, filterErr, shareErr)
		}
		if shared != strings.HasPrefix(s, "$share/") {
			t.Fatalf("ParseShare(%q) shared = %v", s, shared)
		}
		if filterErr != nil {
			if !errors.Is(filterErr, ErrInvalidFilter) && !errors.Is(filterErr, ErrInvalidShare) {
				t.Fatalf("ValidateFilter(%q) = %v, wraps no sentinel", s, filterErr)
			}
			if nameErr == nil && !shared {
				t.Fatalf("%q is a valid name but not a valid filter: %v", s, filterErr)
			}
			return
		}
		if shared {
			if group == "" || strings.ContainsAny(group, "/+#") || "$share/"+group+"/"+inner != s {
				t.Fatalf("ParseShare(%q) = group %q, inner %q", s, group, inner)
			}
			if err := validatePlain(inner); err != nil {
				t.Fatalf("inner filter %q of valid %q does not validate: %v", inner, s, err)
			}
		} else if inner != s || group != "" {
			t.Fatalf("ParseShare(%q) = group %q, inner %q for a non-shared filter", s, group, inner)
		}

		ix := NewIndex[string, int]()
		if ix.Subscribe(s, "k", 1) {
			t.Fatalf("first Subscribe(%q) reported a replacement", s)
		}
		if !ix.Subscribe(s, "k", 2) {
			t.Fatalf("second Subscribe(%q) did not report a replacement", s)
		}
		if ix.Len() != 1 {
			t.Fatalf("Len = %d after subscribing %q, want 1", ix.Len(), s)
		}
		if ValidateName(inner) == nil { // no wildcards: the filter matches its own text
			got := 0
			ix.Match(inner, func(k string, v int, g string) {
				if k != "k" || v != 2 || g != group {
					t.Errorf("Match(%q) reported %q, %d, %q", inner, k, v, g)
				}
				got++
			})
			if got != 1 || !Match(inner, inner) {
				t.Fatalf("filter %q: Index.Match of its own text reported %d times, Match = %v", s, got, Match(inner, inner))
			}
		}
		if !ix.Unsubscribe(s, "k") || ix.Unsubscribe(s, "k") {
			t.Fatalf("Unsubscribe(%q) did not remove exactly one subscription", s)
		}
		if ix.Len() != 0 || nodeCount(ix) != 0 {
			t.Fatalf("after Unsubscribe(%q): Len %d, %d nodes", s, ix.Len(), nodeCount(ix))
		}
	})
}
