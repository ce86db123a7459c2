package workflow

import (
	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// Cache is one cache a job restores before its first step and saves after
// its last, when it succeeded (docs/workflow.md#caches).
type Cache struct {
	// Key names the saved cache; a template the agent renders after the
	// checkout (so hashFiles() sees the code). A saved key is never
	// overwritten.
	Key *expr.Template
	// Paths are globs relative to the workspace, as artifacts' paths.
	Paths []string
	// RestoreKeys are prefixes tried, in order, when no cache has Key
	// exactly; templates too.
	RestoreKeys []*expr.Template
}

// Bounds of a job's caches.
const (
	MaxCaches      = 8
	MaxRestoreKeys = 8
)

func (p *parser) parseCaches(n *yaml.Node, j *Job) []Cache {
	items, _ := p.list(n, "cache")
	if len(items) > MaxCaches {
		p.errorf(n, "cache: %d caches; at most %d", len(items), MaxCaches)
		return nil
	}
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
			nodes := p.strListOf(x.v, "paths")
			c.Paths = values(nodes)
			for _, pn := range nodes {
				if msg := pathProblem(pn.Value); msg != "" {
					p.errorf(pn, "cache: paths: %q %s (point the tool's cache into the workspace, e.g. GOMODCACHE=$KILN_WORKSPACE/.gomod)", pn.Value, msg)
				}
			}
			if len(c.Paths) == 0 {
				p.errorf(x.v, "cache: paths: is empty")
			}
		} else {
			p.errorf(it, "cache: paths: is missing")
		}
		if x, has := f["restore_keys"]; has {
			nodes := p.strListOf(x.v, "restore_keys")
			if len(nodes) > MaxRestoreKeys {
				p.errorf(x.v, "cache: restore_keys: %d keys; at most %d", len(nodes), MaxRestoreKeys)
			}
			for _, rn := range nodes {
				if t := p.text(rn, "cache.restore_keys", LocStep, j); t != nil {
					c.RestoreKeys = append(c.RestoreKeys, t)
				}
			}
		}
		out = append(out, c)
	}
	return out
}
