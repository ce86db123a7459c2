package workflow

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// site is an expression-bearing value waiting to be type-checked once the
// whole workflow (and so every context) is known.
type site struct {
	n    *yaml.Node
	key  string
	loc  Location
	job  *Job
	tmpl *expr.Template
	cond *expr.Expr
}

// text parses a value that may hold ${{ }} expressions. A syntax error is
// reported at once; the type check waits for checkExpressions.
func (p *parser) text(n *yaml.Node, key string, loc Location, job *Job) *expr.Template {
	t, err := expr.ParseTemplate(n.Value)
	if err != nil {
		p.exprError(n, key, err)
		return nil
	}
	if !t.IsLiteral() {
		p.sites = append(p.sites, site{n: n, key: key, loc: loc, job: job, tmpl: t})
	}
	return t
}

// cond parses an `if:` condition: a bare expression or one wrapped whole
// in ${{ }}.
func (p *parser) cond(n *yaml.Node, key string, loc Location, job *Job) *expr.Expr {
	if n.Kind != yaml.ScalarNode || isNull(n) || strings.TrimSpace(n.Value) == "" {
		p.errorf(n, "%s: expected a condition such as always() or ${{ event.branch == 'main' }}, found %s", key, describe(n))
		return nil
	}
	e, err := expr.ParseCondition(n.Value)
	if err != nil {
		p.exprError(n, key, err)
		return nil
	}
	p.sites = append(p.sites, site{n: n, key: key, loc: loc, job: job, cond: e})
	return e
}

// exprError reports an expr error at its position in the file.
func (p *parser) exprError(n *yaml.Node, key string, err error) {
	var ee *expr.Error
	if !errors.As(err, &ee) {
		p.errorf(n, "%s: %v", key, err)
		return
	}
	line, col := p.exprPos(n, ee.Offset)
	p.errorAt(line, col, "%s: %s", key, ee.Msg)
}

// checkExpressions type-checks every expression against the contexts
// available where it stands.
func (p *parser) checkExpressions() {
	for _, s := range p.sites {
		scope := ScopeFor(s.loc, p.w, s.job)
		var errs []*expr.Error
		if s.tmpl != nil {
			errs = s.tmpl.Check(scope)
		} else {
			_, errs = s.cond.Check(scope)
		}
		for _, e := range errs {
			line, col := p.exprPos(s.n, e.Offset)
			msg := e.Msg
			if s.job != nil && s.job.Matrix == nil && strings.HasPrefix(msg, "matrix has no field") {
				msg += fmt.Sprintf(" (job %q has no matrix)", s.job.ID)
			}
			p.errorAt(line, col, "%s: %s", s.key, msg)
		}
	}
}

// exprPos maps a byte offset into a scalar's value to a line and column of
// the file: exactly for plain and quoted one-line scalars and for literal
// (|) blocks; at the scalar's own position otherwise.
func (p *parser) exprPos(n *yaml.Node, off int) (int, int) {
	v := n.Value
	if off < 0 || off > len(v) || n.Line < 1 || n.Line > len(p.lineStart) {
		return n.Line, n.Column
	}
	switch n.Style {
	case 0: // plain
		if !strings.Contains(v, "\n") {
			return n.Line, n.Column + utf8.RuneCountInString(v[:off])
		}
	case yaml.SingleQuotedStyle, yaml.DoubleQuotedStyle:
		if raw, ok := p.quotedPrefix(n, off); ok {
			return n.Line, n.Column + 1 + utf8.RuneCountInString(raw)
		}
	case yaml.LiteralStyle:
		return p.literalPos(n, off)
	}
	return n.Line, n.Column
}

// quotedPrefix returns the raw source text of a one-line quoted scalar that
// decodes to v[:off], by decoding the source alongside.
func (p *parser) quotedPrefix(n *yaml.Node, off int) (string, bool) {
	start := p.offsetOf(n.Line, n.Column) + 1 // after the opening quote
	end := lineEnd(p.data, start)
	if start > end {
		return "", false
	}
	raw := string(p.data[start:end])
	decoded := 0
	for i := 0; i < len(raw); {
		if decoded == off {
			return raw[:i], true
		}
		c := raw[i]
		switch {
		case n.Style == yaml.SingleQuotedStyle && c == '\'':
			if i+1 < len(raw) && raw[i+1] == '\'' {
				i, decoded = i+2, decoded+1
				continue
			}
			return "", false // the closing quote: off is past the value
		case n.Style == yaml.DoubleQuotedStyle && c == '"':
			return "", false
		case n.Style == yaml.DoubleQuotedStyle && c == '\\':
			size, width := escapeSizes(raw[i:])
			if size == 0 {
				return "", false
			}
			i, decoded = i+size, decoded+width
			continue
		}
		i, decoded = i+1, decoded+1
	}
	return "", false
}

// escapeSizes returns the source length of a double-quoted escape and the
// byte length of what it decodes to (0, 0 when unknown).
func escapeSizes(s string) (int, int) {
	if len(s) < 2 {
		return 0, 0
	}
	hexRune := func(digits int) (int, int) {
		if len(s) < 2+digits {
			return 0, 0
		}
		var r rune
		for _, c := range s[2 : 2+digits] {
			r <<= 4
			switch {
			case c >= '0' && c <= '9':
				r |= c - '0'
			case c >= 'a' && c <= 'f':
				r |= c - 'a' + 10
			case c >= 'A' && c <= 'F':
				r |= c - 'A' + 10
			default:
				return 0, 0
			}
		}
		if digits == 2 {
			return 4, utf8.RuneLen(r) // \xNN is a code point, as in yaml.v3
		}
		return 2 + digits, utf8.RuneLen(r)
	}
	switch s[1] {
	case 'x':
		return hexRune(2)
	case 'u':
		return hexRune(4)
	case 'U':
		return hexRune(8)
	case 'N', '_':
		return 2, 2 // U+0085, U+00A0: two bytes each
	case 'L', 'P':
		return 2, 3 // U+2028, U+2029
	}
	return 2, 1
}

// literalPos maps an offset into a literal block scalar: value line i is
// source line n.Line+1+i, indented by the block's indentation.
func (p *parser) literalPos(n *yaml.Node, off int) (int, int) {
	before := n.Value[:off]
	i := strings.Count(before, "\n")
	lineInValue := before[strings.LastIndexByte(before, '\n')+1:]
	line := n.Line + 1 + i
	if line > len(p.lineStart) {
		return n.Line, n.Column
	}
	indent := p.blockIndent(n.Line + 1)
	return line, indent + 1 + utf8.RuneCountInString(lineInValue)
}

// blockIndent is the indentation of the first non-blank line from line on.
func (p *parser) blockIndent(line int) int {
	for l := line; l <= len(p.lineStart); l++ {
		start := p.lineStart[l-1]
		end := lineEnd(p.data, start)
		text := p.data[start:end]
		trimmed := strings.TrimLeft(string(text), " ")
		if strings.TrimSpace(trimmed) != "" {
			return len(text) - len(trimmed)
		}
	}
	return 0
}

// offsetOf converts a 1-based line and rune column to a byte offset.
func (p *parser) offsetOf(line, col int) int {
	off := p.lineStart[line-1]
	for c := 1; c < col && off < len(p.data); c++ {
		_, size := utf8.DecodeRune(p.data[off:])
		off += size
	}
	return off
}
