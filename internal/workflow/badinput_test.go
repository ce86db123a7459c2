package workflow

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadInput feeds the front end what a stranger's repository may hold;
// each case must be a clear, positioned error, never a panic or a hang.
// Proves B74 (docs/behaviours.md).
func TestBadInput(t *testing.T) {
	billionLaughs := `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
	var deepBlock strings.Builder
	for i := range 40 {
		deepBlock.WriteString(strings.Repeat("  ", i) + "k:\n")
	}
	cases := []struct {
		name, src, want string
	}{
		{"too large", "on: push\n" + strings.Repeat("#", MaxFileSize), "1:1: the file is 1048585 bytes; a workflow file may be at most 1 MiB"},
		{"invalid utf-8", "on: push\njobs:\n  a: {steps: [{run: \"caf\xe9\"}]}\n", "3:25: invalid UTF-8 at byte offset 39"},
		{"tab indentation", "on: push\njobs:\n\ta: {steps: [{run: x}]}\n", "3:1: a tab is used for indentation"},
		{"tab after spaces", "on: push\njobs:\n  a:\n  \tsteps: [{run: x}]\n", "4:3: a tab is used for indentation"},
		{"billion laughs", billionLaughs, "2:8: YAML aliases (*a) are not supported"},
		{"merge key", "base: &b {x: 1}\nother:\n  <<: {y: 2}\n", "3:3: YAML merge keys (<<) are not supported"},
		{"deep flow nesting", "on: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + "\n", "the file nests deeper than 32 levels"},
		{"very deep flow nesting", "on: " + strings.Repeat("[", 20000) + "\n", "1:1: invalid YAML: exceeded max depth of 10000"},
		{"deep block nesting", deepBlock.String(), "the file nests deeper than 32 levels"},
		{"two documents", "on: push\njobs: {a: {steps: [{run: x}]}}\n---\non: tag\n", "3:1: a workflow file holds one YAML document"},
		{"custom tag", "on: !include other.yml\njobs: {a: {steps: [{run: x}]}}\n", "1:5: YAML tag !include is not supported"},
		{"binary tag", "on: push\nname: !!binary aGVsbG8=\njobs: {a: {steps: [{run: x}]}}\n", "2:7: YAML tag !!binary is not supported"},
		{"empty", "", "1:1: the file is empty"},
		{"only comments", "# nothing\n", "1:1: the file is empty"},
		{"null document", "~\n", "1:1: the file is empty"},
		{"scalar root", "hello\n", "1:1: a workflow file is a mapping"},
		{"unquoted colon", "on: push\njobs:\n  a:\n    steps:\n      - run: echo a: b\n", "5:1: invalid YAML: mapping values are not allowed in this context (a value containing \": \" must be quoted)"},
		{"bad indentation", "on: push\njobs:\n  a:\n    steps:\n  - run: x\n   b: 1\n", "invalid YAML:"},
		{"backtick", "on: push\nname: `x`\njobs: {a: {steps: [{run: x}]}}\n", "2:1: invalid YAML: found character that cannot start any token (a value starting with @, ` or % must be quoted)"},
		{"nul byte", "on: push\x00\n", "invalid YAML: control characters are not allowed"},
		{"non-string key", "on: push\njobs:\n  [a, b]: {steps: [{run: x}]}\n", "3:3: keys in jobs must be plain strings, not a list"},
		{"null key", "on: push\n~: 1\njobs: {a: {steps: [{run: x}]}}\n", "2:1: keys in the workflow must be plain strings, not nothing (null)"},
		{"unclosed bracket", "on: push\nname: [1, 2\njobs: {}\n", "2:1: invalid YAML: did not find expected ',' or ']' in the mapping or list that starts here"},
		{"unclosed quote", "on: push\nname: \"ci\njobs: {}\n", "invalid YAML:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := parseErrors(t, c.src)
			for _, e := range errs {
				if strings.Contains(e, c.want) {
					return
				}
			}
			t.Errorf("want an error containing %q, got:\n%s", c.want, strings.Join(errs, "\n"))
		})
	}
}

// Tabs inside values (a Makefile fragment in a block scalar, a tab in a
// quoted string) are content, not indentation.
func TestTabsInValuesAreFine(t *testing.T) {
	mustParse(t, "t.yml", "on: push\njobs:\n  a:\n    steps:\n      - run: |\n          printf 'a\\tb'\n          \techo indented-by-tab\n      - run: \"x\ty\"\n")
}

func TestLoadDir(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, ".kiln", "workflows")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	write := func(name, body string) { must(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)) }
	write("ci.yml", "on: push\njobs: {a: {steps: [{run: x}]}}\n")
	write("release.YAML", "on: tag\njobs: {a: {steps: [{run: x}]}}\n")
	write("README.md", "not a workflow")
	write("sub/ignored.yml", "garbage: [")
	write("broken.yaml", "on: push\njobs: {a: {needs: b, steps: [{run: x}]}}\n")
	write("dup.yml", "name: ci\non: push\njobs: {a: {steps: [{run: x}]}}\n")
	big, err := os.Create(filepath.Join(dir, "huge.yml"))
	must(t, err)
	must(t, big.Truncate(MaxFileSize+1)) // sparse: refused by size, never read
	must(t, big.Close())

	ws, err := LoadDir(root)
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err = %v, want an ErrorList", err)
	}
	var names []string
	for _, w := range ws {
		names = append(names, w.File)
	}
	if strings.Join(names, ",") != ".kiln/workflows/ci.yml,.kiln/workflows/release.YAML" {
		t.Errorf("valid workflows = %v", names)
	}
	got := list.Error()
	for _, want := range []string{
		`.kiln/workflows/broken.yaml:2:19: needs: job "b" does not exist`,
		`.kiln/workflows/dup.yml:1:1: workflow name "ci" is also used by .kiln/workflows/ci.yml`,
		".kiln/workflows/huge.yml:1:1: the file is 1048577 bytes; a workflow file may be at most 1 MiB",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ignored.yml") || strings.Contains(got, "README") {
		t.Errorf("read files it should not:\n%s", got)
	}
}

func TestLoadDirNoWorkflows(t *testing.T) {
	root := t.TempDir()
	if _, err := LoadDir(root); !errors.Is(err, ErrNoWorkflows) {
		t.Fatalf("missing dir: err = %v", err)
	}
	must(t, os.MkdirAll(filepath.Join(root, ".kiln", "workflows"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, ".kiln", "workflows", "notes.txt"), nil, 0o644))
	if _, err := LoadDir(root); !errors.Is(err, ErrNoWorkflows) {
		t.Fatalf("empty dir: err = %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
