package expr

import (
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
)

// function is one built-in. Names are case-insensitive; name is the
// canonical spelling used in messages.
type function struct {
	name     string
	params   string // for messages: "haystack, needle"
	min, max int    // argument counts; max < 0: no upper bound
	status   bool   // success(), failure(), …: only where Scope.StatusFuncs
	hash     bool   // hashFiles(): only where Scope.HashFiles
	result   Type
	check    func(c *checker, n *callNode, args []Type) // argument types; nil: anything goes
	eval     func(ev *evaluator, n *callNode, args []any) (any, *Error)
	// lazy, when set instead of eval, gets the arguments unevaluated (case()).
	lazy func(ev *evaluator, n *callNode) (any, *Error)
}

var functions = map[string]*function{}

func init() {
	for _, f := range []*function{
		{name: "contains", params: "haystack, needle", min: 2, max: 2, result: Bool, check: checkContains, eval: evalContains},
		{name: "startsWith", params: "string, prefix", min: 2, max: 2, result: Bool, check: checkScalarArgs, eval: evalAffix(strings.HasPrefix)},
		{name: "endsWith", params: "string, suffix", min: 2, max: 2, result: Bool, check: checkScalarArgs, eval: evalAffix(strings.HasSuffix)},
		{name: "format", params: "format, args…", min: 1, max: -1, result: String, check: checkFormat, eval: evalFormat},
		{name: "hashFiles", params: "pattern, …", min: 1, max: -1, hash: true, result: String, check: checkStringArgs, eval: evalHashFiles},
		{name: "success", min: 0, max: 0, status: true, result: Bool, eval: evalStatus(kiln.ResultSuccess)},
		{name: "failure", min: 0, max: 0, status: true, result: Bool, eval: evalStatus(kiln.ResultFailure)},
		{name: "cancelled", min: 0, max: 0, status: true, result: Bool, eval: evalStatus(kiln.ResultCancelled)},
		{name: "always", min: 0, max: 0, status: true, result: Bool, eval: evalStatus("")},
	} {
		functions[strings.ToLower(f.name)] = f
	}
}

func lookupFunc(name string) *function { return functions[strings.ToLower(name)] }

func (f *function) arity() string {
	switch {
	case f.max < 0:
		return "at least " + plural(f.min, "argument")
	case f.min == f.max:
		return plural(f.min, "argument")
	}
	return strconv.Itoa(f.min) + " to " + plural(f.max, "argument")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func (ev *evaluator) call(n *callNode) (any, *Error) {
	f := n.fn
	if f == nil {
		return nil, errorf(n.pos, "unknown function %q", n.name)
	}
	if len(n.args) < f.min || f.max >= 0 && len(n.args) > f.max {
		return nil, errorf(n.pos, "%s() takes %s, got %d", f.name, f.arity(), len(n.args))
	}
	if f.lazy != nil {
		return f.lazy(ev, n)
	}
	args := make([]any, len(n.args))
	for i, a := range n.args {
		v, err := ev.eval(a)
		if err != nil {
			return nil, err
		}
		args[i] = v
	}
	return f.eval(ev, n, args)
}

// scalarText is the text of a scalar argument (nil is ""); ok is false for
// arrays, objects and opaque values.
func scalarText(v any) (string, bool) {
	switch kindOf(norm(v)) {
	case vArray, vObject, vOther:
		return "", false
	}
	return ToString(v), true
}

// Case-insensitive comparisons fold both sides (foldString); they read
// every byte, so each KiB costs a step.
func (ev *evaluator) lower(s string, pos int) (string, *Error) {
	if err := ev.chargeBytes(len(s), pos); err != nil {
		return "", err
	}
	return foldString(s), nil
}

func (ev *evaluator) chargeBytes(n, pos int) *Error { return ev.charge(n>>10, pos) }

func evalContains(ev *evaluator, n *callNode, args []any) (any, *Error) {
	hay, needle := norm(args[0]), args[1]
	switch kindOf(hay) {
	case vNull:
		return false, nil
	case vArray:
		for i := range arrayLen(hay) {
			if err := ev.step(n.pos); err != nil {
				return nil, err
			}
			eq, err := ev.equal(arrayAt(hay, i), needle, 0, n.pos)
			if err != nil || eq {
				return eq, err
			}
		}
		return false, nil
	case vObject, vOther:
		return nil, errorf(n.args[0].at().pos, "contains() searches a string or an array, not %s", kindNames[kindOf(hay)])
	}
	ns, ok := scalarText(needle)
	if !ok {
		return false, nil
	}
	h, err := ev.lower(ToString(hay), n.pos)
	if err != nil {
		return nil, err
	}
	if ns, err = ev.lower(ns, n.pos); err != nil {
		return nil, err
	}
	return strings.Contains(h, ns), nil
}

func evalAffix(has func(s, affix string) bool) func(*evaluator, *callNode, []any) (any, *Error) {
	return func(ev *evaluator, n *callNode, args []any) (any, *Error) {
		var s [2]string
		for i := range s {
			t, ok := scalarText(args[i])
			if !ok {
				return nil, errorf(n.args[i].at().pos, "%s() compares strings, not %s", n.fn.name, kindNames[kindOf(norm(args[i]))])
			}
			var err *Error
			if s[i], err = ev.lower(t, n.pos); err != nil {
				return nil, err
			}
		}
		return has(s[0], s[1]), nil
	}
}

func evalHashFiles(ev *evaluator, n *callNode, args []any) (any, *Error) {
	patterns := make([]string, len(args))
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			return nil, errorf(n.args[i].at().pos, "hashFiles() takes glob patterns (strings), not %s", kindNames[kindOf(norm(a))])
		}
		patterns[i] = s
	}
	if ev.env.HashFiles == nil {
		return nil, errorf(n.pos, "hashFiles() is not available here")
	}
	sum, err := ev.env.HashFiles(patterns)
	if err != nil {
		return nil, errorf(n.pos, "hashFiles(): %v", err)
	}
	return sum, nil
}

// evalStatus returns a status function; want "" is always().
func evalStatus(want kiln.Result) func(*evaluator, *callNode, []any) (any, *Error) {
	return func(ev *evaluator, _ *callNode, _ []any) (any, *Error) {
		if want == "" {
			return true, nil
		}
		got := ev.env.JobStatus
		if got == "" {
			got = kiln.ResultSuccess
		}
		return got == want, nil
	}
}
