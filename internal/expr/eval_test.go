package expr

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

func TestEval(t *testing.T) {
	cases := []struct {
		src  string
		want any
	}{
		// literals
		{"null", nil}, {"true", true}, {"false", false}, {"42", 42.0}, {"-1.5", -1.5},
		{"1e3", 1000.0}, {"2.5E-1", 0.25}, {"0x1F", 31.0}, {"007", 7.0},
		// number literals GitHub Actions accepts (B236)
		{".5", 0.5}, {"+1", 1.0}, {"-.5", -0.5}, {"+.5e1", 5.0}, {"0o17", 15.0}, {"0O7", 7.0},
		{"1 == +1", true}, {"(.5)", 0.5}, {"format('{0}', .25)", "0.25"},
		{"'it''s'", "it's"}, {"''", ""},
		// lookups
		{"event.branch", "main"},
		{"event.pr.number", 7.0},
		{"event['branch']", "main"},
		{"event.changed_files[1]", "internal/expr/lex.go"},
		{"event.changed_files[1.0]", "internal/expr/lex.go"},
		{"needs.build-linux.outputs.version", "1.2.3"},
		{"needs['build-linux'].result", "success"},
		{"needs['build (1.26)'].outputs.version", "1.26.0"},
		{"needs[format('build ({0})', matrix.go)].outputs['version']", "1.26.0"},
		{"needs.strings[1]", "b"},
		{"env.GOFLAGS", "-mod=mod"},
		// missing keys, and lookups on the wrong kind, are null
		{"env.MISSING", nil},
		{"env.MISSING.deeper[0]", nil},
		{"event.nope", nil},
		{"nosuchcontext.x", nil},
		{"event.changed_files[2]", nil},
		{"event.changed_files[-1]", nil},
		{"event.changed_files[0.5]", nil},
		{"event.changed_files['0']", nil},
		{"event[0]", nil},
		{"event.branch.length", nil},
		{"event.branch[0]", nil},
		{"null.x", nil},
		{"event[true]", nil},
		// ! and truthiness
		{"!true", false}, {"!false", true}, {"!null", true}, {"!0", true}, {"!1", false},
		{"!''", true}, {"!'x'", false}, {"!event.changed_files", false}, {"!needs.test.outputs", false},
		{"!!event.branch", true}, {"!env.MISSING", true},
		// && and || return an operand
		{"inputs.target || 'staging'", "staging"},
		{"event.branch || 'staging'", "main"},
		{"null || 0 || ''", ""},
		{"'a' && 'b'", "b"},
		{"'a' && 0 && 'c'", 0.0},
		{"inputs.dry_run && 'dry'", "dry"},
		{"true || false && false", true},
		{"(true || false) && false", false},
		{"false && nosuch.x.y", false},
		// == and !=: same type and value, no coercion, case-sensitive
		{"1 == 1.0", true}, {"0x10 == 16", true}, {"1 == '1'", false}, {"'1' != 1", true},
		{"'Main' == 'main'", false}, {"event.branch == 'main'", true},
		{"null == null", true}, {"env.MISSING == null", true}, {"null == false", false},
		{"0 == false", false}, {"'' == null", false}, {"true == true", true},
		{"event.changed_files == event.changed_files", true},
		{"needs.numbers.list == needs.numbers.list", true},
		{"needs.test.outputs == needs.numbers", false},
		{"needs['build (1.26)'].outputs == needs['build (1.26)'].outputs", true},
		{"needs.strings == needs.strings", true},
		{"event.changed_files == needs.strings", false},
		{"1 == 1 == true", true},
		// ordering
		{"1 < 2", true}, {"2 <= 2", true}, {"3 > 2.5", true}, {"-1 >= 0", false},
		{"'a' < 'b'", true}, {"'B' < 'a'", true}, {"'abc' >= 'abd'", false}, {"'10' < '9'", true},
		{"event.pr.number > 3", true},
		// contains
		{"contains('Hello World', 'WORLD')", true},
		{"contains(event.message, 'skip CI')", true},
		{"contains('abc', 'x')", false},
		{"contains('abc', '')", true},
		{"contains(event.changed_files, 'go.mod')", true},
		{"contains(event.changed_files, 'GO.MOD')", false},
		{"contains(needs.numbers.list, 2)", true},
		{"contains(needs.numbers.list, '2')", false},
		{"contains(needs.strings, 'b')", true},
		{"contains(env.MISSING, 'x')", false},
		{"contains(123, 2)", true},
		{"contains('abc', event.changed_files)", false},
		// startsWith / endsWith
		{"startsWith(event.ref, 'REFS/heads/')", true},
		{"startsWith('abc', 'abcd')", false},
		{"endsWith('file.GO', '.go')", true},
		{"endsWith('abc', '')", true},
		{"endsWith(env.MISSING, '')", true},
		{"startsWith(1234, 12)", true},
		// format
		{"format('{0} and {1}', 'a', 'b')", "a and b"},
		{"format('{1}{0}{1}', 'a', 'b')", "bab"},
		{"format('{{0}} {0}', 'x')", "{0} x"},
		{"format('}}{{')", "}{"},
		{"format('{0}-{1}-{2}-{3}', 1.5, true, null, event.changed_files)", `1.5-true--["go.mod","internal/expr/lex.go"]`},
		{"format('v{0}', run.number)", "v42"},
		{"format('no placeholders', 'unused')", "no placeholders"},
		// status functions with the default (success) status
		{"success()", true}, {"failure()", false}, {"cancelled()", false}, {"always()", true},
		{"SUCCESS()", true}, {"Always()", true},
		// hashFiles through the hook
		{"hashFiles('go.sum', '**/go.mod')", "hash:go.sum"},
	}
	for _, c := range cases {
		e := mustParse(t, c.src)
		got, err := e.Eval(testEnv())
		if err != nil {
			t.Errorf("Eval(%q): %v", c.src, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Eval(%q) = %#v, want %#v", c.src, got, c.want)
		}
	}
}

func TestEvalStatusFunctions(t *testing.T) {
	cases := []struct {
		status                              kiln.Result
		success, failure, cancelled, always bool
	}{
		{"", true, false, false, true},
		{kiln.ResultSuccess, true, false, false, true},
		{kiln.ResultFailure, false, true, false, true},
		{kiln.ResultCancelled, false, false, true, true},
	}
	for _, c := range cases {
		env := &Env{JobStatus: c.status}
		for src, want := range map[string]bool{
			"success()": c.success, "failure()": c.failure, "cancelled()": c.cancelled, "always()": c.always,
		} {
			got, err := mustParse(t, src).EvalBool(env)
			if err != nil || got != want {
				t.Errorf("status %q: %s = %v, %v; want %v", c.status, src, got, err, want)
			}
		}
	}
}

func TestEvalErrors(t *testing.T) {
	cases := []struct {
		src  string
		off  int
		want string
	}{
		{"true < false", 5, "cannot compare a bool with a bool using <"},
		{"1 < 'a'", 2, "cannot compare a number with a string using <"},
		{"env.MISSING < 1", 12, "cannot compare null with a number using <"},
		{"event > event", 6, "cannot compare an object with an object using >"},
		{"toYAML(event)", 0, `unknown function "toYAML"`},
		{"contains('a')", 0, "contains() takes 2 arguments, got 1"},
		{"contains(event, 'a')", 9, "contains() searches a string or an array, not an object"},
		{"startsWith(event.changed_files, 'a')", 11, "startsWith() compares strings, not an array"},
		{"format(event)", 7, "format() needs a format string as its first argument, not an object"},
		{"format('{1}', 'a')", 7, "format placeholder {1} has no argument: format() got 1 argument"},
		{"format('{x}')", 7, "format string has a '{' that does not start a placeholder"},
		{"format('{99999999}')", 7, "out of range"},
		{"hashFiles(1)", 10, "hashFiles() takes glob patterns (strings), not a number"},
		{"1 == 1 && (true < 1)", 16, "cannot compare"},
	}
	for _, c := range cases {
		_, err := mustParse(t, c.src).Eval(testEnv())
		var e *Error
		if !errors.As(err, &e) || e.Offset != c.off || !strings.Contains(e.Msg, c.want) {
			t.Errorf("Eval(%q) = %v, want offset %d containing %q", c.src, err, c.off, c.want)
		}
	}
}

func TestEvalHashFilesHook(t *testing.T) {
	e := mustParse(t, "hashFiles('go.sum')")
	if _, err := e.Eval(&Env{}); err == nil || !strings.Contains(err.Error(), "hashFiles() is not available here") {
		t.Errorf("nil hook: %v", err)
	}
	failing := &Env{HashFiles: func([]string) (string, error) { return "", errors.New("no files match") }}
	if _, err := e.Eval(failing); err == nil || err.Error() != "offset 0: hashFiles(): no files match" {
		t.Errorf("failing hook: %v", err)
	}
	var got []string
	recording := &Env{HashFiles: func(p []string) (string, error) { got = p; return "h", nil }}
	if v, err := mustParse(t, "hashFiles('a', 'b/**')").Eval(recording); err != nil || v != "h" || !reflect.DeepEqual(got, []string{"a", "b/**"}) {
		t.Errorf("hook got %q, returned %v, %v", got, v, err)
	}
}

// The safety net: a panic below the API (here in a caller's hook) becomes an
// internal error instead of crashing the process.
func TestEvalRecoversFromPanic(t *testing.T) {
	env := &Env{HashFiles: func([]string) (string, error) { panic("boom") }}
	_, err := mustParse(t, "hashFiles('x')").Eval(env)
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "internal error") || !strings.Contains(e.Msg, "boom") {
		t.Fatalf("err = %v", err)
	}
	if _, err := mustTemplate(t, "${{ hashFiles('x') }}").Render(env); err == nil {
		t.Fatal("Render did not report the panic")
	}
}

// Contexts built by hand with other Go types behave like their JSON forms.
func TestEvalGoValues(t *testing.T) {
	env := &Env{Contexts: map[string]any{
		"c": map[string]any{
			"i": 3, "i64": int64(-2), "u8": uint8(7), "f32": float32(0.5), "n": json.Number("12"),
			"ss": []string{"x", "y"}, "ms": map[string]string{"k": "v"}, "opaque": struct{ A int }{1},
		},
	}}
	cases := map[string]any{
		"c.i == 3": true, "c.i64 < 0": true, "c.u8": 7.0, "c.f32 == 0.5": true, "c.n == 12": true,
		"c.ss[1]": "y", "contains(c.ss, 'x')": true, "c.ms.k": "v", "c.ms.nope": nil,
		"format('{0}', c.ss)": `["x","y"]`, "format('{0}', c.ms)": `{"k":"v"}`,
		"!c.opaque": false, "c.opaque == c.opaque": false, "c.opaque.A": nil,
		"format('{0}', c.opaque)": `{"A":1}`,
	}
	for src, want := range cases {
		got, err := mustParse(t, src).Eval(env)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Eval(%q) = %#v, %v; want %#v", src, got, err, want)
		}
	}
}

func TestTruthy(t *testing.T) {
	falsy := []any{nil, false, 0.0, math.NaN(), "", 0, int64(0), float32(0)}
	truthy := []any{true, 1.0, -1.0, math.Inf(1), "0", "false", " ", []any{}, map[string]any{}, []string{}, struct{}{}}
	for _, v := range falsy {
		if Truthy(v) {
			t.Errorf("Truthy(%#v) = true", v)
		}
	}
	for _, v := range truthy {
		if !Truthy(v) {
			t.Errorf("Truthy(%#v) = false", v)
		}
	}
}

func TestToString(t *testing.T) {
	cases := []struct {
		v    any
		want string
	}{
		{nil, ""}, {"x", "x"}, {"", ""}, {true, "true"}, {false, "false"},
		{3.0, "3"}, {-3.0, "-3"}, {0.0, "0"}, {math.Copysign(0, -1), "0"}, {1.5, "1.5"},
		{0.1, "0.1"}, {1e20, "100000000000000000000"}, {1e21, "1e+21"}, {1e-7, "1e-07"},
		{123456789.0, "123456789"}, {math.NaN(), "NaN"}, {math.Inf(-1), "-Infinity"}, {7, "7"},
		{[]any{}, "[]"}, {map[string]any{}, "{}"},
		{[]any{1.0, "a", nil, true, []any{2.5}}, `[1,"a",null,true,[2.5]]`},
		{map[string]any{"b": 1.0, "a": map[string]any{"c": "<&>"}}, `{"a":{"c":"<&>"},"b":1}`},
		{[]any{"q\"\\\n\t\x01\xff"}, `["q\"\\\n\t\u0001\ufffd"]`},
		{[]any{math.NaN()}, `[null]`},
	}
	for _, c := range cases {
		if got := ToString(c.v); got != c.want {
			t.Errorf("ToString(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
	// JSON output parses back.
	v := testContexts()["event"]
	var back any
	if err := json.Unmarshal([]byte(ToString(v)), &back); err != nil || !reflect.DeepEqual(back, v) {
		t.Errorf("ToString(event) does not round-trip: %v", err)
	}
	// Absurdly nested data is rendered, not recursed into without bound.
	var deep any = "x"
	for range 1000 {
		deep = []any{deep}
	}
	if s := ToString(deep); !strings.Contains(s, "null") || len(s) > 500 {
		t.Errorf("deep value rendered as %.60q… (%d bytes)", s, len(s))
	}
}

func TestCallsStatusFunc(t *testing.T) {
	for src, want := range map[string]bool{
		"always()": true, "event.branch == 'main' && FAILURE()": true, "!cancelled()": true,
		"contains(format('{0}', success()), 'true')": true, "x[success()]": true,
		"event.branch == 'main'": false, "success": false, "contains(a, 'success()')": false,
	} {
		if got := mustParse(t, src).CallsStatusFunc(); got != want {
			t.Errorf("CallsStatusFunc(%q) = %v, want %v", src, got, want)
		}
	}
}
