package workflow

import (
	"slices"

	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// The shapes of keys kiln recognises but does not support yet. Parse reads
// them (so their own mistakes are reported) and then rejects them with a
// "not supported yet" error; see notYet in keys.go.

// Container is the image a job's steps would run in.
type Container struct {
	Image *expr.Template
	Env   []EnvVar
}

// parseNotYet reads the job-level keys that are not supported yet.
func (p *parser) parseNotYet(j *Job, f map[string]pair) {
	for _, key := range []string{"context", "secrets", "approval", "container"} {
		pr, has := f[key]
		if !has {
			continue
		}
		switch key {
		case "context":
			if s, ok := p.str(pr.v, "context"); ok {
				if msg := idProblem(s, "context name"); msg != "" {
					p.errorf(pr.v, "context: %s", msg)
				}
				j.Context = s
			}
		case "secrets":
			items, _ := p.strList(pr.v, "secrets")
			for _, it := range items {
				if !envNameRE.MatchString(it.Value) {
					p.errorf(it, "secrets: %q is not a valid variable name", it.Value)
					continue
				}
				j.Secrets = append(j.Secrets, it.Value)
			}
		case "container":
			j.Container = p.parseContainer(pr.v, j)
		}
		p.notSupported(pr)
	}
}

func (p *parser) parseContainer(n *yaml.Node, j *Job) *Container {
	if n.Kind == yaml.ScalarNode {
		if _, ok := p.str(n, "container"); ok {
			return &Container{Image: p.text(n, "container", LocJob, j)}
		}
		return nil
	}
	pairs, _ := p.mapping(n, "container")
	f := p.fields(pairs, "container", containerKeys)
	c := &Container{}
	if x, has := f["image"]; has {
		if _, ok := p.str(x.v, "image"); ok {
			c.Image = p.text(x.v, "container.image", LocJob, j)
		}
	} else {
		p.errorf(n, "container: image: is missing")
	}
	if x, has := f["env"]; has {
		c.Env = p.parseEnv(x.v, "container.env", LocJob, j)
	}
	return c
}

func (p *parser) strListOf(n *yaml.Node, key string) []*yaml.Node {
	items, _ := p.strList(n, key)
	return items
}

func values(nodes []*yaml.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if !slices.Contains(out, n.Value) {
			out = append(out, n.Value)
		}
	}
	return out
}
