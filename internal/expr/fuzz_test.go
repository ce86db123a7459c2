package expr

import (
	"encoding/json"
	"strings"
	"testing"
)

// The fuzzers call the unguarded internals (parseTemplate, check, render, …)
// so that a panic fails them instead of being turned into an internal
// error by the API's safety net.

var fuzzSeeds = []string{
	"",
	"plain",
	"${{ event.branch }}",
	"deploy-${{ event.branch }}-${{ inputs.target || 'staging' }}",
	"${{ needs['build (1.26)'].outputs.version }}",
	"${{ needs.build-linux.result == 'success' && !cancelled() }}",
	"${{ format('{0}/{1} {{x}}', event.repository, run.number) }}",
	"${{ contains(event.changed_files, 'go.mod') || startsWith(event.ref, 'refs/tags/') }}",
	"${{ hashFiles('go.sum', '**/go.mod') }}",
	"${{ 0x1F <= -1.5e3 }} ${{ 'it''s' }} ${{ null }}",
	"${{ event[inputs.key][0].x }}",
	"${{ (((a))) }}",
	"${{ a",
	"${{ 'a }} b' }}",
	"${{ format('{0}{0}', format('{0}{0}', event)) }}",
	"${{ toJSON(event) }} ${{ fromJSON('[1,{\"a\":null}]')[1].a }}",
	"${{ join(event.changed_files, ', ') }} ${{ join(fromJSON(inputs.n)) }}",
	"${{ case(event.branch == 'main', 'prod', inputs.n > 2, 'big', 'other') }}",
	"${{ .5 + +1 }} ${{ 0o17 == -0xFF }} ${{ format(null) }}${{ format(true, 1) }}",
	"${{ contains('ΟΔΟΣ', 'ς') && !startsWith('İ', 'i') }}",
	"${{ event.brnch }}",
	"always()",
	"${{ success() }}",
	"\xff${{",
}

func fuzzEnv(inputs any) *Env {
	env := testEnv()
	env.Contexts["inputs"] = inputs
	env.Limits = Limits{MaxSteps: 2000, MaxStringBytes: 64 << 10}
	return env
}

func fuzzScope() *Scope {
	s := stepScope()
	s.HashFiles = true
	return s
}

func checkErrOffset(t *testing.T, what, src string, err *Error) {
	t.Helper()
	if err == nil {
		return
	}
	if err.Offset < 0 || err.Offset > len(src) || err.Msg == "" {
		t.Fatalf("%s(%q): bad error %v", what, src, err)
	}
	if strings.Contains(err.Msg, "internal error") {
		t.Fatalf("%s(%q): %v", what, src, err)
	}
}

// exercise runs every phase on one source and context, checking invariants.
func exercise(t *testing.T, src string, inputs any) {
	env := fuzzEnv(inputs)
	if e, err := parse(src); err != nil {
		checkErrOffset(t, "parse", src, err)
	} else {
		exerciseExpr(t, src, e, env)
	}
	if e, err := parseCondition(src); err != nil {
		checkErrOffset(t, "parseCondition", src, err)
	} else {
		exerciseExpr(t, src, e, env)
	}
	tm, err := parseTemplate(src)
	if err != nil {
		checkErrOffset(t, "parseTemplate", src, err)
		return
	}
	if tm.Source() != src || len(tm.segs) != 2*len(tm.exprs)+1 {
		t.Fatalf("template %q: %d segments for %d expressions", src, len(tm.segs), len(tm.exprs))
	}
	for _, e := range tm.exprs {
		if e.String() == "" || !strings.Contains(src, e.String()) {
			t.Fatalf("template %q: expression text %q", src, e.String())
		}
	}
	for _, err := range tm.check(fuzzScope()) {
		checkErrOffset(t, "Template.Check", src, err)
	}
	out, rerr := tm.render(env)
	checkErrOffset(t, "Render", src, rerr)
	if rerr == nil {
		if again, _ := tm.render(env); again != out {
			t.Fatalf("Render(%q) is not deterministic", src)
		}
	}
	text, vars, serr := tm.substitute(env, "KILN_EXPR_")
	checkErrOffset(t, "Substitute", src, serr)
	if serr == nil && len(vars) != len(tm.exprs) {
		t.Fatalf("Substitute(%q): %d vars for %d expressions", src, len(vars), len(tm.exprs))
	}
	if (rerr == nil) != (serr == nil) && !strings.Contains(serr.Error(), "NUL") {
		t.Fatalf("Render and Substitute disagree on %q: %v / %v", src, rerr, serr)
	}
	_ = text
}

func exerciseExpr(t *testing.T, src string, e *Expr, env *Env) {
	if e.pos < 0 || e.end > len(src) || e.pos > e.end {
		t.Fatalf("expression span %d..%d in %q", e.pos, e.end, src)
	}
	_, errs := e.check(fuzzScope())
	for _, err := range errs {
		checkErrOffset(t, "Check", src, err)
	}
	v, err := newEvaluator(env).eval(e.root)
	checkErrOffset(t, "Eval", src, err)
	if err == nil {
		_ = ToString(v)
		_ = Truthy(v)
	}
	e.CallsStatusFunc()
}

func FuzzParseTemplate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		exercise(t, src, map[string]any{"target": "", "key": "changed_files", "n": 3.0})
	})
}

// FuzzEval varies the data as well as the expression: inputs is whatever
// JSON the fuzzer makes up (or null when it is not JSON).
// Proves B75 and B237 (docs/behaviours.md).
func FuzzEval(f *testing.F) {
	f.Add("inputs.a[0] == inputs.b", `{"a":[1,"x",null],"b":1}`)
	f.Add("contains(inputs, inputs[0])", `[[1],[1]]`)
	f.Add("format('{0}|{1}', inputs, inputs.x)", `{"x":{"y":[true,false,0.5e-3]}}`)
	f.Add("inputs.s < inputs.t || startsWith(inputs.s, inputs.t)", `{"s":"ÄB","t":"äb"}`)
	f.Add("toJSON(fromJSON(toJSON(inputs))) == toJSON(inputs)", `{"b":[1,{"c":"ς"}],"a":null}`)
	f.Add("join(inputs, inputs[0]) || case(inputs[1], inputs, fromJSON(inputs[2]))", `["-",true,"[{}]"]`)
	f.Add("inputs == inputs", `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`)
	f.Fuzz(func(t *testing.T, src, data string) {
		var inputs any
		if json.Unmarshal([]byte(data), &inputs) != nil {
			inputs = data
		}
		e, err := parse(src)
		if err != nil {
			checkErrOffset(t, "parse", src, err)
			return
		}
		exerciseExpr(t, src, e, fuzzEnv(inputs))
	})
}
