package expr

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
)

// Template is text with zero or more `${{ expr }}` segments. It is
// immutable and safe for concurrent use.
type Template struct {
	src   string
	segs  []segment // text, expr, text, …, text: always 2·len(exprs)+1 segments
	exprs []*Expr
}

// segment is literal text (expr == nil) or one `${{ }}`; pos is where it
// starts in the source.
type segment struct {
	pos  int
	text string
	expr *Expr
}

// ParseTemplate parses text with zero or more `${{ }}` segments. There is no
// escape for a literal "${{", and one that is not closed by "}}" is an
// error (*Error). "}}" inside a string literal does not close a segment.
func ParseTemplate(src string) (_ *Template, err error) {
	defer guard(&err)
	t, perr := parseTemplate(src)
	if perr != nil {
		return nil, perr
	}
	return t, nil
}

func parseTemplate(src string) (*Template, *Error) {
	if err := checkSource(src); err != nil {
		return nil, err
	}
	t := &Template{src: src}
	i := 0
	for {
		j := strings.Index(src[i:], "${{")
		if j < 0 {
			t.segs = append(t.segs, segment{pos: i, text: src[i:]})
			return t, nil
		}
		open := i + j
		t.segs = append(t.segs, segment{pos: i, text: src[i:open]})
		p := &parser{lx: lexer{src: src, pos: open + 3}, open: open}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		t.segs = append(t.segs, segment{pos: open, expr: e})
		t.exprs = append(t.exprs, e)
		i = p.tok.end // after the closing }}
	}
}

// Source returns the template's text as given to ParseTemplate.
func (t *Template) Source() string { return t.src }

// IsLiteral reports whether the template has no `${{ }}`.
func (t *Template) IsLiteral() bool { return len(t.exprs) == 0 }

// Exprs returns the template's expressions in order. Their offsets are into
// the template's source.
func (t *Template) Exprs() []*Expr { return slices.Clone(t.exprs) }

// Check type-checks every expression of the template and returns all errors.
func (t *Template) Check(s *Scope) (errs []*Error) {
	defer func() {
		if r := recover(); r != nil {
			errs = append(errs, internalError(r))
		}
	}()
	return t.check(s)
}

func (t *Template) check(s *Scope) []*Error {
	var errs []*Error
	for _, e := range t.exprs {
		_, es := e.check(s)
		errs = append(errs, es...)
	}
	return errs
}

// Render evaluates the template: its literal text with each `${{ }}`
// replaced by the ToString of its value. The limits apply to the template as
// a whole. Never use Render to build a shell script: see Substitute.
func (t *Template) Render(env *Env) (_ string, err error) {
	defer guard(&err)
	s, rerr := t.render(env)
	if rerr != nil {
		return "", rerr
	}
	return s, nil
}

func (t *Template) render(env *Env) (string, *Error) {
	ev := newEvaluator(env)
	limit := ev.limits.MaxStringBytes
	var b []byte
	for _, s := range t.segs {
		if s.expr == nil {
			b = append(b, s.text...)
			continue
		}
		n := len(b)
		var err *Error
		if b, err = ev.renderValue(b, s.expr, limit); err != nil {
			return "", err
		}
		if err := ev.chargeBytes(len(b)-n, s.expr.pos); err != nil {
			return "", err
		}
	}
	if len(b) > limit {
		return "", errorf(0, "the rendered text is longer than the limit of %d bytes", limit)
	}
	return string(b), nil
}

// renderValue evaluates e and appends its text to b, failing once b would
// pass limit bytes.
func (ev *evaluator) renderValue(b []byte, e *Expr, limit int) ([]byte, *Error) {
	v, err := ev.eval(e.root)
	if err != nil {
		return nil, err
	}
	b, aerr := appendString(b, v, limit)
	if aerr != nil {
		return nil, errorf(e.pos, "the rendered text is longer than the limit of %d bytes", ev.limits.MaxStringBytes)
	}
	return b, nil
}

// Var is an environment variable carrying one expression's value.
type Var struct{ Name, Value string }

// Substitute prepares a template for a shell script without ever pasting a
// value into the script's text: the n-th `${{ }}` (n = 1, 2, …) becomes
// "${<prefix><n>}" and its rendered value is returned as Var{prefix+n,
// value}, for the caller to put in the script's environment. A hostile
// value is then data to the shell, never code; inside double quotes it is
// not even split into words. prefix must be a shell variable name such as
// "KILN_EXPR_". The limits apply to the template as a whole.
func (t *Template) Substitute(env *Env, prefix string) (text string, vars []Var, err error) {
	defer guard(&err)
	text, vars, serr := t.substitute(env, prefix)
	if serr != nil {
		return "", nil, serr
	}
	return text, vars, nil
}

func (t *Template) substitute(env *Env, prefix string) (string, []Var, *Error) {
	if !validVarPrefix(prefix) {
		return "", nil, errorf(0, "invalid variable prefix %q: it must be a shell variable name", prefix)
	}
	ev := newEvaluator(env)
	budget := ev.limits.MaxStringBytes // for all values together
	var text strings.Builder
	vars := make([]Var, 0, len(t.exprs))
	var buf []byte
	for _, s := range t.segs {
		if s.expr == nil {
			text.WriteString(s.text)
			continue
		}
		var err *Error
		if buf, err = ev.renderValue(buf[:0], s.expr, budget); err != nil {
			return "", nil, err
		}
		if err := ev.chargeBytes(len(buf), s.expr.pos); err != nil {
			return "", nil, err
		}
		budget -= len(buf)
		if bytes.IndexByte(buf, 0) >= 0 {
			return "", nil, errorf(s.expr.pos, "the value contains a NUL byte, which an environment variable cannot hold")
		}
		name := prefix + strconv.Itoa(len(vars)+1)
		vars = append(vars, Var{Name: name, Value: string(buf)})
		text.WriteString("${" + name + "}")
	}
	return text.String(), vars, nil
}

func validVarPrefix(p string) bool {
	if p == "" || !isLetter(p[0]) {
		return false
	}
	for i := 1; i < len(p); i++ {
		if !isLetter(p[i]) && !isDigit(p[i]) {
			return false
		}
	}
	return true
}
