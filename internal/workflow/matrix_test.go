package workflow

import (
	"strings"
	"testing"
)

func variantNames(t *testing.T, body string) []string {
	t.Helper()
	w := mustParse(t, "m.yml", "on: push\njobs:\n  t:\n"+body+"    steps: [{run: x}]\n")
	var names []string
	for _, v := range w.Job("t").Variants {
		names = append(names, v.Name)
	}
	return names
}

// TestMatrixExpansion follows GitHub Actions' documented include/exclude
// examples: exclude first, then include extends every original combination
// it does not contradict, or adds a new one.
// Proves B15 (docs/behaviours.md).
func TestMatrixExpansion(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"one key", "    matrix: {go: [\"1.25\", \"1.26\"]}\n", []string{"t (1.25)", "t (1.26)"}},
		{"product, first key outermost", "    matrix: {os: [l, m], go: [a, b]}\n", []string{"t (l, a)", "t (l, b)", "t (m, a)", "t (m, b)"}},
		{"exclude on every key given", "    matrix: {os: [l, m], go: [a, b]}\n    exclude: [{os: m, go: a}]\n", []string{"t (l, a)", "t (l, b)", "t (m, b)"}},
		{"exclude on a subset", "    matrix: {os: [l, m], go: [a, b]}\n    exclude: [{os: m}]\n", []string{"t (l, a)", "t (l, b)"}},
		{"include extends matching", "    matrix: {fruit: [apple, pear], animal: [cat, dog]}\n    include: [{color: green}, {color: pink, animal: cat}, {fruit: apple, shape: circle}, {fruit: banana}, {fruit: banana, animal: cat}]\n",
			// GitHub's own example: docs "Example: Expanding configurations".
			[]string{"t (apple, cat, pink, circle)", "t (apple, dog, green, circle)", "t (pear, cat, pink)", "t (pear, dog, green)", "t (banana)", "t (banana, cat)"}},
		{"include adds back an excluded combination", "    matrix: {os: [l, m], go: [a, b]}\n    exclude: [{os: m, go: b}]\n    include: [{os: m, go: b, experimental: \"true\"}]\n",
			[]string{"t (l, a)", "t (l, b)", "t (m, a)", "t (m, b, true)"}},
		{"include only", "    include: [{target: web}, {target: api, port: \"80\"}]\n", []string{"t (web)", "t (api, 80)"}},
		{"later include overwrites an added value", "    matrix: {go: [a]}\n    include: [{extra: x}, {extra: y}]\n", []string{"t (a, y)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := variantNames(t, c.body)
			if strings.Join(got, " | ") != strings.Join(c.want, " | ") {
				t.Errorf("children:\n got %s\nwant %s", strings.Join(got, " | "), strings.Join(c.want, " | "))
			}
		})
	}
}

func TestMatrixKeptForScheduler(t *testing.T) {
	w := mustParse(t, "m.yml", "on: push\njobs:\n  t:\n    matrix: {go: [a, b]}\n    max_parallel: 1\n    fail_fast: false\n    steps: [{run: x}]\n  u:\n    matrix: {go: [a]}\n    steps: [{run: x}]\n")
	if m := w.Job("t").Matrix; m.MaxParallel != 1 || m.FailFast {
		t.Errorf("matrix = %+v", m)
	}
	if m := w.Job("u").Matrix; m.MaxParallel != 0 || !m.FailFast {
		t.Errorf("defaults = %+v, want no bound and fail_fast", m)
	}
	v := w.Job("t").Variants[1]
	if got, ok := v.Value("go"); !ok || got != "b" {
		t.Errorf("Value(go) = %q, %v", got, ok)
	}
	if _, ok := v.Value("nope"); ok {
		t.Error("Value of an unknown key")
	}
}

// The cap counts children after exclude and include: 16×17 = 272 is too
// many, but excluding 16 of them brings it to 256, which is allowed.
// Proves B15 (docs/behaviours.md).
func TestMatrixCapAfterExclude(t *testing.T) {
	var a, b []string
	for i := range 17 {
		a = append(a, string(rune('a'+i)))
	}
	for i := range 16 {
		b = append(b, string(rune('A'+i)))
	}
	body := "    matrix: {x: [" + strings.Join(a, ",") + "], y: [" + strings.Join(b, ",") + "]}\n    exclude: [{x: q}]\n"
	if n := len(variantNames(t, body)); n != 256 {
		t.Fatalf("%d children, want 256", n)
	}
}
