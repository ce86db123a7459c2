package suggest

import (
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"go", "og", 1}, {"runs_on", "runs_no", 1}, {"steps", "step", 1},
		{"ca", "abc", 3}, // optimal string alignment: a swapped pair is not edited again
		{"matrix", "matrix", 0},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", c.b, c.a, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	keys := []string{"runs_on", "steps", "needs", "matrix", "boolean", "timeout_minutes"}
	for _, c := range []struct {
		word string
		cand []string
		want string
	}{
		// Workflow keys.
		{"runs-on", keys, "runs_on"}, // one replacement
		{"stpes", keys, "steps"},     // a swap
		{"Needs", keys, "needs"},     // case is ignored
		{"bool", keys, "boolean"},    // a prefix
		{"xyz", keys, ""},            // nothing near
		{"env", keys, ""},            // short words need near-exact matches
		{"steps", keys, ""},          // the word itself is no suggestion
		{"timeout_minuets", keys, "timeout_minutes"},
		// Expression contexts and fields.
		{"brnch", []string{"base_branch", "branch"}, "branch"},
		{"BRANCH", []string{"branch"}, "branch"},
		{"x", []string{"y", "xy"}, ""}, // replacing all of a word is no typo
		{"zzzzzz", []string{"number", "title"}, ""},
		{strings.Repeat("a", 100), []string{strings.Repeat("a", 99)}, ""}, // too long to be a typo
	} {
		if got := Closest(c.word, c.cand); got != c.want {
			t.Errorf("Closest(%q, %q) = %q, want %q", c.word, c.cand, got, c.want)
		}
	}
}
