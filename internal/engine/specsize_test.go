package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// hugeSpecWorkflow is a 4 KB workflow whose every matrix child renders
// about 8 MB of job env: each env value joins a thousand copies of a
// kilobyte the workflow env holds.
func hugeSpecWorkflow() string {
	zeros := strings.TrimSuffix(strings.Repeat("0,", 1000), ",")
	var env strings.Builder
	for i := range 8 {
		fmt.Fprintf(&env, "      BIG%d: ${{ join(fromJSON(env.ZEROS), env.KB) }}\n", i)
	}
	return `on: push
env:
  KB: "` + strings.Repeat("k", 1000) + `"
  ZEROS: "[` + zeros + `]"
jobs:
  build:
    matrix:
      n: [1, 2, 3, 4]
    env:
` + env.String() + `    steps: [{run: make}]
  small:
    steps: [{run: make}]
`
}

// A workflow whose expressions render a job spec over queue.max_spec_bytes
// fails each such job at release with a sentence naming the setting, and
// stops rendering once past it; its other jobs run.
//
// B105: a job's rendered spec is bounded.
func TestAJobWhoseRenderedSpecIsTooLargeFailsWithAReason(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		src := hugeSpecWorkflow()
		if len(src) > 8<<10 {
			t.Fatalf("the workflow is %d bytes; the attack is a small file", len(src))
		}
		run := start(t, b, src, pushEvent(), nil)
		for n := 1; n <= 4; n++ {
			j := job(t, b, run.ID, fmt.Sprintf("build (%d)", n))
			if j.Status != kiln.JobFailed || !strings.Contains(j.Error, "queue.max_spec_bytes (1 MiB)") || len(j.Spec) > 1<<20 {
				t.Fatalf("build (%d): %s %q, spec %d bytes", n, j.Status, j.Error, len(j.Spec))
			}
		}
		if small := job(t, b, run.ID, "small"); small.Status != kiln.JobQueued {
			t.Fatalf("small: %s %q", small.Status, small.Error)
		}
	})
}

// The budget admits a spec up to its bound exactly and names what passed
// it.
//
// B105: a job's rendered spec is bounded.
func TestSpecBudgetNamesWhatPassedTheBound(t *testing.T) {
	budget := &specBudget{used: 10, max: 100}
	if err := budget.take("env.A", 90); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if err := budget.take("env.B", 1); err == nil || !strings.Contains(err.Error(), "env.B") {
		t.Fatalf("over the bound: %v", err)
	}
}
