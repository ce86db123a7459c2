package executor

import (
	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
)

// This file is the executor's only contact with the expression language
// (package expr; docs/expressions.md).

// evalEnv is what step expressions see.
type evalEnv struct {
	contexts  map[string]any
	status    kiln.Result // the job's status for success(), failure(), cancelled()
	hashFiles func([]string) (string, error)
}

func (ev *evalEnv) expr() *expr.Env {
	return &expr.Env{Contexts: ev.contexts, JobStatus: ev.status, HashFiles: ev.hashFiles}
}

// evalCondition evaluates a step's if: (bare, or wrapped whole in ${{ }}).
// A condition that calls no status function runs only while the job is
// succeeding, as if written `success() && (…)` (GitHub's rule).
func evalCondition(src string, env *evalEnv) (bool, error) {
	e, err := expr.ParseCondition(src)
	if err != nil {
		return false, err
	}
	ok, err := e.EvalBool(env.expr())
	if err != nil {
		return false, err
	}
	if !e.CallsStatusFunc() {
		ok = ok && env.status == kiln.ResultSuccess
	}
	return ok, nil
}

// renderTemplate evaluates a template (an env value, working_directory)
// to text.
func renderTemplate(src string, env *evalEnv) (string, error) {
	t, err := expr.ParseTemplate(src)
	if err != nil {
		return "", err
	}
	return t.Render(env.expr())
}

// hasExpressions reports whether text holds a ${{ }} (or fails to parse
// as a template, which the caller reports when it evaluates it).
func hasExpressions(src string) bool {
	t, err := expr.ParseTemplate(src)
	return err != nil || !t.IsLiteral()
}

// substituteRun replaces each `${{ }}` of a run: script with a reference
// "${<prefix><n>}" and returns the values as environment variables, so a
// value is never pasted into the script as code.
func substituteRun(src string, env *evalEnv, prefix string) (string, []envVar, error) {
	t, err := expr.ParseTemplate(src)
	if err != nil {
		return "", nil, err
	}
	text, vars, err := t.Substitute(env.expr(), prefix)
	if err != nil {
		return "", nil, err
	}
	out := make([]envVar, len(vars))
	for i, v := range vars {
		out[i] = envVar{v.Name, v.Value}
	}
	return text, out, nil
}
