package behaviours

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/bench"
)

// page is where the behaviours live, from the repository root.
const page = "docs/behaviours.md"

var (
	// entryRE is one behaviour's line: number, sources, text, proofs.
	entryRE = regexp.MustCompile(`^- \*\*B([0-9]+)\*\* \(([^)]+)\) (.+) Proof: (.+?)\.?$`)
	// sourceRE is the form of each source a line names. The checklist has
	// 69 items; the brief, 10 numbered capabilities.
	sourceRE = regexp.MustCompile(`^(?:seed\schecklist ([0-9]+)|PRODUCT (?:capability (?:[1-9]|10)|shape|bad input|performance))$`)
	// funcProofRE names a test, fuzz target or benchmark in a test file.
	funcProofRE = regexp.MustCompile("^`([A-Za-z0-9_./-]+_test\\.go):((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)`$")
	// benchProofRE names a kiln bench scenario.
	benchProofRE = regexp.MustCompile("^`kiln bench --scenario ([a-z]+)`$")
	retiredRE    = regexp.MustCompile(`^Retired numbers: (.+)\.$`)
	// citeRE is a behaviour cited in a Go comment: B and digits as a word.
	citeRE = regexp.MustCompile(`\bB([0-9]+)\b`)
	// foreignRE finds the names a Go file must not use for where a
	// behaviour comes from: the specification's checklist and the
	// reference system. (Spelt so that this file does not match itself.)
	foreignRE = regexp.MustCompile(`(?i)seed\schecklist|k[i]ci`)
)

type entry struct {
	n      int
	line   int
	proofs []proof
}

type proof struct {
	file, fn string // a function in a test file
	scenario string // or a bench scenario
}

// TestBehavioursPageIsTrue checks docs/behaviours.md against the code.
func TestBehavioursPageIsTrue(t *testing.T) {
	root := moduleRoot(t)
	problems := check(root, bench.Scenarios)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) == 0 {
		entries, _, _ := parsePage(mustRead(t, filepath.Join(root, page)))
		if len(entries) < 10 {
			t.Fatalf("%s lists %d behaviours; the parser has lost its way", page, len(entries))
		}
	}
}

// The check itself catches each kind of mistake, on a small repository
// made for it.
func TestCheckCatchesEachMistake(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(page, strings.Join([]string{
		"Retired numbers: B9.",
		"- **B1** (PRODUCT shape) Good. Proof: `x/a_test.go:TestCites`, `kiln bench --scenario idle`.",
		"- **B2** (PRODUCT shape) Missing test. Proof: `x/a_test.go:TestGone`.",
		"- **B3** (PRODUCT shape) Uncited. Proof: `x/a_test.go:TestSilent`.",
		"- **B1** (PRODUCT performance) Again. Proof: `x/a_test.go:TestCites`.",
		"- **B4** (the moon) Bad source. Proof: `x/a_test.go:TestCites`.",
		"- **B5** (PRODUCT shape) No proof.",
		"- **B6** (PRODUCT shape) Unknown scenario. Proof: `kiln bench --scenario warp`.",
		"- **B9** (PRODUCT shape) Retired. Proof: `kiln bench --scenario idle`.",
		"- **B7** (PRODUCT shape) Bad proof. Proof: `x/a_test.go`.",
		"",
	}, "\n"))
	write("x/a_test.go", `package x

// TestCites proves B1 and B4.
func TestCites(t *testing.T) {}

// TestSilent cites nothing.
func TestSilent(t *testing.T) {}
`)
	write("x/b.go", "package x\n\n// B42: unknown. B9: retired. 0xB1 and B1x are not citations.\n// "+
		"Ki"+"CI said so.\nvar v = 1\n")
	write("x/testdata/c.go", "package x // B77 in testdata is not looked at\n")

	problems := strings.Join(check(root, []string{"idle"}), "\n")
	for _, want := range []string{
		"line 3: B2 names x/a_test.go:TestGone, which x/a_test.go does not declare",
		"line 4: x/a_test.go:TestSilent proves B3 but its doc comment does not cite B3",
		"line 5: B1 is used again (first on line 2)",
		`line 6: B4: "the moon" is not a source`,
		"line 7: a line that starts like a behaviour is not one",
		`line 8: B6 names the bench scenario "warp", which kiln bench does not have`,
		"line 9: B9 is retired",
		"line 10: B7: proof \"`x/a_test.go`\" is neither",
		"x/b.go:3: cites B42, which " + page + " does not list",
		"x/b.go:3: cites B9, which is retired",
		"x/b.go:4: names the specification's checklist or the reference system",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("the check does not report %q; it reports:\n%s", want, problems)
		}
	}
	if strings.Contains(problems, "B77") || strings.Contains(problems, "B1x") || strings.Contains(problems, "cites B1,") {
		t.Errorf("the check reports what is not a mistake:\n%s", problems)
	}
	if n := strings.Count(problems, "\n") + 1; n != 11 {
		t.Errorf("%d problems, want 11:\n%s", n, problems)
	}
}

// check returns every way the page and the Go files under root disagree.
func check(root string, scenarios []string) []string {
	text, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return []string{err.Error()}
	}
	entries, retired, problems := parsePage(text)
	listed := map[int]bool{}
	for _, e := range entries {
		listed[e.n] = true
	}
	type parsed struct {
		fns map[string]*ast.FuncDecl
		err error
	}
	files := map[string]parsed{}
	for _, e := range entries {
		for _, p := range e.proofs {
			if p.scenario != "" {
				if !slices.Contains(scenarios, p.scenario) {
					problems = append(problems, fmt.Sprintf("%s:line %d: B%d names the bench scenario %q, which kiln bench does not have",
						page, e.line, e.n, p.scenario))
				}
				continue
			}
			f, ok := files[p.file]
			if !ok {
				f.fns, f.err = funcs(filepath.Join(root, filepath.FromSlash(p.file)))
				files[p.file] = f
			}
			fn := f.fns[p.fn]
			switch {
			case f.err != nil:
				problems = append(problems, fmt.Sprintf("%s:line %d: B%d names %s:%s: %v", page, e.line, e.n, p.file, p.fn, f.err))
			case fn == nil:
				problems = append(problems, fmt.Sprintf("%s:line %d: B%d names %s:%s, which %s does not declare",
					page, e.line, e.n, p.file, p.fn, p.file))
			case !cites(fn.Doc.Text(), e.n):
				problems = append(problems, fmt.Sprintf("%s:line %d: %s:%s proves B%d but its doc comment does not cite B%d",
					page, e.line, p.file, p.fn, e.n, e.n))
			}
		}
	}
	return append(problems, citations(root, listed, retired)...)
}

// parsePage reads the behaviours and the retired numbers, and reports what
// does not follow the page's rules.
func parsePage(text []byte) (entries []entry, retired map[int]bool, problems []string) {
	retired = map[int]bool{}
	first := map[int]int{}
	for i, line := range strings.Split(string(text), "\n") {
		no := i + 1
		bad := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("%s:line %d: ", page, no)+fmt.Sprintf(format, args...))
		}
		if m := retiredRE.FindStringSubmatch(line); m != nil {
			if m[1] == "none" {
				continue
			}
			for _, s := range strings.Split(m[1], ", ") {
				n, err := strconv.Atoi(strings.TrimPrefix(s, "B"))
				if err != nil || !strings.HasPrefix(s, "B") {
					bad("%q is not a retired number", s)
					continue
				}
				retired[n] = true
			}
			continue
		}
		if !strings.HasPrefix(line, "- **B") {
			continue
		}
		m := entryRE.FindStringSubmatch(line)
		if m == nil {
			bad("a line that starts like a behaviour is not one: want - **B<n>** (<source>) <text>. Proof: `<file>:<Func>`, …")
			continue
		}
		n, _ := strconv.Atoi(m[1])
		e := entry{n: n, line: no}
		if at, dup := first[n]; dup {
			bad("B%d is used again (first on line %d)", n, at)
			continue
		}
		first[n] = no
		if retired[n] {
			bad("B%d is retired; give the behaviour a new number", n)
		}
		for _, s := range strings.Split(m[2], "; ") {
			sm := sourceRE.FindStringSubmatch(s)
			if sm == nil {
				bad("B%d: %q is not a source (the page's rules list the forms)", n, s)
				continue
			}
			if k, _ := strconv.Atoi(sm[1]); sm[1] != "" && (k < 1 || k > 69) {
				bad("B%d: the checklist has no item %d", n, k)
			}
		}
		for _, p := range strings.Split(m[4], ", ") {
			if fm := funcProofRE.FindStringSubmatch(p); fm != nil {
				e.proofs = append(e.proofs, proof{file: fm[1], fn: fm[2]})
			} else if bm := benchProofRE.FindStringSubmatch(p); bm != nil {
				e.proofs = append(e.proofs, proof{scenario: bm[1]})
			} else {
				bad("B%d: proof %q is neither `<file>_test.go:<Test|Fuzz|Benchmark…>` nor `kiln bench --scenario <name>`", n, p)
			}
		}
		entries = append(entries, e)
	}
	return entries, retired, problems
}

// funcs returns the top-level functions a Go file declares, by name.
func funcs(path string) (map[string]*ast.FuncDecl, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]*ast.FuncDecl{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
			out[fn.Name.Name] = fn
		}
	}
	return out, nil
}

func cites(comment string, n int) bool {
	for _, m := range citeRE.FindAllStringSubmatch(comment, -1) {
		if m[1] == strconv.Itoa(n) {
			return true
		}
	}
	return false
}

// citations checks every comment of every Go file under root (testdata and
// hidden directories aside): each cited number must be listed and not
// retired, and no file may name the checklist or the reference system.
func citations(root string, listed, retired map[int]bool) []string {
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if foreignRE.MatchString(line) {
				problems = append(problems, fmt.Sprintf("%s:%d: names the specification's checklist or the reference system; cite a B number of %s instead",
					rel, i+1, page))
			}
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, group := range f.Comments {
			for _, c := range group.List {
				for _, m := range citeRE.FindAllStringSubmatchIndex(c.Text, -1) {
					n, _ := strconv.Atoi(c.Text[m[2]:m[3]])
					line := fset.Position(c.Slash).Line + strings.Count(c.Text[:m[0]], "\n")
					switch {
					case retired[n]:
						problems = append(problems, fmt.Sprintf("%s:%d: cites B%d, which is retired", rel, line, n))
					case !listed[n]:
						problems = append(problems, fmt.Sprintf("%s:%d: cites B%d, which %s does not list", rel, line, n, page))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// moduleRoot is the directory holding go.mod, above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
