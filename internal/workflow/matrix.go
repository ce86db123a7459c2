package workflow

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// Matrix is a job's static matrix as written. The scheduler reads
// MaxParallel and FailFast; the children themselves are Job.Variants.
type Matrix struct {
	Keys    []string   // dimensions, in the order written
	Values  [][]string // Values[i] are the values of Keys[i], as written
	Include [][]KV     // include: entries, in order
	Exclude [][]KV     // exclude: entries, in order
	// MaxParallel bounds how many children run at once; 0: no bound.
	MaxParallel int
	// FailFast cancels the remaining children when one fails (default true).
	FailFast bool

	templates map[string]*expr.Template // parsed values, by key + "\x00" + value
}

// KV is one matrix key and its value, as written (`go: 1.20` is "1.20").
// A matrix value may hold expressions: Template renders it (for a literal
// value, to Value itself).
type KV struct {
	Key      string
	Value    string
	Template *expr.Template
}

// Variant is one job to run: a matrix child, or a plain job's only variant.
type Variant struct {
	// Name is the job id, or for a matrix child `<job> (<values joined by
	// ", ">)`, e.g. "test (1.26, sqlite)".
	Name string
	// Values are the child's matrix values: the matrix keys in order, then
	// keys added by include: in the order they first appear.
	Values []KV
}

// Value returns the variant's value for key ("" and false if it has none).
func (v Variant) Value(key string) (string, bool) {
	for _, kv := range v.Values {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// Matrix limits.
const (
	// MaxMatrixChildren caps the children of one matrix job.
	MaxMatrixChildren = 256
	// maxCombinations caps the raw product enumerated before exclude.
	maxCombinations = 4096
)

// matrixKeys are job-level keys that users put inside matrix: by habit.
var matrixJobKeys = []string{"include", "exclude", "max_parallel", "fail_fast"}

// parseMatrix reads matrix:, include:, exclude:, max_parallel: and
// fail_fast: and expands the job's variants.
func (p *parser) parseMatrix(j *Job, at *yaml.Node, f map[string]pair) {
	mx, hasMatrix := f["matrix"]
	inc, hasInclude := f["include"]
	if !hasMatrix && !hasInclude {
		for _, k := range []string{"exclude", "max_parallel", "fail_fast"} {
			if x, has := f[k]; has {
				p.errorf(x.k, "%s: only a matrix job has %s", k, k)
			}
		}
		j.Variants = []Variant{{Name: j.ID}}
		return
	}
	m := &Matrix{FailFast: true, templates: map[string]*expr.Template{}}
	ok := true
	var exNodes []*yaml.Node
	if hasMatrix {
		ok = p.matrixDims(m, mx.v, j)
	}
	if x, has := f["exclude"]; has {
		if !hasMatrix {
			p.errorf(x.k, "exclude: only a job with matrix: can exclude combinations")
			ok = false
		} else {
			m.Exclude, exNodes, ok = p.matrixEntries(x.v, "exclude", m, ok)
		}
	}
	if hasInclude {
		m.Include, _, ok = p.matrixEntries(inc.v, "include", m, ok)
	}
	if x, has := f["max_parallel"]; has {
		m.MaxParallel, _ = p.integer(x.v, "max_parallel", 1, MaxMatrixChildren)
	}
	if x, has := f["fail_fast"]; has {
		m.FailFast, _ = p.boolean(x.v, "fail_fast")
	}
	j.Matrix = m
	if !ok {
		j.Variants = []Variant{{Name: j.ID}}
		return
	}
	at = firstOf(mx, inc, at)
	j.Variants = p.expand(j.ID, m, at, exNodes)
}

func firstOf(a, b pair, def *yaml.Node) *yaml.Node {
	if a.k != nil {
		return a.k
	}
	if b.k != nil {
		return b.k
	}
	return def
}

// matrixDims reads matrix: key → list of values.
func (p *parser) matrixDims(m *Matrix, n *yaml.Node, j *Job) bool {
	pairs, ok := p.mapping(n, "matrix")
	if !ok {
		return false
	}
	if len(pairs) == 0 {
		p.errorf(n, "matrix: needs at least one key with a list of values")
		return false
	}
	for _, pr := range pairs {
		if slices.Contains(matrixJobKeys, pr.key) {
			p.errorf(pr.k, "matrix: write %s: next to matrix:, in the job itself", pr.key)
			ok = false
			continue
		}
		if msg := idProblem(pr.key, "matrix key"); msg != "" {
			p.errorf(pr.k, "matrix: %s", msg)
			ok = false
			continue
		}
		if pr.v.Kind != yaml.SequenceNode || len(pr.v.Content) == 0 {
			p.errorf(pr.v, "matrix: %s needs a non-empty list of values, found %s", pr.key, describe(pr.v))
			ok = false
			continue
		}
		var vals []string
		for _, it := range pr.v.Content {
			if it.Kind != yaml.ScalarNode || isNull(it) {
				p.errorf(it, "matrix: values of %s must be strings or numbers, not %s", pr.key, describe(it))
				ok = false
				continue
			}
			if slices.Contains(vals, it.Value) {
				p.errorf(it, "matrix: value %q of %s is listed twice", it.Value, pr.key)
				ok = false
				continue
			}
			if t := p.text(it, "matrix."+pr.key, LocMatrixValue, j); t != nil {
				m.templates[pr.key+"\x00"+it.Value] = t
			}
			vals = append(vals, it.Value)
		}
		m.Keys = append(m.Keys, pr.key)
		m.Values = append(m.Values, vals)
	}
	return ok
}

// matrixEntries reads the include: or exclude: list of {key: value} mappings.
// It also returns each entry's node.
func (p *parser) matrixEntries(n *yaml.Node, key string, m *Matrix, ok bool) ([][]KV, []*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s: expected a list of {key: value} mappings, found %s", key, describe(n))
		return nil, nil, false
	}
	var out [][]KV
	var nodes []*yaml.Node
	for _, it := range n.Content {
		pairs, good := p.mapping(it, "an "+key+" entry")
		if !good {
			ok = false
			continue
		}
		if len(pairs) == 0 {
			p.errorf(it, "%s: an entry is empty", key)
			ok = false
			continue
		}
		var entry []KV
		for _, pr := range pairs {
			if msg := idProblem(pr.key, "matrix key"); msg != "" {
				p.errorf(pr.k, "%s: %s", key, msg)
				ok = false
				continue
			}
			if key == "exclude" && !slices.Contains(m.Keys, pr.key) {
				p.errorf(pr.k, "exclude: %q is not a matrix key%s", pr.key, didYouMean(pr.key, m.Keys))
				ok = false
				continue
			}
			if pr.v.Kind != yaml.ScalarNode || isNull(pr.v) {
				p.errorf(pr.v, "%s: the value of %s must be a string or number, not %s", key, pr.key, describe(pr.v))
				ok = false
				continue
			}
			if strings.Contains(pr.v.Value, "${{") {
				p.errorf(pr.v, "%s: expressions are not allowed here; %s values are compared as written", key, key)
				ok = false
				continue
			}
			entry = append(entry, KV{Key: pr.key, Value: pr.v.Value})
		}
		out = append(out, entry)
		nodes = append(nodes, it)
	}
	return out, nodes, ok
}

// expand computes the matrix children with GitHub Actions' semantics:
// the cartesian product of the keys (first key outermost), minus every
// combination an exclude: entry matches on all its keys, then each include:
// entry is added to every original combination it does not contradict on
// an original key (an include may overwrite values added by an earlier
// include), or becomes a new combination when it fits none.
func (p *parser) expand(id string, m *Matrix, at *yaml.Node, exNodes []*yaml.Node) []Variant {
	total := 1.0
	for _, vs := range m.Values {
		total *= float64(len(vs))
	}
	if total > maxCombinations {
		p.errorf(at, "matrix: %.0f combinations; a job expands to at most %d children", total, MaxMatrixChildren)
		return []Variant{{Name: id}}
	}
	var combos []map[string]string
	if len(m.Keys) > 0 {
		combos = product(m)
	}
	combos = p.applyExclude(combos, m, exNodes)
	extra := p.applyInclude(&combos, m)
	order := append(append([]string(nil), m.Keys...), extra...)
	if len(combos) == 0 {
		p.errorf(at, "matrix: exclude removes every combination, so the job would never run")
		return []Variant{{Name: id}}
	}
	if len(combos) > MaxMatrixChildren {
		p.errorf(at, "matrix: %d children; a job expands to at most %d", len(combos), MaxMatrixChildren)
		return []Variant{{Name: id}}
	}
	out := make([]Variant, 0, len(combos))
	names := map[string]bool{}
	for _, c := range combos {
		v := Variant{}
		var parts []string
		for _, k := range order {
			if val, ok := c[k]; ok {
				v.Values = append(v.Values, KV{Key: k, Value: val, Template: m.template(k, val)})
				parts = append(parts, val)
			}
		}
		v.Name = fmt.Sprintf("%s (%s)", id, strings.Join(parts, ", "))
		if names[v.Name] {
			p.errorf(at, "matrix: two children are both named %q; make their values differ", v.Name)
			continue
		}
		names[v.Name] = true
		out = append(out, v)
	}
	return out
}

// template returns the parsed value of a matrix key (a literal for values
// added by include:, which never hold expressions).
func (m *Matrix) template(key, val string) *expr.Template {
	if t, ok := m.templates[key+"\x00"+val]; ok {
		return t
	}
	t, _ := expr.ParseTemplate(val) // no ${{: cannot fail
	return t
}

// product enumerates every combination of the matrix keys.
func product(m *Matrix) []map[string]string {
	combos := []map[string]string{{}}
	for i, k := range m.Keys {
		next := make([]map[string]string, 0, len(combos)*len(m.Values[i]))
		for _, c := range combos {
			for _, v := range m.Values[i] {
				nc := make(map[string]string, len(c)+1)
				for ck, cv := range c {
					nc[ck] = cv
				}
				nc[k] = v
				next = append(next, nc)
			}
		}
		combos = next
	}
	return combos
}

func (p *parser) applyExclude(combos []map[string]string, m *Matrix, nodes []*yaml.Node) []map[string]string {
	for i, ex := range m.Exclude {
		kept := combos[:0]
		removed := 0
		for _, c := range combos {
			if matchesAll(c, ex) {
				removed++
				continue
			}
			kept = append(kept, c)
		}
		combos = kept
		if removed == 0 {
			p.errorf(nodes[i], "exclude: %s matches no combination of the matrix", formatKVs(ex))
		}
	}
	return combos
}

// applyInclude adds the include: entries and returns the keys they added
// beyond the matrix keys, in order of first appearance.
func (p *parser) applyInclude(combos *[]map[string]string, m *Matrix) []string {
	var extra []string
	original := len(*combos)
	for _, inc := range m.Include {
		matched := false
		for _, c := range (*combos)[:original] {
			if !compatible(c, inc, m.Keys) {
				continue
			}
			matched = true
			for _, kv := range inc {
				c[kv.Key] = kv.Value
			}
		}
		if !matched {
			c := make(map[string]string, len(inc))
			for _, kv := range inc {
				c[kv.Key] = kv.Value
			}
			*combos = append(*combos, c)
		}
		for _, kv := range inc {
			if !slices.Contains(m.Keys, kv.Key) && !slices.Contains(extra, kv.Key) {
				extra = append(extra, kv.Key)
			}
		}
	}
	return extra
}

func matchesAll(c map[string]string, entry []KV) bool {
	for _, kv := range entry {
		if c[kv.Key] != kv.Value {
			return false
		}
	}
	return true
}

// compatible: the entry agrees with the combination on every original key.
func compatible(c map[string]string, entry []KV, keys []string) bool {
	for _, kv := range entry {
		if slices.Contains(keys, kv.Key) && c[kv.Key] != kv.Value {
			return false
		}
	}
	return true
}

func formatKVs(kvs []KV) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = kv.Key + ": " + kv.Value
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
