package behaviours

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// namedPages are the pages whose citations of code must name code that
// exists: each backticked pkg.Name or pkg.Type.Member.
var namedPages = []string{"docs/lifecycle.md"}

// codeRE is a citation of code on a page, in backticks:
//
//	`pkg.Name`         a function, type, variable or constant of pkg
//	`pkg.Type.Member`  a method of Type (value or pointer receiver), a
//	                   method of the interface Type, or a field of the
//	                   struct Type
//	`pkg.(*Type).Method` the same as pkg.Type.Method
//
// pkg is the package's name as its files declare it (kiln for the module
// root). A backticked word.word whose first word is no package's name is
// not a citation (a config key such as queue.unroutable_grace, a column
// such as jobs.queued_at) unless the second word is exported, which
// only code is.
var codeRE = regexp.MustCompile("`([a-z][a-z0-9]*)\\.(?:\\(\\*([A-Za-z_][A-Za-z0-9_]*)\\)\\.([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_]*)(?:\\.([A-Za-z_][A-Za-z0-9_]*))?)`")

// TestPagesNameOnlyCodeThatExists checks every citation of code on the
// named pages against the source: a renamed or misspelt function fails the
// test, naming the page and line.
func TestPagesNameOnlyCodeThatExists(t *testing.T) {
	root := moduleRoot(t)
	idx, err := indexCode(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range namedPages {
		cited, problems := checkCodeNames(idx, page, mustRead(t, filepath.Join(root, page)))
		for _, p := range problems {
			t.Error(p)
		}
		if cited < 40 {
			t.Errorf("%s cites %d names of code; the check has lost its way", page, cited)
		}
	}
}

// The check itself catches a misspelt function, method, field and package,
// on a small repository made for it, and lets the rest through.
func TestCodeNameCheckCatchesMisspellings(t *testing.T) {
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
	write("internal/pump/pump.go", `package pump

type Pump struct{ Rate int }

type Valve interface{ Open() error }

func New() *Pump { return &Pump{} }

func (p *Pump) Start() {}

func (p Pump) stop() {}

type cache[K comparable] struct{}

func (c *cache[K]) get() {}

const Max = 3
`)
	write("internal/pump/pump_test.go", "package pump\n\nfunc helperOnlyInTests() {}\n")
	write("internal/pump/testdata/x.go", "package ignored\n\nfunc Hidden() {}\n")
	idx, err := indexCode(root)
	if err != nil {
		t.Fatal(err)
	}
	page := strings.Join([]string{
		"Good: `pump.New`, `pump.Pump.Start`, `pump.(*Pump).Start`, `pump.Pump.stop`, `pump.Pump.Rate`,",
		"`pump.Valve.Open`, `pump.cache.get`, `pump.Max`, `pump.Pump`; not citations: `queue.unroutable_grace`, `kiln run`.",
		"Bad: `pump.Nwe`, `pump.Pump.Strat`, `pump.Valve.Close`, `pump.helperOnlyInTests`, `pmup.New`, `ignored.Hidden`.",
	}, "\n")
	cited, problems := checkCodeNames(idx, "docs/x.md", []byte(page))
	got := strings.Join(problems, "\n")
	for _, want := range []string{
		"docs/x.md:3: `pump.Nwe`: package pump declares no Nwe",
		"docs/x.md:3: `pump.Pump.Strat`: pump.Pump has no method or field Strat",
		"docs/x.md:3: `pump.Valve.Close`: pump.Valve has no method or field Close",
		"docs/x.md:3: `pump.helperOnlyInTests`: package pump declares no helperOnlyInTests",
		"docs/x.md:3: `pmup.New`: no package is named pmup",
		"docs/x.md:3: `ignored.Hidden`: no package is named ignored",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check does not report %q; it reports:\n%s", want, got)
		}
	}
	if len(problems) != 6 || cited != 15 {
		t.Errorf("%d problems of %d citations, want 6 of 15:\n%s", len(problems), cited, got)
	}
}

// codeIndex is what the non-test Go files under a root declare, by package
// name.
type codeIndex map[string]*pkgDecls

type pkgDecls struct {
	dirs    []string
	names   map[string]bool            // top-level functions, types, variables, constants
	members map[string]map[string]bool // type → its methods, interface methods and fields
}

func (p *pkgDecls) member(typ, name string) {
	if p.members[typ] == nil {
		p.members[typ] = map[string]bool{}
	}
	p.members[typ][name] = true
}

// indexCode parses every non-test Go file under root (testdata and hidden
// directories aside).
func indexCode(root string) (codeIndex, error) {
	idx := codeIndex{}
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
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		p := idx[f.Name.Name]
		if p == nil {
			p = &pkgDecls{names: map[string]bool{}, members: map[string]map[string]bool{}}
			idx[f.Name.Name] = p
		}
		if dir := filepath.Dir(path); len(p.dirs) == 0 || p.dirs[len(p.dirs)-1] != dir {
			p.dirs = append(p.dirs, dir)
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					p.names[decl.Name.Name] = true
				} else if typ := receiverType(decl.Recv.List[0].Type); typ != "" {
					p.member(typ, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						p.names[spec.Name.Name] = true
						typeMembers(p, spec)
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							p.names[n.Name] = true
						}
					}
				}
			}
		}
		return nil
	})
	return idx, err
}

// receiverType is the name of a method's receiver type: T, *T, T[K], *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// typeMembers records the fields of a struct type and the methods of an
// interface type (embedded ones by their type's name).
func typeMembers(p *pkgDecls, spec *ast.TypeSpec) {
	var fields *ast.FieldList
	switch t := spec.Type.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			p.member(spec.Name.Name, n.Name)
		}
		if len(f.Names) == 0 {
			if name := receiverType(f.Type); name != "" {
				p.member(spec.Name.Name, name)
			}
		}
	}
}

// checkCodeNames returns how many citations of code page holds and what is
// wrong with them.
func checkCodeNames(idx codeIndex, page string, text []byte) (cited int, problems []string) {
	for i, line := range strings.Split(string(text), "\n") {
		for _, m := range codeRE.FindAllStringSubmatch(line, -1) {
			pkg, typ, member := m[1], m[2]+m[4], m[3]+m[5]
			if m[2] == "" && m[5] == "" {
				typ, member = "", m[4] // pkg.Name
			}
			p := idx[pkg]
			if p == nil {
				if typ == "" && !ast.IsExported(member) && m[2] == "" {
					continue // a config key or a column, not code
				}
				problems = append(problems, fmt.Sprintf("%s:%d: %s: no package is named %s", page, i+1, m[0], pkg))
				cited++
				continue
			}
			cited++
			if len(p.dirs) > 1 {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %d directories declare package %s (%s); the citation is ambiguous",
					page, i+1, m[0], len(p.dirs), pkg, strings.Join(sorted(p.dirs), ", ")))
				continue
			}
			switch {
			case typ == "" && !p.names[member]:
				problems = append(problems, fmt.Sprintf("%s:%d: %s: package %s declares no %s", page, i+1, m[0], pkg, member))
			case typ != "" && !p.names[typ]:
				problems = append(problems, fmt.Sprintf("%s:%d: %s: package %s declares no type %s", page, i+1, m[0], pkg, typ))
			case typ != "" && !p.members[typ][member]:
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s.%s has no method or field %s", page, i+1, m[0], pkg, typ, member))
			}
		}
	}
	return cited, problems
}

func sorted(ss []string) []string {
	out := append([]string(nil), ss...)
	sort.Strings(out)
	return out
}
