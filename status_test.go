package kiln

import "testing"

func TestTerminalStatusesHaveNoTransitions(t *testing.T) {
	for _, s := range JobStatuses {
		if !s.Valid() {
			t.Errorf("%s: not valid", s)
		}
		if s.Terminal() != (len(TransitionsFrom(s)) == 0) {
			t.Errorf("%s: terminal=%v but has %d transitions", s, s.Terminal(), len(TransitionsFrom(s)))
		}
		if s.Terminal() != (s.Result() != "") {
			t.Errorf("%s: terminal=%v but result %q", s, s.Terminal(), s.Result())
		}
	}
	if JobStatus("bogus").Valid() {
		t.Error("bogus status is valid")
	}
}

func TestCanTransition(t *testing.T) {
	cases := []struct {
		from, to JobStatus
		ok       bool
	}{
		{JobPending, JobQueued, true},
		{JobPending, JobSkipped, true},
		{JobPending, JobRunning, false},
		{JobQueued, JobDispatched, true},
		{JobQueued, JobUnroutable, true},
		{JobDispatched, JobQueued, true},
		{JobDispatched, JobRunning, true},
		{JobRunning, JobQueued, false},
		{JobRunning, JobRecovering, true},
		{JobRecovering, JobAgentLost, true},
		{JobRecovering, JobQueued, true},
		{JobCancelling, JobCancelled, true},
		{JobSuccess, JobFailed, false},
		{JobCancelled, JobQueued, false},
	}
	for _, c := range cases {
		if got := CanTransition(c.from, c.to); got != c.ok {
			t.Errorf("%s → %s: got %v, want %v", c.from, c.to, got, c.ok)
		}
	}
}

func TestResultMapping(t *testing.T) {
	want := map[JobStatus]Result{
		JobSuccess: ResultSuccess, JobFailed: ResultFailure, JobTimedOutStale: ResultFailure,
		JobUnroutable: ResultFailure, JobAgentLost: ResultFailure, JobCancelled: ResultCancelled,
		JobSkipped: ResultSkipped, JobRunning: "",
	}
	for s, r := range want {
		if got := s.Result(); got != r {
			t.Errorf("%s: result %q, want %q", s, got, r)
		}
	}
}

// Proves B26 (docs/behaviours.md).
func TestRollUp(t *testing.T) {
	cases := []struct {
		jobs []JobStatus
		want RunStatus
		ok   bool
	}{
		{nil, RunSuccess, true},
		{[]JobStatus{JobSuccess, JobSkipped}, RunSuccess, true},
		{[]JobStatus{JobSuccess, JobCancelled}, RunCancelled, true},
		{[]JobStatus{JobCancelled, JobUnroutable}, RunFailed, true},
		{[]JobStatus{JobAgentLost}, RunFailed, true},
		{[]JobStatus{JobSuccess, JobRunning}, "", false},
		{[]JobStatus{JobFailed, JobQueued}, "", false},
	}
	for _, c := range cases {
		got, ok := RollUp(c.jobs)
		if got != c.want || ok != c.ok {
			t.Errorf("RollUp(%v) = %q,%v; want %q,%v", c.jobs, got, ok, c.want, c.ok)
		}
	}
}
