package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

// Proves B14 and B25 (docs/behaviours.md).
func TestJobIfFalseSkipsAndNeedsOutputsReachEnv(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		run := start(t, b, `
on: push
jobs:
  build:
    steps: [{run: make}]
  deploy:
    needs: [build]
    if: ${{ event.branch == 'release' }}
    steps: [{run: ./deploy}]
  notify:
    needs: [build]
    env: {VERSION: "${{ needs.build.outputs.version }}", RESULT: "${{ needs.build.result }}"}
    steps: [{run: echo}]
`, pushEvent(), nil)
		finish(t, b, linux, "build", kiln.JobSuccess, map[string]string{"version": "1.2.3"})
		deploy := job(t, b, run.ID, "deploy")
		if deploy.Status != kiln.JobSkipped || !strings.Contains(deploy.Error, "event.branch == 'release'") {
			t.Fatalf("deploy: %s %q", deploy.Status, deploy.Error)
		}
		notify := job(t, b, run.ID, "notify")
		spec := specOf(t, notify.Spec)
		if notify.Status != kiln.JobQueued || spec.JobEnv["VERSION"] != "1.2.3" || spec.JobEnv["RESULT"] != "success" {
			t.Fatalf("notify: %s env %v", notify.Status, spec.JobEnv)
		}
		needs := spec.Contexts["needs"].(map[string]any)
		if needs["build"].(map[string]any)["result"] != "success" {
			t.Fatalf("needs context: %v", needs)
		}
	})
}

// Proves B16 (docs/behaviours.md).
func TestMatrixRunsOnAndValuesAreEvaluated(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		run := start(t, b, `
on: push
jobs:
  test:
    runs_on: ["${{ matrix.os }}"]
    matrix:
      os: [linux, arm64]
    env: {OS: "${{ matrix.os }}"}
    steps: [{run: make test}]
`, pushEvent(), nil)
		for _, c := range []struct{ name, key string }{{"test (linux)", "linux"}, {"test (arm64)", "arm64"}} {
			j := job(t, b, run.ID, c.name)
			spec := specOf(t, j.Spec)
			if j.Status != kiln.JobQueued || j.Requirement.Key() != c.key || spec.JobEnv["OS"] != c.key {
				t.Fatalf("%s: %s key %q env %v", c.name, j.Status, j.Requirement.Key(), spec.JobEnv)
			}
			if m := spec.Contexts["matrix"].(map[string]any); m["os"] != c.key {
				t.Fatalf("%s: matrix context %v", c.name, m)
			}
		}
	})
}

// Proves B25 (docs/behaviours.md).
func TestDisagreeingMatrixOutputsFailTheDependent(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		run := start(t, b, `
on: push
jobs:
  test:
    matrix: {v: ["1", "2"]}
    steps: [{run: make}]
  report:
    needs: [test]
    steps: [{run: echo}]
`, pushEvent(), nil)
		finish(t, b, linux, "test (1)", kiln.JobSuccess, map[string]string{"version": "a"})
		finish(t, b, linux, "test (2)", kiln.JobSuccess, map[string]string{"version": "b"})
		r := job(t, b, run.ID, "report")
		if r.Status != kiln.JobFailed || !strings.Contains(r.Error, "test (1)") || !strings.Contains(r.Error, "test (2)") {
			t.Fatalf("report: %s %q", r.Status, r.Error)
		}
	})
}

// B271: a job's timeout written as an expression is evaluated when the
// job is released, with the matrix and inputs it sees; what it evaluates
// to must read as a duration, or the job fails saying so.
func TestJobTimeoutExpressionIsEvaluatedAtRelease(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		run := start(t, b, `
on: push
jobs:
  test:
    matrix:
      slow: ["90s", "soon", "10"]
    fail_fast: false
    timeout: ${{ matrix.slow }}
    steps: [{run: make test}]
`, pushEvent(), nil)
		j := job(t, b, run.ID, "test (90s)")
		if spec := specOf(t, j.Spec); j.Status != kiln.JobQueued || spec.TimeoutMS != 90_000 {
			t.Fatalf("test (90s): %s, timeout %d ms", j.Status, spec.TimeoutMS)
		}
		for name, want := range map[string]string{
			"test (soon)": `evaluated to "soon", which is not a duration`,
			"test (10)":   `evaluated to "10", which has no unit`,
		} {
			if j := job(t, b, run.ID, name); j.Status != kiln.JobFailed || !strings.Contains(j.Error, want) {
				t.Fatalf("%s: %s %q, want an error with %q", name, j.Status, j.Error, want)
			}
		}
	})
}

// Proves B16 (docs/behaviours.md).
func TestExpressionErrorAtReleaseFailsTheJobWithAReason(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		// A runs_on expression that evaluates to something that is not a
		// label is only known at release.
		run := start(t, b, `
on: push
jobs:
  build:
    runs_on: ["${{ event.message }}"]
    steps: [{run: make}]
`, &kiln.Event{Name: kiln.EventPush, Ref: "refs/heads/main", Branch: "main", SHA: "abc", Repository: "acme/app", Message: "fix: a, b"}, nil)
		j := job(t, b, run.ID, "build")
		if j.Status != kiln.JobFailed || !strings.Contains(j.Error, "runs_on") {
			t.Fatalf("build: %s %q", j.Status, j.Error)
		}
		r, _ := b.db.Runs().Get(context.Background(), run.ID)
		if r.Status != kiln.RunFailed {
			t.Fatalf("run: %s", r.Status)
		}
	})
}

// Proves B22 (docs/behaviours.md).
func TestCancelIsGracefulThenForced(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		run := start(t, b, `
on: push
jobs:
  a: {steps: [{run: sleep 100}]}
  b: {needs: [a], steps: [{run: echo}]}
`, pushEvent(), nil)
		claimed, err := b.db.Queue().Claim(ctx, "agent-1", linux, 1)
		if err != nil || len(claimed) != 1 {
			t.Fatal(err)
		}
		b.db.Jobs().Start(ctx, leaseOf(claimed[0].JobID, claimed[0].Epoch))
		r, err := b.eng.Cancel(ctx, run.ID, "cancelled by alice")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != kiln.RunCancelling || len(b.rec.cancels) != 1 || b.rec.cancels[0].force || b.rec.cancels[0].t.AgentID != "agent-1" {
			t.Fatalf("graceful: run %s, cancels %+v", r.Status, b.rec.cancels)
		}
		if j := job(t, b, run.ID, "b"); j.Status != kiln.JobCancelled {
			t.Fatalf("pending dependent: %s", j.Status)
		}
		r, err = b.eng.Cancel(ctx, run.ID, "cancelled by alice")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != kiln.RunCancelled || len(b.rec.cancels) != 2 || !b.rec.cancels[1].force {
			t.Fatalf("forced: run %s, cancels %+v", r.Status, b.rec.cancels)
		}
		if _, err := b.eng.Cancel(ctx, run.ID, ""); kiln.ErrorCode(err) != kiln.CodeConflict {
			t.Fatalf("cancel of a finished run: %v", err)
		}
	})
}

// Proves B19 (docs/behaviours.md).
func TestSweepCancelsRunsPastTheirDeadline(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		run := start(t, b, `
on: push
timeout: 10m
jobs:
  a: {steps: [{run: sleep 100}]}
`, pushEvent(), nil)
		b.eng.Sweep(context.Background())
		if r, _ := b.db.Runs().Get(context.Background(), run.ID); r.Status.Terminal() {
			t.Fatalf("run ended before its deadline: %s", r.Status)
		}
		b.clock.Advance(11 * time.Minute)
		b.eng.Sweep(context.Background())
		r, _ := b.db.Runs().Get(context.Background(), run.ID)
		if r.Status != kiln.RunCancelled {
			t.Fatalf("run past its deadline: %s", r.Status)
		}
		if j := r.Jobs[0]; !strings.Contains(j.Error, "workflow timeout") {
			t.Fatalf("job error %q", j.Error)
		}
	})
}

// Proves B33 (docs/behaviours.md).
func TestUnroutableJobsFailAfterTheGrace(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if err := b.db.Auth().UpsertAgent(ctx, agentRecord("linux-1", linux)); err != nil {
			t.Fatal(err)
		}
		run := start(t, b, `
on: push
jobs:
  gpu: {runs_on: [gpu], steps: [{run: train}]}
  cpu: {runs_on: [linux], steps: [{run: make}]}
`, pushEvent(), nil)
		b.eng.Sweep(ctx) // first sighting
		b.clock.Advance(30 * time.Second)
		b.eng.Sweep(ctx)
		if j := job(t, b, run.ID, "gpu"); j.Status != kiln.JobQueued {
			t.Fatalf("gpu failed before the grace: %s", j.Status)
		}
		b.clock.Advance(31 * time.Second)
		b.eng.Sweep(ctx)
		gpu := job(t, b, run.ID, "gpu")
		if gpu.Status != kiln.JobUnroutable || !strings.Contains(gpu.Error, "gpu") {
			t.Fatalf("gpu: %s %q", gpu.Status, gpu.Error)
		}
		if cpu := job(t, b, run.ID, "cpu"); cpu.Status != kiln.JobQueued {
			t.Fatalf("a routable job was touched: %s", cpu.Status)
		}
	})
}
