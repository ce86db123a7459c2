package expr

import (
	"errors"
	"strings"
	"testing"
)

func TestParseGood(t *testing.T) {
	cases := []string{
		"true", "false", "null", "0", "-1", "1.5", "-0.25e-3", "2E+10", "0x1f", "0XFF", "007", ".5", "+1", "-.5", "0o17",
		"'it''s'", "''", "event", "_x9", "event.branch", "needs.build-linux.result",
		"needs.build-linux-.result", "a.b_c-d.e", "a . b", "a['key']", "a[0]", "a[b.c]", "a[b[c[0]]]",
		"needs['build (1.26)'].outputs.version", "!a", "!!a", "a || b && c", "(a || b) && c",
		"a == b", "a != b", "a < b", "a <= b", "a > b", "a >= b", "a == b == c",
		"contains(a, 'x')", "CONTAINS(a, 'x')", "success()", "format('{0}', a, b, c)", "f()",
		"a.true", "a.null.if", "  \t\n a \r\n ", "a[0].b['c'][1]", "(a)[0]", "'x'.y",
	}
	for _, src := range cases {
		e, err := Parse(src)
		if err != nil {
			t.Errorf("Parse(%q): %v", src, err)
			continue
		}
		if got := e.String(); got != strings.TrimSpace(src) {
			t.Errorf("Parse(%q).String() = %q", src, got)
		}
	}
}

func TestParseBad(t *testing.T) {
	deepParens := strings.Repeat("(", MaxDepth+1) + "a" + strings.Repeat(")", MaxDepth+1)
	cases := []struct {
		src  string
		off  int
		want string
	}{
		{"", 0, "empty expression"},
		{"   ", 3, "empty expression"},
		{"a ==", 4, "unexpected end of input"},
		{"a || ", 5, "unexpected end of input"},
		{"!", 1, "unexpected end of input"},
		{"a = b", 2, "compare with '=='"},
		{"a & b", 2, "'&&'"},
		{"a | b", 2, "'||'"},
		{`"x"`, 0, "single quotes"},
		{"'abc", 0, "unterminated string"},
		{"'it''s", 0, "unterminated string"},
		{"a.1", 2, "unexpected number after '.'"},
		{"a.", 2, "unexpected end of input after '.'"},
		{"a.-b", 2, "unexpected '-'"},
		{"a.b(1)", 3, "unexpected '(' after the expression"},
		{"(a", 0, "'(' is not closed"},
		{"(a b", 3, "in parentheses"},
		{"a[0", 1, "'[' is not closed"},
		{"a[0 1]", 4, "in an index"},
		{"a[]", 2, "empty index"},
		{"f(a,)", 4, "unexpected ')'"},
		{"f(a b)", 4, "expected ',' or ')'"},
		{"f(a", 1, "'(' is not closed"},
		{"1abc", 0, "invalid number"},
		{"1.2.3", 0, "invalid number"},
		{"0x", 0, "invalid hexadecimal number"},
		// B236: a sign before 0x or 0o is refused, as GitHub Actions refuses it
		{"-0xFF", 0, "a hexadecimal number cannot have a sign"},
		{"+0x1", 0, "a hexadecimal number cannot have a sign"},
		{"-0o17", 0, "an octal number cannot have a sign"},
		{"0o8", 0, "invalid octal number"},
		{"0o", 0, "invalid octal number"},
		{"+", 0, "unexpected '+'"},
		{"+a", 0, "unexpected '+'"},
		{"1 + 1", 2, "unexpected '+'"},
		{"1 +1", 2, "unexpected number"},
		{"0xfg", 0, "invalid number"},
		{"1e", 0, "exponent has no digits"},
		{"1.", 0, "'.' must be followed by digits"},
		{"1e999", 0, "out of range"},
		{"0x1ffffffffffffffff", 0, "out of range"},
		{"-", 0, "unexpected '-'"},
		{"a - 1", 2, "unexpected '-'"},
		{"a }} b", 2, "unexpected '}}'"},
		{"${{ a }}", 0, "unexpected '${{'"},
		{"a b", 2, `unexpected "b" after the expression`},
		{")", 0, "unexpected ')'"},
		{"a ? b : c", 2, `unexpected character "?"`},
		{"é", 0, "non-ASCII"},
		{"a == 'ok' \xff", 10, "invalid UTF-8"},
		{"a\x00", 1, `unexpected character "\x00"`},
		{deepParens, MaxDepth, "nested too deeply"},
		{strings.Repeat("!", MaxDepth+1) + "a", MaxDepth, "nested too deeply"},
		{strings.Repeat("a == ", MaxDepth+1) + "a", 0, "nested too deeply"},
		{strings.Repeat("f(", MaxDepth+1) + strings.Repeat(")", MaxDepth+1), 2 * MaxDepth, "nested too deeply"},
		{strings.Repeat("a[", MaxDepth+1) + "0" + strings.Repeat("]", MaxDepth+1), 2 * MaxDepth, "nested too deeply"},
		{strings.Repeat("x", MaxSourceBytes+1), 0, "too long"},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%.40q) = %v, want an *Error", c.src, err)
			continue
		}
		if e.Offset != c.off || !strings.Contains(e.Msg, c.want) {
			t.Errorf("Parse(%.40q) = offset %d %q, want offset %d containing %q", c.src, e.Offset, e.Msg, c.off, c.want)
		}
	}
}

// Long flat chains are not nesting: they parse however long they are.
func TestParseLongFlatChains(t *testing.T) {
	for _, src := range []string{
		strings.Repeat("a || ", 1000) + "a",
		strings.Repeat("a && ", 1000) + "a",
		"a" + strings.Repeat(".b", 1000),
		"a" + strings.Repeat("[0]", 1000),
		"f(" + strings.Repeat("a, ", 1000) + "a)",
	} {
		if _, err := Parse(src); err != nil {
			t.Errorf("Parse(%.30q…): %v", src, err)
		}
	}
}

func TestParseCondition(t *testing.T) {
	good := []struct{ src, text string }{
		{"always()", "always()"},
		{"${{ always() }}", "always()"},
		{"  ${{ event.branch == 'main' }}\n", "event.branch == 'main'"},
		{"${{ format('}}') }}", "format('}}')"},
	}
	for _, c := range good {
		e, err := ParseCondition(c.src)
		if err != nil {
			t.Errorf("ParseCondition(%q): %v", c.src, err)
			continue
		}
		if e.String() != c.text {
			t.Errorf("ParseCondition(%q).String() = %q, want %q", c.src, e.String(), c.text)
		}
	}
	// Offsets stay relative to the source with its wrapper.
	e, _ := ParseCondition("  ${{ evnt.x }}")
	if _, errs := e.Check(stepScope()); len(errs) != 1 || errs[0].Offset != 6 {
		t.Errorf("Check offsets = %v, want one error at 6", errs)
	}
	bad := []struct {
		src  string
		off  int
		want string
	}{
		{"${{ a }} && ${{ b }}", 9, "text outside ${{ }}"},
		{"${{ a }}${{ b }}", 8, "not several"},
		{"${{ a }} x", 9, "text outside"},
		{"${{ a", 0, "not closed"},
		{"a && ${{ b }}", 5, "unexpected '${{'"},
		{"${{ }}", 0, "empty expression"},
	}
	for _, c := range bad {
		_, err := ParseCondition(c.src)
		var e *Error
		if !errors.As(err, &e) || e.Offset != c.off || !strings.Contains(e.Msg, c.want) {
			t.Errorf("ParseCondition(%q) = %v, want offset %d containing %q", c.src, err, c.off, c.want)
		}
	}
}

func TestParseTemplate(t *testing.T) {
	tm := mustTemplate(t, "deploy-${{ event.branch }}-${{needs['a }}'].x}}!")
	if tm.IsLiteral() || len(tm.Exprs()) != 2 {
		t.Fatalf("exprs = %d", len(tm.Exprs()))
	}
	if got := tm.Exprs()[0].String(); got != "event.branch" {
		t.Errorf("expr 0 = %q", got)
	}
	if got := tm.Exprs()[1].String(); got != "needs['a }}'].x" {
		t.Errorf("expr 1 = %q", got)
	}
	if tm.Source() != "deploy-${{ event.branch }}-${{needs['a }}'].x}}!" {
		t.Errorf("Source = %q", tm.Source())
	}
	for _, lit := range []string{"", "plain text", "$ {{ not }}", "${ {x}}", "}} and {{"} {
		if tm := mustTemplate(t, lit); !tm.IsLiteral() || len(tm.Exprs()) != 0 {
			t.Errorf("%q is not literal", lit)
		}
	}
	bad := []struct {
		src  string
		off  int
		want string
	}{
		{"x ${{ a ", 2, "${{ is not closed with }}"},
		{"x ${{ a == ", 2, "${{ is not closed with }}"},
		{"a ${{ b }} ${{ c", 11, "not closed"},
		{"${{ }}", 0, "empty expression in ${{ }}"},
		{"${{}}", 0, "empty expression in ${{ }}"},
		{"${{ a } }}", 6, `unexpected character "}"`},
		{"${{ a ${{ b }}", 6, "unexpected '${{'"},
		{"${{ 'a }}", 4, "unterminated string"},
		{"${{ a b }}", 6, `unexpected "b" after the expression`},
		{"ok ${{ (a }}", 10, "unexpected '}}' in parentheses"},
		{"ok\xc3 ${{ a }}", 2, "invalid UTF-8"},
	}
	for _, c := range bad {
		_, err := ParseTemplate(c.src)
		var e *Error
		if !errors.As(err, &e) || e.Offset != c.off || !strings.Contains(e.Msg, c.want) {
			t.Errorf("ParseTemplate(%q) = %v, want offset %d containing %q", c.src, err, c.off, c.want)
		}
	}
}

func TestErrorString(t *testing.T) {
	_, err := Parse("a ==")
	if err.Error() != "offset 4: unexpected end of input; expected a value, a name or '('" {
		t.Errorf("Error() = %q", err.Error())
	}
}
