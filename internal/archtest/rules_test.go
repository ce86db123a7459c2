package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kilnci/kiln"

// pkg is one package of `go list -deps -json`: its non-test imports only.
type pkg struct {
	ImportPath string
	Name       string
	Imports    []string
	Standard   bool
}

// graph is the import graph of the module's packages and everything they
// link, from the non-test files.
type graph map[string]*pkg

func loadGraph(t *testing.T) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Name,Imports,Standard", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		g[p.ImportPath] = &p
	}
	if g[module+"/cmd/kiln"] == nil || g[module+"/internal/server"] == nil {
		t.Fatalf("go list listed %d packages, without cmd/kiln or internal/server", len(g))
	}
	return g
}

// path returns the import chain from `from` to `to` (both included), or
// nil when from does not link to.
func (g graph) path(from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for p := to; p != ""; p = prev[p] {
				chain = append(chain, short(p))
			}
			slices.Reverse(chain)
			return chain
		}
		if p := g[cur]; p != nil {
			for _, imp := range p.Imports {
				if _, seen := prev[imp]; !seen {
					prev[imp] = cur
					queue = append(queue, imp)
				}
			}
		}
	}
	return nil
}

// ours lists the module's packages, sorted.
func (g graph) ours() []string {
	var out []string
	for ip := range g {
		if ip == module || strings.HasPrefix(ip, module+"/") {
			out = append(out, ip)
		}
	}
	slices.Sort(out)
	return out
}

func short(ip string) string {
	if ip == module {
		return "kiln"
	}
	return strings.TrimPrefix(ip, module+"/")
}

func under(ip, dir string) bool {
	full := module + "/" + dir
	return ip == full || strings.HasPrefix(ip, full+"/")
}

// The agent side (an agent binary's code) links no server-side package,
// not even through another package: it carries no database code, and what
// it shares with the orchestrator is proto.
func TestAgentSideLinksNoServerCode(t *testing.T) {
	g := loadGraph(t)
	agentSide := []string{"internal/agent", "internal/executor"}
	serverSide := []string{"internal/store", "internal/engine", "internal/fleet", "internal/server", "internal/api"}
	for _, ip := range g.ours() {
		if !slices.ContainsFunc(agentSide, func(d string) bool { return under(ip, d) }) {
			continue
		}
		for _, dep := range g.ours() {
			if !slices.ContainsFunc(serverSide, func(d string) bool { return under(dep, d) }) {
				continue
			}
			if chain := g.path(ip, dep); chain != nil {
				t.Errorf("%s links the server-side package %s: %s", short(ip), short(dep), strings.Join(chain, " → "))
			}
		}
	}
}

// The composition root is started only by the CLI (kiln server), kiln run
// and the end-to-end tests; nothing else depends on how kiln is wired.
func TestOnlyCLILocalrunAndE2EImportServer(t *testing.T) {
	g := loadGraph(t)
	allowed := []string{"internal/cli", "internal/localrun", "internal/e2e", "internal/server"}
	for _, ip := range g.ours() {
		if slices.ContainsFunc(allowed, func(d string) bool { return under(ip, d) }) {
			continue
		}
		if slices.Contains(g[ip].Imports, module+"/internal/server") {
			t.Errorf("%s imports internal/server; only %s may", short(ip), strings.Join(allowed[:3], ", "))
		}
	}
}

// testing and net/http/httptest belong in tests and in test-helper
// packages (named *test, like storetest), and the kiln binary links
// neither: no test helper reaches production.
func TestKilnBinaryLinksNoTestCode(t *testing.T) {
	g := loadGraph(t)
	testOnly := []string{"testing", "net/http/httptest"}
	for _, ip := range g.ours() {
		p := g[ip]
		for _, imp := range testOnly {
			if slices.Contains(p.Imports, imp) && !strings.HasSuffix(p.Name, "test") {
				t.Errorf("%s (package %s) imports %s; only test-helper packages named *test may", short(ip), p.Name, imp)
			}
		}
	}
	for _, imp := range testOnly {
		if chain := g.path(module+"/cmd/kiln", imp); chain != nil {
			t.Errorf("the kiln binary links %s: %s", imp, strings.Join(chain, " → "))
		}
	}
	for _, ip := range g.ours() {
		if strings.HasSuffix(g[ip].Name, "test") {
			if chain := g.path(module+"/cmd/kiln", ip); chain != nil {
				t.Errorf("the kiln binary links the test helper %s: %s", short(ip), strings.Join(chain, " → "))
			}
		}
	}
}

// The domain and language packages sit at the bottom: kiln imports none of
// ours, and the pure packages only kiln and each other, downward. They are
// what the agent, kiln lint and the orchestrator all share.
func TestPurePackagesStayAtTheBottom(t *testing.T) {
	g := loadGraph(t)
	may := map[string][]string{
		"kiln":              nil,
		"internal/suggest":  nil,
		"internal/jsonwire": nil,
		"internal/expr":     {"kiln", "internal/suggest", "internal/jsonwire"},
		"internal/workflow": {"kiln", "internal/expr", "internal/suggest"},
		"internal/trigger":  {"kiln", "internal/workflow"},
		"internal/proto":    {"kiln", "internal/jsonwire"},
		"internal/runrules": {"kiln"},
	}
	for pkg, allowed := range may {
		ip := module + "/" + pkg
		if pkg == "kiln" {
			ip = module
		}
		p := g[ip]
		if p == nil {
			t.Errorf("%s is not in the module", pkg)
			continue
		}
		for _, imp := range p.Imports {
			if (imp == module || strings.HasPrefix(imp, module+"/")) && !slices.Contains(allowed, short(imp)) {
				t.Errorf("%s imports %s; it may import only %v of ours", pkg, short(imp), allowed)
			}
		}
	}
}
