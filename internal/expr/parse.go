package expr

import (
	"strings"
	"unicode/utf8"
)

// Parsing bounds. Run scripts are templates too, so the source limit is
// generous; a longer script belongs in a file in the repository.
const (
	// MaxSourceBytes bounds the text given to Parse, ParseCondition and
	// ParseTemplate.
	MaxSourceBytes = 64 << 10
	// MaxDepth bounds the nesting of an expression: parentheses, '!',
	// function arguments, indexes and comparison chains.
	MaxDepth = 64
)

// Expr is one parsed expression. It is immutable and safe for concurrent
// use.
type Expr struct {
	src      string // the whole source given to Parse*
	pos, end int    // the expression's own text within src
	root     node
}

// String returns the expression's source text, without any surrounding
// `${{ }}` and whitespace.
func (e *Expr) String() string { return e.src[e.pos:e.end] }

// Parse parses one bare expression (no `${{ }}`). The error is an *Error.
func Parse(src string) (_ *Expr, err error) {
	defer guard(&err)
	e, perr := parse(src)
	if perr != nil {
		return nil, perr
	}
	return e, nil
}

// ParseCondition parses the value of an `if:`: a bare expression
// (`always()`), or one wrapped whole in `${{ }}` (`${{ always() }}`).
// Offsets in errors are into src, wrapper included.
func ParseCondition(src string) (_ *Expr, err error) {
	defer guard(&err)
	e, perr := parseCondition(src)
	if perr != nil {
		return nil, perr
	}
	return e, nil
}

func parse(src string) (*Expr, *Error) {
	if err := checkSource(src); err != nil {
		return nil, err
	}
	p := &parser{lx: lexer{src: src}, open: -1}
	return p.parseExpr()
}

func parseCondition(src string) (*Expr, *Error) {
	if !strings.HasPrefix(strings.TrimLeft(src, " \t\r\n"), "${{") {
		return parse(src)
	}
	t, err := parseTemplate(src)
	if err != nil {
		return nil, err
	}
	if len(t.exprs) == 1 {
		seg := t.segs[1] // segs alternate text, expression, text
		if strings.TrimSpace(t.segs[0].text) == "" && strings.TrimSpace(t.segs[2].text) == "" {
			return seg.expr, nil
		}
	}
	for _, s := range t.segs {
		if s.expr == nil && strings.TrimSpace(s.text) != "" {
			return nil, errorf(s.pos+len(s.text)-len(strings.TrimLeft(s.text, " \t\r\n")),
				"text outside ${{ }}: a condition is either a bare expression or one wrapped whole in ${{ }}")
		}
	}
	return nil, errorf(t.segs[3].pos, "a condition is either a bare expression or one wrapped whole in ${{ }}, not several ${{ }}")
}

func checkSource(src string) *Error {
	if len(src) > MaxSourceBytes {
		return errorf(0, "too long: %d bytes (at most %d)", len(src), MaxSourceBytes)
	}
	if !utf8.ValidString(src) {
		for i, r := range src {
			if r == utf8.RuneError {
				if _, n := utf8.DecodeRuneInString(src[i:]); n == 1 {
					return errorf(i, "invalid UTF-8")
				}
			}
		}
	}
	return nil
}

// parser is a recursive-descent parser. Every cycle of recursion passes
// through unary, which bounds it by MaxDepth; the height of every node it
// builds is bounded by MaxDepth too.
type parser struct {
	lx      lexer
	tok     token
	lastEnd int // end of the last consumed token
	depth   int
	open    int // offset of the "${{" being parsed, or -1 for a bare expression
}

func (p *parser) advance() *Error {
	p.lastEnd = p.tok.end
	t, err := p.lx.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

// parseExpr parses a whole expression: to the end of the input when bare, to
// the closing }} in a template.
func (p *parser) parseExpr() (*Expr, *Error) {
	if err := p.advance(); err != nil {
		return nil, err
	}
	start := p.tok.pos
	if p.open >= 0 && p.tok.kind == tClose {
		return nil, errorf(p.open, "empty expression in ${{ }}")
	}
	if p.open < 0 && p.tok.kind == tEOF {
		return nil, errorf(start, "empty expression")
	}
	root, err := p.or()
	if err != nil {
		return nil, err
	}
	want := tEOF
	if p.open >= 0 {
		want = tClose
	}
	if p.tok.kind != want {
		return nil, p.unexpected(" after the expression")
	}
	return &Expr{src: p.lx.src, pos: start, end: p.lastEnd, root: root}, nil
}

func (p *parser) unexpected(where string) *Error {
	if p.tok.kind == tEOF && p.open >= 0 {
		return errorf(p.open, "${{ is not closed with }}")
	}
	if p.tok.kind == tClose && p.open < 0 {
		return errorf(p.tok.pos, "unexpected '}}'%s", where)
	}
	return errorf(p.tok.pos, "unexpected %s%s", p.tok.describe(), where)
}

func (p *parser) tooDeep(n node) *Error {
	if n.at().height > MaxDepth {
		return errorf(n.at().pos, "expression is nested too deeply (more than %d levels)", MaxDepth)
	}
	return nil
}

// Precedence levels, lowest first: || && (== !=) (< <= > >=), then unary.
const (
	levelOr = iota
	levelAnd
	levelEq
	levelCmp
	levelUnary
)

var (
	eqOps  = []tokKind{tEq, tNe}
	cmpOps = []tokKind{tLt, tLe, tGt, tGe}
)

func (p *parser) or() (node, *Error) { return p.level(levelOr) }

func (p *parser) level(l int) (node, *Error) {
	switch l {
	case levelOr:
		return p.logic(tOr, levelAnd)
	case levelAnd:
		return p.logic(tAnd, levelEq)
	case levelEq:
		return p.binary(eqOps, levelCmp)
	case levelCmp:
		return p.binary(cmpOps, levelUnary)
	}
	return p.unary()
}

// logic parses a chain of || or && (op) into one flat node.
func (p *parser) logic(op tokKind, operand int) (node, *Error) {
	first, err := p.level(operand)
	if err != nil || p.tok.kind != op {
		return first, err
	}
	ops := []node{first}
	for p.tok.kind == op {
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.level(operand)
		if err != nil {
			return nil, err
		}
		ops = append(ops, n)
	}
	n := &logicNode{and: op == tAnd, ops: ops}
	n.loc = loc{pos: first.at().pos, end: p.lastEnd, height: heightOf(ops...)}
	return n, nil
}

// binary parses a left-associative chain of the given comparison operators.
func (p *parser) binary(ops []tokKind, operand int) (node, *Error) {
	l, err := p.level(operand)
	if err != nil {
		return nil, err
	}
	for isOneOf(p.tok.kind, ops) {
		op, opPos := p.tok.kind, p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		r, err := p.level(operand)
		if err != nil {
			return nil, err
		}
		n := &cmpNode{op: op, opPos: opPos, l: l, r: r}
		n.loc = loc{pos: l.at().pos, end: p.lastEnd, height: heightOf(l, r)}
		if err := p.tooDeep(n); err != nil {
			return nil, err
		}
		l = n
	}
	return l, nil
}

func isOneOf(k tokKind, ks []tokKind) bool {
	for _, x := range ks {
		if k == x {
			return true
		}
	}
	return false
}

func (p *parser) unary() (node, *Error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > MaxDepth {
		return nil, errorf(p.tok.pos, "expression is nested too deeply (more than %d levels)", MaxDepth)
	}
	if p.tok.kind != tNot {
		return p.postfix()
	}
	pos := p.tok.pos
	if err := p.advance(); err != nil {
		return nil, err
	}
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	n := &notNode{x: x}
	n.loc = loc{pos: pos, end: p.lastEnd, height: heightOf(x)}
	return n, p.tooDeep(n)
}

// postfix parses a primary followed by any number of .name and [index].
func (p *parser) postfix() (node, *Error) {
	base, err := p.primary()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tDot && p.tok.kind != tLBracket {
		return base, nil
	}
	n := &accessNode{base: base}
	h := base.at().height
	for p.tok.kind == tDot || p.tok.kind == tLBracket {
		step := accessStep{pos: p.tok.pos}
		if p.tok.kind == tDot {
			if err := p.advance(); err != nil {
				return nil, err
			}
			if p.tok.kind != tProp {
				return nil, p.unexpected(" after '.'; expected a property name")
			}
			step.name, step.namePos = p.tok.text, p.tok.pos
		} else {
			open := p.tok.pos
			if err := p.advance(); err != nil {
				return nil, err
			}
			if p.tok.kind == tRBracket {
				return nil, errorf(p.tok.pos, "empty index '[]'")
			}
			idx, err := p.or()
			if err != nil {
				return nil, err
			}
			if p.tok.kind != tRBracket {
				if p.tok.kind == tEOF && p.open < 0 {
					return nil, errorf(open, "'[' is not closed with ']'")
				}
				return nil, p.unexpected(" in an index; expected ']'")
			}
			step.index = idx
			h = max(h, idx.at().height)
		}
		step.end = p.tok.end
		if err := p.advance(); err != nil {
			return nil, err
		}
		n.steps = append(n.steps, step)
	}
	n.loc = loc{pos: base.at().pos, end: p.lastEnd, height: h + 1}
	return n, p.tooDeep(n)
}

func (p *parser) primary() (node, *Error) {
	t := p.tok
	leaf := loc{pos: t.pos, end: t.end, height: 1}
	switch t.kind {
	case tNumber:
		return &litNode{loc: leaf, val: t.num}, p.advance()
	case tString:
		return &litNode{loc: leaf, val: t.str}, p.advance()
	case tLParen:
		if err := p.advance(); err != nil {
			return nil, err
		}
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tRParen {
			if p.tok.kind == tEOF && p.open < 0 {
				return nil, errorf(t.pos, "'(' is not closed with ')'")
			}
			return nil, p.unexpected(" in parentheses; expected ')'")
		}
		return x, p.advance()
	case tIdent:
		switch t.text {
		case "true", "false":
			return &litNode{loc: leaf, val: t.text == "true"}, p.advance()
		case "null":
			return &litNode{loc: leaf, val: nil}, p.advance()
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind == tLParen {
			return p.call(t)
		}
		return &ctxNode{loc: leaf, name: t.text}, nil
	}
	return nil, p.unexpected("; expected a value, a name or '('")
}

func (p *parser) call(name token) (node, *Error) {
	open := p.tok.pos
	if err := p.advance(); err != nil {
		return nil, err
	}
	n := &callNode{name: name.text, fn: lookupFunc(name.text)}
	for p.tok.kind != tRParen {
		if len(n.args) > 0 {
			if p.tok.kind != tComma {
				if p.tok.kind == tEOF && p.open < 0 {
					return nil, errorf(open, "'(' is not closed with ')'")
				}
				return nil, p.unexpected(" in the arguments; expected ',' or ')'")
			}
			if err := p.advance(); err != nil {
				return nil, err
			}
		}
		arg, err := p.or()
		if err != nil {
			return nil, err
		}
		n.args = append(n.args, arg)
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	n.loc = loc{pos: name.pos, end: p.lastEnd, height: heightOf(n.args...)}
	return n, p.tooDeep(n)
}
