package expr

import (
	"strconv"
	"strings"
)

type tokKind int

const (
	tEOF      tokKind = iota
	tIdent            // a context or function name, or a keyword (true, false, null)
	tProp             // a property name right after '.', hyphens allowed
	tNumber           // num holds the value
	tString           // str holds the unescaped value
	tDot              // .
	tLBracket         // [
	tRBracket         // ]
	tLParen           // (
	tRParen           // )
	tComma            // ,
	tOr               // ||
	tAnd              // &&
	tEq               // ==
	tNe               // !=
	tLt               // <
	tLe               // <=
	tGt               // >
	tGe               // >=
	tNot              // !
	tClose            // }} (ends a template segment)
)

var tokNames = [...]string{
	tEOF: "end of input", tIdent: "name", tProp: "property name", tNumber: "number",
	tString: "string", tDot: "'.'", tLBracket: "'['", tRBracket: "']'", tLParen: "'('",
	tRParen: "')'", tComma: "','", tOr: "'||'", tAnd: "'&&'", tEq: "'=='", tNe: "'!='",
	tLt: "'<'", tLe: "'<='", tGt: "'>'", tGe: "'>='", tNot: "'!'", tClose: "'}}'",
}

type token struct {
	kind     tokKind
	pos, end int    // byte offsets into the whole source
	text     string // identifiers: the name
	num      float64
	str      string
}

func (t token) describe() string {
	switch t.kind {
	case tIdent, tProp:
		return strconv.Quote(t.text)
	case tNumber, tString:
		return tokNames[t.kind]
	}
	return tokNames[t.kind]
}

// lexer produces tokens on demand. After a '.', a name may contain hyphens
// (`needs.build-linux.result`); elsewhere it may not, which is why the lexer
// remembers the previous token.
type lexer struct {
	src     string
	pos     int
	prevDot bool
	last    tokKind // the kind of the previous token
}

func isSpace(c byte) bool  { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }
func isHex(c byte) bool    { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func (l *lexer) peekByte(off int) byte {
	if l.pos+off < len(l.src) {
		return l.src[l.pos+off]
	}
	return 0
}

func (l *lexer) next() (token, *Error) {
	t, err := l.lex()
	l.last = t.kind
	return t, err
}

func (l *lexer) lex() (token, *Error) {
	for l.pos < len(l.src) && isSpace(l.src[l.pos]) {
		l.pos++
	}
	afterDot := l.prevDot
	l.prevDot = false
	start := l.pos
	if start >= len(l.src) {
		return token{kind: tEOF, pos: start, end: start}, nil
	}
	c := l.src[start]
	switch {
	case isLetter(c):
		return l.name(afterDot), nil
	case l.startsNumber():
		return l.number()
	case c == '\'':
		return l.string()
	}
	two := ""
	if start+2 <= len(l.src) {
		two = l.src[start : start+2]
	}
	switch two {
	case "||":
		return l.op(tOr, 2), nil
	case "&&":
		return l.op(tAnd, 2), nil
	case "==":
		return l.op(tEq, 2), nil
	case "!=":
		return l.op(tNe, 2), nil
	case "<=":
		return l.op(tLe, 2), nil
	case ">=":
		return l.op(tGe, 2), nil
	case "}}":
		return l.op(tClose, 2), nil
	}
	switch c {
	case '.':
		l.prevDot = true
		return l.op(tDot, 1), nil
	case '[':
		return l.op(tLBracket, 1), nil
	case ']':
		return l.op(tRBracket, 1), nil
	case '(':
		return l.op(tLParen, 1), nil
	case ')':
		return l.op(tRParen, 1), nil
	case ',':
		return l.op(tComma, 1), nil
	case '<':
		return l.op(tLt, 1), nil
	case '>':
		return l.op(tGt, 1), nil
	case '!':
		return l.op(tNot, 1), nil
	}
	return token{}, l.badChar(start)
}

func (l *lexer) op(k tokKind, n int) token {
	t := token{kind: k, pos: l.pos, end: l.pos + n}
	l.pos += n
	return t
}

func (l *lexer) badChar(at int) *Error {
	c := l.src[at]
	switch {
	case c == '=':
		return errorf(at, "unexpected '='; compare with '=='")
	case c == '&':
		return errorf(at, "unexpected '&'; the and operator is '&&'")
	case c == '|':
		return errorf(at, "unexpected '|'; the or operator is '||'")
	case c == '"':
		return errorf(at, "unexpected '\"'; strings are in single quotes: 'text'")
	case c == '-' || c == '+':
		return errorf(at, "unexpected '%c'; there is no arithmetic, and a signed number is written %c1", c, c)
	case strings.HasPrefix(l.src[at:], "${{"):
		return errorf(at, "unexpected '${{' inside an expression")
	case c >= 0x80:
		return errorf(at, "unexpected non-ASCII character; names are ASCII letters, digits and '_'")
	}
	return errorf(at, "unexpected character %q", string(c))
}

func (l *lexer) name(afterDot bool) token {
	start := l.pos
	l.pos++
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		if !isLetter(c) && !isDigit(c) && !(afterDot && c == '-') {
			break
		}
		l.pos++
	}
	kind := tIdent
	if afterDot {
		kind = tProp
	}
	return token{kind: kind, pos: start, end: l.pos, text: l.src[start:l.pos]}
}

// startsNumber reports whether a number starts here: a digit, or '.', '-'
// or '+' before one (`.5`, `-1`, `+.5`), as GitHub Actions accepts. After a
// value, '.' reads a property (`a.1` is a bad property name, not a number).
func (l *lexer) startsNumber() bool {
	if l.peekByte(0) == '.' {
		switch l.last {
		case tIdent, tProp, tNumber, tString, tRBracket, tRParen:
			return false
		}
	}
	i := 0
	if c := l.peekByte(0); c == '-' || c == '+' {
		i++
	}
	if l.peekByte(i) == '.' {
		i++
	}
	return isDigit(l.peekByte(i))
}

// number lexes decimal numbers (`1`, `.5`, `1.5e3`, with an optional sign)
// and unsigned 0x hexadecimal and 0o octal integers. A sign before 0x or 0o
// is refused, as GitHub Actions refuses it (`-0xFF`).
func (l *lexer) number() (token, *Error) {
	start := l.pos
	sign := l.peekByte(0)
	signed := sign == '-' || sign == '+'
	if signed {
		l.pos++
	}
	digits := func(ok func(byte) bool) int {
		n := 0
		for l.pos < len(l.src) && ok(l.src[l.pos]) {
			l.pos++
			n++
		}
		return n
	}
	var v float64
	if base, name := radix(l.peekByte(0), l.peekByte(1)); base != 0 {
		if signed {
			return token{}, errorf(start, "%s number cannot have a sign; write it in decimal (-255, not -0xff)", article(name))
		}
		l.pos += 2
		numStart := l.pos
		isDigitOf := isHex
		if base == 8 {
			isDigitOf = func(c byte) bool { return c >= '0' && c <= '7' }
		}
		if digits(isDigitOf) == 0 {
			return token{}, errorf(start, "invalid %s number: %q must be followed by its digits", name, l.src[start:numStart])
		}
		u, err := strconv.ParseUint(l.src[numStart:l.pos], base, 64)
		if err != nil {
			return token{}, errorf(start, "number %s is out of range", l.src[start:l.pos])
		}
		v = float64(u)
	} else {
		digits(isDigit)
		if l.peekByte(0) == '.' {
			l.pos++
			if digits(isDigit) == 0 {
				return token{}, errorf(start, "invalid number: a '.' must be followed by digits")
			}
		}
		if c := l.peekByte(0); c == 'e' || c == 'E' {
			l.pos++
			if c := l.peekByte(0); c == '+' || c == '-' {
				l.pos++
			}
			if digits(isDigit) == 0 {
				return token{}, errorf(start, "invalid number: the exponent has no digits")
			}
		}
		f, err := strconv.ParseFloat(l.src[start:l.pos], 64)
		if err != nil {
			return token{}, errorf(start, "number %.40s is out of range", l.src[start:l.pos])
		}
		v = f
	}
	if c := l.peekByte(0); isLetter(c) || isDigit(c) || c == '.' {
		return token{}, errorf(start, "invalid number %.40q", l.src[start:min(l.pos+1, len(l.src))])
	}
	return token{kind: tNumber, pos: start, end: l.pos, num: v}, nil
}

// radix recognizes the 0x (hexadecimal) and 0o (octal) prefixes.
func radix(c0, c1 byte) (int, string) {
	if c0 != '0' {
		return 0, ""
	}
	switch c1 {
	case 'x', 'X':
		return 16, "hexadecimal"
	case 'o', 'O':
		return 8, "octal"
	}
	return 0, ""
}

// string lexes a single-quoted string; a quote inside is written twice.
func (l *lexer) string() (token, *Error) {
	start := l.pos
	l.pos++
	var b strings.Builder
	for {
		i := strings.IndexByte(l.src[l.pos:], '\'')
		if i < 0 {
			return token{}, errorf(start, "unterminated string: no closing quote (a quote inside a string is written '')")
		}
		b.WriteString(l.src[l.pos : l.pos+i])
		l.pos += i + 1
		if l.peekByte(0) != '\'' {
			break
		}
		b.WriteByte('\'')
		l.pos++
	}
	return token{kind: tString, pos: start, end: l.pos, str: b.String()}, nil
}

func article(name string) string {
	if name == "octal" {
		return "an " + name
	}
	return "a " + name
}
