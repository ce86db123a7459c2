package workflow

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

// mustParse parses src as file and fails the test on any error.
func mustParse(t *testing.T, file, src string) *Workflow {
	t.Helper()
	w, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatalf("Parse(%s):\n%v", file, err)
	}
	return w
}

// parseErrors parses src and returns its error lines without the file name.
func parseErrors(t *testing.T, src string) []string {
	t.Helper()
	w, err := Parse("wf.yml", []byte(src))
	if err == nil {
		t.Fatalf("Parse succeeded (%s), want errors for:\n%s", w.Name, src)
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("error is %T, want ErrorList", err)
	}
	var out []string
	for _, e := range list {
		out = append(out, strings.TrimPrefix(e.Error(), "wf.yml:"))
	}
	return out
}

func TestDefaults(t *testing.T) {
	w := mustParse(t, ".kiln/workflows/build.yaml", "on: [push, pull_request]\njobs:\n  b:\n    steps:\n      - run: |\n\n          make all\n          make test\n")
	if w.Name != "build" {
		t.Errorf("name = %q, want the file name without extension", w.Name)
	}
	if !slices.Equal(w.On.PullRequest.Types, []string{"opened", "synchronize", "reopened"}) {
		t.Errorf("pull_request types = %v", w.On.PullRequest.Types)
	}
	if w.Timeout != 0 {
		t.Errorf("workflow timeout = %v, want none", w.Timeout)
	}
	j := w.Job("b")
	if j == nil || j.OnAgentLost != "retry" || !j.Checkout || j.Timeout != 0 || j.Matrix != nil || j.If != nil {
		t.Fatalf("job defaults wrong: %+v", j)
	}
	if len(j.Variants) != 1 || j.Variants[0].Name != "b" || j.Variants[0].Values != nil {
		t.Errorf("variants = %+v, want one named after the job", j.Variants)
	}
	s := j.Steps[0]
	if s.Name != "Run make all" || s.Shell != "sh" || s.Timeout != 30*time.Minute || s.Retry.MaxAttempts != 1 || s.ContinueOnError || s.Index != 0 {
		t.Errorf("step defaults wrong: %+v", s)
	}
	if got := ShellArgs(s.Shell); !slices.Equal(got, []string{"sh", "-e"}) {
		t.Errorf("ShellArgs(sh) = %v", got)
	}
	if w.Hash != Hash([]byte("on: [push, pull_request]\njobs:\n  b:\n    steps:\n      - run: |\n\n          make all\n          make test\n")) || !strings.HasPrefix(w.Hash, "sha256:") || len(w.Hash) != 71 {
		t.Errorf("hash = %q", w.Hash)
	}
}

func TestDefaultPullRequestTypesNotShared(t *testing.T) {
	w := mustParse(t, "a.yml", "on: pull_request\njobs: {a: {steps: [{run: x}]}}\n")
	w.On.PullRequest.Types[0] = "mutated"
	if DefaultPullRequestTypes[0] != "opened" {
		t.Fatal("a workflow's types alias the package default")
	}
}

func TestRetry(t *testing.T) {
	w := mustParse(t, "r.yml", `on: push
jobs:
  a:
    steps:
      - {run: x, retry: 3}
      - {run: x, retry: {max_attempts: 2, delay: 5s, backoff: fixed}}
      - {run: x, retry: {max_attempts: 4, delay: 1m}}
`)
	steps := w.Job("a").Steps
	want := []Retry{
		{MaxAttempts: 3, Delay: time.Second, Backoff: "exponential", MaxDelay: 30 * time.Second},
		{MaxAttempts: 2, Delay: 5 * time.Second, Backoff: "fixed", MaxDelay: 30 * time.Second},
		{MaxAttempts: 4, Delay: time.Minute, Backoff: "exponential", MaxDelay: time.Minute},
	}
	for i, s := range steps {
		if s.Retry != want[i] {
			t.Errorf("step %d retry = %+v, want %+v", i, s.Retry, want[i])
		}
	}
	r := want[0]
	for n, d := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 60: 30 * time.Second} {
		if got := r.Wait(n); got != d {
			t.Errorf("Wait(%d) = %v, want %v", n, got, d)
		}
	}
	if got := want[1].Wait(4); got != 5*time.Second {
		t.Errorf("fixed Wait = %v", got)
	}
}

func TestOnForms(t *testing.T) {
	cases := []struct {
		on   string
		want []kiln.EventName
	}{
		{"push", []kiln.EventName{"push"}},
		{"[tag, push]", []kiln.EventName{"tag", "push"}},
		{"{dispatch: , pull_request: {branches: main}}", []kiln.EventName{"dispatch", "pull_request"}},
		{"{schedule: [\"@daily\", {cron: \"*/5 * * * *\", timezone: America/New_York}]}", []kiln.EventName{"schedule"}},
	}
	for _, c := range cases {
		w := mustParse(t, "o.yml", "on: "+c.on+"\njobs: {a: {steps: [{run: x}]}}\n")
		if !slices.Equal(w.On.Order, c.want) {
			t.Errorf("on: %s → order %v, want %v", c.on, w.On.Order, c.want)
		}
		for _, n := range c.want {
			if !w.On.Has(n) {
				t.Errorf("on: %s: Has(%s) is false", c.on, n)
			}
		}
	}
}

func TestScheduleNextInTimezone(t *testing.T) {
	w := mustParse(t, "s.yml", "on: {schedule: [{cron: \"0 3 * * *\", timezone: Europe/Berlin}, {cron: \"@hourly\"}]}\njobs: {a: {steps: [{run: x}]}}\n")
	s := w.On.Schedule[0]
	from := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	next := s.Next(from)
	// 03:00 in Berlin in summer is 01:00 UTC.
	if want := time.Date(2026, 7, 2, 1, 0, 0, 0, time.UTC); !next.Equal(want) {
		t.Errorf("Next = %v, want %v", next.UTC(), want)
	}
	if got := w.On.Schedule[1].Next(from); !got.Equal(from.Add(time.Hour)) {
		t.Errorf("@hourly Next = %v", got)
	}
	if w.On.Schedule[1].Timezone != time.UTC {
		t.Errorf("default timezone = %v", w.On.Schedule[1].Timezone)
	}
}

func TestDispatchInputs(t *testing.T) {
	w := mustParse(t, "d.yml", `on:
  dispatch:
    inputs:
      target: {type: choice, options: [staging, production], default: staging}
      dry_run: {type: boolean, default: false}
      n: {type: number, default: 1_000}
      note: {required: true, description: why}
jobs: {a: {steps: [{run: x}]}}
`)
	d := w.On.Dispatch
	if len(d.Inputs) != 4 || d.Input("missing") != nil {
		t.Fatalf("inputs = %+v", d.Inputs)
	}
	checks := []struct {
		name string
		typ  InputType
		def  any
		req  bool
	}{{"target", InputChoice, "staging", false}, {"dry_run", InputBoolean, false, false}, {"n", InputNumber, 1000.0, false}, {"note", InputString, nil, true}}
	for i, c := range checks {
		in := d.Inputs[i]
		if in.Name != c.name || in.Type != c.typ || in.Default != c.def || in.Required != c.req {
			t.Errorf("input %d = %+v, want %+v", i, in, c)
		}
	}
}

func TestNeedsWhen(t *testing.T) {
	w := mustParse(t, "n.yml", `on: push
jobs:
  a: {steps: [{run: x}]}
  b: {steps: [{run: x}]}
  c: {steps: [{run: x}]}
  d: {steps: [{run: x}]}
  e:
    needs: [a, {job: b, when: always}, {job: c, when: failure}, {job: d, when: [skipped, success]}]
    steps: [{run: x}]
`)
	want := [][]kiln.Result{{"success"}, kiln.Results, {"failure"}, {"success", "skipped"}}
	for i, n := range w.Job("e").Needs {
		if !slices.Equal(n.When, want[i]) {
			t.Errorf("need %s when = %v, want %v", n.Job, n.When, want[i])
		}
	}
	if !w.Job("e").Needs[3].Accepts("skipped") || w.Job("e").Needs[0].Accepts("failure") {
		t.Error("Accepts disagrees with When")
	}
}

func TestValuesAsWritten(t *testing.T) {
	w := mustParse(t, "v.yml", "on: push\nenv: {A: 0, B: true, C: 1.20, D: }\njobs:\n  t:\n    matrix: {go: [1.20, 1.3]}\n    steps: [{run: x}]\n")
	var env []string
	for _, e := range w.Env {
		env = append(env, e.Name+"="+e.Value.Source())
	}
	if !slices.Equal(env, []string{"A=0", "B=true", "C=1.20", "D="}) {
		t.Errorf("env = %v", env)
	}
	if v := w.Job("t").Variants; v[0].Name != "t (1.20)" || v[1].Name != "t (1.3)" {
		t.Errorf("variants = %+v; numbers must keep their written form", v)
	}
}

func TestErrorListIsKilnInvalid(t *testing.T) {
	_, err := Parse("x.yml", []byte("on: push\n"))
	if kiln.ErrorCode(err) != kiln.CodeInvalid || !strings.Contains(kiln.ErrorMessage(err), "x.yml:1:1: jobs: is missing") {
		t.Fatalf("code %q message %q", kiln.ErrorCode(err), kiln.ErrorMessage(err))
	}
}
