package expr

// The syntax tree. Every node records its byte span in the source (for error
// offsets and for naming a path in messages) and its height, which the
// parser bounds so that the recursive checker and evaluator are bounded too.
// Chains that users write long (a || b || c, a.b.c.d) are flat nodes, so the
// height limit only bites on real nesting.

type node interface {
	at() *loc
}

type loc struct {
	pos, end int // byte offsets into the source
	height   int // 1 for a leaf
}

func (l *loc) at() *loc { return l }

// litNode is a literal: nil, bool, float64 or string.
type litNode struct {
	loc
	val any
}

// ctxNode names a context: `event`.
type ctxNode struct {
	loc
	name string
}

// accessNode is a chain of property and index accesses on a base:
// `needs.build.outputs['version']`.
type accessNode struct {
	loc
	base  node
	steps []accessStep
}

// accessStep is `.name` (index == nil) or `[index]`. end is where the step
// ends, so the source up to it names the path so far.
type accessStep struct {
	pos, end int
	name     string
	namePos  int
	index    node
}

// callNode is a function call; fn is nil for an unknown function, which
// Check reports and Eval refuses.
type callNode struct {
	loc
	name string // as written
	fn   *function
	args []node
}

type notNode struct {
	loc
	x node
}

// logicNode is a chain of && (and) or || operands.
type logicNode struct {
	loc
	and bool
	ops []node
}

// cmpNode is one of == != < <= > >=.
type cmpNode struct {
	loc
	op    tokKind
	opPos int
	l, r  node
}

func heightOf(ns ...node) int {
	h := 0
	for _, n := range ns {
		if n != nil {
			h = max(h, n.at().height)
		}
	}
	return h + 1
}

// walk calls visit on n and its descendants, depth first, until visit
// returns false. Its recursion is bounded by the tree's height.
func walk(n node, visit func(node) bool) bool {
	if !visit(n) {
		return false
	}
	var kids []node
	switch n := n.(type) {
	case *accessNode:
		kids = append(kids, n.base)
		for _, s := range n.steps {
			if s.index != nil {
				kids = append(kids, s.index)
			}
		}
	case *callNode:
		kids = n.args
	case *notNode:
		kids = []node{n.x}
	case *logicNode:
		kids = n.ops
	case *cmpNode:
		kids = []node{n.l, n.r}
	}
	for _, k := range kids {
		if !walk(k, visit) {
			return false
		}
	}
	return true
}

// CallsStatusFunc reports whether the expression calls success(), failure(),
// always() or cancelled(). A step's `if:` that calls none of them runs only
// while the job is succeeding, as if written `success() && (…)`, the way
// GitHub Actions does it; the step executor applies that rule.
func (e *Expr) CallsStatusFunc() bool {
	found := false
	walk(e.root, func(n node) bool {
		if c, ok := n.(*callNode); ok && c.fn != nil && c.fn.status {
			found = true
		}
		return !found
	})
	return found
}
