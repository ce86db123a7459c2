package expr

import (
	"math"

	"github.com/kilnci/kiln"
)

// Evaluation bounds. Every node evaluated, every property or index step and
// every array element or object field that contains() or == looks at costs
// one step, so the time an evaluation takes is linear in MaxSteps whatever
// the expression or the data.
const (
	DefaultMaxSteps       = 10_000
	DefaultMaxStringBytes = 1 << 20
)

// Limits bounds one Eval, Render or Substitute call. Zero fields take the
// defaults.
type Limits struct {
	MaxSteps       int // evaluation steps
	MaxStringBytes int // bytes of any string produced: a format() result, a rendered template
}

func (l Limits) withDefaults() Limits {
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	if l.MaxStringBytes <= 0 {
		l.MaxStringBytes = DefaultMaxStringBytes
	}
	return l
}

// Env is what expressions are evaluated against.
type Env struct {
	// Contexts maps context names (event, inputs, needs, …) to JSON-shaped
	// values. A context that is absent is null.
	Contexts map[string]any
	// JobStatus is the job's result so far, for success(), failure() and
	// cancelled(); "" means success.
	JobStatus kiln.Result
	// HashFiles computes hashFiles(); nil makes hashFiles() an evaluation
	// error.
	HashFiles func(patterns []string) (string, error)
	Limits    Limits
}

// Eval evaluates the expression. Missing contexts, properties and indexes
// are nil; type errors that the checker would have reported (ordering a
// bool, a bad function argument), an unknown function and exceeding the
// limits are errors (*Error). The value may share memory with env.Contexts;
// callers must not modify it.
func (e *Expr) Eval(env *Env) (_ any, err error) {
	defer guard(&err)
	v, eerr := newEvaluator(env).eval(e.root)
	if eerr != nil {
		return nil, eerr
	}
	return v, nil
}

// EvalBool evaluates the expression and returns its truthiness.
func (e *Expr) EvalBool(env *Env) (bool, error) {
	v, err := e.Eval(env)
	if err != nil {
		return false, err
	}
	return Truthy(v), nil
}

type evaluator struct {
	env    *Env
	limits Limits
	steps  int
}

func newEvaluator(env *Env) *evaluator {
	if env == nil {
		env = &Env{}
	}
	return &evaluator{env: env, limits: env.Limits.withDefaults()}
}

func (ev *evaluator) step(pos int) *Error { return ev.charge(1, pos) }

// charge spends n steps.
func (ev *evaluator) charge(n, pos int) *Error {
	ev.steps += n
	if ev.steps > ev.limits.MaxSteps {
		return errorf(pos, "expression is too expensive: it took more than %d evaluation steps", ev.limits.MaxSteps)
	}
	return nil
}

func (ev *evaluator) eval(n node) (any, *Error) {
	if err := ev.step(n.at().pos); err != nil {
		return nil, err
	}
	switch n := n.(type) {
	case *litNode:
		return n.val, nil
	case *ctxNode:
		return norm(ev.env.Contexts[n.name]), nil
	case *accessNode:
		return ev.access(n)
	case *callNode:
		return ev.call(n)
	case *notNode:
		v, err := ev.eval(n.x)
		if err != nil {
			return nil, err
		}
		return !Truthy(v), nil
	case *logicNode:
		return ev.logic(n)
	case *cmpNode:
		return ev.compare(n)
	}
	return nil, errorf(n.at().pos, "internal error: unknown node %T", n)
}

func (ev *evaluator) access(n *accessNode) (any, *Error) {
	v, err := ev.eval(n.base)
	if err != nil {
		return nil, err
	}
	for _, s := range n.steps {
		if err := ev.step(s.pos); err != nil {
			return nil, err
		}
		if s.index == nil {
			v = objectGet(v, s.name)
			continue
		}
		k, err := ev.eval(s.index)
		if err != nil {
			return nil, err
		}
		v = index(v, k)
	}
	return v, nil
}

// index reads v[k]: a string key of an object, an integral in-range number
// of an array; anything else is nil.
func index(v, k any) any {
	switch k := norm(k).(type) {
	case string:
		return objectGet(v, k)
	case float64:
		if kindOf(v) != vArray || k != math.Trunc(k) || k < 0 || k >= float64(arrayLen(v)) {
			return nil
		}
		return arrayAt(v, int(k))
	}
	return nil
}

// logic returns the operand that decided: the first falsy one for &&, the
// first truthy one for ||, else the last.
func (ev *evaluator) logic(n *logicNode) (any, *Error) {
	var v any
	for _, op := range n.ops {
		var err *Error
		if v, err = ev.eval(op); err != nil {
			return nil, err
		}
		if Truthy(v) != n.and {
			return v, nil
		}
	}
	return v, nil
}

func (ev *evaluator) compare(n *cmpNode) (any, *Error) {
	l, err := ev.eval(n.l)
	if err != nil {
		return nil, err
	}
	r, err := ev.eval(n.r)
	if err != nil {
		return nil, err
	}
	switch n.op {
	case tEq, tNe:
		eq, err := ev.equal(l, r, 0, n.opPos)
		if err != nil {
			return nil, err
		}
		return eq == (n.op == tEq), nil
	}
	var c int
	switch {
	case kindOf(l) == vNumber && kindOf(r) == vNumber:
		a, b := l.(float64), r.(float64)
		if math.IsNaN(a) || math.IsNaN(b) {
			return false, nil
		}
		c = cmpOrdered(a, b)
	case kindOf(l) == vString && kindOf(r) == vString:
		c = cmpOrdered(l.(string), r.(string))
	default:
		return nil, errorf(n.opPos, "cannot compare %s with %s using %s; it compares two numbers or two strings",
			kindNames[kindOf(l)], kindNames[kindOf(r)], opText(n.op))
	}
	switch n.op {
	case tLt:
		return c < 0, nil
	case tLe:
		return c <= 0, nil
	case tGt:
		return c > 0, nil
	}
	return c >= 0, nil
}

func cmpOrdered[T float64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func opText(op tokKind) string { return tokNames[op][1 : len(tokNames[op])-1] }

// equal is == on values: the same kind and the same value, arrays and
// objects compared element by element (each costing a step). Nothing is
// converted: 1 == '1' is false, and string comparison is case-sensitive.
func (ev *evaluator) equal(a, b any, depth, pos int) (bool, *Error) {
	a, b = norm(a), norm(b)
	ka := kindOf(a)
	if ka != kindOf(b) {
		return false, nil
	}
	switch ka {
	case vNull:
		return true, nil
	case vBool:
		return a.(bool) == b.(bool), nil
	case vNumber:
		return a.(float64) == b.(float64), nil
	case vString:
		return a.(string) == b.(string), nil
	case vOther:
		return false, nil
	}
	if depth >= maxValueDepth {
		return false, errorf(pos, "values are nested too deeply to compare")
	}
	if ka == vArray {
		if arrayLen(a) != arrayLen(b) {
			return false, nil
		}
		for i := range arrayLen(a) {
			if err := ev.step(pos); err != nil {
				return false, err
			}
			if eq, err := ev.equal(arrayAt(a, i), arrayAt(b, i), depth+1, pos); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if objectLen(a) != objectLen(b) {
		return false, nil
	}
	if err := ev.charge(objectLen(a), pos); err != nil { // before sorting the keys
		return false, err
	}
	ak, bk := objectKeys(a), objectKeys(b)
	for i, k := range ak {
		if bk[i] != k {
			return false, nil
		}
		if eq, err := ev.equal(objectGet(a, k), objectGet(b, k), depth+1, pos); !eq || err != nil {
			return false, err
		}
	}
	return true, nil
}
