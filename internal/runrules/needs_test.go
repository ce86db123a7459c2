package runrules

import (
	"slices"
	"testing"

	"github.com/kilnci/kiln"
)

var (
	success   = kiln.ResultSuccess
	failure   = kiln.ResultFailure
	cancelled = kiln.ResultCancelled
	skipped   = kiln.ResultSkipped
)

// statusOf is a terminal status with result r.
func statusOf(r kiln.Result) kiln.JobStatus {
	return map[kiln.Result]kiln.JobStatus{
		success: kiln.JobSuccess, failure: kiln.JobFailed, cancelled: kiln.JobCancelled, skipped: kiln.JobSkipped,
	}[r]
}

// Every `when` set against a one-child group: met exactly when the child's
// result is in the set, whichever failing status produced a failure (B13).
func TestEveryWhenSetOneChild(t *testing.T) {
	failures := []kiln.JobStatus{kiln.JobFailed, kiln.JobTimedOutStale, kiln.JobUnroutable, kiln.JobAgentLost}
	for mask := 1; mask < 16; mask++ {
		var accept []kiln.Result
		for i, r := range kiln.Results {
			if mask&(1<<i) != 0 {
				accept = append(accept, r)
			}
		}
		for _, st := range append([]kiln.JobStatus{kiln.JobSuccess, kiln.JobCancelled, kiln.JobSkipped}, failures...) {
			why := Unsatisfied(Need{"a", accept}, []Upstream{{"a", "a", st}})
			if met := why == ""; met != slices.Contains(accept, st.Result()) {
				t.Errorf("when %v, a %s: met=%v (%q)", accept, st, met, why)
			}
		}
	}
}

// A matrix group: met when every child's result is accepted, or when
// failure is accepted and some child failed (B13).
func TestWhenOverAMatrixGroup(t *testing.T) {
	cases := []struct {
		accept   []kiln.Result
		children []kiln.Result
		why      string
	}{
		{[]kiln.Result{success}, []kiln.Result{success, success}, ""},
		{[]kiln.Result{success}, []kiln.Result{success, failure}, "needs not met: t (2) is failure (wanted success)"},
		{[]kiln.Result{success}, []kiln.Result{cancelled, skipped}, "needs not met: t (1) is cancelled, t (2) is skipped (wanted success)"},
		{[]kiln.Result{failure}, []kiln.Result{success, failure}, ""}, // cleanup after any failure
		{[]kiln.Result{failure}, []kiln.Result{success, success}, "needs not met: t (1) is success, t (2) is success (wanted failure)"},
		{[]kiln.Result{failure}, []kiln.Result{cancelled, failure}, ""},
		{[]kiln.Result{success, skipped}, []kiln.Result{success, skipped}, ""},
		{[]kiln.Result{success, failure}, []kiln.Result{success, cancelled}, "needs not met: t (2) is cancelled (wanted success or failure)"},
		{[]kiln.Result{cancelled}, []kiln.Result{cancelled, cancelled}, ""},
		{kiln.Results, []kiln.Result{success, failure, cancelled, skipped}, ""},
	}
	for _, c := range cases {
		var ups []Upstream
		for i, r := range c.children {
			ups = append(ups, Upstream{Name: "t (" + string(rune('1'+i)) + ")", Base: "t", Status: statusOf(r)})
		}
		ups = append(ups, Upstream{"other", "other", kiln.JobFailed}) // another group: ignored
		if why := Unsatisfied(Need{"t", c.accept}, ups); why != c.why {
			t.Errorf("when %v over %v: %q, want %q", c.accept, c.children, why, c.why)
		}
	}
}

// A pending dependent is decided in order: not yet, cancelled with its run,
// skipped on an unmet need (B14), held for a slot, released.
func TestDecideDependent(t *testing.T) {
	ok := []Upstream{{"a", "a", kiln.JobSuccess}, {"b (1)", "b", kiln.JobSuccess}, {"b (2)", "b", kiln.JobFailed}}
	needs := []Need{{"a", []kiln.Result{success}}, {"b", []kiln.Result{success, failure}}}
	cases := []struct {
		name string
		p    Pending
		want Dependent
		why  string
	}{
		{"needs met", Pending{Needs: needs, Upstream: ok}, Release, ""},
		{"needs met, max_parallel group", Pending{Needs: needs, Upstream: ok, MaxParallel: 2}, HoldForSlot, ""},
		{"a needed child still running", Pending{Needs: needs, Upstream: append(slices.Clone(ok), Upstream{"b (3)", "b", kiln.JobRunning}), RunCancelled: true}, NotYet, ""},
		{"a needed child recovering", Pending{Needs: needs, Upstream: []Upstream{{"a", "a", kiln.JobRecovering}}}, NotYet, ""},
		{"run cancelled beats release", Pending{Needs: needs, Upstream: ok, RunCancelled: true}, CancelledWithRun, RunCancelledMessage},
		{"run cancelled beats skip", Pending{Needs: needs[:1], Upstream: []Upstream{{"a", "a", kiln.JobFailed}}, RunCancelled: true}, CancelledWithRun, RunCancelledMessage},
		{"first unmet need in order", Pending{Needs: []Need{{"a", []kiln.Result{failure}}, {"b", []kiln.Result{skipped}}}, Upstream: ok},
			Unmet, "needs not met: a is success (wanted failure)"},
		{"skip cascades from a skipped need", Pending{Needs: needs[:1], Upstream: []Upstream{{"a", "a", kiln.JobSkipped}}, MaxParallel: 3},
			Unmet, "needs not met: a is skipped (wanted success)"},
		{"a skipped need accepted", Pending{Needs: []Need{{"a", []kiln.Result{skipped}}}, Upstream: []Upstream{{"a", "a", kiln.JobSkipped}}}, Release, ""},
		{"no needs (a root)", Pending{}, Release, ""},
	}
	for _, c := range cases {
		got, why := DecideDependent(c.p)
		if got != c.want || why != c.why {
			t.Errorf("%s: %v %q, want %v %q", c.name, got, why, c.want, c.why)
		}
	}
}
