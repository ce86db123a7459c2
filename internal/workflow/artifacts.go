package workflow

import (
	"strings"

	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// Artifact is a set of files a job uploads after its steps, whatever its
// result, and its direct dependents get before their first step.
type Artifact struct {
	// Name is unique in a run; a template the agent renders. A matrix
	// child's name carries its matrix values: the ones the name's
	// expressions use (coverage-${{ matrix.go }}), or else the child's own
	// suffix ("coverage (1.26, sqlite)"), added when the run is created.
	Name *expr.Template
	// Paths are globs relative to the workspace (doublestar: ** matches
	// directories); "!glob" excludes.
	Paths []string
}

// MaxArtifacts bounds a job's artifacts list.
const MaxArtifacts = 32

func (p *parser) parseArtifacts(n *yaml.Node, j *Job) []Artifact {
	items, _ := p.list(n, "artifacts")
	if len(items) > MaxArtifacts {
		p.errorf(n, "artifacts: %d artifacts; at most %d", len(items), MaxArtifacts)
		return nil
	}
	var out []Artifact
	seen := map[string]bool{}
	for _, it := range items {
		pairs, ok := p.mapping(it, "an artifact")
		if !ok {
			continue
		}
		f := p.fields(pairs, "an artifact", artifactKeys)
		a := Artifact{}
		if x, has := f["name"]; has {
			if s, good := p.str(x.v, "name"); good {
				if msg := artifactNameProblem(s); msg != "" {
					p.errorf(x.v, "artifacts: name: %s", msg)
				} else if seen[s] {
					p.errorf(x.v, "artifacts: the name %q is used twice in this job", s)
				}
				seen[s] = true
				a.Name = p.text(x.v, "artifacts.name", LocStep, j)
			}
		} else {
			p.errorf(it, "artifacts: name: is missing")
		}
		if x, has := f["paths"]; has {
			a.Paths = values(p.strListOf(x.v, "paths"))
			for _, pn := range p.strListOf(x.v, "paths") {
				if msg := pathProblem(pn.Value); msg != "" {
					p.errorf(pn, "artifacts: paths: %q %s", pn.Value, msg)
				}
			}
			if len(a.Paths) == 0 {
				p.errorf(x.v, "artifacts: paths: is empty")
			}
		} else {
			p.errorf(it, "artifacts: paths: is missing")
		}
		out = append(out, a)
	}
	return out
}

// artifactNameProblem checks a name as written (before any expression is
// rendered): printable, no slash, not "." or "..", at most 128 bytes.
func artifactNameProblem(s string) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "is empty"
	case len(s) > 128:
		return "is longer than 128 bytes"
	case s == "." || s == "..":
		return "must not be . or .."
	case strings.ContainsAny(s, "/\\"):
		return "must not hold / or \\"
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "holds a control character"
		}
	}
	return ""
}

// pathProblem checks an upload glob: relative to the workspace and never
// climbing out of it.
func pathProblem(s string) string {
	s = strings.TrimPrefix(s, "!")
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~") {
		return "must be relative to the workspace"
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == ".." {
			return "must not climb out of the workspace (..)"
		}
	}
	if strings.TrimSpace(s) == "" {
		return "is empty"
	}
	return ""
}

// checkArtifactNames reports a literal artifact name two jobs of the
// workflow both upload: names are unique in a run.
func checkArtifactNames(p *parser, w *Workflow) {
	owner := map[string]string{}
	for _, j := range w.Jobs {
		for _, a := range j.Artifacts {
			if a.Name == nil || !a.Name.IsLiteral() {
				continue
			}
			name := a.Name.Source()
			if other, ok := owner[name]; ok && other != j.ID {
				p.errorAt(j.Pos.Line, j.Pos.Col, "artifacts: jobs %s and %s both upload an artifact named %q; names are unique in a run", other, j.ID, name)
				continue
			}
			owner[name] = j.ID
		}
	}
}
