package workflow

import (
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// pair is one key and its value in a YAML mapping.
type pair struct {
	key  string
	k, v *yaml.Node
}

// mapping returns the pairs of a mapping node in file order, reporting keys
// defined twice and keys that are not strings. A null node is an empty
// mapping (`env:` with nothing after it).
func (p *parser) mapping(n *yaml.Node, what string) ([]pair, bool) {
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping, not %s", what, describe(n))
		return nil, false
	}
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	out := make([]pair, 0, len(n.Content)/2)
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.errorf(k, "keys in %s must be plain strings, not %s", what, describe(k))
			ok = false
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.errorf(k, "%q is defined twice in %s (first on line %d)", k.Value, what, first.Line)
			ok = false
			continue
		}
		seen[k.Value] = k
		out = append(out, pair{key: k.Value, k: k, v: v})
	}
	return out, ok
}

// fields checks a mapping's keys against the keys allowed in it and returns
// the known ones by name. Unknown keys are errors with a hint.
func (p *parser) fields(pairs []pair, what string, known []string) map[string]pair {
	out := make(map[string]pair, len(pairs))
	for _, pr := range pairs {
		if !slices.Contains(known, pr.key) {
			p.errorf(pr.k, "unknown key %q in %s%s", pr.key, what, keyHint(pr.key, known))
			continue
		}
		out[pr.key] = pr
	}
	return out
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// str reads a scalar as text. Numbers and booleans are taken as written
// (`go: 1.20` is "1.20", not 1.2), which is what users mean in a CI file.
func (p *parser) str(n *yaml.Node, key string) (string, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errorf(n, "%s: expected a string, found %s", key, describe(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, key string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err == nil {
			return b, true
		}
	}
	p.errorf(n, "%s: expected true or false, found %s", key, describe(n))
	return false, false
}

// integer reads a whole number in [lo, hi].
func (p *parser) integer(n *yaml.Node, key string, lo, hi int) (int, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		p.errorf(n, "%s: expected a whole number, found %s", key, describe(n))
		return 0, false
	}
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
	if err != nil || v < int64(lo) || v > int64(hi) {
		p.errorf(n, "%s: %s is out of range; use a number from %d to %d", key, n.Value, lo, hi)
		return 0, false
	}
	return int(v), true
}

// list returns the items of a sequence. A single scalar stands for a list of
// one (`runs_on: linux`); null is an empty list.
func (p *parser) list(n *yaml.Node, key string) ([]*yaml.Node, bool) {
	switch {
	case isNull(n):
		return nil, true
	case n.Kind == yaml.SequenceNode:
		return n.Content, true
	case n.Kind == yaml.ScalarNode:
		return []*yaml.Node{n}, true
	}
	p.errorf(n, "%s: expected a list, found %s", key, describe(n))
	return nil, false
}

// strList reads a list of strings (or one string), keeping the nodes for
// positions.
func (p *parser) strList(n *yaml.Node, key string) ([]*yaml.Node, bool) {
	items, ok := p.list(n, key)
	out := make([]*yaml.Node, 0, len(items))
	for _, it := range items {
		if _, good := p.str(it, key); good {
			out = append(out, it)
		} else {
			ok = false
		}
	}
	return out, ok
}

// duration reads a positive Go-style duration ("30s", "10m", "1h30m").
func (p *parser) duration(n *yaml.Node, key string) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errorf(n, "%s: expected a duration like 30s, 10m or 1h, found %s", key, describe(n))
		return 0, false
	}
	if n.Tag == "!!int" || n.Tag == "!!float" {
		p.errorf(n, "%s: %s has no unit; write it like %ss or %sm", key, n.Value, n.Value, n.Value)
		return 0, false
	}
	if strings.Contains(n.Value, "${{") {
		p.errorf(n, "%s: expressions are not supported here yet (only a job's timeout may be one); write a duration like 30m", key)
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		p.errorf(n, "%s: %q is not a duration; write it like 30s, 10m or 1h30m (units: ms, s, m, h)", key, n.Value)
		return 0, false
	}
	if d <= 0 {
		p.errorf(n, "%s: must be longer than zero", key)
		return 0, false
	}
	return d, true
}
