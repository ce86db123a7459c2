package runrules

import (
	"slices"
	"testing"

	"github.com/kilnci/kiln"
)

func TestAfterEnded(t *testing.T) {
	ended := func(id, run, base string, st kiln.JobStatus, maxParallel int, failFast, deps bool) Ended {
		return Ended{ID: id, RunID: run, Name: id, Base: base, Status: st, MaxParallel: maxParallel, FailFast: failFast, HasDependents: deps}
	}
	c := AfterEnded([]Ended{
		ended("t1", "r1", "t", kiln.JobSuccess, 2, true, true),
		ended("t2", "r1", "t", kiln.JobTimedOutStale, 2, true, true), // a failure: fail_fast
		ended("t3", "r1", "t", kiln.JobFailed, 2, true, true),        // same group: stopped once, by t2
		ended("u1", "r1", "u", kiln.JobFailed, 0, false, false),      // no fail_fast
		ended("v1", "r1", "v", kiln.JobCancelled, 0, true, false),    // cancelled is not a failure
		ended("w1", "r2", "t", kiln.JobAgentLost, 0, true, true),     // another run's group
		ended("x1", "r2", "x", kiln.JobUnroutable, 4, true, false),
	})
	var ff []string
	for _, f := range c.FailFast {
		ff = append(ff, f.ID)
	}
	if !slices.Equal(ff, []string{"t2", "w1", "x1"}) {
		t.Errorf("fail_fast from %v", ff)
	}
	if want := []Group{{"r1", "t"}, {"r2", "t"}}; !slices.Equal(c.Dependents, want) {
		t.Errorf("dependents of %v, want %v", c.Dependents, want)
	}
	if want := []Group{{"r1", "t"}, {"r2", "x"}}; !slices.Equal(c.Waves.Groups(), want) || c.Waves[Group{"r2", "x"}] != 4 {
		t.Errorf("waves %v", c.Waves)
	}
	if c := AfterEnded(nil); c.Waves == nil || len(c.FailFast)+len(c.Dependents)+len(c.Waves) != 0 {
		t.Errorf("nothing ended: %+v", c)
	}
}

func TestWavesInRunThenBaseOrder(t *testing.T) {
	w := Waves{}
	for _, g := range []Group{{"r2", "a"}, {"r1", "b"}, {"r1", "a"}, {"r10", "a"}} {
		w.Add(g, 1)
	}
	if want := []Group{{"r1", "a"}, {"r1", "b"}, {"r10", "a"}, {"r2", "a"}}; !slices.Equal(w.Groups(), want) {
		t.Fatalf("order %v", w.Groups())
	}
}

// Which statuses hold a max_parallel slot, and how many are free (B17).
func TestSlots(t *testing.T) {
	holds := map[kiln.JobStatus]bool{kiln.JobQueued: true, kiln.JobDispatched: true, kiln.JobRunning: true, kiln.JobRecovering: true, kiln.JobCancelling: true}
	for _, s := range kiln.JobStatuses {
		if HoldsSlot(s) != holds[s] {
			t.Errorf("%s holds a slot: %v", s, HoldsSlot(s))
		}
	}
	if HoldsSlot("bogus") {
		t.Error("an unknown status holds a slot")
	}
	if got := SlotHolders(); len(got) != len(holds) {
		t.Errorf("slot holders %v", got)
	}
	for _, c := range []struct{ max, holding, free int }{{1, 0, 1}, {2, 0, 2}, {2, 1, 1}, {2, 2, 0}, {2, 5, 0}, {256, 3, 253}} {
		if got := FreeSlots(c.max, c.holding); got != c.free {
			t.Errorf("FreeSlots(%d, %d) = %d, want %d", c.max, c.holding, got, c.free)
		}
	}
}

func TestStopFor(t *testing.T) {
	want := map[kiln.JobStatus]Stop{
		kiln.JobPending: StopNow, kiln.JobQueued: StopNow, kiln.JobRecovering: StopNow,
		kiln.JobDispatched: StopAsk, kiln.JobRunning: StopAsk,
	}
	for _, s := range kiln.JobStatuses {
		if got := StopFor(s); got != want[s] {
			t.Errorf("StopFor(%s) = %v, want %v", s, got, want[s])
		}
	}
	for _, s := range kiln.JobStatuses {
		if got, want := Forced(s), s == kiln.JobDispatched || s == kiln.JobRunning || s == kiln.JobCancelling; got != want {
			t.Errorf("Forced(%s) = %v", s, got)
		}
	}
	if m := FailFastMessage("test (1)"); m != "cancelled by fail_fast: test (1) failed" {
		t.Errorf("message %q", m)
	}
}

func TestStepEnds(t *testing.T) {
	for _, c := range []struct {
		job              kiln.JobStatus
		running, waiting kiln.StepStatus
	}{
		{kiln.JobSuccess, kiln.StepSuccess, kiln.StepSkipped},
		{kiln.JobFailed, kiln.StepFailed, kiln.StepSkipped},
		{kiln.JobCancelled, kiln.StepCancelled, kiln.StepCancelled},
		{kiln.JobTimedOutStale, kiln.StepFailed, kiln.StepSkipped},
		{kiln.JobAgentLost, kiln.StepFailed, kiln.StepSkipped},
		{kiln.JobUnroutable, kiln.StepFailed, kiln.StepSkipped},
		{kiln.JobSkipped, kiln.StepFailed, kiln.StepSkipped},
	} {
		if r, w := StepEnds(c.job); r != c.running || w != c.waiting {
			t.Errorf("%s: steps %s/%s, want %s/%s", c.job, r, w, c.running, c.waiting)
		}
	}
}
