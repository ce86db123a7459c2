package runrules

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The rules stay pure: besides the standard library they may import only
// the root package — never the store, a driver, or anything doing I/O.
func TestImportsOnlyTheRootPackage(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	allowedStd := map[string]bool{"fmt": true, "slices": true, "strings": true, "time": true}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path != "github.com/kilnci/kiln" && !allowedStd[path] {
				t.Errorf("%s imports %s: runrules may import only the root package and pure parts of the standard library", name, path)
			}
		}
	}
}
