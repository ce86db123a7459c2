package expr

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/kilnci/kiln/internal/jsonwire"
)

// The functions that turn data into text and back (toJSON, fromJSON, join)
// and case(), the one function whose arguments are evaluated lazily.

func init() {
	for _, f := range []*function{
		{name: "toJSON", params: "value", min: 1, max: 1, result: String, eval: evalToJSON},
		{name: "fromJSON", params: "text", min: 1, max: 1, result: Any, check: checkScalarText, eval: evalFromJSON},
		{name: "join", params: "array, separator", min: 1, max: 2, result: String, check: checkJoin, eval: evalJoin},
		{name: "case", params: "condition, value, …, default", min: 3, max: -1, result: Any, check: checkCase, lazy: evalCase},
	} {
		functions[strings.ToLower(f.name)] = f
	}
}

// evalToJSON writes the value as JSON indented by two spaces, keys sorted,
// as GitHub Actions indents it; the text is bounded by MaxStringBytes.
func evalToJSON(ev *evaluator, n *callNode, args []any) (any, *Error) {
	limit := ev.limits.MaxStringBytes
	b := appendJSONIndent(nil, args[0], 0, limit)
	if len(b) > limit {
		return nil, errorf(n.pos, "toJSON() would produce more than the limit of %d bytes", limit)
	}
	if err := ev.chargeBytes(len(b), n.pos); err != nil {
		return nil, err
	}
	return string(b), nil
}

// evalFromJSON parses JSON text into a value. Numbers become float64 as
// everywhere else, and a value nested deeper than maxValueDepth is refused,
// so what it returns can be compared and rendered like any context.
func evalFromJSON(ev *evaluator, n *callNode, args []any) (any, *Error) {
	s, ok := scalarText(args[0])
	if !ok {
		return nil, errorf(n.args[0].at().pos, "fromJSON() parses a string, not %s", kindNames[kindOf(norm(args[0]))])
	}
	if err := ev.chargeBytes(len(s), n.pos); err != nil {
		return nil, err
	}
	if strings.TrimSpace(s) == "" {
		return nil, errorf(n.pos, "fromJSON() got an empty string, which is not JSON")
	}
	if d := jsonDepth(s); d > maxValueDepth {
		return nil, errorf(n.pos, "fromJSON(): the JSON is nested more than %d levels deep", maxValueDepth)
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) { // only a number too large for a float64
			return nil, errorf(n.pos, "fromJSON(): a number in the JSON is out of range")
		}
		return nil, errorf(n.pos, "fromJSON(): the text is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return v, nil
}

// jsonDepth is the deepest nesting of brackets outside strings; the text
// need not be valid JSON.
func jsonDepth(s string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

func checkScalarText(c *checker, n *callNode, args []Type) {
	switch args[0].kind() {
	case kObject, kMap, kArray:
		c.errorf(n.args[0].at().pos, "%s() parses a string, not %s", n.fn.name, args[0].article())
	}
}

func checkJoin(c *checker, n *callNode, args []Type) {
	if len(args) == 2 {
		switch args[1].kind() {
		case kObject, kMap, kArray:
			c.errorf(n.args[1].at().pos, "join()'s separator is a string, not %s", args[1].article())
		}
	}
}

// evalJoin joins an array's elements as text with the separator (',' by
// default); any other value is its own text, as in GitHub Actions.
func evalJoin(ev *evaluator, n *callNode, args []any) (any, *Error) {
	sep := ","
	if len(args) == 2 {
		s, ok := scalarText(args[1])
		if !ok {
			return nil, errorf(n.args[1].at().pos, "join()'s separator is a string, not %s", kindNames[kindOf(norm(args[1]))])
		}
		sep = s
	}
	v := norm(args[0])
	limit := ev.limits.MaxStringBytes
	if kindOf(v) != vArray {
		b, err := appendString(nil, v, limit)
		if err != nil {
			return nil, errorf(n.pos, "join() would produce more than the limit of %d bytes", limit)
		}
		return string(b), ev.chargeBytes(len(b), n.pos)
	}
	var b []byte
	for i := range arrayLen(v) {
		if err := ev.step(n.pos); err != nil {
			return nil, err
		}
		if i > 0 {
			b = append(b, sep...)
		}
		var err error
		if b, err = appendString(b, arrayAt(v, i), limit); err != nil || len(b) > limit {
			return nil, errorf(n.pos, "join() would produce more than the limit of %d bytes", limit)
		}
	}
	return string(b), ev.chargeBytes(len(b), n.pos)
}

// checkCase wants an odd number of arguments and conditions that can be
// booleans.
func checkCase(c *checker, n *callNode, args []Type) {
	if len(args)%2 == 0 {
		c.errorf(n.pos, "case() takes pairs of a condition and a value, then a default value: an odd number of arguments, got %d", len(args))
		return
	}
	for i := 0; i < len(args)-1; i += 2 {
		if k := args[i].kind(); k != kBool && k != kAny {
			c.errorf(n.args[i].at().pos, "case() condition %d is %s; a condition is a boolean (compare it: x == 'value')", i/2+1, args[i].article())
		}
	}
}

// caseResult is case()'s type: the values' type when they all have one.
func caseResult(args []Type) Type {
	t := args[1]
	for i := 3; i < len(args); i += 2 {
		if !sameType(t, args[i]) {
			return Any
		}
	}
	if !sameType(t, args[len(args)-1]) {
		return Any
	}
	return t
}

// evalCase evaluates the conditions in order and only the value it returns:
// the one after the first true condition, else the last argument.
func evalCase(ev *evaluator, n *callNode) (any, *Error) {
	if len(n.args)%2 == 0 {
		return nil, errorf(n.pos, "case() takes pairs of a condition and a value, then a default value: an odd number of arguments, got %d", len(n.args))
	}
	for i := 0; i < len(n.args)-1; i += 2 {
		v, err := ev.eval(n.args[i])
		if err != nil {
			return nil, err
		}
		b, ok := v.(bool)
		if !ok {
			return nil, errorf(n.args[i].at().pos, "case() condition %d is %s, not a boolean", i/2+1, kindNames[kindOf(norm(v))])
		}
		if b {
			return ev.eval(n.args[i+1])
		}
	}
	return ev.eval(n.args[len(n.args)-1])
}

// appendJSONIndent is appendJSON with each element on its own line,
// indented two spaces per level.
func appendJSONIndent(b []byte, v any, depth, limit int) []byte {
	v = norm(v)
	k := kindOf(v)
	if len(b) > limit || depth > maxValueDepth || k != vArray && k != vObject {
		return appendJSON(b, v, depth, limit)
	}
	open, close, n := byte('['), byte(']'), arrayLen(v)
	var keys []string
	if k == vObject {
		open, close, keys = '{', '}', objectKeys(v)
		n = len(keys)
	}
	b = append(b, open)
	if n == 0 {
		return append(b, close)
	}
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendIndent(b, depth+1)
		elem := any(nil)
		if k == vObject {
			b = jsonwire.AppendString(b, keys[i])
			b = append(b, ": "...)
			elem = objectGet(v, keys[i])
		} else {
			elem = arrayAt(v, i)
		}
		b = appendJSONIndent(b, elem, depth+1, limit)
		if len(b) > limit {
			return b
		}
	}
	b = appendIndent(b, depth)
	return append(b, close)
}

func appendIndent(b []byte, depth int) []byte {
	b = append(b, '\n')
	for range depth {
		b = append(b, ' ', ' ')
	}
	return b
}
