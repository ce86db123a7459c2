package api_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/api"
	"go.yaml.in/yaml/v3"
)

// The OpenAPI file documents exactly the routes the API serves.
// Proves B59 (docs/behaviours.md).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                               `yaml:"openapi"`
		Paths   map[string]map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml does not parse: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	methods := []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}
	var documented []string
	for path, ops := range doc.Paths {
		for m, op := range ops {
			if !slices.Contains(methods, m) {
				continue // parameters, summary…
			}
			documented = append(documented, strings.ToUpper(m)+" "+path)
			if _, ok := op["responses"]; !ok {
				t.Errorf("%s %s documents no responses", m, path)
			}
		}
	}
	var served []string
	public, readOnly := map[string]bool{}, map[string]bool{}
	for _, r := range api.Routes() {
		served = append(served, r.Method+" "+r.Path)
		public[r.Method+" "+r.Path] = r.Public
		readOnly[r.Method+" "+r.Path] = r.ReadOnly && !r.Public
	}
	slices.Sort(documented)
	slices.Sort(served)
	for _, d := range documented {
		if !slices.Contains(served, d) {
			t.Errorf("docs/openapi.yaml documents %s, which routes.go does not serve", d)
		}
	}
	for _, s := range served {
		if !slices.Contains(documented, s) {
			t.Errorf("routes.go serves %s, which docs/openapi.yaml does not document", s)
		}
	}
	// Public routes say so (security: []), the others need the token.
	for path, ops := range doc.Paths {
		for m, op := range ops {
			key := strings.ToUpper(m) + " " + path
			sec, hasSec := op["security"]
			open := hasSec && len(sec.([]any)) == 0
			if served := slices.Contains(served, key); served && open != public[key] {
				t.Errorf("%s: public in the docs = %v, in routes.go = %v", key, open, public[key])
			}
			// What a read-only token may call says so (x-kiln-read-only).
			ro, _ := op["x-kiln-read-only"].(bool)
			if served := slices.Contains(served, key); served && ro != readOnly[key] {
				t.Errorf("%s: x-kiln-read-only in the docs = %v, read-only tokens allowed by routes.go = %v", key, ro, readOnly[key])
			}
		}
	}
}
