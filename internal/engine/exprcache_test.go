package engine

import (
	"context"
	"testing"

	"github.com/kilnci/kiln/internal/expr"
	"github.com/kilnci/kiln/internal/trigger"
)

// Creating a run keeps the templates workflow.Parse produced, so releasing
// its jobs evaluates those very values instead of parsing their source
// again; literal text is not kept.
func TestReleaseUsesTheWorkflowsParsedTemplates(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		src := `
on: push
env: {WHO: "${{ event.actor }} (cache test)", PLAIN: "no expressions here"}
jobs:
  build:
    matrix: {os: [linux, "${{ event.branch }}-cache"]}
    runs_on: ["${{ matrix.os }}"]
    env: {TARGET: "${{ matrix.os }}-${{ run.number }}"}
    steps: [{run: make}]
`
		parsed.mu.Lock()
		clear(parsed.templates)
		parsed.bytes = 0
		parsed.mu.Unlock()
		wf, content := parse(t, src)
		ev := pushEvent()
		runs, err := b.eng.Start(context.Background(), StartRequest{Source: "src", Event: ev,
			Matches: []Match{{Workflow: wf, Content: content, Decision: trigger.Match(wf, ev)}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		job := wf.Job("build")
		for _, want := range []*expr.Template{wf.Env[0].Value, job.Env[0].Value, job.RunsOn[0], job.Variants[1].Values[0].Template} {
			parsed.mu.Lock()
			got := parsed.templates[want.Source()]
			parsed.mu.Unlock()
			if got != want {
				t.Fatalf("%q: release would use %p, not the workflow's %p", want.Source(), got, want)
			}
		}
		parsed.mu.Lock()
		_, plain := parsed.templates["no expressions here"]
		parsed.mu.Unlock()
		if plain {
			t.Fatal("literal text was kept")
		}
		run := mustRun(t, b, runs[0].ID)
		if s := specOf(t, run.Jobs[0].Spec); s.WorkflowEnv["WHO"] != "alice (cache test)" || s.JobEnv["TARGET"] != "linux-"+itoa(run.Number) {
			t.Fatalf("env %v %v", s.WorkflowEnv, s.JobEnv)
		}
	})
}

// The cache is bounded: past its entries or bytes it starts over, and a
// source too large for it is parsed every time, never kept.
func TestExprCacheIsBounded(t *testing.T) {
	c := newExprCache(2, 1600)
	for _, src := range []string{"${{ a }}", "${{ b }}", "${{ c }}"} {
		if _, err := c.template(src); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.templates) != 1 || c.templates["${{ c }}"] == nil {
		t.Fatalf("after three sources with room for two: %v", c.templates)
	}
	big := "${{ '" + string(make([]byte, 200)) + "' }}"
	if _, err := c.template(big); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.templates[big]; ok || c.bytes > 1600 {
		t.Fatalf("a source past a sixteenth of the bound was kept (%d bytes held)", c.bytes)
	}
	e1, err := c.condition("success()")
	if err != nil {
		t.Fatal(err)
	}
	if e2, _ := c.condition("success()"); e2 != e1 {
		t.Fatal("a condition was parsed twice")
	}
	if _, err := c.condition("a &&"); err == nil || len(c.conditions) != 1 {
		t.Fatalf("a bad condition: %v, %d kept", err, len(c.conditions))
	}
}
