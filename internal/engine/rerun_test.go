package engine

import (
	"context"
	"testing"

	"github.com/kilnci/kiln"
)

const rerunFlow = `
on: push
jobs:
  build: {steps: [{run: make}]}
  test:
    needs: [build]
    matrix: {n: ["1", "2"]}
    steps: [{run: make test}]
  report:
    needs: [build, test]
    env: {V: "${{ needs.build.outputs.version }}"}
    steps: [{run: echo}]
`

// Proves B24 (docs/behaviours.md).
func TestRerunOnlyFailedJobsCarriesTheRestOver(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		run := start(t, b, rerunFlow, pushEvent(), nil)
		finish(t, b, linux, "build", kiln.JobSuccess, map[string]string{"version": "7"})
		finish(t, b, linux, "test (1)", kiln.JobSuccess, nil)
		finish(t, b, linux, "test (2)", kiln.JobFailed, nil)
		orig, _ := b.db.Runs().Get(ctx, run.ID)
		if orig.Status != kiln.RunFailed {
			t.Fatalf("original run: %s", orig.Status)
		}
		if _, err := b.eng.Rerun(ctx, run.ID, true); err != nil {
			t.Fatal(err)
		}
		runs, _ := b.db.Runs().List(ctx, storeFilterAll())
		re := runs[0]
		if re.RerunOf != run.ID {
			t.Fatalf("lineage: rerun_of %q", re.RerunOf)
		}
		want := map[string]kiln.JobStatus{"build": kiln.JobSuccess, "test (1)": kiln.JobSuccess, "test (2)": kiln.JobQueued, "report": kiln.JobPending}
		for name, st := range want {
			if j := job(t, b, re.ID, name); j.Status != st {
				t.Errorf("%s: %s, want %s", name, j.Status, st)
			}
		}
		finish(t, b, linux, "test (2)", kiln.JobSuccess, nil)
		report := job(t, b, re.ID, "report")
		if report.Status != kiln.JobQueued || specOf(t, report.Spec).JobEnv["V"] != "7" {
			t.Fatalf("report after the rerun: %s env %v (carried-over outputs must reach it)", report.Status, specOf(t, report.Spec).JobEnv)
		}
		if _, err := b.eng.Rerun(ctx, re.ID, true); kiln.ErrorCode(err) != kiln.CodeConflict {
			t.Fatalf("rerun of a running run: %v", err)
		}
	})
}

// Proves B24 (docs/behaviours.md).
func TestRerunWholeRunStartsEverything(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		run := start(t, b, rerunFlow, pushEvent(), nil)
		finish(t, b, linux, "build", kiln.JobFailed, nil)
		cr, err := b.eng.Rerun(ctx, run.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		if j := job(t, b, cr.ID, "build"); j.Status != kiln.JobQueued {
			t.Fatalf("build in the whole rerun: %s", j.Status)
		}
		if a := attemptOf(mustRun(t, b, cr.ID)); a != 2 {
			t.Fatalf("attempt %d, want 2", a)
		}
	})
}
