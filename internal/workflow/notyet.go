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

// Resources are the CPU and memory a job would reserve and be limited to.
type Resources struct {
	Requests Amount
	Limits   Amount
}

// Amount is a quantity of CPU (in millicpus) and memory (in bytes).
type Amount struct {
	MilliCPUs int64
	Memory    int64
}

// Cache is one cache a job would restore before its steps and save after.
type Cache struct {
	Key         *expr.Template
	Paths       []string
	RestoreKeys []string
}

// parseNotYet reads the job-level keys that are not supported yet.
func (p *parser) parseNotYet(j *Job, f map[string]pair) {
	for _, key := range []string{"context", "secrets", "approval", "cache", "container", "resources"} {
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
		case "cache":
			j.Cache = p.parseCaches(pr.v, j)
		case "container":
			j.Container = p.parseContainer(pr.v, j)
		case "resources":
			j.Resources = p.parseResources(pr.v)
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

func (p *parser) parseResources(n *yaml.Node) *Resources {
	pairs, _ := p.mapping(n, "resources")
	f := p.fields(pairs, "resources", resourcesKeys)
	r := &Resources{}
	if x, has := f["requests"]; has {
		r.Requests = p.parseAmount(x.v, "resources.requests")
	}
	if x, has := f["limits"]; has {
		r.Limits = p.parseAmount(x.v, "resources.limits")
	}
	return r
}

func (p *parser) parseAmount(n *yaml.Node, what string) Amount {
	var a Amount
	pairs, _ := p.mapping(n, what)
	f := p.fields(pairs, what, amountKeys)
	if x, has := f["cpus"]; has {
		if _, ok := p.str(x.v, what+".cpus"); ok {
			v, err := parseCPUs(x.v)
			if err != nil {
				p.errorf(x.v, "%s.cpus: %s", what, err)
			}
			a.MilliCPUs = v
		}
	}
	if x, has := f["memory"]; has {
		if s, ok := p.str(x.v, what+".memory"); ok {
			v, err := parseSize(s)
			if err != nil {
				p.errorf(x.v, "%s.memory: %s", what, err)
			}
			a.Memory = v
		}
	}
	return a
}

func (p *parser) parseCaches(n *yaml.Node, j *Job) []Cache {
	items, _ := p.list(n, "cache")
	var out []Cache
	for _, it := range items {
		pairs, ok := p.mapping(it, "a cache")
		if !ok {
			continue
		}
		f := p.fields(pairs, "a cache", cacheKeys)
		c := Cache{}
		if x, has := f["key"]; has {
			if _, good := p.str(x.v, "key"); good {
				c.Key = p.text(x.v, "cache.key", LocStep, j)
			}
		} else {
			p.errorf(it, "cache: key: is missing")
		}
		if x, has := f["paths"]; has {
			c.Paths = values(p.strListOf(x.v, "paths"))
		}
		if x, has := f["restore_keys"]; has {
			c.RestoreKeys = values(p.strListOf(x.v, "restore_keys"))
		}
		out = append(out, c)
	}
	return out
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
