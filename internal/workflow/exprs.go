package workflow

import (
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Text is a string value that may hold ${{ }} expressions.
// (Becomes *expr.Template once the expr package lands.)
type Text = string

// Cond is an `if:` condition. (Becomes *expr.Expr.)
type Cond = string

// site is an expression-bearing value waiting to be type-checked once the
// whole workflow (and so every context) is known.
type site struct {
	n    *yaml.Node
	key  string
	loc  Location
	job  *Job
	cond bool
}

func (p *parser) text(n *yaml.Node, key string, loc Location, job *Job) Text {
	if strings.Contains(n.Value, "${{") {
		p.sites = append(p.sites, site{n: n, key: key, loc: loc, job: job})
	}
	return n.Value
}

func (p *parser) cond(n *yaml.Node, key string, loc Location, job *Job) Cond {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errorf(n, "%s: expected a condition, found %s", key, describe(n))
		return ""
	}
	p.sites = append(p.sites, site{n: n, key: key, loc: loc, job: job, cond: true})
	return n.Value
}

func (p *parser) checkExpressions() {}
