package expr

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// evalCases evaluates each source against testEnv and compares the value.
func evalCases(t *testing.T, cases map[string]any) {
	t.Helper()
	for src, want := range cases {
		got, err := mustParse(t, src).Eval(testEnv())
		if err != nil {
			t.Errorf("Eval(%q): %v", src, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Eval(%q) = %#v, want %#v", src, got, want)
		}
	}
}

// evalFails evaluates each source and wants an error containing the text.
func evalFails(t *testing.T, env *Env, cases map[string]string) {
	t.Helper()
	for src, want := range cases {
		_, err := mustParse(t, src).Eval(env)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Msg, want) {
			t.Errorf("Eval(%q) = %v, want an error containing %q", src, err, want)
		}
	}
}

// B236: the number literals GitHub Actions accepts (a leading '.', a '+'
// sign, 0o octal) are numbers, and a sign before 0x or 0o is refused.
func TestNumberLiteralsGitHubAccepts(t *testing.T) {
	evalCases(t, map[string]any{
		".5": 0.5, "+1": 1.0, "-.25": -0.25, "+.5e1": 5.0, "0o17": 15.0, "0x1F": 31.0,
		"+1 == 1":                true,
		"format('{0}', .5)":      "0.5",
		"case(.5 < 1, 'a', 'b')": "a",
	})
	for _, src := range []string{"-0xFF", "+0x1", "-0o17"} {
		_, err := Parse(src)
		if err == nil || !strings.Contains(err.Error(), "cannot have a sign") {
			t.Errorf("Parse(%q) = %v, want a refusal of the sign", src, err)
		}
	}
}

// B237: toJSON writes indented JSON with sorted keys, fromJSON reads JSON
// back into values, join joins an array's elements as text.
func TestToJSONFromJSONJoin(t *testing.T) {
	evalCases(t, map[string]any{
		"toJSON(event.pr)":                           "{\n  \"number\": 7,\n  \"title\": \"Expressions\"\n}",
		"toJSON(event.changed_files)":                "[\n  \"go.mod\",\n  \"internal/expr/lex.go\"\n]",
		"toJSON('a\"b')":                             `"a\"b"`,
		"toJSON(null)":                               "null",
		"toJSON(1.5)":                                "1.5",
		"toJSON(fromJSON('[]'))":                     "[]",
		"toJSON(fromJSON('{}'))":                     "{}",
		"toJSON(fromJSON('[[1],{}]'))":               "[\n  [\n    1\n  ],\n  {}\n]",
		"fromJSON('{\"a\":[1,true]}').a":             []any{1.0, true},
		"fromJSON('3') == 3":                         true,
		"fromJSON(' \"x\" ')":                        "x",
		"fromJSON('true')":                           true,
		"fromJSON('null')":                           nil,
		"fromJSON(toJSON(event.pr)) == event.pr":     true,
		"join(event.changed_files)":                  "go.mod,internal/expr/lex.go",
		"join(event.changed_files, ' ')":             "go.mod internal/expr/lex.go",
		"join(fromJSON('[1,null,true,\"x\"]'), '-')": "1--true-x",
		"join(fromJSON('[]'), ',')":                  "",
		"join('alone', ',')":                         "alone",
		"join(null)":                                 "",
		"JOIN(event.changed_files, 1)":               "go.mod1internal/expr/lex.go",
	})
	deep := strings.Repeat("[", maxValueDepth+1) + strings.Repeat("]", maxValueDepth+1)
	evalFails(t, testEnv(), map[string]string{
		"fromJSON('')":                     "empty string",
		"fromJSON('{')":                    "not valid JSON",
		"fromJSON('1 2')":                  "not valid JSON",
		"fromJSON('1e999')":                "out of range",
		"fromJSON(event.changed_files)":    "parses a string, not an array",
		"fromJSON('" + deep + "')":         "nested more than 100 levels",
		"join(event.changed_files, event)": "separator is a string, not an object",
	})
	small := testEnv()
	small.Limits.MaxStringBytes = 32
	evalFails(t, small, map[string]string{
		"toJSON(event)": "toJSON() would produce more than the limit of 32 bytes",
		"join(fromJSON('[\"0123456789\",\"0123456789\",\"0123456789\",\"0123456789\"]'))": "join() would produce more than the limit",
	})
}

// B237: case() returns the value after the first true condition, else the
// last argument; it evaluates only what it returns, and a condition that is
// not a boolean is an error.
func TestCaseFunction(t *testing.T) {
	evalCases(t, map[string]any{
		"case(true, 'first', 'default')":                                             "first",
		"case(false, 'first', 'default')":                                            "default",
		"case(false, 'first', true, 'second', 'default')":                            "second",
		"case(event.branch == 'main', 'prod', event.name == 'push', 'dev', 'other')": "prod",
		"case(event.branch == 'dev', 'prod', event.name == 'push', 'dev', 'other')":  "dev",
		"case(true, event.pr, null).number":                                          7.0,
		"case(true, 'ok', fromJSON('not json'))":                                     "ok",
		"case(false, fromJSON('not json'), 'ok')":                                    "ok",
	})
	evalFails(t, testEnv(), map[string]string{
		"case('main', 'a', 'b')":          "case() condition 1 is a string, not a boolean",
		"case(false, 'a', 1, 'b', 'c')":   "case() condition 2 is a number",
		"case(true, fromJSON('x'), 'ok')": "not valid JSON",
		"case(event.pr.number, 'a', 'b')": "not a boolean",
	})
	if got, _ := mustParse(t, "case(true, 'a', 'b')").Check(stepScope()); got != String {
		t.Errorf("case() of strings checks as %v, want string", got)
	}
	if got, _ := mustParse(t, "case(true, 'a', 1)").Check(stepScope()); got != Any {
		t.Errorf("case() of a string and a number checks as %v, want any", got)
	}
}

// B238: startsWith, endsWith and contains ignore case by Unicode simple
// case folding, as an ordinal case-insensitive comparison does: final
// sigma matches capital sigma, and dotted capital I does not match i.
func TestCaseInsensitiveFunctionsFoldUnicode(t *testing.T) {
	evalCases(t, map[string]any{
		"contains('ΟΔΟΣ', 'ς')":            true,
		"endsWith('οδος', 'Σ')":            true,
		"startsWith('Σοφία', 'σο')":        true,
		"contains('İstanbul', 'i')":        false,
		"startsWith('istanbul', 'İ')":      false,
		"startsWith('İstanbul', 'İS')":     true,
		"contains('ÄÖÜ', 'äöü')":           true,
		"endsWith('Kelvin 5K', 'k')":       true, // the Kelvin sign
		"contains('straße', 'SS')":         false,
		"contains('Hello World', 'WORLD')": true,
	})
}

// B239: format() takes any scalar as its format string, as GitHub
// Actions does: format(null) is the empty string, format(true) is 'true'.
func TestFormatOfNonStrings(t *testing.T) {
	evalCases(t, map[string]any{
		"format(null)":        "",
		"format(true)":        "true",
		"format(12)":          "12",
		"format(null, 'x')":   "",
		"format(env.MISSING)": "",
	})
	for _, src := range []string{"format(null)", "format(true)", "format(inputs.x)"} {
		if _, errs := mustParse(t, src).Check(stepScope()); len(errs) > 0 {
			t.Errorf("Check(%q) = %v, want no error", src, errs)
		}
	}
}

// B238: folding agrees with strings.EqualFold on valid UTF-8 and is
// idempotent.
func FuzzFold(f *testing.F) {
	for _, s := range [][2]string{{"ς", "Σ"}, {"i", "İ"}, {"K", "k"}, {"ß", "SS"}, {"ǅ", "ǆ"}, {"ABC", "abc"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		fa, fb := foldString(a), foldString(b)
		if (fa == fb) != strings.EqualFold(a, b) {
			t.Fatalf("fold(%q)=%q, fold(%q)=%q, EqualFold=%v", a, fa, b, fb, strings.EqualFold(a, b))
		}
		if foldString(fa) != fa {
			t.Fatalf("fold is not idempotent on %q", a)
		}
	})
}
