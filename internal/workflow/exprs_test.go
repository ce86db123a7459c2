package workflow

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
)

// TestExpressionContexts checks, location by location, that an expression
// may use exactly the contexts docs/workflow.md's table lists, with errors
// at the exact line and column of the offending name.
func TestExpressionContexts(t *testing.T) {
	head := "on: {push: , dispatch: {inputs: {n: {type: number}, flag: {type: boolean}, who: {}}}}\n"
	cases := []struct {
		name, src, want string // want "" means the file is valid
	}{
		{"workflow env: event, inputs, run", head + "env: {A: \"${{ event.branch }}${{ inputs.who }}${{ run.number }}\"}\njobs: {a: {steps: [{run: x}]}}\n", ""},
		{"workflow env: no needs", head + "env: {A: \"${{ needs.a.result }}\"}\njobs: {a: {steps: [{run: x}]}}\n", `2:15: env.A: "needs" is not available here; available: event, inputs, run`},
		{"workflow env: no env", head + "env: {A: \"${{ env.B }}\"}\njobs: {a: {steps: [{run: x}]}}\n", `2:15: env.A: "env" is not available here`},
		{"job if: needs and env", head + "jobs:\n  a: {steps: [{run: x}]}\n  b: {needs: a, if: \"needs.a.result == 'success' && env.X != ''\", steps: [{run: x}]}\n", ""},
		{"job if: no matrix", head + "jobs:\n  a: {matrix: {v: [x]}, if: matrix.v == 'x', steps: [{run: x}]}\n", `3:29: if: "matrix" is not available here`},
		{"job if: no status functions", head + "jobs:\n  a: {if: always(), steps: [{run: x}]}\n", "3:11: if: always() is only available in steps"},
		{"job if: no job context", head + "jobs:\n  a: {if: job.status == 'x', steps: [{run: x}]}\n", `3:11: if: "job" is not available here`},
		{"runs_on: matrix", head + "jobs:\n  a: {matrix: {os: [linux]}, runs_on: \"${{ matrix.os }}\", steps: [{run: x}]}\n", ""},
		{"runs_on: unknown matrix key", head + "jobs:\n  a: {matrix: {os: [linux]}, runs_on: \"${{ matrix.arch }}\", steps: [{run: x}]}\n", `3:51: runs_on: matrix has no field "arch"; its fields are os`},
		{"job env: no hashFiles", head + "jobs:\n  a: {env: {H: \"${{ hashFiles('go.sum') }}\"}, steps: [{run: x}]}\n", `3:21: env.H: hashFiles() is only available`},
		{"matrix value: no matrix", head + "jobs:\n  a: {matrix: {v: [\"${{ matrix.v }}\"]}, steps: [{run: x}]}\n", `3:25: matrix.v: "matrix" is not available here`},
		{"matrix value: inputs", head + "jobs:\n  a: {matrix: {v: [\"${{ inputs.who }}\"]}, steps: [{run: x}]}\n", ""},
		{"step if: status functions and job", head + "jobs:\n  a:\n    steps:\n      - {if: \"failure() && job.status == 'failure'\", run: x}\n", ""},
		{"step if: no hashFiles", head + "jobs:\n  a:\n    steps:\n      - {if: \"hashFiles('x') != ''\", run: x}\n", "5:15: if: hashFiles() is only available"},
		{"step run: everything", head + "jobs:\n  a:\n    matrix: {v: [x]}\n    steps:\n      - run: echo ${{ hashFiles('go.sum') }} ${{ job.name }} ${{ matrix.v }} ${{ success() }}\n", ""},
		{"matrix in a job without one", head + "jobs:\n  a:\n    steps:\n      - run: echo ${{ matrix.os }}\n", `5:30: run: matrix has no field "os" (job "a" has no matrix)`},
		{"step working_directory", head + "jobs:\n  a:\n    steps:\n      - {run: x, working_directory: \"${{ inputs.nope }}\"}\n", `5:49: working_directory: inputs has no field "nope"; its fields are flag, n, who`},
		{"needs only what is needed", head + "jobs:\n  a: {steps: [{run: x}]}\n  b: {steps: [{run: x}]}\n  c: {needs: a, if: needs.b.result == 'success', steps: [{run: x}]}\n", `5:27: if: needs has no field "b"`},
		{"needs a matrix child", head + "jobs:\n  t: {matrix: {go: [\"1.26\"]}, steps: [{run: x}]}\n  c: {needs: t, if: \"needs['t (1.26)'].outputs.v == 'x'\", steps: [{run: x}]}\n", ""},
		{"needs an unknown child", head + "jobs:\n  t: {matrix: {go: [\"1.26\"]}, steps: [{run: x}]}\n  c: {needs: t, if: \"needs['t (1.25)'].result\", steps: [{run: x}]}\n", `4:28: if: needs has no field "t (1.25)"`},
		{"event fields are closed", head + "env: {A: \"${{ event.brnach }}\"}\njobs: {a: {steps: [{run: x}]}}\n", `2:21: env.A: event has no field "brnach"`},
		{"event pr number", head + "env: {A: \"${{ event.pr.number == 7 }}\"}\njobs: {a: {steps: [{run: x}]}}\n", ""},
		{"syntax error column", head + "jobs:\n  a:\n    steps:\n      - run: echo ${{ event.branch == }}\n", "5:39: run: unexpected '}}'"},
		{"unclosed", head + "jobs:\n  a:\n    steps:\n      - run: echo ${{ event.branch\n", "5:19: run:"},
		{"literal block position", head + "jobs:\n  a:\n    steps:\n      - run: |\n          echo one\n            echo ${{ nope.x }}\n", `7:22: run: "nope" is not available here`},
		{"double-quoted escapes", head + "env: {A: \"\\t\\u00e9${{ nope }}\"}\njobs: {a: {steps: [{run: x}]}}\n", `2:23: env.A: "nope" is not available here`},
		{"single-quoted quotes", head + "env: {A: 'it''s ${{ nope }}'}\njobs: {a: {steps: [{run: x}]}}\n", `2:21: env.A: "nope" is not available here`},
		{"empty if", head + "jobs:\n  a: {if: \"\", steps: [{run: x}]}\n", "3:11: if: expected a condition"},
		{"if wrapped and bare", head + "jobs:\n  a: {if: \"${{ event.name == 'push' }}\", steps: [{run: x, if: \"cancelled()\"}]}\n", ""},
		{"include values are literal", head + "jobs:\n  a: {matrix: {v: [x]}, include: [{v: \"${{ inputs.who }}\"}], steps: [{run: x}]}\n", "3:39: include: expressions are not allowed here"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("wf.yml", []byte(c.src))
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected errors:\n%v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(strings.TrimPrefix(line, "wf.yml:"), c.want) {
					return
				}
			}
			t.Errorf("want an error starting %q, got:\n%v", c.want, err)
		})
	}
}

func TestScopeFor(t *testing.T) {
	w := mustParse(t, "s.yml", "on: push\njobs:\n  a: {steps: [{run: x}]}\n  b: {needs: a, steps: [{run: x}]}\n")
	b := w.Job("b")
	cases := []struct {
		loc             Location
		contexts        string
		status, hashing bool
	}{
		{LocWorkflowEnv, "event inputs run", false, false},
		{LocConcurrencyGroup, "event inputs run", false, false},
		{LocJobIf, "env event inputs needs run", false, false},
		{LocJob, "env event inputs matrix needs run", false, false},
		{LocMatrixValue, "env event inputs needs run", false, false},
		{LocStepIf, "env event inputs job matrix needs run", true, false},
		{LocStep, "env event inputs job matrix needs run", true, true},
	}
	for _, c := range cases {
		s := ScopeFor(c.loc, w, b)
		var names []string
		for _, n := range []string{"env", "event", "inputs", "job", "matrix", "needs", "run"} {
			if _, ok := s.Contexts[n]; ok {
				names = append(names, n)
			}
		}
		if strings.Join(names, " ") != c.contexts || s.StatusFuncs != c.status || s.HashFiles != c.hashing {
			t.Errorf("loc %d: contexts %v status %v hashFiles %v", c.loc, names, s.StatusFuncs, s.HashFiles)
		}
	}
}

// EventContext's values agree with EventType: every field an expression
// may read evaluates to what the event carries.
func TestEventContextMatchesItsType(t *testing.T) {
	ev := &kiln.Event{Name: "pull_request", Action: "opened", Ref: "refs/pull/7/head", SHA: "abc", Branch: "feat", BaseBranch: "main",
		Repository: "o/r", Actor: "me", Message: "msg", PR: &kiln.PR{Number: 7, Title: "T"}, ChangedFiles: []string{"a.go"}}
	src := "${{ event.name }}|${{ event.action }}|${{ event.ref }}|${{ event.sha }}|${{ event.branch }}|${{ event.base_branch }}|" +
		"${{ event.tag }}|${{ event.repository }}|${{ event.actor }}|${{ event.message }}|${{ event.pr.number }}|${{ event.pr.title }}|${{ event.changed_files[0] }}"
	tmpl, err := expr.ParseTemplate(src)
	if err != nil {
		t.Fatal(err)
	}
	if errs := tmpl.Check(ScopeFor(LocWorkflowEnv, &Workflow{}, nil)); len(errs) > 0 {
		t.Fatalf("type check: %v", errs[0])
	}
	got, err := tmpl.Render(&expr.Env{Contexts: map[string]any{"event": EventContext(ev)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "pull_request|opened|refs/pull/7/head|abc|feat|main||o/r|me|msg|7|T|a.go"; got != want {
		t.Errorf("rendered %q, want %q", got, want)
	}
	push := EventContext(&kiln.Event{Name: "push"})
	if push["pr"] != nil {
		t.Errorf("pr outside pull requests = %v, want null", push["pr"])
	}
}
