package expr

import (
	"testing"

	"github.com/kilnci/kiln"
)

// stepScope is what a step's if: sees (workflow.md, "Who evaluates what").
func stepScope() *Scope {
	return &Scope{
		Contexts: map[string]Type{
			"event": ObjectOf(map[string]Type{
				"name": String, "action": String, "ref": String, "sha": String, "branch": String,
				"base_branch": String, "tag": String, "repository": String, "actor": String,
				"message": String, "changed_files": ArrayOf(String),
				"pr": ObjectOf(map[string]Type{"number": Number, "title": String}),
			}),
			"inputs": MapOf(Any),
			"run":    ObjectOf(map[string]Type{"id": String, "number": Number}),
			"env":    MapOf(String),
			"matrix": MapOf(Any),
			"needs": MapOf(ObjectOf(map[string]Type{
				"result":  String,
				"outputs": MapOf(String),
			})),
			"job": ObjectOf(map[string]Type{"status": String}),
		},
		StatusFuncs: true,
	}
}

// runScope is what concurrency.group and workflow env see.
func runScope() *Scope {
	s := stepScope()
	return &Scope{Contexts: map[string]Type{
		"event": s.Contexts["event"], "inputs": s.Contexts["inputs"], "run": s.Contexts["run"],
	}}
}

func testContexts() map[string]any {
	return map[string]any{
		"event": map[string]any{
			"name": "push", "ref": "refs/heads/main", "sha": "abc123", "branch": "main",
			"repository": "kilnci/kiln", "actor": "Ada", "message": "Fix the Build [skip ci]",
			"changed_files": []any{"go.mod", "internal/expr/lex.go"},
			"pr":            map[string]any{"number": float64(7), "title": "Expressions"},
		},
		"inputs": map[string]any{"target": "", "dry_run": true, "count": float64(3)},
		"run":    map[string]any{"id": "r-1", "number": float64(42)},
		"env":    map[string]string{"GOFLAGS": "-mod=mod"},
		"matrix": map[string]any{"go": "1.26", "db": "sqlite"},
		"needs": map[string]any{
			"build-linux":  map[string]any{"result": "success", "outputs": map[string]any{"version": "1.2.3"}},
			"build (1.26)": map[string]any{"result": "success", "outputs": map[string]any{"version": "1.26.0"}},
			"test":         map[string]any{"result": "failure", "outputs": map[string]any{}},
			"numbers":      map[string]any{"list": []any{float64(1), float64(2), float64(3)}},
			"strings":      []string{"a", "b"},
		},
		"job": map[string]any{"status": "success"},
	}
}

func testEnv() *Env {
	return &Env{
		Contexts: testContexts(),
		HashFiles: func(patterns []string) (string, error) {
			return "hash:" + patterns[0], nil
		},
	}
}

func mustParse(t testing.TB, src string) *Expr {
	t.Helper()
	e, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(%.60q): %v", src, err)
	}
	return e
}

func mustTemplate(t testing.TB, src string) *Template {
	t.Helper()
	tm, err := ParseTemplate(src)
	if err != nil {
		t.Fatalf("ParseTemplate(%.60q): %v", src, err)
	}
	return tm
}

var _ = kiln.ResultSuccess
