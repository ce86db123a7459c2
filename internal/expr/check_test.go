package expr

import (
	"strings"
	"testing"
)

func checkErrs(t *testing.T, s *Scope, src string) []*Error {
	t.Helper()
	_, errs := mustParse(t, src).Check(s)
	return errs
}

func TestCheckOK(t *testing.T) {
	cases := []struct {
		src  string
		want Type
	}{
		{"event.branch == 'main' && !cancelled()", Bool},
		{"event.pr.number", Number},
		{"event.pr.number > 3", Bool},
		{"event.changed_files[0]", String},
		{"event['branch']", String},
		{"needs.build-linux.outputs.version", String},
		{"needs['build (1.26)'].outputs.version", String},
		{"needs.x.result == 'success' || failure()", Bool},
		{"inputs.target || 'staging'", Any},
		{"event.branch || 'main'", String},
		{"inputs.count < 3", Bool},
		{"inputs.x.y.z[0]['w']", Any},
		{"env.HOME == null", Bool},
		{"contains(event.changed_files, 'go.mod')", Bool},
		{"contains(event.message, 'skip')", Bool},
		{"contains(null, 'x')", Bool},
		{"STARTSWITH(event.ref, 'refs/tags/')", Bool},
		{"format('{0}-{1}', event.branch, run.number)", String},
		{"format(inputs.f, 1)", String},
		{"matrix.go", Any},
		{"job.status", String},
		{"'abc' < 'abd'", Bool},
		{"event.changed_files == event.changed_files", Bool},
	}
	for _, c := range cases {
		typ, errs := mustParse(t, c.src).Check(stepScope())
		if len(errs) != 0 {
			t.Errorf("Check(%q): %v", c.src, errs)
			continue
		}
		if !sameType(typ, c.want) {
			t.Errorf("Check(%q) type = %s, want %s", c.src, typ, c.want)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	cases := []struct {
		scope *Scope
		src   string
		off   int
		msg   string // the exact message
	}{
		{runScope(), "secrets.TOKEN", 0, `"secrets" is not available here; available: event, inputs, run`},
		{runScope(), "evnt.branch", 0, `"evnt" is not available here; available: event, inputs, run; did you mean "event"?`},
		{runScope(), "success", 0, `"success" is not available here; available: event, inputs, run; did you mean success()?`},
		{&Scope{}, "event", 0, `"event" is not available here; no contexts are available here`},
		{nil, "event", 0, `"event" is not available here; no contexts are available here`},
		{stepScope(), "event.brnch", 6, `event has no field "brnch"; did you mean "branch"?`},
		{stepScope(), "event.Branch", 6, `event has no field "Branch"; did you mean "branch"?`},
		{stepScope(), "event.pr.nmber", 9, `event.pr has no field "nmber"; did you mean "number"?`},
		{stepScope(), "event.pr.zzzzzz", 9, `event.pr has no field "zzzzzz"; its fields are number, title`},
		{stepScope(), "event['brnch']", 6, `event has no field "brnch"; did you mean "branch"?`},
		{stepScope(), "needs.x.outputz.v", 8, `needs.x has no field "outputz"; did you mean "outputs"?`},
		{stepScope(), "needs['build (1.26)'].reslt", 22, `needs['build (1.26)'] has no field "reslt"; did you mean "result"?`},
		{stepScope(), "event.branch.x", 13, `event.branch is a string; it has no property "x"`},
		{stepScope(), "event.pr.number.x", 16, `event.pr.number is a number; it has no property "x"`},
		{stepScope(), "event.changed_files.x", 20, `event.changed_files is an array; it has no property "x" (read an element with [0])`},
		{stepScope(), "event.branch[0]", 13, `event.branch is a string; it cannot be indexed`},
		{stepScope(), "event[0]", 6, `event is an object; index it with a string, not a number`},
		{stepScope(), "env[1]", 4, `env is an object; index it with a string, not a number`},
		{stepScope(), "event.changed_files['a']", 20, `event.changed_files is an array; index it with a number, not a string`},
		{stepScope(), "env[true]", 4, `an index is a string or a number, not a bool`},
		{stepScope(), "event.pr.number == '7'", 16, `comparing a number with a string using == is always false: values of different types are never equal`},
		{stepScope(), "event.branch != true", 13, `comparing a string with a bool using != is always true: values of different types are never equal`},
		{stepScope(), "true < false", 5, `cannot compare a bool with a bool using <; it compares two numbers or two strings`},
		{stepScope(), "event.pr.number >= 'a'", 16, `cannot compare a number with a string using >=; it compares two numbers or two strings`},
		{stepScope(), "inputs.x > null", 9, `cannot compare a value of unknown type with null using >; it compares two numbers or two strings`},
		{stepScope(), "event.changed_files < 1", 20, `cannot compare an array with a number using <; it compares two numbers or two strings`},
		{runScope(), "success()", 0, `success() is only available in steps (a step's if:, env and run)`},
		{runScope(), "ALWAYS()", 0, `always() is only available in steps (a step's if:, env and run)`},
		{stepScope(), "hashFiles('go.sum')", 0, `hashFiles() is only available in a step's env, run and working_directory and in cache keys`},
		{stepScope(), "contains('a')", 0, `contains() takes 2 arguments, got 1: contains(haystack, needle)`},
		{stepScope(), "success(1)", 0, `success() takes 0 arguments, got 1: success()`},
		{stepScope(), "format()", 0, `format() takes at least 1 argument, got 0: format(format, args…)`},
		{stepScope(), "toJSN(event)", 0, `unknown function "toJSN"; did you mean toJSON()?`},
		{stepScope(), "nosuch(event)", 0, `unknown function "nosuch"; the functions are always, cancelled, case, contains, endsWith, failure, format, fromJSON, hashFiles, join, startsWith, success, toJSON`},
		{stepScope(), "case(true, 'a')", 0, `case() takes at least 3 arguments, got 2: case(condition, value, …, default)`},
		{stepScope(), "case(true, 'a', false, 'b')", 0, `case() takes pairs of a condition and a value, then a default value: an odd number of arguments, got 4`},
		{stepScope(), "case('x', 'a', 'b')", 5, `case() condition 1 is a string; a condition is a boolean (compare it: x == 'value')`},
		{stepScope(), "fromJSON(event)", 9, `fromJSON() parses a string, not an object`},
		{stepScope(), "join('a', event)", 10, `join()'s separator is a string, not an object`},
		{stepScope(), "contain(event.message, 'x')", 0, `unknown function "contain"; did you mean contains()?`},
		{stepScope(), "contains(event.pr.number, 7)", 9, `contains() searches a string or an array, not a number`},
		{stepScope(), "contains(event, 'x')", 9, `contains() searches a string or an array, not an object`},
		{stepScope(), "startsWith(event.changed_files, 'a')", 11, `startsWith() compares strings, not an array`},
		{stepScope(), "endsWith('a', event.pr)", 14, `endsWith() compares strings, not an object`},
		{stepScope(), "format(event)", 7, `format() needs a format string as its first argument, not an object`},
		{stepScope(), "format('{0} {1}', 'a')", 7, `format placeholder {1} has no argument: format() got 1 argument after the format string`},
		{stepScope(), "format('{0')", 7, `format string has a '{' that does not start a placeholder such as {0}; write {{ for a literal brace (at byte 0 of the format string)`},
		{stepScope(), "format('a}b')", 7, `format string has a '}' that does not close a placeholder; write }} for a literal brace (at byte 1 of the format string)`},
	}
	for _, c := range cases {
		errs := checkErrs(t, c.scope, c.src)
		if len(errs) != 1 {
			t.Errorf("Check(%q) = %v, want one error", c.src, errs)
			continue
		}
		if errs[0].Offset != c.off || errs[0].Msg != c.msg {
			t.Errorf("Check(%q) =\n  offset %d: %s\nwant\n  offset %d: %s", c.src, errs[0].Offset, errs[0].Msg, c.off, c.msg)
		}
	}
}

func TestCheckHashFilesAllowed(t *testing.T) {
	s := stepScope()
	s.HashFiles = true
	if errs := checkErrs(t, s, "hashFiles('go.sum', '**/go.mod')"); len(errs) != 0 {
		t.Fatal(errs)
	}
	errs := checkErrs(t, s, "hashFiles('go.sum', 3)")
	if len(errs) != 1 || errs[0].Offset != 20 || errs[0].Msg != "hashFiles() takes glob patterns (strings), not a number" {
		t.Fatal(errs)
	}
}

// Every error of an expression is reported, each at its own offset, and an
// error does not cascade into the operators around it.
func TestCheckReportsAllErrors(t *testing.T) {
	src := "secrets.A == 'x' || event.brnch == 1 || hashFiles('a') || contains() || format('{3}', 1) || event.pr.number.x"
	errs := checkErrs(t, stepScope(), src)
	want := []int{
		0,                                // secrets
		strings.Index(src, "brnch"),      // unknown field (no cascade into == 1: the field is unknown)
		strings.Index(src, "hashFiles"),  // not allowed
		strings.Index(src, "contains"),   // arity
		strings.Index(src, "'{3}'"),      // placeholder
		strings.LastIndex(src, ".x") + 1, // property of a number
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d: %v", len(errs), len(want), errs)
	}
	for i, e := range errs {
		if e.Offset != want[i] {
			t.Errorf("error %d at %d, want %d: %s", i, e.Offset, want[i], e.Msg)
		}
	}
}

func TestTemplateCheckOffsets(t *testing.T) {
	src := "deploy ${{ event.brnch }} to ${{ secrets.X }} ok ${{ run.id }}"
	errs := mustTemplate(t, src).Check(runScope())
	if len(errs) != 2 {
		t.Fatalf("errors = %v", errs)
	}
	if errs[0].Offset != strings.Index(src, "brnch") || errs[1].Offset != strings.Index(src, "secrets") {
		t.Errorf("offsets = %d, %d", errs[0].Offset, errs[1].Offset)
	}
}

func TestTypeString(t *testing.T) {
	cases := map[string]Type{
		"string": String, "number": Number, "bool": Bool, "null": Null, "any": Any,
		"object {a, b}":   ObjectOf(map[string]Type{"b": Bool, "a": String}),
		"map of string":   MapOf(String),
		"array of number": ArrayOf(Number),
		"any ":            {},
	}
	for want, typ := range cases {
		if got := typ.String(); got != strings.TrimSpace(want) {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	if String == Number || Any != (Type{}) {
		t.Error("scalar types do not compare as expected")
	}
}
