package store

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kilnci/kiln"
)

// The parsed-key cache never holds more than its bound, however many
// distinct keys pass through it, and still answers every key correctly.
func TestKeyCacheIsBounded(t *testing.T) {
	c := requirementCache{max: 8}
	for i := range 100 {
		key := kiln.Requirement{RunsOn: []string{fmt.Sprintf("label-%d", i)}}.Key()
		r := c.get(key)
		if !slices.Equal(r.RunsOn, []string{fmt.Sprintf("label-%d", i)}) {
			t.Fatalf("key %q parsed as %+v", key, r)
		}
		if n := c.len(); n > 8 {
			t.Fatalf("after %d keys the cache holds %d, more than its bound 8", i+1, n)
		}
	}
	if requirements.max != maxCachedKeys {
		t.Fatalf("the process cache is bounded by %d, want %d", requirements.max, maxCachedKeys)
	}
}
