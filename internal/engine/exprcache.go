package engine

import (
	"sync"

	"github.com/kilnci/kiln/internal/expr"
)

// parsed holds the parsed form of the expressions release evaluates, by
// source text. A run's jobs share their expressions (the children of a
// matrix, the workflow env of every job) and a workflow's runs repeat them,
// so each source is parsed once: creating a run stores the templates
// workflow.Parse produced, and release parses only what is not here (after
// a restart, or once the bound cleared it). Parsed expressions are
// immutable and safe for concurrent use, and a source always parses to the
// same expression, so the cache changes how often a source is parsed and
// nothing else. It is process-wide because release is a plain function the
// store calls (see Release), and bounded in entries and bytes.
var parsed = newExprCache(4096, 4<<20)

type exprCache struct {
	mu         sync.Mutex
	templates  map[string]*expr.Template
	conditions map[string]*expr.Expr
	bytes      int // source bytes held
	maxEntries int
	maxBytes   int
}

func newExprCache(maxEntries, maxBytes int) *exprCache {
	return &exprCache{templates: map[string]*expr.Template{}, conditions: map[string]*expr.Expr{},
		maxEntries: maxEntries, maxBytes: maxBytes}
}

// template returns src parsed as a template (text with ${{ }} segments).
func (c *exprCache) template(src string) (*expr.Template, error) {
	c.mu.Lock()
	t, ok := c.templates[src]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := expr.ParseTemplate(src)
	if err != nil {
		return nil, err
	}
	c.keep(t)
	return t, nil
}

// condition returns src parsed as an `if:` condition.
func (c *exprCache) condition(src string) (*expr.Expr, error) {
	c.mu.Lock()
	e, ok := c.conditions[src]
	c.mu.Unlock()
	if ok {
		return e, nil
	}
	e, err := expr.ParseCondition(src)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.room(len(src)) {
		c.conditions[src] = e
	}
	c.mu.Unlock()
	return e, nil
}

// keep stores a parsed template under its source. Literal text is not
// kept: it has nothing to parse.
func (c *exprCache) keep(t *expr.Template) {
	if t == nil || t.IsLiteral() {
		return
	}
	src := t.Source()
	c.mu.Lock()
	if _, ok := c.templates[src]; !ok && c.room(len(src)) {
		c.templates[src] = t
	}
	c.mu.Unlock()
}

// room makes room for a source of n bytes, clearing the cache when it is
// full, and reports whether the source fits at all. c.mu is held.
func (c *exprCache) room(n int) bool {
	if n > c.maxBytes/16 {
		return false
	}
	if len(c.templates)+len(c.conditions) >= c.maxEntries || c.bytes+n > c.maxBytes {
		clear(c.templates)
		clear(c.conditions)
		c.bytes = 0
	}
	c.bytes += n
	return true
}
