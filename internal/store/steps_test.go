package store_test

import (
	"errors"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestStepUpdates(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a")))
		c := claimJob(t, db, "agent-1", cr.Jobs["a"])
		l := lease(c)
		exit0, exit2 := 0, 2
		t0 := clock.Now()
		if err := db.Jobs().UpdateSteps(ctx, l, store.StepUpdate{Index: 0, Status: kiln.StepRunning}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(sec(2))
		if err := db.Jobs().UpdateSteps(ctx, l,
			store.StepUpdate{Index: 0, Status: kiln.StepSuccess, ExitCode: &exit0},
			store.StepUpdate{Index: 1, Status: kiln.StepFailed, ExitCode: &exit2, Error: "exit status 2"},
			store.StepUpdate{Index: 2, Name: "post: cleanup", Status: kiln.StepRunning},
		); err != nil {
			t.Fatal(err)
		}
		// A terminal step is never rewritten.
		if err := db.Jobs().UpdateSteps(ctx, l, store.StepUpdate{Index: 0, Status: kiln.StepRunning}); err != nil {
			t.Fatal(err)
		}
		j := mustJob(t, db, c.JobID)
		if len(j.Steps) != 3 {
			t.Fatalf("steps %+v", j.Steps)
		}
		s0, s1, s2 := j.Steps[0], j.Steps[1], j.Steps[2]
		if s0.Status != kiln.StepSuccess || *s0.ExitCode != 0 || !s0.StartedAt.Equal(t0) || !s0.FinishedAt.Equal(clock.Now()) {
			t.Fatalf("step 0 %+v", s0)
		}
		if s1.Name != "build" || s1.Status != kiln.StepFailed || *s1.ExitCode != 2 || s1.Error != "exit status 2" {
			t.Fatalf("step 1 %+v", s1)
		}
		if s2.Name != "post: cleanup" || s2.Status != kiln.StepRunning {
			t.Fatalf("step 2 %+v", s2)
		}
		// Bad input changes nothing.
		if err := db.Jobs().UpdateSteps(ctx, l, store.StepUpdate{Index: 0, Status: "exploded"}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("bad status: %v", err)
		}
		if err := db.Jobs().UpdateSteps(ctx, l, store.StepUpdate{Index: -1, Status: kiln.StepRunning}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("bad index: %v", err)
		}
		// The job ends: a step still running takes the job's outcome.
		complete(t, db, c, kiln.JobFailed)
		j = mustJob(t, db, c.JobID)
		if j.Steps[2].Status != kiln.StepFailed || j.Steps[0].Status != kiln.StepSuccess {
			t.Fatalf("steps after the job ended %+v", j.Steps)
		}
		if err := db.Jobs().UpdateSteps(ctx, l, store.StepUpdate{Index: 2, Status: kiln.StepSuccess}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a step update after the end: %v", err)
		}
	})
}

// Steps of a job that never ran are skipped (cancelled when cancelled).
func TestStepsReconciled(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b", need("a")), job("c")))
		runJob(t, db, cr.Jobs["a"], kiln.JobFailed)
		for _, s := range mustJob(t, db, cr.Jobs["b"]).Steps {
			if s.Status != kiln.StepSkipped {
				t.Fatalf("skipped job step %+v", s)
			}
		}
		if _, err := db.Runs().Cancel(ctx, cr.ID, "user", false); err != nil {
			t.Fatal(err)
		}
		for _, s := range mustJob(t, db, cr.Jobs["c"]).Steps {
			if s.Status != kiln.StepCancelled {
				t.Fatalf("cancelled job step %+v", s)
			}
		}
	})
}

// A batch of completions commits together; refused items are reported one
// by one and change nothing.
func TestCompleteBatch(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b"), job("c"), job("d"), job("e", need("d"))))
		var cs []store.Claimed
		for _, n := range []string{"a", "b", "c", "d"} {
			cs = append(cs, claimJob(t, db, "agent-1", cr.Jobs[n]))
		}
		old := lease(cs[2])
		old.Epoch--
		batch := []store.Completion{
			{Lease: lease(cs[0]), Status: kiln.JobSuccess},
			{Lease: lease(cs[1]), Status: kiln.JobFailed, Error: "exit 1"},
			{Lease: old, Status: kiln.JobSuccess},
			{Lease: lease(cs[3]), Status: kiln.JobSuccess, Outputs: map[string]string{"v": "1"}},
			{Lease: store.Lease{JobID: "nope", Epoch: 1}, Status: kiln.JobSuccess},
			{Lease: lease(cs[2]), Status: kiln.JobQueued},
		}
		errs, eff, err := db.Jobs().CompleteBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		want := []error{nil, nil, store.ErrStaleLease, nil, store.ErrNotFound, store.ErrInvalid}
		for i, w := range want {
			if (w == nil) != (errs[i] == nil) || (w != nil && !errors.Is(errs[i], w)) {
				t.Errorf("item %d: err %v, want %v", i, errs[i], w)
			}
		}
		wantStatus(t, db, cs[0].JobID, kiln.JobSuccess)
		if j := wantStatus(t, db, cs[1].JobID, kiln.JobFailed); j.Error != "exit 1" {
			t.Fatalf("error %q", j.Error)
		}
		wantStatus(t, db, cs[2].JobID, kiln.JobDispatched)
		if j := wantStatus(t, db, cs[3].JobID, kiln.JobSuccess); j.Outputs["v"] != "1" {
			t.Fatalf("outputs %v", j.Outputs)
		}
		if len(eff.Queued) != 1 || eff.Queued[0].Name != "e" || len(eff.Finished) != 3 {
			t.Fatalf("effects %+v", eff)
		}
	})
}
