package expr

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kilnci/kiln/internal/suggest"
)

// Scope is what may be used at one location of a workflow file.
type Scope struct {
	Contexts    map[string]Type // the context names usable at this location
	StatusFuncs bool            // success(), failure(), always(), cancelled()
	HashFiles   bool            // hashFiles()
}

// Check type-checks the expression against the scope and returns its type
// and every error found, each with its offset. Errors do not cascade: the
// part of an expression that has an error is treated as Any.
func (e *Expr) Check(s *Scope) (t Type, errs []*Error) {
	defer func() {
		if r := recover(); r != nil {
			t, errs = Any, append(errs, internalError(r))
		}
	}()
	return e.check(s)
}

func (e *Expr) check(s *Scope) (Type, []*Error) {
	if s == nil {
		s = &Scope{}
	}
	c := &checker{scope: s, src: e.src}
	t := c.check(e.root)
	return t, c.errs
}

type checker struct {
	scope *Scope
	src   string
	errs  []*Error
}

func (c *checker) errorf(pos int, format string, args ...any) {
	c.errs = append(c.errs, errorf(pos, format, args...))
}

func (c *checker) check(n node) Type {
	switch n := n.(type) {
	case *litNode:
		switch n.val.(type) {
		case string:
			return String
		case float64:
			return Number
		case bool:
			return Bool
		}
		return Null
	case *ctxNode:
		return c.context(n)
	case *accessNode:
		return c.access(n)
	case *callNode:
		return c.call(n)
	case *notNode:
		c.check(n.x)
		return Bool
	case *logicNode:
		t := c.check(n.ops[0])
		for _, op := range n.ops[1:] {
			if u := c.check(op); !sameType(t, u) {
				t = Any
			}
		}
		return t
	case *cmpNode:
		return c.compare(n)
	}
	return Any
}

func (c *checker) context(n *ctxNode) Type {
	if t, ok := c.scope.Contexts[n.name]; ok {
		return t
	}
	names := slices.Sorted(maps.Keys(c.scope.Contexts))
	msg := strconv.Quote(n.name) + " is not available here; "
	if len(names) == 0 {
		msg += "no contexts are available here"
	} else {
		msg += "available: " + strings.Join(names, ", ")
	}
	if s := suggest.Closest(n.name, names); s != "" {
		msg += "; did you mean " + strconv.Quote(s) + "?"
	} else if f := lookupFunc(n.name); f != nil {
		msg += "; did you mean " + f.name + "()?"
	}
	c.errorf(n.pos, "%s", msg)
	return Any
}

func (c *checker) access(n *accessNode) Type {
	t := c.check(n.base)
	for _, s := range n.steps {
		path := strings.TrimRight(c.src[n.pos:s.pos], " \t\r\n")
		if s.index == nil {
			t = c.property(t, s.name, path, s.namePos)
			continue
		}
		it := c.check(s.index)
		t = c.index(t, it, s.index, path)
	}
	return t
}

func (c *checker) property(t Type, name, path string, pos int) Type {
	switch t.kind() {
	case kAny, kNull:
		return t
	case kMap:
		return t.t.elem
	case kObject:
		if ft, ok := t.t.fields[name]; ok {
			return ft
		}
		fields := t.fieldNames()
		msg := path + " has no field " + strconv.Quote(name)
		if s := suggest.Closest(name, fields); s != "" {
			msg += "; did you mean " + strconv.Quote(s) + "?"
		} else if len(fields) > 0 {
			msg += "; its fields are " + strings.Join(fields, ", ")
		}
		c.errorf(pos, "%s", msg)
	case kArray:
		c.errorf(pos, "%s is an array; it has no property %q (read an element with [0])", path, name)
	default:
		c.errorf(pos, "%s is %s; it has no property %q", path, t.article(), name)
	}
	return Any
}

func (c *checker) index(t, it Type, idx node, path string) Type {
	pos := idx.at().pos
	switch it.kind() {
	case kBool, kNull, kObject, kMap, kArray:
		c.errorf(pos, "an index is a string or a number, not %s", it.article())
		return Any
	}
	switch t.kind() {
	case kAny, kNull:
		return t
	case kObject, kMap:
		if it.kind() == kNumber {
			c.errorf(pos, "%s is an object; index it with a string, not a number", path)
			return Any
		}
		if lit, ok := idx.(*litNode); ok && t.kind() == kObject {
			return c.property(t, lit.val.(string), path, pos)
		}
		if t.kind() == kMap {
			return t.t.elem
		}
		return Any
	case kArray:
		if it.kind() == kString {
			c.errorf(pos, "%s is an array; index it with a number, not a string", path)
			return Any
		}
		return t.t.elem
	}
	c.errorf(pos, "%s is %s; it cannot be indexed", path, t.article())
	return Any
}

func (c *checker) call(n *callNode) Type {
	args := make([]Type, len(n.args))
	for i, a := range n.args {
		args[i] = c.check(a)
	}
	f := n.fn
	if f == nil {
		names := make([]string, 0, len(functions))
		for _, f := range functions {
			names = append(names, f.name)
		}
		slices.Sort(names)
		msg := "unknown function " + strconv.Quote(n.name)
		if s := suggest.Closest(n.name, names); s != "" {
			msg += "; did you mean " + s + "()?"
		} else {
			msg += "; the functions are " + strings.Join(names, ", ")
		}
		c.errorf(n.pos, "%s", msg)
		return Any
	}
	switch {
	case f.status && !c.scope.StatusFuncs:
		c.errorf(n.pos, "%s() is only available in steps (a step's if:, env and run)", f.name)
	case f.hash && !c.scope.HashFiles:
		c.errorf(n.pos, "hashFiles() is only available in a step's env, run and working_directory and in cache keys")
	}
	if len(n.args) < f.min || f.max >= 0 && len(n.args) > f.max {
		usage := f.name + "(" + f.params + ")"
		c.errorf(n.pos, "%s() takes %s, got %d: %s", f.name, f.arity(), len(n.args), usage)
		return f.result
	}
	if f.check != nil {
		f.check(c, n, args)
	}
	if f.name == "case" && len(args)%2 == 1 {
		return caseResult(args)
	}
	return f.result
}

func (c *checker) compare(n *cmpNode) Type {
	l, r := c.check(n.l), c.check(n.r)
	lk, rk := l.kind(), r.kind()
	if n.op == tEq || n.op == tNe {
		if l.isScalar() && r.isScalar() && lk != rk {
			always := "false"
			if n.op == tNe {
				always = "true"
			}
			c.errorf(n.opPos, "comparing %s with %s using %s is always %s: values of different types are never equal", l.article(), r.article(), opText(n.op), always)
		}
		return Bool
	}
	if lk == kAny && (rk == kAny || rk == kNumber || rk == kString) ||
		rk == kAny && (lk == kNumber || lk == kString) ||
		lk == rk && (lk == kNumber || lk == kString) {
		return Bool
	}
	c.errorf(n.opPos, "cannot compare %s with %s using %s; it compares two numbers or two strings", l.article(), r.article(), opText(n.op))
	return Bool
}

func checkContains(c *checker, n *callNode, args []Type) {
	switch args[0].kind() {
	case kNumber, kBool, kObject, kMap:
		c.errorf(n.args[0].at().pos, "contains() searches a string or an array, not %s", args[0].article())
	}
}

func checkScalarArgs(c *checker, n *callNode, args []Type) {
	for i, t := range args {
		switch t.kind() {
		case kObject, kMap, kArray:
			c.errorf(n.args[i].at().pos, "%s() compares strings, not %s", n.fn.name, t.article())
		}
	}
}

func checkStringArgs(c *checker, n *callNode, args []Type) {
	for i, t := range args {
		if k := t.kind(); k != kString && k != kAny {
			c.errorf(n.args[i].at().pos, "%s() takes glob patterns (strings), not %s", n.fn.name, t.article())
		}
	}
}
